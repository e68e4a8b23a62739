"""Native chunks of a committed Icechunk snapshot in a local folder, read as plain files.

Why: Icechunk's own `get` of a chunk costs three to four times the CPU of reading the same
file (its runtime hands each chunk through a stream, a copy and two thread switches), and on a
full scan that CPU competes with decoding. A committed snapshot says exactly where each native
chunk lives: its manifests map a chunk's grid index to `chunks/<id>`, an offset and a length.
For a repository on local disk this module reads those manifests itself, by Icechunk's
published format (a 39-byte header, then a flatbuffer, zstd-compressed or not), and answers a
chunk key with the bytes of that file range.

It answers only what it can answer exactly. `locate` returns None, and the caller asks
Icechunk, for everything else: metadata documents, inline-free virtual chunks (Icechunk checks
their authorization and checksums), a key that is no chunk of a known array, a chunk in no
manifest, a spec version or file kind not known here, a manifest that does not parse, a file
shorter than its reference. So the worst case is Icechunk's speed, never another answer.

Snapshots, manifests and chunk files are immutable (a manifest's and a chunk's name is a random
id written once), so what is parsed here is kept for the life of the snapshot's store.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

from zarrsql.store.base import ByteRange

#: The start of every Icechunk metadata file ("ICE", the ice cube emoji, "CHUNK").
_MAGIC = "ICE\N{ICE CUBE}CHUNK".encode()
#: Magic, the writer's name (24 bytes), then one byte each: spec version, file type, compression.
_HEADER = len(_MAGIC) + 24 + 3
_SPEC_VERSIONS = (1, 2)
_MANIFEST_FILE = 2
_UNCOMPRESSED, _ZSTD = 0, 1
#: Manifests bigger than this (decompressed) are left to Icechunk rather than held here.
_MAX_MANIFEST_BYTES = 256 << 20

_RFC_TO_CROCKFORD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789ABCDEFGHJKMNPQRSTVWXYZ")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def object_id(raw: bytes) -> str:
    """An Icechunk object id as it names files: Crockford's base32, unpadded."""
    return base64.b32encode(raw).decode("ascii").rstrip("=").translate(_RFC_TO_CROCKFORD)


# -- flatbuffers, as far as the manifest schema needs them -----------------------------------


class _Table:
    """One flatbuffer table: fields are found through its vtable by slot number (the field's
    position in the schema); an absent field reads as None (or the schema's default)."""

    __slots__ = ("buf", "pos", "vtable", "vtable_size")

    def __init__(self, buf: memoryview, pos: int) -> None:
        vtable = pos - struct.unpack_from("<i", buf, _inside(buf, pos, 4))[0]
        self.vtable_size = struct.unpack_from("<H", buf, _inside(buf, vtable, 4))[0]
        _inside(buf, vtable, self.vtable_size)
        self.buf, self.pos, self.vtable = buf, pos, vtable

    def _field(self, slot: int) -> int | None:
        at = 4 + 2 * slot
        if at + 2 > self.vtable_size:
            return None
        offset = struct.unpack_from("<H", self.buf, self.vtable + at)[0]
        return self.pos + offset if offset else None

    def u64(self, slot: int) -> int:
        at = self._field(slot)
        return 0 if at is None else int(struct.unpack_from("<Q", self.buf, _inside(self.buf, at, 8))[0])

    def fixed(self, slot: int, size: int) -> bytes | None:
        """A struct of `size` bytes stored in the table (an object id)."""
        at = self._field(slot)
        return None if at is None else bytes(self.buf[_inside(self.buf, at, size) : at + size])

    def _target(self, slot: int) -> int | None:
        at = self._field(slot)
        return None if at is None else at + struct.unpack_from("<I", self.buf, _inside(self.buf, at, 4))[0]

    def vector(self, slot: int, item: int) -> tuple[int, int] | None:
        """(position of the first element, number of elements) of a vector field."""
        at = self._target(slot)
        if at is None:
            return None
        count = struct.unpack_from("<I", self.buf, _inside(self.buf, at, 4))[0]
        _inside(self.buf, at + 4, count * item)
        return at + 4, int(count)

    def table_at(self, element: int) -> _Table:
        """The table an element of a vector of tables points to."""
        return _Table(self.buf, element + struct.unpack_from("<I", self.buf, _inside(self.buf, element, 4))[0])


def _inside(buf: memoryview, pos: int, size: int) -> int:
    if pos < 0 or size < 0 or pos + size > len(buf):
        raise ValueError("a flatbuffer offset points outside the manifest")
    return pos


# Slots of the manifest schema (icechunk-format/flatbuffers/manifest.fbs, versions 1 and 2).
_MANIFEST_ARRAYS = 1
_ARRAY_NODE_ID, _ARRAY_REFS = 0, 1
_REF_INDEX, _REF_INLINE, _REF_OFFSET, _REF_LENGTH, _REF_CHUNK_ID = 0, 1, 2, 3, 4


class _Manifest:
    """One parsed manifest: per array (node id), its references, sorted by grid index as the
    format requires, found by binary search."""

    def __init__(self, body: bytes) -> None:
        self._buf = memoryview(body)
        root = _Table(self._buf, struct.unpack_from("<I", self._buf, _inside(self._buf, 0, 4))[0])
        self._root = root
        self._arrays: dict[str, tuple[int, int]] = {}
        arrays = root.vector(_MANIFEST_ARRAYS, 4)
        if arrays is None:
            raise ValueError("a manifest without arrays")
        start, count = arrays
        for i in range(count):
            array = root.table_at(start + 4 * i)
            node = array.fixed(_ARRAY_NODE_ID, 8)
            refs = array.vector(_ARRAY_REFS, 4)
            if node is None or refs is None:
                raise ValueError("an array manifest without its node id or references")
            self._arrays[object_id(node)] = refs

    def _index(self, ref: _Table) -> tuple[int, ...]:
        found = ref.vector(_REF_INDEX, 4)
        if found is None:
            raise ValueError("a chunk reference without its index")
        start, count = found
        return struct.unpack_from(f"<{count}I", self._buf, start)

    def reference(self, node: str, index: tuple[int, ...]) -> tuple[str, Any, int, int] | None:
        """('inline', bytes, 0, n) or ('native', chunk id, offset, length) for the chunk at
        `index` of array `node`; None when it is virtual or not in this manifest."""
        refs = self._arrays.get(node)
        if refs is None:
            return None
        start, count = refs
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            ref = self._root.table_at(start + 4 * mid)
            here = self._index(ref)
            if here == index:
                return _payload(ref)
            if here < index:
                lo = mid + 1
            else:
                hi = mid
        return None


def _payload(ref: _Table) -> tuple[str, Any, int, int] | None:
    inline = ref.vector(_REF_INLINE, 1)
    if inline is not None:
        start, count = inline
        return "inline", bytes(ref.buf[start : start + count]), 0, count
    chunk = ref.fixed(_REF_CHUNK_ID, 12)
    if chunk is None:
        return None  # a virtual chunk: Icechunk resolves and authorizes it
    return "native", object_id(chunk), ref.u64(_REF_OFFSET), ref.u64(_REF_LENGTH)


def read_manifest(data: bytes) -> _Manifest:
    """A manifest file's bytes, checked and parsed; ValueError for anything not understood."""
    if len(data) < _HEADER or not data.startswith(_MAGIC):
        raise ValueError("not an Icechunk file")
    version, kind, compression = data[_HEADER - 3 : _HEADER]
    if version not in _SPEC_VERSIONS or kind != _MANIFEST_FILE:
        raise ValueError(f"spec version {version}, file type {kind}: not a known manifest")
    if compression == _UNCOMPRESSED:
        body = bytes(data[_HEADER:])
    elif compression == _ZSTD:
        import zstandard

        pieces, size = [], 0
        with zstandard.ZstdDecompressor().stream_reader(memoryview(data)[_HEADER:]) as reader:
            while piece := reader.read(1 << 20):  # a read may return less than asked: to the end
                size += len(piece)
                if size > _MAX_MANIFEST_BYTES:
                    raise ValueError("a manifest too big to hold")
                pieces.append(piece)
        body = b"".join(pieces)
    else:
        raise ValueError(f"compression {compression} is not known")
    return _Manifest(body)


# -- the snapshot's arrays -------------------------------------------------------------------


class _Array:
    __slots__ = ("manifests", "ndim", "node")

    def __init__(self, node: str, ndim: int, manifests: list[tuple[tuple[tuple[int, int], ...], str]]) -> None:
        self.node, self.ndim, self.manifests = node, ndim, manifests

    def manifest_for(self, index: tuple[int, ...]) -> str | None:
        for extents, manifest in self.manifests:
            if all(lo <= i < hi for i, (lo, hi) in zip(index, extents, strict=True)):
                return manifest
        return None


def _arrays(snapshot: Mapping[str, Any]) -> dict[str, _Array]:
    """Array path (as store keys spell it: no leading '/', the root '') → its node and manifests,
    from Icechunk's own description of the snapshot (`Repository.inspect_snapshot`)."""
    found: dict[str, _Array] = {}
    for node in snapshot.get("nodes", []):
        if node.get("node_type") != "array":
            continue
        refs = []
        ndim = None
        for ref in node.get("manifest_refs") or []:
            extents = tuple((int(lo), int(hi)) for lo, hi in ref["extents"])
            if ndim is not None and len(extents) != ndim:
                raise ValueError("manifest extents of different ranks")
            ndim = len(extents)
            refs.append((extents, str(ref["id"])))
        if ndim is not None:
            found[str(node["path"]).strip("/")] = _Array(str(node["id"]), ndim, refs)
    return found


class NativeChunks:
    """Where the chunks of one committed snapshot in the local repository at `root` are.

    `describe` returns Icechunk's description of the snapshot (a JSON text or a dict, as
    `Repository.inspect_snapshot` gives it in Icechunk 1.x and 2.x); it is called once, on the
    first chunk asked for.
    """

    def __init__(self, root: str, describe: Callable[[], Any]) -> None:
        self._root = root
        self._describe = describe
        self._lock = threading.Lock()
        self._array_paths: dict[str, _Array] | None = None
        self._manifests: dict[str, _Manifest | None] = {}

    def _known_arrays(self) -> dict[str, _Array]:
        with self._lock:
            if self._array_paths is None:
                try:
                    described = self._describe()
                    snapshot = json.loads(described) if isinstance(described, str | bytes) else described
                    self._array_paths = _arrays(snapshot)
                except Exception:  # a description not understood: every chunk goes to Icechunk
                    self._array_paths = {}
            return self._array_paths

    def _manifest(self, manifest_id: str) -> _Manifest | None:
        with self._lock:
            if manifest_id in self._manifests:
                return self._manifests[manifest_id]
        parsed: _Manifest | None = None
        if manifest_id.isascii() and manifest_id.isalnum():  # an id, never a path elsewhere
            try:
                with open(os.path.join(self._root, "manifests", manifest_id), "rb") as f:
                    parsed = read_manifest(f.read())
            except Exception:  # unreadable, unknown, damaged (zstandard's errors too): Icechunk's to report
                parsed = None
        with self._lock:
            self._manifests[manifest_id] = parsed
        return parsed

    def locate(self, key: str) -> tuple[str, Any, int, int] | None:
        """The reference of chunk `key`, or None where Icechunk must answer (see the module)."""
        found = _chunk_of(key, self._known_arrays())
        if found is None:
            return None
        array, index = found
        manifest_id = array.manifest_for(index)
        if manifest_id is None:
            return None
        manifest = self._manifest(manifest_id)
        if manifest is None:
            return None
        try:
            return manifest.reference(array.node, index)
        except (ValueError, struct.error):
            return None

    def read(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        """The chunk's bytes (of `byte_range` within it), or None where Icechunk must read it."""
        found = self.locate(key)
        if found is None:
            return None
        kind, what, offset, length = found
        first, last = _within(length, byte_range)
        if kind == "inline":
            return bytes(what[first:last])
        if length <= 0:
            return None
        try:
            fd = os.open(os.path.join(self._root, "chunks", what), os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EACCES):
                return None  # Icechunk says what is wrong
            raise
        try:
            data = os.pread(fd, last - first, offset + first)
        finally:
            os.close(fd)
        return data if len(data) == last - first else None


def _chunk_of(key: str, arrays: Mapping[str, _Array]) -> tuple[_Array, tuple[int, ...]] | None:
    """The known array and grid index a chunk key names (`<array>/c/<i>/<j>...`, or `c/...`
    for a root array, `<array>/c` for one of no dimensions), or None. Every place `c` could
    split the key is tried: an array or group may itself be named `c` or a number."""
    at = -1
    while (at := key.find("c", at + 1)) >= 0:
        if (at > 0 and key[at - 1] != "/") or key[at + 1 : at + 2] not in ("", "/"):
            continue
        array = arrays.get(key[: max(0, at - 1)])
        if array is None:
            continue
        rest = key[at + 2 :]
        parts = rest.split("/") if rest else []
        if len(parts) == array.ndim and all(p.isascii() and p.isdigit() for p in parts):
            return array, tuple(int(p) for p in parts)
    return None


def _within(length: int, byte_range: ByteRange | None) -> tuple[int, int]:
    """The part of a chunk of `length` bytes a byte range asks for, as [first, last)."""
    if byte_range is None:
        return 0, length
    if byte_range.start < 0:
        return max(0, length - byte_range.length), length
    first = min(byte_range.start, length)
    return first, min(length, byte_range.start + byte_range.length)
