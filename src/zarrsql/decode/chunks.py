"""Chunk bytes to numpy arrays, and regions of an array assembled from its chunks.

The common codec pipelines (v3: transpose, bytes, vlen-utf8/vlen-bytes, gzip, zstd, blosc,
crc32c; v2: any numcodecs compressor and filters) are decoded directly with numcodecs, which
costs tens of microseconds per chunk. Anything else (sharding, unknown codecs) is read through
zarr-python, slower but complete. A chunk key that does not exist reads as the fill value; any
other read failure is an error, never a fill.

A chunk that does not decode — any codec's failure, whatever exception type the codec library
raises (zlib.error, EOFError, OSError, RuntimeError, ...), or decoded bytes that do not fill the
chunk shape — is a `DecodeError` naming the chunk key, the array and the codec that failed.
Codecs without a checksum (zstd without one, blosc, raw bytes) can turn some corruption into
wrong values without any error; nothing can detect that short of a checksum codec (crc32c).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numcodecs
import numpy as np

from zarrsql import counters
from zarrsql.decode import inflate
from zarrsql.decode.buffers import MIN_BYTES, POOL, blosc_content_size, zstd_content_size
from zarrsql.errors import DecodeError, UnsupportedError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import ByteRange, RangeReading, Store, ZarrPythonAccess

_BYTES_CODECS = {"gzip", "zstd", "blosc", "crc32c"}
#: numcodecs' bytes-to-bytes codecs, decoded here when a v3 array names them `numcodecs.<id>`
#: after `bytes` (HDF5's shuffle, zlib and fletcher32 filters as VirtualiZarr writes them).
NUMCODECS_BYTES = frozenset(
    {"shuffle", "zlib", "gzip", "bz2", "lzma", "zstd", "blosc", "fletcher32", "crc32", "crc32c", "adler32"}
)


def _bytes_codec_name(name: Any) -> bool:
    return name in _BYTES_CODECS or (
        isinstance(name, str) and name.startswith("numcodecs.") and name[10:] in NUMCODECS_BYTES
    )


class _Failure(Exception):
    """A codec stage that failed; `detail` names the codec and says why. `decode_chunk` turns
    it into a `DecodeError` naming the chunk, which the stage itself does not know."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _stage(codec: str, decode: Any, data: Any) -> Any:
    """`decode(data)`, with any failure of the codec library reported as codec `codec`'s."""
    try:
        return decode(data)
    except _Failure:
        raise
    except Exception as err:  # codec libraries raise their own types; this is their edge
        raise _Failure(f"codec '{codec}' failed: {type(err).__name__}: {err}") from err


def _numcodec(config: dict[str, Any]) -> Any:
    """The codec of a numcodecs configuration; deflate (zlib, gzip) through ISA-L when it is
    installed (decode/inflate.py)."""
    fast = inflate.codec_for(config)
    return fast if fast is not None else numcodecs.get_codec(dict(config))


def _codec_id(config: Any) -> str:
    return str(config.get("id") or "?") if isinstance(config, dict) else "?"


@lru_cache(maxsize=256)
def _v3_bytes_codec(name: str, frozen: tuple) -> Any:
    config = dict(frozen)
    if name == "gzip":
        return _numcodec({"id": "gzip", "level": config.get("level", 5)})
    if name == "zstd":
        return numcodecs.Zstd(level=config.get("level", 0))
    if name == "blosc":
        return numcodecs.Blosc()
    if name == "crc32c":
        return numcodecs.CRC32C()
    if name.startswith("numcodecs."):
        return _numcodec({**config, "id": name[10:]})
    raise UnsupportedError(name)


def _bytes_config(name: str, config: Any, itemsize: int) -> Any:
    """A numcodecs shuffle without `elementsize` shuffles by the array's item size, as
    zarr-python's numcodecs wrapper does (numcodecs' own default, 4, would be wrong)."""
    if name == "numcodecs.shuffle" and "elementsize" not in (config or {}):
        return {**(config or {}), "elementsize": itemsize}
    return config


def _freeze(config: Any) -> tuple:
    return tuple(sorted((k, v if not isinstance(v, (list, dict)) else repr(v)) for k, v in (config or {}).items()))


def _pipeline_ok(codecs: Any) -> bool:
    """Whether this module decodes a v3 codec list itself (sharding: its inner lists too)."""
    names = [c.get("name") for c in codecs]
    a2b = [n for n in names if n in ("bytes", "vlen-utf8", "vlen-bytes", "sharding_indexed")]
    others = [n for n in names if n not in ("bytes", "vlen-utf8", "vlen-bytes", "transpose", "sharding_indexed")]
    if len(a2b) != 1 or not all(_bytes_codec_name(n) for n in others):
        return False
    for c in codecs:
        if c.get("name") == "sharding_indexed":
            config = c.get("configuration") or {}
            inner = config.get("index_codecs") or []
            if "transpose" in names or not _pipeline_ok(config.get("codecs") or []) or not _pipeline_ok(inner):
                return False
    return True


def fast_path(array: ArrayMeta) -> bool:
    """Whether this module decodes the array's chunks itself (else zarr-python does)."""
    return array.zarr_format == 2 or _pipeline_ok(array.codecs)


def fill_chunk(array: ArrayMeta, shape: tuple[int, ...]) -> np.ndarray:
    dt = array.dtype.numpy
    fill = array.fill_value
    if array.dtype.kind == "string":
        out = np.empty(shape, dtype=object)
        out.fill(fill if isinstance(fill, str) else "")
        return out
    if fill is None:  # no fill: zeros, as zarr-python reads it; NaT for times (zero is 1970-01-01)
        if dt is not None and dt.kind in "mM":
            return np.full(shape, np.array("NaT", dtype=dt))
        return np.zeros(shape, dtype=dt)
    return np.full(shape, fill, dtype=dt)


def _check_blosc(raw: Any) -> None:
    """Refuse a Blosc frame whose header disagrees with its length.

    numcodecs' Blosc trusts the sizes in the 16-byte header, so a truncated frame would be
    decoded from memory past its end: garbage values instead of an error.
    """
    view = memoryview(raw).cast("B")
    if len(view) < 16:
        raise ValueError(f"blosc frame of {len(view)} bytes is shorter than its 16-byte header")
    cbytes = int.from_bytes(view[12:16], "little")
    if cbytes != len(view):
        raise ValueError(f"blosc frame says {cbytes} bytes but holds {len(view)}")


def _decode_bytes_codec(codec: Any, data: Any, size: int | None = None, hint: int | None = None) -> Any:
    """`codec.decode(data)`; when the decoded bytes are the chunk's values of known `size`,
    a zstd or Blosc frame declaring exactly that size decodes into a pooled buffer (see
    `decode/buffers.py`). Any other frame decodes as before, and its size is checked later."""
    blosc = isinstance(codec, numcodecs.Blosc)
    if blosc:
        _check_blosc(data)
    if size is not None and size >= MIN_BYTES:
        declared = blosc_content_size(data) if blosc else zstd_content_size(data)
        if declared == size and (blosc or isinstance(codec, numcodecs.Zstd)):
            return codec.decode(data, out=POOL.take(size))
    return _decode_sized(codec, data, size or hint)


def _decode_sized(codec: Any, data: Any, size: int | None) -> Any:
    """`codec.decode(data)`, a deflate codec told the size to expect (decode/inflate.py)."""
    if size and isinstance(codec, inflate.Inflate):
        return codec.decode(data, size_hint=size)
    return codec.decode(data)


def _cells(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _from_bytes(origin: str, data: Any, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The flat values of a fixed-size chunk, refused unless they fill `shape` exactly.

    `origin` says where the bytes came from, as the error names it ("codec 'gzip' gave").
    """
    got, want = memoryview(data).nbytes, _cells(shape) * dtype.itemsize
    if got != want:
        raise _Failure(f"{origin} {got} bytes, but a chunk of shape {list(shape)} of {dtype} holds {want}")
    return np.frombuffer(data, dtype=dtype)


def _check_vlen(codec: str, data: Any, shape: tuple[int, ...]) -> None:
    """Refuse a variable-length frame whose header does not count one value per cell.

    numcodecs allocates as many values as the header counts before reading them, so random
    bytes there would ask for gigabytes instead of failing.
    """
    view = memoryview(data).cast("B")
    cells = _cells(shape)
    if len(view) < 4:
        raise _Failure(f"codec '{codec}' failed: the frame of {len(view)} bytes is shorter than its 4-byte header")
    counted = int.from_bytes(view[:4], "little")
    if counted != cells:
        raise _Failure(f"codec '{codec}' counts {counted} values, but a chunk of shape {list(shape)} holds {cells}")
    if len(view) < 4 + 4 * cells:
        raise _Failure(f"codec '{codec}' failed: the frame of {len(view)} bytes is too short for {cells} values")


def _decode_vlen(codec: str, data: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A vlen-utf8 / vlen-bytes frame as a flat object array of one value per cell."""
    _check_vlen(codec, data, shape)
    vlen = numcodecs.VLenUTF8() if codec == "vlen-utf8" else numcodecs.VLenBytes()
    arr = np.asarray(_stage(codec, vlen.decode, data), dtype=object).reshape(-1)
    if arr.size != _cells(shape):
        raise _Failure(
            f"codec '{codec}' gave {arr.size} values, but a chunk of shape {list(shape)} holds {_cells(shape)}"
        )
    return arr


@dataclass(frozen=True, slots=True)
class _V2Pipeline:
    """A v2 array's compressor and filters, built once: `decode` turns a chunk's bytes into
    its values (chunk shape, `order`). Codecs known to keep no state between calls are shared
    by every chunk (and thread); any other is built per chunk, as numcodecs expects."""

    array: ArrayMeta
    compressor: tuple[str, Any] | None
    filters: tuple[tuple[str, dict[str, Any], Any], ...]
    #: The chunk's bytes when the compressor's output is its values (no filter, fixed size).
    size: int | None
    #: The chunk's values in bytes (fixed-size types): what a deflate stage most likely
    #: decodes to, told to it so that its output is allocated once.
    chunk_bytes: int | None = None

    @staticmethod
    def build(array: ArrayMeta) -> _V2Pipeline:
        comp = array.codecs.get("compressor")
        compressor = (_codec_id(comp), _shared_numcodec(comp)) if comp else None
        filters = tuple((_codec_id(f), f, _shared_numcodec(f)) for f in reversed(array.codecs.get("filters") or []))
        fixed = array.dtype.kind != "string"
        chunk_bytes = _cells(array.chunks) * np.dtype(array.dtype.name).itemsize if fixed else None
        size = chunk_bytes if not filters else None
        return _V2Pipeline(array, compressor, filters, size, chunk_bytes)

    def decode(self, raw: Any) -> np.ndarray:
        array = self.array
        data: Any = raw
        last = None
        if self.compressor is not None:
            last, shared = self.compressor
            codec = shared if shared is not None else _numcodec(array.codecs["compressor"])
            data = _stage(last, lambda d: _decode_bytes_codec(codec, d, self.size, self.chunk_bytes), data)
        for last, config, shared in self.filters:
            data = _v2_filter(last, config, shared, data, array.chunks, self.chunk_bytes)
        if array.dtype.kind == "string":
            arr = np.asarray(data, dtype=object).reshape(-1)
            if arr.size != _cells(array.chunks):
                cells = _cells(array.chunks)
                raise _Failure(
                    f"codec '{last}' gave {arr.size} values, but a chunk of shape {list(array.chunks)} holds {cells}"
                )
        else:
            origin = f"codec '{last}' gave" if last else "the stored chunk (no compressor) holds"
            arr = _from_bytes(origin, data, np.dtype(array.dtype.name), array.chunks)
        return arr.reshape(array.chunks, order=array.order)


def _shared_numcodec(config: Any) -> Any:
    """The numcodecs codec of `config`, built once, when its id is one of the stateless
    bytes codecs (`NUMCODECS_BYTES`); None for any other (built per chunk)."""
    if not isinstance(config, dict) or config.get("id") not in NUMCODECS_BYTES:
        return None
    try:
        return _numcodec(config)
    except Exception:  # a configuration numcodecs refuses: each chunk's decode reports it by name
        return None


@dataclass(frozen=True, slots=True)
class _V3Pipeline:
    """One v3 codec list prepared for chunks of `shape`: the bytes-to-bytes codecs in decode
    order, the array-to-bytes codec, and the transpose, all looked up once."""

    array: ArrayMeta
    stages: tuple[tuple[str, Any], ...]
    a2b: dict[str, Any]
    stored: tuple[int, ...]
    back: tuple[int, ...] | None
    dtype: np.dtype | None
    origin: str
    #: The last stage's output size when it is the chunk's values (read by `bytes`).
    size: int | None
    #: The chunk's values in bytes (a hint for deflate stages, see `_V2Pipeline.chunk_bytes`).
    values_bytes: int | None = None

    @staticmethod
    def build(
        array: ArrayMeta, codecs: list[dict], shape: tuple[int, ...], dtype: np.dtype | None = None
    ) -> _V3Pipeline:
        stages = []
        last = None  # the bytes-to-bytes codec the array-to-bytes codec gets its input from
        for c in reversed(codecs):
            name = c.get("name")
            if _bytes_codec_name(name):
                itemsize = (dtype if dtype is not None else array.dtype.numpy or np.dtype("u1")).itemsize
                stages.append(
                    (name, _v3_bytes_codec(name, _freeze(_bytes_config(name, c.get("configuration"), itemsize))))
                )
                last = name
        order = None
        for c in codecs:
            if c.get("name") == "transpose":
                settings: Any = c.get("configuration") or {}  # JSON, checked by check_v3_codecs
                order = tuple(settings.get("order"))
        stored = tuple(shape[i] for i in order) if order else shape
        a2b = next(c for c in codecs if c.get("name") in ("bytes", "vlen-utf8", "vlen-bytes", SHARDING))
        dt = None
        if a2b["name"] == "bytes":
            base = dtype if dtype is not None else array.dtype.numpy
            assert base is not None, "an array with the 'bytes' codec has a fixed-size numpy dtype"
            endian = (a2b.get("configuration") or {}).get("endian", "little")
            dt = (
                base
                if base.itemsize == 1 or base.kind == "S"
                else base.newbyteorder("<" if endian == "little" else ">")
            )
        origin = f"codec '{last}' gave" if last else "codec 'bytes' got"
        back = tuple(int(i) for i in np.argsort(order)) if order else None
        values_bytes = _cells(stored) * dt.itemsize if dt is not None else None
        size = values_bytes if stages else None
        return _V3Pipeline(array, tuple(stages), a2b, stored, back, dt, origin, size, values_bytes)

    def decode(self, raw: Any) -> np.ndarray:
        data: Any = raw
        final = len(self.stages) - 1
        for k, (name, codec) in enumerate(self.stages):
            try:
                data = _decode_bytes_codec(codec, data, self.size if k == final else None, self.values_bytes)
            except _Failure:
                raise
            except Exception as err:  # codec libraries raise their own types; this is their edge
                raise _Failure(f"codec '{name}' failed: {type(err).__name__}: {err}") from err
        name = self.a2b["name"]
        if name == SHARDING:
            arr = _decode_shard(self.array, self.a2b.get("configuration") or {}, data, self.stored)
        elif name == "bytes":
            assert self.dtype is not None
            arr = _from_bytes(self.origin, data, self.dtype, self.stored)
        else:
            arr = _decode_vlen(name, data, self.stored)
        arr = arr.reshape(self.stored)
        return arr.transpose(self.back) if self.back else arr


def _v2_filter(
    codec: str, f: dict[str, Any], shared: Any, data: Any, shape: tuple[int, ...], chunk_bytes: int | None
) -> Any:
    """One v2 filter's decode; `chunk_bytes` (the chunk's values, in bytes) is what a deflate
    filter most likely decodes to (HDF5's shuffle + deflate: the shuffled values)."""
    if codec in ("vlen-utf8", "vlen-bytes"):
        return _decode_vlen(codec, data, shape)
    decoder = shared if shared is not None else _numcodec(f)
    return _stage(codec, lambda d: _decode_sized(decoder, d, chunk_bytes), data)


def _decode_codecs(
    array: ArrayMeta, codecs: list[dict], raw: Any, shape: tuple[int, ...], dtype: np.dtype | None = None
) -> np.ndarray:
    """Decode one v3 codec list into an array of `shape` (`dtype` overrides the array's)."""
    return _V3Pipeline.build(array, codecs, shape, dtype).decode(raw)


#: Prepared pipelines of recently read arrays, by the array record's identity (see `_pipeline`).
_PIPELINES: dict[int, tuple[ArrayMeta, _V2Pipeline | _V3Pipeline]] = {}
_PIPELINES_KEPT = 256


def _pipeline(array: ArrayMeta) -> _V2Pipeline | _V3Pipeline:
    """The array's chunk pipeline, prepared once: a scan of many small chunks would otherwise
    look up its codecs again for every chunk. Kept by identity, the record held with it so
    that a reused id never matches; rebuilt after the cache is cleared (no lock: a race
    builds the same pipeline twice)."""
    hit = _PIPELINES.get(id(array))
    if hit is not None and hit[0] is array:
        return hit[1]
    made = _V2Pipeline.build(array) if array.zarr_format == 2 else _V3Pipeline.build(array, array.codecs, array.chunks)
    if len(_PIPELINES) >= _PIPELINES_KEPT:
        _PIPELINES.clear()
    _PIPELINES[id(array)] = (array, made)
    return made


#: An inner chunk a shard's index marks as absent (offset and length all ones).
_ABSENT = 2**64 - 1
SHARDING = "sharding_indexed"


def inner_grid(config: dict, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(inner chunk shape, inner chunks per axis) of a shard of `shape`."""
    inner = tuple(config.get("chunk_shape") or ())
    if len(inner) != len(shape) or any(c <= 0 or s % c for s, c in zip(shape, inner, strict=True)):
        raise _Failure(
            f"codec '{SHARDING}': inner chunk shape {list(inner)} does not divide the shard shape {list(shape)}"
        )
    return inner, tuple(s // c for s, c in zip(shape, inner, strict=True))


def _index_codecs(config: dict) -> list[dict]:
    return config.get("index_codecs") or [{"name": "bytes", "configuration": {"endian": "little"}}]


def index_size(config: dict, grid: tuple[int, ...]) -> int:
    """Bytes of a shard's index: (offset, length) as two uint64 per inner chunk, and a
    checksum when the index codecs have one."""
    return int(np.prod(grid)) * 16 + 4 * sum(1 for c in _index_codecs(config) if c.get("name") == "crc32c")


def decode_index(array: ArrayMeta, config: dict, raw: Any, grid: tuple[int, ...]) -> np.ndarray:
    """A shard's index as (offset, length) per inner chunk, shape (*grid, 2)."""
    try:
        return _decode_codecs(array, _index_codecs(config), raw, (*grid, 2), np.dtype("<u8"))
    except _Failure as err:
        raise _Failure(f"in the index of the shard ({SHARDING}), {err.detail}") from err


def is_absent(offset: int, length: int) -> bool:
    """Whether an index entry marks an inner chunk that was never written (fill)."""
    return offset == _ABSENT and length == _ABSENT


def decode_inner(array: ArrayMeta, config: dict, raw: Any, pos: tuple[int, ...], inner: tuple[int, ...]) -> np.ndarray:
    """Inner chunk `pos` of a shard from its bytes."""
    try:
        return _decode_codecs(array, config.get("codecs") or [], raw, inner)
    except _Failure as err:
        raise _Failure(f"in inner chunk {list(pos)} of the shard ({SHARDING}), {err.detail}") from err


def too_short(got: int, size: int) -> _Failure:
    return _Failure(f"codec '{SHARDING}' failed: the shard's {got} bytes are fewer than its {size}-byte index")


def past_end(end: int, size: int) -> _Failure:
    return _Failure(f"codec '{SHARDING}' failed: the shard's index points past its end ({end} > {size})")


def _decode_shard(array: ArrayMeta, config: dict, raw: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A shard: its index (one (offset, length) per inner chunk) and the inner chunks it points to."""
    inner, grid = inner_grid(config, shape)
    size = index_size(config, grid)
    view = memoryview(raw).cast("B")
    if len(view) < size:
        raise too_short(len(view), size)
    at_end = config.get("index_location", "end") == "end"
    index = decode_index(array, config, view[len(view) - size :] if at_end else view[:size], grid)
    out = fill_chunk(array, shape)
    for pos in np.ndindex(*grid):
        offset, length = (int(v) for v in index[pos])
        if is_absent(offset, length):
            continue
        if offset + length > len(view):
            raise past_end(offset + length, len(view))
        chunk = decode_inner(array, config, view[offset : offset + length], pos, inner)
        out[tuple(slice(p * c, (p + 1) * c) for p, c in zip(pos, inner, strict=True))] = chunk
    return out


def _chunk_error(array: ArrayMeta, key: str | None, store_url: str | None, detail: str) -> DecodeError:
    chunk = f"chunk '{key}'" if key else "a chunk"
    where = f" in store '{store_url}'" if store_url else ""
    return DecodeError(
        f"{chunk} of array '{array.path}'{where} could not be decoded: {detail}; the chunk is corrupt "
        "or truncated: rewrite it, or exclude the array from the query"
    )


@contextmanager
def naming_chunk(array: ArrayMeta, key: str | None, store_url: str | None) -> Iterator[None]:
    """A codec's failure inside the block becomes the `DecodeError` naming chunk `key`."""
    try:
        yield
    except _Failure as err:
        raise _chunk_error(array, key, store_url, err.detail) from err


def decode_chunk(
    array: ArrayMeta, raw: bytes | None, key: str | None = None, store_url: str | None = None
) -> np.ndarray:
    """The full chunk (chunk shape, padded at the edges) from its stored bytes.

    `key` and `store_url` only name the chunk in the error a corrupt chunk raises.
    """
    counters.count(chunks_decoded=1)
    if raw is None:
        return fill_chunk(array, array.chunks)
    return _decode_stored(array, _pipeline(array), raw, key, store_url)


def _decode_stored(
    array: ArrayMeta, pipeline: _V2Pipeline | _V3Pipeline, raw: Any, key: str | None, store_url: str | None
) -> np.ndarray:
    """One stored chunk through its array's prepared pipeline; a failure names the chunk."""
    try:
        arr = pipeline.decode(raw)
    except _Failure as err:
        raise _chunk_error(array, key, store_url, err.detail) from err
    except (ValueError, RuntimeError, TypeError) as err:  # the layout around the codecs (a reshape)
        raise _chunk_error(array, key, store_url, str(err)) from err
    if arr.dtype != array.dtype.numpy and array.dtype.kind != "string":
        arr = arr.astype(array.dtype.numpy)
    return arr


def _chunk_ranges(start: int, stop: int, size: int) -> range:
    return range(start // size, (stop - 1) // size + 1) if stop > start else range(0)


def region_chunks(array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> list[tuple[int, ...]]:
    per_axis = [_chunk_ranges(a, b, c) for (a, b), c in zip(region, array.chunks, strict=True)]
    return list(itertools.product(*per_axis))


def _region_key_list(array: ArrayMeta, per_axis: list[range]) -> list[str]:
    """The keys of every chunk in the product of `per_axis`, in `region_chunks` order:
    `ArrayMeta.chunk_key`'s spelling, with each axis's part of the key formatted once."""
    sep = array.separator
    if array.v2_keys:
        head = f"{array.path}/" if array.path else ""
        parts = [[(sep if k else "") + str(i) for i in r] for k, r in enumerate(per_axis)]
    else:
        head = f"{array.path}/c" if array.path else "c"
        parts = [[sep + str(i) for i in r] for r in per_axis]
    return [head + "".join(p) for p in itertools.product(*parts)]


def region_keys(array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> list[str] | None:
    """The store keys `read_region` will get for `region`; None when zarr-python reads it."""
    if not fast_path(array):
        return None
    if not region:
        return [array.chunk_key(())]
    return _region_key_list(array, [_chunk_ranges(a, b, c) for (a, b), c in zip(region, array.chunks, strict=True)])


def read_region(store: Store, array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The cells of `region` ((start, stop) per axis), assembled from every chunk it touches."""
    if not fast_path(array):
        return _read_with_zarr(store, array, region)
    indices = region_chunks(array, region)
    if len(indices) == 1:
        idx = indices[0]
        sl = _within(region, idx, array.chunks)
        key = array.chunk_key(idx)
        rows = _leading(array, region, idx)
        if rows:
            return _read_leading(store, array, key, rows)[sl]
        return decode_chunk(array, store.get(key), key, store.url)[sl]
    return _assemble(store, array, region)


#: A region within the first `PREFIX_SHARE` (a fraction, as a pair) of a chunk's rows along
#: its first axis decodes only those rows (`_read_leading`); past it the whole chunk is
#: decoded in one call, which is faster per byte than a stream.
PREFIX_SHARE = (1, 2)
#: Stored bytes read for a chunk's leading rows beyond the decoded bytes they take: zstd
#: grows no block by more than its 3-byte header, and the block holding the last byte
#: wanted (up to 128 KiB decoded) must be read whole.
LEADING_SLACK = 128 * 1024 + 4096


def streams_leading_rows(array: ArrayMeta) -> bool:
    """Whether the array's chunks are a lone zstd frame of the values as they lie in memory
    (`_direct_codec`), so that their leading rows can be decompressed alone, and zstandard,
    which decodes a frame as a stream, is there."""
    return (
        array.ndim > 0
        and array.dtype.numpy is not None
        and isinstance(_direct_codec(_pipeline(array)), numcodecs.Zstd)
        and zstd_module() is not None
    )


def _leading(array: ArrayMeta, region: tuple[tuple[int, int], ...], idx: tuple[int, ...]) -> int:
    """The rows of chunk `idx` that `region` (inside it) needs along the first axis, counted
    from the chunk's start, when they are at most `PREFIX_SHARE` of its rows and its frames
    stream (`streams_leading_rows`); else 0, and the chunk is decoded whole."""
    rows = region[0][1] - idx[0] * array.chunks[0] if region else 0
    if rows and rows * PREFIX_SHARE[1] <= array.chunks[0] * PREFIX_SHARE[0] and streams_leading_rows(array):
        return rows
    return 0


def _stream_rows(array: ArrayMeta, raw: Any, rows: int) -> tuple[np.ndarray, Any] | None:
    """The first `rows` rows of chunk frame `raw`, shaped `(rows, *chunks[1:])`, decoded as a
    stream, with the stream (to go on from there); None when the frame does not allow it
    (`_open_stream`) or does not decode that far. Counts the chunk as decoded."""
    dtype = array.dtype.numpy
    assert dtype is not None, "checked by streams_leading_rows"
    shape = (rows, *array.chunks[1:])
    stream = _open_stream(array, raw)
    out = np.empty(_cells(shape) * dtype.itemsize, dtype=np.uint8)
    if stream is None or not _stream_into(stream, out):
        return None
    counters.count(chunks_decoded=1)
    return out.view(dtype).reshape(shape), stream


def _read_leading(store: Store, array: ArrayMeta, key: str, rows: int) -> np.ndarray:
    """The chunk at `key` as far as its first `rows` rows along the first axis, shaped
    `(rows, *chunks[1:])` (the whole chunk where the quick way does not apply).

    A zstd frame is a stream, so the values before an offset decode without the rest: an
    hour out of a day's chunk costs a 24th of its decoding, and on a local store a 24th of
    its reading too (only the frame's first bytes are read, `LEADING_SLACK` more than the
    rows take). A remote store gets the whole chunk as usual, so that a chunk the reader
    fetched ahead is taken, not asked for again. A frame that does not declare the chunk's
    exact size, that asks for a checksum (checked at the frame's end), or that does not
    decode that far is read and decoded whole, with the errors of that path."""
    dtype = array.dtype.numpy
    assert dtype is not None, "checked by streams_leading_rows"
    need = rows * _cells(array.chunks[1:]) * dtype.itemsize
    if not getattr(store, "remote", False) and isinstance(store, RangeReading):
        raw = store.get_ranges([(key, ByteRange(0, need + LEADING_SLACK))])[0]
    else:
        raw = store.get(key)
    if raw is not None:
        got = _stream_rows(array, raw, rows)
        if got is not None:
            return got[0]
        if len(raw) == need + LEADING_SLACK:  # only the frame's start was read
            raw = store.get(key)
    return decode_chunk(array, raw, key, store.url)


class _Rest:
    """A chunk whose head `read_head` decoded: the rest of its frame, ready to go on."""

    __slots__ = ("array", "rows", "store", "stream")

    def __init__(self, store: Store, array: ArrayMeta, stream: Any, rows: int) -> None:
        self.store, self.array, self.stream, self.rows = store, array, stream, rows


#: Heads' streams waiting for their rests: a few per decoding thread (the rest is the unit
#: right after its head). Past that the oldest is dropped and its rest decodes whole again.
RESTS_KEPT = 16
_rests: dict[tuple[int, str], _Rest] = {}
_rests_lock = threading.Lock()


def read_head(store: Store, array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """`read_region` of the head of a unit that the reader split (`scan.reader.head_and_rest`),
    keeping the chunk's zstd stream where the head's rows end, so that `read_rest` of the
    rest of the unit goes on decoding from there: each chunk is still read once and decoded
    once. The chunk is read whole (the rest needs it). Anything `_read_leading` would not
    decode as a stream reads as `read_region` does."""
    indices = region_chunks(array, region) if region and fast_path(array) else []
    rows = _leading(array, region, indices[0]) if len(indices) == 1 else 0
    if not rows:
        return read_region(store, array, region)
    idx = indices[0]
    key = array.chunk_key(idx)
    raw = store.get(key)
    got = _stream_rows(array, raw, rows) if raw is not None else None
    if got is None:
        return decode_chunk(array, raw, key, store.url)[_within(region, idx, array.chunks)]
    head, stream = got
    with _rests_lock:
        _rests[(id(store), key)] = _Rest(store, array, stream, rows)
        while len(_rests) > RESTS_KEPT:
            del _rests[next(iter(_rests))]
    return head[_within(region, idx, array.chunks)]


def read_rest(store: Store, array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """`read_region` of the rest of a split unit: the chunk's stream kept by `read_head` goes on
    from the head's last row (nothing read or counted again); without one (dropped, or
    another scan's), the region reads as `read_region` does."""
    indices = region_chunks(array, region) if region and fast_path(array) else []
    if len(indices) != 1:
        return read_region(store, array, region)
    idx = indices[0]
    key = array.chunk_key(idx)
    with _rests_lock:
        kept = _rests.pop((id(store), key), None)
    first = region[0][0] - idx[0] * array.chunks[0]
    if kept is None or kept.store is not store or kept.array is not array or kept.rows != first:
        return read_region(store, array, region)
    dtype = array.dtype.numpy
    assert dtype is not None, "a kept stream is of a fixed-size type"
    rows = region[0][1] - idx[0] * array.chunks[0] - first
    out = np.empty(rows * _cells(array.chunks[1:]) * dtype.itemsize, dtype=np.uint8)
    if not _stream_into(kept.stream, out):
        return read_region(store, array, region)  # a frame that fails late: decoded whole, by name
    rest = out.view(dtype).reshape((rows, *array.chunks[1:]))
    return rest[(slice(None), *_within(region, idx, array.chunks)[1:])]


def forget_rests(store: Store) -> None:
    """Drop the kept streams of `store` (its scan is over; a LIMIT met by a head leaves one)."""
    with _rests_lock:
        for k in [k for k, v in _rests.items() if v.store is store]:
            del _rests[k]


def _within(region: tuple[tuple[int, int], ...], idx: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(a - i * c, b - i * c) for (a, b), i, c in zip(region, idx, chunks, strict=True))


def _open_stream(array: ArrayMeta, raw: Any) -> Any:
    """A zstd stream over chunk frame `raw` when it declares the chunk's exact size and no
    checksum, else None (see `_read_leading`)."""
    dtype = array.dtype.numpy
    if dtype is None or zstd_content_size(raw) != _cells(array.chunks) * dtype.itemsize:
        return None
    if _zstd_checksum(raw):
        return None
    data = memoryview(raw).cast("B")
    return zstd_module().ZstdDecompressor().stream_reader(data, read_size=len(data), read_across_frames=False)


def _stream_into(stream: Any, out: np.ndarray) -> bool:
    """Fill `out` (bytes) from `stream`; False when the frame ends first or fails."""
    try:
        return _fill(stream, out.data) == len(out)
    except Exception:  # noqa: BLE001 - any failure: the chunk is decoded whole, and fails by name there
        return False


def _zstd_checksum(raw: Any) -> bool:
    """Whether a zstd frame's header asks for a content checksum (bit 2 of its descriptor)."""
    return bool(memoryview(raw).cast("B")[4] & 0b100)


def zstd_prefix(raw: Any, out: memoryview) -> int:
    """Decompress zstd frame `raw` only as far as `out` (bytes) reaches, into it; the bytes
    written, fewer when the frame ends first. zstandard's errors propagate. The caller
    checks that `zstd_module()` is there."""
    data = memoryview(raw).cast("B")
    with zstd_module().ZstdDecompressor().stream_reader(data, read_size=len(data), read_across_frames=False) as r:
        return _fill(r, out)


def _fill(stream: Any, out: memoryview) -> int:
    """Read `stream` into `out` until it is full or the stream ends; the bytes read."""
    got = 0
    while got < len(out):
        n = stream.readinto(out[got:])
        if not n:
            break
        got += n
    return got


def _axis_slices(a: int, b: int, c: int) -> tuple[range, list[slice], list[slice]]:
    """Along one axis of region [a, b) over chunks of length `c`: the chunks it touches, and
    per chunk the slice of the region it fills and the slice of the chunk it takes."""
    chunks = _chunk_ranges(a, b, c)
    dst, src = [], []
    for i in chunks:
        lo, hi = max(a, i * c), min(b, (i + 1) * c)
        dst.append(slice(lo - a, hi - a))
        src.append(slice(lo - i * c, hi - i * c))
    return chunks, dst, src


def _assemble(store: Store, array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """A region of several chunks: fetched together, each decoded through the array's prepared
    pipeline into its place; the slices are worked out per axis once, not per chunk, since a
    region of many small chunks spends its time on per-chunk work."""
    axes = [_axis_slices(a, b, c) for (a, b), c in zip(region, array.chunks, strict=True)]
    keys = _region_key_list(array, [ax[0] for ax in axes])
    out = np.empty(tuple(b - a for a, b in region), dtype=array.dtype.numpy)
    pipeline = _pipeline(array)
    fill: np.ndarray | None = None
    raws = store.get_many(keys)  # concurrent on remote stores
    counters.count(chunks_decoded=len(keys))
    dsts = itertools.product(*[ax[1] for ax in axes])
    srcs = itertools.product(*[ax[2] for ax in axes])
    for key, raw, dst, src in zip(keys, raws, dsts, srcs, strict=True):
        if raw is None:  # absent: the fill value
            if fill is None:
                fill = fill_chunk(array, (1,) * len(region))
            out[dst] = fill
            continue
        out[dst] = _decode_stored(array, pipeline, raw, key, store.url)[src]
    return out


def _direct_codec(pipeline: _V2Pipeline | _V3Pipeline) -> Any:
    """The lone zstd or Blosc codec of a pipeline whose output is a chunk's values as they
    lie in memory (native byte order, C order, no transpose, no filter), else None: such a
    frame can be decoded straight into its place in a larger output."""
    if isinstance(pipeline, _V3Pipeline):
        if pipeline.a2b["name"] != "bytes" or pipeline.back is not None or len(pipeline.stages) != 1:
            return None
        dt = pipeline.dtype
        codec = pipeline.stages[0][1]
    else:
        if pipeline.filters or pipeline.compressor is None or pipeline.array.order != "C":
            return None
        dt = np.dtype(pipeline.array.dtype.name)
        codec = pipeline.compressor[1]
    if dt is None or dt != pipeline.array.dtype.numpy or not (dt.isnative or dt.itemsize == 1):
        return None
    return codec if isinstance(codec, (numcodecs.Zstd, numcodecs.Blosc)) else None


def _decode_into(codec: Any, raw: Any, dest: np.ndarray) -> bool:
    """Decode frame `raw` into `dest` (uint8, exactly the chunk's bytes) when the frame
    declares exactly that size; False (nothing written) for any other frame, which the
    chunk's own pipeline then decodes and checks."""
    if isinstance(codec, numcodecs.Zstd):
        if zstd_content_size(raw) != len(dest):
            return False
    else:
        _check_blosc(raw)
        if blosc_content_size(raw) != len(dest):
            return False
    codec.decode(raw, out=dest)
    return True


def chunk_order_ok(array: ArrayMeta, region: tuple[tuple[int, int], ...], grid: tuple[int, ...]) -> bool:
    """Whether `read_region_in_chunk_order` reads `region` of `array` on the table's chunk
    `grid`: the array's chunks are the grid's, the region starts on a chunk boundary, its
    values have a fixed size and this module decodes them."""
    return (
        tuple(array.chunks) == tuple(grid)
        and len(region) == array.ndim
        and array.dtype.kind not in ("string", "unsupported")
        and array.dtype.numpy is not None
        and array.dtype.numpy != np.dtype(object)
        and all(a % c == 0 for (a, _), c in zip(region, array.chunks, strict=True))
        and fast_path(array)
        and (array.zarr_format == 2 or all(c.get("name") != SHARDING for c in array.codecs))
    )


def read_region_in_chunk_order(store: Store, array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The cells of `region` as one flat array in chunk order: chunk by chunk in row-major
    order of the chunk grid, each chunk's cells (clipped to the region) row-major. That is
    the order in which the reader hands out a grouped unit's rows (`plan.units.ungrouped_order`),
    so a region read this way needs no reordering, and each chunk is written once, straight
    to its place: an interior chunk's zstd or Blosc frame decodes into the output itself,
    where assembling the region and then reordering it copies every value twice more.
    The caller checks `chunk_order_ok` first."""
    axes = [_axis_slices(a, b, c) for (a, b), c in zip(region, array.chunks, strict=True)]
    keys = _region_key_list(array, [ax[0] for ax in axes])
    dtype = array.dtype.numpy
    assert dtype is not None
    lengths = [[s.stop - s.start for s in ax[2]] for ax in axes]
    cells = np.ones(1, dtype=np.int64)
    for axis_lengths in lengths:  # cells of each chunk's part, in chunk order
        cells = np.multiply.outer(cells, np.asarray(axis_lengths, dtype=np.int64)).reshape(-1)
    ends = np.cumsum(cells).tolist()
    out = np.empty(ends[-1] if ends else 0, dtype=dtype)
    raw_out = out.view(np.uint8)
    itemsize = dtype.itemsize
    full = _cells(array.chunks)
    pipeline = _pipeline(array)
    direct = _direct_codec(pipeline)
    raws = store.get_many(keys)  # concurrent on remote stores
    counters.count(chunks_decoded=len(keys))
    done = _zstd_batch(direct, raws, ends, full, itemsize, raw_out)
    fill: np.ndarray | None = None
    start = 0
    for i, (key, raw, end, src) in enumerate(
        zip(keys, raws, ends, itertools.product(*[ax[2] for ax in axes]), strict=True)
    ):
        n = end - start
        if done is not None and done[i]:
            pass
        elif raw is None:  # absent: the fill value
            if fill is None:
                fill = fill_chunk(array, (1,))
            out[start:end] = fill
        elif not (
            direct is not None and n == full and _decode_into_safe(direct, raw, raw_out, start * itemsize, n * itemsize)
        ):
            chunk = _decode_stored(array, pipeline, raw, key, store.url)
            part = chunk[src]
            out[start:end].reshape(part.shape)[...] = part
        start = end
    return out


@lru_cache(maxsize=1)
def zstd_module() -> Any:
    try:
        import zstandard
    except ImportError:  # an optional package: without it each frame is decoded by numcodecs
        return None
    return zstandard


@lru_cache(maxsize=1)
def _zstandard() -> Any:
    zstandard = zstd_module()
    # the batch call is in the C backend only (not the cffi one)
    if zstandard is None or "multi_decompress_to_buffer" not in getattr(zstandard, "backend_features", ()):
        return None
    return zstandard


_local = threading.local()

#: The fewest whole zstd chunks of a region decoded as one batch (fewer: one by one).
BATCH_MIN = 4


def _zstd_batch(
    codec: Any, raws: list[Any], ends: list[int], full: int, itemsize: int, out: np.ndarray
) -> list[bool] | None:
    """Decode the region's whole zstd chunks in one call when the `zstandard` package is
    there: its `multi_decompress_to_buffer` decodes every frame in C without the GIL, where
    numcodecs costs a Python call per frame and lets the decoding threads fight over the
    GIL between frames of a few KB. Returns which chunks it wrote (into `out`, uint8 over
    the region's values) or None; a batch that fails writes nothing trusted, and every
    chunk is then decoded one by one (a corrupt one raises its `DecodeError` there)."""
    zstandard = _zstandard()
    if zstandard is None or not isinstance(codec, numcodecs.Zstd):
        return None
    done = [False] * len(raws)
    picked, frames, starts = [], [], []
    start = 0
    for i, (raw, end) in enumerate(zip(raws, ends, strict=True)):
        if raw is not None and end - start == full:
            picked.append(i)
            frames.append(raw)
            starts.append(start * itemsize)
        start = end
    if len(frames) < BATCH_MIN:
        return None
    nbytes = full * itemsize
    dctx = getattr(_local, "zstd", None)
    if dctx is None:
        dctx = _local.zstd = zstandard.ZstdDecompressor()
    try:
        got = dctx.multi_decompress_to_buffer(
            frames, decompressed_sizes=np.full(len(frames), nbytes, dtype=np.uint64).tobytes()
        )
        if len(got) != len(frames):
            return None
        if got.size() != nbytes * len(frames):
            return None
        for i, at, segment in zip(picked, starts, got, strict=True):
            out[at : at + nbytes] = segment  # a segment of the wrong length fails to broadcast
            done[i] = True
    except Exception:  # noqa: BLE001 - any failure: decoded again frame by frame, by name
        return None
    return done


def _decode_into_safe(codec: Any, raw: Any, out: np.ndarray, at: int, nbytes: int) -> bool:
    """`_decode_into` the `nbytes` of `out` from byte `at` (a whole chunk's); False on any failure:
    the chunk's own pipeline then decodes it again and reports the failure by chunk key
    (`DecodeError`)."""
    try:
        return _decode_into(codec, raw, out[at : at + nbytes])
    except Exception:  # noqa: BLE001 - any codec failure is re-raised by name on the slow path
        return False


def _read_with_zarr(store: Store, array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Read a region through zarr-python, for codecs this module does not decode itself."""
    import zarr

    zstore = _zarr_store(store)
    try:
        arr = zarr.open_array(store=zstore, path=array.path, mode="r", zarr_format=array.zarr_format)
    except Exception as err:  # zarr raises many types; this is the edge of the fallback
        raise DecodeError(
            f"array '{array.path}' in store '{store.url}' could not be opened with zarr-python: "
            f"{type(err).__name__}: {err}"
        ) from err
    try:
        got = arr[tuple(slice(a, b) for a, b in region)]
    except Exception as err:  # zarr raises many types; this is the edge of the fallback
        raise _fallback_error(store, array, arr, region, err) from err
    n = 1
    for (a, b), c in zip(region, array.chunks, strict=True):
        n *= len(_chunk_ranges(a, b, c))
    counters.count(chunks_decoded=n)
    out = np.asarray(got)
    if array.dtype.kind != "string" and out.dtype != array.dtype.numpy:
        assert array.dtype.numpy is not None, "unsupported dtypes are never read"
        out = out.astype(array.dtype.numpy)
    return out


def _fallback_error(
    store: Store, array: ArrayMeta, arr: Any, region: tuple[tuple[int, int], ...], err: Exception
) -> DecodeError:
    """A failed zarr-python read as a `DecodeError` naming the first chunk that fails alone
    (zarr-python's own error names no chunk), found by reading the region's chunks one by one."""
    codecs = ", ".join(str(c.get("name")) for c in array.codecs if isinstance(c, dict))
    detail = f"zarr-python failed with codecs [{codecs}] ({type(err).__name__}: {err})"
    for idx in region_chunks(array, region):
        cells = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(idx, array.chunks, array.shape, strict=True))
        try:
            arr[cells]
        except Exception as one:  # the same edge, chunk by chunk
            detail = f"zarr-python failed with codecs [{codecs}] ({type(one).__name__}: {one})"
            return _chunk_error(array, array.chunk_key(idx), store.url, detail)
    return _chunk_error(array, None, store.url, detail)


def _zarr_store(store: Store) -> Any:
    if isinstance(store, ZarrPythonAccess):
        return store.zarr_python_store()
    raise UnsupportedError(
        f"array codecs of store {store.url} need zarr-python, which cannot read through this store "
        "(DuckDB secrets); pass credentials in storage_options := MAP {...} to read it with fsspec"
    )
