"""Corrupt chunks of every codec the reader decodes: each failure is a `DecodeError` naming the
chunk key, the array, the store and the codec, however the query is fetched.

Every store is written by zarr-python; one chunk file is then damaged the way disks, copies
and uploads damage files: cut short, overwritten with random bytes, one byte flipped, or
replaced by a valid frame of the wrong size. Only damage the codec can detect is asked about:
a flipped bit in a raw, blosc or checksum-less zstd chunk decodes to other numbers, and no
reader can tell (docs/user-guide.md says to add crc32c where that matters).

The control in each case: the chunks left intact still read, equal to what zarr-python reads
from the same damaged store.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

import zarrsql

N = 12  # cells of every 1-D array, chunks of 4: the damaged chunk 1 holds cells 4..7
DATA = np.arange(N, dtype="f8") * 1.5 - 3.0
# zarr-python warns that a numcodecs codec in a v3 array is outside the spec (the fallback case)
pytestmark = pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning")

WORDS = np.array(["alpha", "b", "", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lam", "mu"])


@dataclass(frozen=True)
class Case:
    """An array written with these codecs, the chunk damaged, and the codec that must be named."""

    fmt: int
    kwargs: Callable[[], dict[str, Any]]
    codec: str
    data: np.ndarray = field(default_factory=lambda: DATA)
    chunks: tuple[int, ...] = (4,)
    shards: tuple[int, ...] | None = None
    damaged: tuple[int, ...] = (1,)
    keep: str = "i < 4 OR i >= 8"  # a WHERE that skips the damaged chunk


def _v2(compressor: Any = None, filters: list[Any] | None = None) -> Callable[[], dict[str, Any]]:
    return lambda: {"compressors": compressor, "filters": filters}


CASES: dict[str, Case] = {
    "v3-bytes": Case(3, lambda: {"compressors": None}, "bytes"),
    "v3-transpose": Case(
        3,
        lambda: {"compressors": None, "filters": [TransposeCodec(order=(1, 0))]},
        "bytes",
        data=np.arange(24.0).reshape(4, 6),
        chunks=(2, 3),
        damaged=(0, 1),
        keep="a >= 2",  # one column: DuckDB 1.5 prunes units by such filters
    ),
    "v3-gzip": Case(3, lambda: {"compressors": GzipCodec(level=5)}, "gzip"),
    "v3-zstd": Case(3, lambda: {"compressors": ZstdCodec(level=3)}, "zstd"),
    "v3-zstd-checksum": Case(3, lambda: {"compressors": ZstdCodec(level=3, checksum=True)}, "zstd"),
    "v3-blosc": Case(3, lambda: {"compressors": BloscCodec(cname="lz4", shuffle="shuffle")}, "blosc"),
    "v3-crc32c": Case(3, lambda: {"compressors": Crc32cCodec()}, "crc32c"),
    "v3-vlen-utf8": Case(3, lambda: {"compressors": None}, "vlen-utf8", data=WORDS),
    "v3-sharding": Case(
        3, lambda: {"compressors": GzipCodec()}, "shard", data=np.arange(16.0), shards=(8,), keep="i < 8"
    ),
    "v2-zlib": Case(2, _v2(numcodecs.Zlib()), "zlib"),
    "v2-gzip": Case(2, _v2(numcodecs.GZip()), "gzip"),
    "v2-bz2": Case(2, _v2(numcodecs.BZ2()), "bz2"),
    "v2-lzma": Case(2, _v2(numcodecs.LZMA()), "lzma"),
    "v2-lz4": Case(2, _v2(numcodecs.LZ4()), "lz4"),
    "v2-zstd": Case(2, _v2(numcodecs.Zstd()), "zstd"),
    "v2-blosc": Case(2, _v2(numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE)), "blosc"),
    "v2-delta-filter": Case(2, _v2(None, [numcodecs.Delta(dtype="<f8")]), "delta"),
    "v2-vlen-utf8": Case(2, _v2(None, [numcodecs.VLenUTF8()]), "vlen-utf8", data=WORDS),
    "v3-zarr-python-fallback": Case(3, lambda: {"compressors": zarr.codecs.numcodecs.LZ4()}, "numcodecs.lz4"),
}

# (case, damage): only damage the codec can detect (see the module docstring)
DAMAGE = [
    ("v3-bytes", "truncate"),
    ("v3-bytes", "append"),
    ("v3-transpose", "truncate"),
    ("v3-gzip", "truncate"),
    ("v3-gzip", "random"),
    ("v3-gzip", "flip"),
    ("v3-gzip", "wrong-size"),
    ("v3-zstd", "truncate"),
    ("v3-zstd", "random"),
    ("v3-zstd-checksum", "flip"),
    ("v3-blosc", "truncate"),
    ("v3-blosc", "random"),
    ("v3-crc32c", "truncate"),
    ("v3-crc32c", "random"),
    ("v3-crc32c", "flip"),
    ("v3-vlen-utf8", "truncate"),
    ("v3-vlen-utf8", "random"),
    ("v3-vlen-utf8", "wrong-size"),
    ("v3-sharding", "truncate"),
    ("v3-sharding", "random"),
    ("v3-sharding", "flip"),
    *((f"v2-{c}", d) for c in ("zlib", "gzip", "bz2", "lzma", "lz4", "zstd", "blosc") for d in ("truncate", "random")),
    ("v2-zlib", "flip"),
    ("v2-gzip", "flip"),
    ("v2-zstd", "wrong-size"),
    ("v2-delta-filter", "truncate"),
    ("v2-vlen-utf8", "truncate"),
    ("v2-vlen-utf8", "random"),
    ("v3-zarr-python-fallback", "truncate"),
    ("v3-zarr-python-fallback", "random"),
]


def _write(path: Path, case: Case) -> zarr.Array:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(path), mode="w", zarr_format=case.fmt)
        dims = ["i"] if case.data.ndim == 1 else ["a", "b"]
        extra: dict[str, Any] = {"shards": case.shards} if case.shards else {}
        if case.fmt == 3:
            extra["dimension_names"] = dims
        else:
            extra["attributes"] = {"_ARRAY_DIMENSIONS": dims}
        dtype = str if case.data.dtype.kind == "U" else case.data.dtype
        arr = group.create_array("v", shape=case.data.shape, dtype=dtype, chunks=case.chunks, **extra, **case.kwargs())
        arr[...] = case.data
    return arr


def _wrong_size(case: Case) -> bytes:
    """A valid frame of the array's codec that holds one cell too few."""
    if case.codec == "gzip":
        return numcodecs.GZip(level=5).encode(np.arange(3.0).tobytes())
    if case.codec == "zstd":
        return numcodecs.Zstd().encode(np.arange(7.0).tobytes())
    if case.codec == "vlen-utf8":
        return numcodecs.VLenUTF8().encode(np.array(["x", "y", "z"], dtype=object))
    raise AssertionError(case)


def _damage(file: Path, how: str, case: Case) -> None:
    raw = file.read_bytes()
    if how == "truncate":
        file.write_bytes(raw[: len(raw) // 2])
    elif how == "append":
        file.write_bytes(raw + b"\x00" * 8)
    elif how == "random":
        file.write_bytes(np.random.default_rng(7).integers(0, 256, len(raw), dtype=np.uint8).tobytes())
    elif how == "flip":
        flipped = bytearray(raw)
        flipped[len(raw) // 3] ^= 0xFF  # inside the payload, past every header
        file.write_bytes(bytes(flipped))
    elif how == "wrong-size":
        file.write_bytes(_wrong_size(case))
    else:
        raise AssertionError(how)


@dataclass(frozen=True)
class Damaged:
    store: Path
    key: str
    case: Case


@pytest.fixture(params=DAMAGE, ids=[f"{c}-{d}" for c, d in DAMAGE])
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> Damaged:
    name, how = request.param
    case = CASES[name]
    store = tmp_path / f"{name}.zarr"
    arr = _write(store, case)
    grid = case.damaged  # with shards, the index of the shard
    key = f"v/c/{'/'.join(map(str, grid))}" if case.fmt == 3 else f"v/{'.'.join(map(str, grid))}"
    assert (store / key).is_file(), sorted(p.name for p in (store / "v").rglob("*"))
    _damage(store / key, how, case)
    del arr
    return Damaged(store, key, case)


def _own_error(run: Callable[[], object]) -> zarrsql.DecodeError:
    with pytest.raises(zarrsql.DecodeError) as info:
        run()
    return info.value


def _codec_named(codec: str) -> str:
    """How the message names the codec that failed."""
    if codec == "shard":
        return "of the shard (sharding_indexed)"
    if codec.startswith("numcodecs."):  # zarr-python decoded it: the array's codec list
        return f"codecs [bytes, {codec}]"
    return f"codec '{codec}'"


def _check_names(err: BaseException, d: Damaged) -> None:
    text = str(err)
    for fragment in (f"chunk '{d.key}'", "array 'v'", f"store '{d.store}'", _codec_named(d.case.codec), "corrupt"):
        assert fragment in text, (fragment, text)


def test_execute_raises_decode_error_naming_chunk_and_codec(damaged: Damaged) -> None:
    con = zarrsql.connect()
    err = _own_error(lambda: con.execute(f"SELECT * FROM read_zarr('{damaged.store}')").fetchall())
    _check_names(err, damaged)
    assert "Traceback" not in str(err)


def test_relation_fetched_by_duckdb_carries_the_message_without_a_traceback(damaged: Damaged) -> None:
    """`con.sql(...)` returns DuckDB's relation, which DuckDB fetches outside zarrsql's wrapper:
    the error is DuckDB's type, but its text is zarrsql's message and no Python traceback."""
    con = zarrsql.connect()
    own = _own_error(lambda: con.execute(f"SELECT * FROM read_zarr('{damaged.store}')").fetchall())
    with pytest.raises(duckdb.Error) as info:
        con.sql(f"SELECT * FROM read_zarr('{damaged.store}')").fetchall()
    text = str(info.value)
    assert str(own) in text, text
    assert "Traceback" not in text, text
    assert 'File "' not in text, text
    _check_names(info.value, damaged)


def test_the_intact_chunks_still_read_as_zarr_python_reads_them(damaged: Damaged) -> None:
    con = zarrsql.connect()
    case = damaged.case
    rows = con.execute(f"SELECT * FROM read_zarr('{damaged.store}') WHERE {case.keep}").fetchall()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.open_array(str(damaged.store / "v"), mode="r")
        if case.data.ndim == 1:
            bad = slice(4, 8) if case.shards is None else slice(8, 16)
            idx = [i for i in range(arr.shape[0]) if not bad.start <= i < bad.stop]
            want = [(i, arr[i : i + 1][0]) for i in idx]
        else:
            want = [(a, b, arr[a, b]) for a in range(arr.shape[0]) for b in range(arr.shape[1]) if a >= 2]
    got = sorted((*r[:-1], r[-1]) for r in rows)
    assert [tuple(map(_plain, r)) for r in got] == sorted(tuple(map(_plain, w)) for w in want)


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def test_every_native_codec_is_covered() -> None:
    """The damage table names every codec decode/chunks.py decodes itself (vlen-bytes aside:
    no dtype zarrsql reads uses it)."""
    covered = {CASES[c].codec for c, _ in DAMAGE}
    for codec in (
        "bytes",
        "gzip",
        "zstd",
        "blosc",
        "crc32c",
        "vlen-utf8",
        "shard",
        "zlib",
        "bz2",
        "lzma",
        "lz4",
        "delta",
    ):
        assert codec in covered, codec
