"""A store over a kerchunk reference set: each key is inline bytes or a byte range of a file.

`ReferenceStore(refset, storage_options)` reads keys as `refsets.RefSet` resolves them.
Inline keys cost nothing. Ranged keys are fetched from the files they point at through the
ordinary stores (a local folder, or an fsspec URL with the same `storage_options`, which is
how one set reaches files on local disk, HTTP and S3 alike), so `trace()` counts the requests
and bytes of the underlying files and their errors read as any store's do.

`get_many` groups the ranges by file and coalesces ranges that touch or lie at most
`COALESCE_GAP` bytes apart into one request (at most `COALESCE_LIMIT` bytes), then cuts each
key's bytes back out: an HDF5 file written in one pass stores a variable's chunks back to
back, so a scan of a day of ERA5 costs one request instead of dozens. A referenced file that
does not exist is an error naming the key and the file; it is never read as fill.

`virtual_chunks` (the `read_zarr` parameter, URL prefix → NULL or 'anonymous') narrows what a
set may read: given, every referenced file must lie under one of its prefixes (compared with
their `.` and `..` segments collapsed, on path boundaries: '../secret/a.nc' is checked, and
read, where it leads, and '/data' does not authorize '/data2/'), and a chunk elsewhere is an
error naming its file and the prefix to add; 'anonymous' reads a public `s3://` or `gs://`
prefix without credentials. Not given, a set reads every file it points at,
as a kerchunk set read by fsspec does.

Listing comes from the set's keys. A set of Zarr v2 documents without a consolidated
`.zmetadata` gets one made from its inline documents, so the metadata walk reads no key twice.

A key's token follows what a read of it returns now. The set's own file (a local JSON file,
a Parquet folder's `.zmetadata`, the HDF5 file hdf5.py scans) is a `SetSource`: its version
(`local.file_version`) is part of every key's token, and a store whose set was made again
(the file rewritten or replaced) loads it again when it next takes tokens (`token_many`),
before the reads that follow. A key pointing into a local file also has that file's token in
its own, so a file rewritten in place (same layout, new values) changes the tokens of the keys
it holds (a file `virtual_chunks :=` does not authorize is not looked at); a remote file's
token would be a request. A remote set is read again at each open, and the digest of its
document is its version (a set rewritten at the same URL is a new one).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zarrsql.errors import StoreNotFoundError, StoreReadError
from zarrsql.store.access import OPEN, AccessPolicy
from zarrsql.store.base import ByteRange, Store, check_key, is_url
from zarrsql.store.choice import container_access, normal_location, within_prefix
from zarrsql.store.local import LocalStore, file_version
from zarrsql.store.redaction import redacted_url
from zarrsql.store.refsets import FolderOpener, Inline, RefSet, Target

#: Largest gap (bytes) between two ranges of one file that are still read as one request:
#: below a page of waste, one round trip saved is worth far more than the bytes.
COALESCE_GAP = 4096
#: Largest coalesced request (bytes): keeps one request's answer a bounded buffer.
COALESCE_LIMIT = 32 * 1024 * 1024
_DOCUMENTS = (".zarray", ".zgroup", ".zattrs")


def _split(url: str) -> tuple[str, str]:
    """(folder, name) of a file URL or path, so the file is a key of its folder's store."""
    if is_url(url):
        folder, _, name = url.rstrip("/").rpartition("/")
        return folder, name
    return os.path.dirname(os.path.abspath(url)), os.path.basename(url)


def _coalesce(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged (start, end) spans covering every span given."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start - out[-1][1] <= COALESCE_GAP and max(end, out[-1][1]) - out[-1][0] <= COALESCE_LIMIT:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _consolidated(refset: RefSet) -> bytes | None:
    """A `.zmetadata` from the set's inline v2 documents (None for a v3 set)."""
    metadata: dict[str, Any] = {}
    for key in refset.keys:
        if key.rsplit("/", 1)[-1] in _DOCUMENTS:
            ref = refset.lookup(key)
            if isinstance(ref, Inline):
                try:
                    metadata[key] = json.loads(ref.data)
                except ValueError:
                    return None  # left to the walk, which names the broken document
    if not metadata or ".zgroup" not in metadata:
        return None
    return json.dumps({"zarr_consolidated_format": 1, "metadata": metadata}).encode()


@dataclass(frozen=True, slots=True)
class SetSource:
    """Where a store's reference set comes from, so the store can follow it: `version()` is
    a validator of the set's file as it is now (None when the file is gone), `load(version)`
    reads the set again, given the version taken before it reads (a write landing in between
    then only costs one more load later, never a set kept under a version it does not have)."""

    version: Callable[[], str | None]
    load: Callable[[str], RefSet]


@dataclass(frozen=True, slots=True)
class _Loaded:
    """One loaded version of the set, swapped whole when the set is loaded again."""

    refset: RefSet
    version: str
    extra: Mapping[str, bytes]  # keys the store adds (a made `.zmetadata`)
    names: frozenset[str]


def _loaded(refset: RefSet, version: str) -> _Loaded:
    extra: dict[str, bytes] = {}
    if ".zmetadata" not in refset.keys:
        made = _consolidated(refset)
        if made is not None:
            extra[".zmetadata"] = made
    return _Loaded(refset, version, extra, refset.keys | frozenset(extra))


def _local_target(url: str) -> bool:
    """Whether a reference's file is a local path (its token a `stat`, not a request)."""
    return not is_url(url) and "://" not in url


class ReferenceStore:
    """The keys of a reference set (see the module docstring). `token` is the version of
    the set `refset` was loaded from; `source`, when given, lets the store follow the set."""

    can_list = True
    metadata_ttl = 0.0

    def __init__(
        self,
        refset: RefSet,
        storage_options: Mapping[str, Any] | None,
        open_folder: FolderOpener,
        *,
        token: str = "",
        virtual_chunks: tuple[tuple[str, str | None], ...] = (),
        source: SetSource | None = None,
        policy: AccessPolicy | None = None,
    ) -> None:
        self._state = _loaded(refset, token)
        self._source = source
        self._reloading = threading.Lock()
        self._open_folder = open_folder
        self.url = redacted_url(refset.location)  # as messages name it: no secret of its URL
        self.storage_options = dict(storage_options or {})
        self._containers = tuple((_container_prefix(p), container_access(p, v)) for p, v in virtual_chunks)
        self._authorized = [p for p, _ in virtual_chunks]  # as given, for the errors
        self._policy = policy or OPEN  # the engine's file-access rules when it was opened
        self._admitted: set[str] = set()  # the files those rules were found to allow
        given = token + (repr(self._containers) if self._containers else "")
        self.cache_key = "kerchunk:" + refset.location + ":" + hashlib.sha1(given.encode()).hexdigest()[:12]
        self.remote = is_url(refset.location) or any(is_url(u) for u in refset.target_urls())
        self.concurrency = 32 if self.remote else max(1, min(os.cpu_count() or 1, 8))
        self._stores: dict[str, Store] = {}
        self._lock = threading.Lock()

    @property
    def refset(self) -> RefSet:
        """The reference set as last loaded."""
        return self._state.refset

    # ------------------------------------------------------------------ reading
    def _container(self, key: str, url: str) -> str | None:
        """The access of the authorized container holding `url` (None: default credentials);
        an error when `virtual_chunks :=` was given and authorizes none, or when the engine's
        file-access rules forbid the file."""
        if url not in self._admitted:  # resolving a path's links costs system calls: once per file
            self._policy.check(url)
            self._admitted.add(url)
        if not self._containers:
            return None
        for prefix, access in self._containers:
            if within_prefix(url, prefix):
                return access
        shown = redacted_url(url) if is_url(url) else "file://" + url
        folder = shown.rsplit("/", 1)[0] + "/"
        raise StoreReadError(
            f"cannot read '{key}' of the reference set '{self.url}': it points at '{shown}', which no "
            f"virtual_chunks := prefix authorizes ({self._authorized}); add that file's "
            f"container (virtual_chunks := MAP {{'{folder}': NULL}}) if you trust those files"
        )

    def _authorizes(self, url: str) -> bool:
        """Whether the set may read `url` (`_container` raises where it may not)."""
        if url not in self._admitted and not self._policy.admits(url):
            return False
        return not self._containers or any(within_prefix(url, prefix) for prefix, _ in self._containers)

    def _store_for(self, folder: str) -> Store:
        with self._lock:
            store = self._stores.get(folder)
        if store is None:
            options = self.storage_options
            if any(within_prefix(folder + "/", p) and a == "anonymous" for p, a in self._containers):
                options = {**options, **_ANONYMOUS[folder.split("://", 1)[0].lower()]}
            store = self._open_folder(folder, options) if is_url(folder) else LocalStore(folder)
            with self._lock:
                store = self._stores.setdefault(folder, store)
        return store

    def get(self, key: str) -> bytes | None:
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        out: list[bytes | None] = [None] * len(keys)
        ranged: dict[str, list[tuple[int, Target]]] = {}
        state = self._state  # one version of the set for the whole call
        for i, key in enumerate(keys):
            check_key(key)
            if key in state.extra:
                out[i] = state.extra[key]
                continue
            ref = state.refset.lookup(key)
            if isinstance(ref, Inline):
                out[i] = ref.data
            elif isinstance(ref, Target):
                self._container(key, ref.url)
                ranged.setdefault(ref.url, []).append((i, ref))
        for url, wanted in ranged.items():
            for i, data in self._fetch(url, wanted):
                out[i] = data
        return out

    def _fetch(self, url: str, wanted: list[tuple[int, Target]]) -> list[tuple[int, bytes]]:
        folder, name = _split(url)
        store = self._store_for(folder)
        whole = [(i, t) for i, t in wanted if t.length is None]
        parts = [(i, t) for i, t in wanted if t.length is not None]
        got: list[tuple[int, bytes]] = []
        if whole:
            data = store.get(name)
            got += [(i, self._found(data, t)) for i, t in whole]
        if parts:
            spans = _coalesce([(t.offset, t.offset + (t.length or 0)) for _, t in parts])
            answers = store.get_ranges([(name, ByteRange(s, e - s)) for s, e in spans])  # type: ignore[attr-defined]
            for i, t in parts:
                k = next(j for j, (s, e) in enumerate(spans) if s <= t.offset and t.offset + (t.length or 0) <= e)
                data = self._found(answers[k], t)
                start = t.offset - spans[k][0]
                piece = data[start : start + (t.length or 0)]
                if len(piece) != t.length:
                    raise StoreReadError(
                        f"the reference set '{self.url}' points at bytes {t.offset}..{t.offset + (t.length or 0)} "
                        f"of '{redacted_url(t.url)}', but the file ends at byte {spans[k][0] + len(data)}; the "
                        "file changed since the references were made: make them again"
                    )
                got.append((i, piece))
        return got

    def _found(self, data: bytes | None, target: Target) -> bytes:
        if data is None:
            raise StoreNotFoundError(
                f"the reference set '{self.url}' points at '{redacted_url(target.url)}', which does not exist; the "
                "referenced file moved or was deleted: restore it or make the references again"
            )
        return data

    # ------------------------------------------------------------------ listing
    def list_dir(self, prefix: str) -> list[str]:
        prefix = prefix.strip("/")
        start = prefix + "/" if prefix else ""
        names = {k[len(start) :].split("/", 1)[0] for k in self._state.names if k.startswith(start) and k != prefix}
        return sorted(n for n in names if n)

    # ------------------------------------------------------------------ tokens
    def token(self, key: str) -> str | None:
        return self.token_many([key])[0]

    def token_many(self, keys: Sequence[str]) -> list[str | None]:
        """Each key's token (the module docstring): the set's version, the key and, for a key
        in a local file, that file's token, each file's taken once per call. The set is
        loaded again first when its file changed; every token is None when it is gone."""
        state = self._current()
        if state is None:
            return [None] * len(keys)
        files: dict[str, str | None] = {}
        return [self._key_token(state, k, files) for k in keys]

    def _key_token(self, state: _Loaded, key: str, files: dict[str, str | None]) -> str | None:
        ref = None if key in state.extra else state.refset.lookup(key)
        if ref is None:
            return f"{state.version}:{key}" if key in state.names else None
        if not isinstance(ref, Target) or not _local_target(ref.url) or not self._authorizes(ref.url):
            return f"{state.version}:{key}"
        if ref.url not in files:
            folder, name = _split(ref.url)
            files[ref.url] = self._store_for(folder).token(name)  # the store the key is read from
        return f"{state.version}:{key}:{files[ref.url]}"

    def _current(self) -> _Loaded | None:
        """The set as its file is now: loaded again when the file's version moved since it
        was loaded (`SetSource`), None when the file is gone."""
        state, source = self._state, self._source
        if source is None:
            return state
        now = source.version()
        if now is None:
            return None
        if now != state.version:
            with self._reloading:  # one load per change, whichever thread sees it first
                state = self._state
                if now != state.version:
                    state = self._state = _loaded(source.load(now), now)
        return state


#: The fsspec options that read a public bucket without credentials, by URL scheme.
_ANONYMOUS: dict[str, dict[str, Any]] = {"s3": {"anon": True}, "gs": {"token": "anon"}, "gcs": {"token": "anon"}}


def _container_prefix(prefix: str) -> str:
    """A `virtual_chunks :=` prefix as the references' URLs are held: local ones as paths
    (`refsets.resolve_url` drops `file://`), remote ones as URLs, both with their `..`
    segments collapsed as the references' are, so 'file:///data/sets/../nc/' authorizes the
    files under '/data/nc/' and nothing beside it."""
    if prefix.lower().startswith("file://"):
        prefix = prefix[7:]
    return normal_location(prefix)


def refset_version(location: str, path: str) -> str | None:
    """The version of the local reference set at `location`, from its file at `path` (a JSON
    file or a scanned HDF5 file itself; a Parquet folder's `.zmetadata`, which kerchunk writes
    again with the records), None when it is gone."""
    version = file_version(path)
    return None if version is None else f"{location}:{version}"


def open_references(
    location: str,
    storage_options: Mapping[str, Any] | None,
    open_folder: FolderOpener,
    *,
    virtual_chunks: tuple[tuple[str, str | None], ...] = (),
    policy: AccessPolicy | None = None,
) -> ReferenceStore:
    """The store over the kerchunk reference set at `location` (JSON file or Parquet folder);
    `open_folder` opens the plain stores its files are read from, and `virtual_chunks`, when
    given, the only containers its references may point into (see the module docstring);
    `policy` the engine's file-access rules, which every referenced file must pass too."""
    from zarrsql.store.refsets import load_refset

    if location.lower().startswith("file://"):
        location = location[7:]
    if not is_url(location):
        location = os.path.abspath(os.path.expanduser(location))
    if is_url(location):  # read again at each open; its digest tells a rewritten set (no file time to ask)
        refset = load_refset(location, storage_options, open_folder)
        token = f"{location}:{refset.digest}"
        return ReferenceStore(
            refset, storage_options, open_folder, token=token, virtual_chunks=virtual_chunks, policy=policy
        )
    given = location
    path = os.path.join(location, ".zmetadata") if os.path.isdir(location) else location

    def load(version: str) -> RefSet:
        return load_refset(given, storage_options, open_folder)

    source = SetSource(lambda: refset_version(given, path), load)
    token = source.version() or location  # taken before the set is read
    refset = load_refset(location, storage_options, open_folder)
    return ReferenceStore(
        refset, storage_options, open_folder, token=token, virtual_chunks=virtual_chunks, source=source, policy=policy
    )
