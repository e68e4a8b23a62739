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
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import numcodecs
import numpy as np

from zarrsql import counters
from zarrsql.decode.buffers import MIN_BYTES, POOL, blosc_content_size, zstd_content_size
from zarrsql.errors import DecodeError, UnsupportedError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import Store, ZarrPythonAccess

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
    return numcodecs.get_codec(dict(config))


def _codec_id(config: Any) -> str:
    return str(config.get("id") or "?") if isinstance(config, dict) else "?"


@lru_cache(maxsize=256)
def _v3_bytes_codec(name: str, frozen: tuple) -> Any:
    config = dict(frozen)
    if name == "gzip":
        return numcodecs.GZip(level=config.get("level", 5))
    if name == "zstd":
        return numcodecs.Zstd(level=config.get("level", 0))
    if name == "blosc":
        return numcodecs.Blosc()
    if name == "crc32c":
        return numcodecs.CRC32C()
    if name.startswith("numcodecs."):
        return numcodecs.get_codec({**config, "id": name[10:]})
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
    if fill is None:
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


def _decode_bytes_codec(codec: Any, data: Any, size: int | None = None) -> Any:
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
    return codec.decode(data)


def _cells(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


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


def _v2_filter(f: dict[str, Any], data: Any, shape: tuple[int, ...]) -> Any:
    codec = _codec_id(f)
    if codec in ("vlen-utf8", "vlen-bytes"):
        return _decode_vlen(codec, data, shape)
    return _stage(codec, _numcodec(f).decode, data)


def _decode_v2(array: ArrayMeta, raw: bytes) -> np.ndarray:
    data: Any = raw
    last = None
    comp = array.codecs.get("compressor")
    filters = array.codecs.get("filters") or []
    if comp:
        last = _codec_id(comp)
        fixed = not filters and array.dtype.kind != "string"
        size = _cells(array.chunks) * np.dtype(array.dtype.name).itemsize if fixed else None
        data = _stage(last, lambda d: _decode_bytes_codec(_numcodec(comp), d, size), data)
    for f in reversed(filters):
        last = _codec_id(f)
        data = _v2_filter(f, data, array.chunks)
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


def _decode_codecs(
    array: ArrayMeta, codecs: list[dict], raw: Any, shape: tuple[int, ...], dtype: np.dtype | None = None
) -> np.ndarray:
    """Decode one v3 codec list into an array of `shape` (`dtype` overrides the array's)."""
    data: Any = raw
    last = None  # the bytes-to-bytes codec the array-to-bytes codec gets its input from
    itemsize = (dtype if dtype is not None else array.dtype.numpy or np.dtype("u1")).itemsize
    stages = [c for c in reversed(codecs) if _bytes_codec_name(c.get("name"))]
    # The last stage's output is the chunk's values when `bytes` reads them: its exact size.
    fixed = any(c.get("name") == "bytes" for c in codecs)
    for k, c in enumerate(stages):
        name = c.get("name")
        codec = _v3_bytes_codec(name, _freeze(_bytes_config(name, c.get("configuration"), itemsize)))
        size = _cells(shape) * itemsize if fixed and k == len(stages) - 1 else None
        data = _stage(name, lambda d, codec=codec, size=size: _decode_bytes_codec(codec, d, size), data)
        last = name
    order = None
    for c in codecs:
        if c.get("name") == "transpose":
            settings: Any = c.get("configuration") or {}  # JSON, checked by check_v3_codecs
            order = tuple(settings.get("order"))
    stored_shape = tuple(shape[i] for i in order) if order else shape
    a2b = next(c for c in codecs if c.get("name") in ("bytes", "vlen-utf8", "vlen-bytes", "sharding_indexed"))
    if a2b["name"] == "sharding_indexed":
        arr = _decode_shard(array, a2b.get("configuration") or {}, data, stored_shape)
    elif a2b["name"] == "bytes":
        base = dtype if dtype is not None else array.dtype.numpy
        assert base is not None, "an array with the 'bytes' codec has a fixed-size numpy dtype"
        endian = (a2b.get("configuration") or {}).get("endian", "little")
        dt = base if base.itemsize == 1 or base.kind == "S" else base.newbyteorder("<" if endian == "little" else ">")
        origin = f"codec '{last}' gave" if last else "codec 'bytes' got"
        arr = _from_bytes(origin, data, dt, stored_shape)
    else:
        arr = _decode_vlen(a2b["name"], data, stored_shape)
    arr = arr.reshape(stored_shape)
    if order:
        arr = arr.transpose(np.argsort(order))
    return arr


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
    try:
        arr = (
            _decode_v2(array, raw) if array.zarr_format == 2 else _decode_codecs(array, array.codecs, raw, array.chunks)
        )
    except _Failure as err:
        raise _chunk_error(array, key, store_url, err.detail) from err
    except (ValueError, RuntimeError, TypeError) as err:  # the layout around the codecs (a reshape)
        raise _chunk_error(array, key, store_url, str(err)) from err
    if arr.dtype != array.dtype.numpy and array.dtype.kind != "string":
        arr = arr.astype(array.dtype.numpy)
    return arr


def read_chunk(store: Store, array: ArrayMeta, index: tuple[int, ...]) -> np.ndarray:
    key = array.chunk_key(index)
    return decode_chunk(array, store.get(key), key, store.url)


def _chunk_ranges(start: int, stop: int, size: int) -> range:
    return range(start // size, (stop - 1) // size + 1) if stop > start else range(0)


def region_chunks(array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> list[tuple[int, ...]]:
    per_axis = [_chunk_ranges(a, b, c) for (a, b), c in zip(region, array.chunks, strict=True)]
    return list(itertools.product(*per_axis))


def region_keys(array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> list[str] | None:
    """The store keys `read_region` will get for `region`; None when zarr-python reads it."""
    if not fast_path(array):
        return None
    return [array.chunk_key(idx) for idx in region_chunks(array, region)]


def read_region(store: Store, array: ArrayMeta, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The cells of `region` ((start, stop) per axis), assembled from every chunk it touches."""
    if not fast_path(array):
        return _read_with_zarr(store, array, region)
    shape = tuple(b - a for a, b in region)
    indices = region_chunks(array, region)
    if len(indices) == 1:
        idx = indices[0]
        chunk = read_chunk(store, array, idx)
        sl = tuple(slice(a - i * c, b - i * c) for (a, b), i, c in zip(region, idx, array.chunks, strict=True))
        return chunk[sl]
    out = np.empty(shape, dtype=array.dtype.numpy)
    keys = [array.chunk_key(idx) for idx in indices]
    raws = store.get_many(keys)  # concurrent on remote stores
    for idx, key, raw in zip(indices, keys, raws, strict=True):
        chunk = decode_chunk(array, raw, key, store.url)
        dst, src = [], []
        for (a, b), i, c in zip(region, idx, array.chunks, strict=True):
            lo, hi = max(a, i * c), min(b, (i + 1) * c)
            dst.append(slice(lo - a, hi - a))
            src.append(slice(lo - i * c, hi - i * c))
        out[tuple(dst)] = chunk[tuple(src)]
    return out


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
