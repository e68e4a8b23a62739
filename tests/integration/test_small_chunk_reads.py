"""Grouped units of small chunks decoded straight into the reader's row order.

A grouped unit's data columns are read chunk by chunk into one flat array in the order the
reader hands out the unit's rows (`decode.chunks.read_region_in_chunk_order`): an interior
zstd or Blosc chunk decodes into its place, a batch of zstd chunks decodes in one call
when the `zstandard` package is there, and edge chunks, absent chunks (the fill value),
other codecs and byte orders take the general path. The oracle is numpy on the arrays
zarr-python wrote and read back, put in chunk order by index; every store has ragged edge
chunks, a descending coordinate and chunks never written.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec

import zarrsql
from zarrsql.decode import chunks as chunk_codecs
from zarrsql.metadata.arrays import parse_v3_array
from zarrsql.plan import units as plan_units
from zarrsql.store.local import LocalStore

SHAPE = (7, 9, 11)
CHUNKS = (2, 4, 3)
X = np.linspace(50.0, -50.0, SHAPE[1])  # descending
Y = np.arange(SHAPE[2], dtype=np.float64) * 0.5
#: Chunk indices left unwritten: interior, at an edge and a corner.
ABSENT = {(0, 1, 1), (3, 2, 3), (1, 0, 3)}


def grid() -> list[tuple[int, ...]]:
    return list(itertools.product(*[range(-(-n // c)) for n, c in zip(SHAPE, CHUNKS, strict=True)]))


def cells_of(index: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, CHUNKS, SHAPE, strict=True))


def values(dtype: str, fill: float | int) -> np.ndarray:
    """Seeded values, with NaN in a float array's written chunks, and the fill value where
    a chunk is never written."""
    rng = np.random.default_rng(11)
    a = (rng.normal(size=SHAPE) * 100).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a[rng.random(SHAPE) < 0.07] = np.nan
    for index in ABSENT:
        a[cells_of(index)] = fill
    return a


def write_store(path: Path, dtype: str, fill: float | int, fmt: int = 3, **codecs) -> np.ndarray:
    """A store of `v` over dims t, x, y, written chunk by chunk except the `ABSENT` ones."""
    a = values(dtype, fill)
    root = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    coords = {"t": np.arange(SHAPE[0], dtype=np.int64), "x": X, "y": Y}
    for name, c in coords.items():
        kw = {"dimension_names": [name]} if fmt == 3 else {"attributes": {"_ARRAY_DIMENSIONS": [name]}}
        root.create_array(name, shape=c.shape, chunks=c.shape, dtype=c.dtype, **kw)[:] = c
    kw = {"dimension_names": ["t", "x", "y"]} if fmt == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["t", "x", "y"]}}
    arr = root.create_array("v", shape=SHAPE, chunks=CHUNKS, dtype=dtype, fill_value=fill, **kw, **codecs)
    for index in grid():
        if index not in ABSENT:
            arr[cells_of(index)] = a[cells_of(index)]
    zarr.consolidate_metadata(str(path))
    back = zarr.open_array(str(path / "v"), mode="r")[...]  # the oracle reads what was written
    for index in ABSENT:  # never written, as the store should say
        key = "c/" + "/".join(map(str, index)) if fmt == 3 else ".".join(map(str, index))
        assert not (path / "v" / key).exists()
    return back


def chunk_order() -> np.ndarray:
    """Flat cell indices chunk by chunk (row-major over the grid), each chunk row-major."""
    flat = np.arange(int(np.prod(SHAPE))).reshape(SHAPE)
    return np.concatenate([flat[cells_of(index)].reshape(-1) for index in grid()])


def check_rows(path: Path, a: np.ndarray, fill: float | int) -> None:
    con = zarrsql.connect()
    table = con.sql(f"SELECT t, x, y, v FROM read_zarr('{path}')").to_arrow_table()
    order = chunk_order()
    t, x, y = np.unravel_index(order, SHAPE)
    assert table.column("t").to_numpy().tolist() == t.tolist()
    assert table.column("x").to_numpy().tolist() == X[x].tolist()
    assert table.column("y").to_numpy().tolist() == Y[y].tolist()
    want = a.reshape(-1)[order]
    got = table.column("v")
    # NULL where the value is NaN or the Zarr fill_value (a sentinel unless all zero bytes),
    # also in chunks never written
    null = np.isnan(want) if a.dtype.kind == "f" else want == fill
    assert np.asarray(got.is_null()).tolist() == null.tolist()
    assert null.any()
    values = got.to_numpy(zero_copy_only=False)
    assert values[~null].tolist() == want[~null].tolist()


#: Grouping targets in cells (`plan.units.GROUP_CELLS`): 200 merges y whole and pairs of x
#: chunks, 400 x and y whole and pairs of t chunks. The first group of a scan is read
#: chunk by chunk, so each target leaves several grouped units to read in chunk order.
TARGETS = [200, 400]


@pytest.fixture(params=TARGETS, ids=lambda t: f"cells={t}")
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(plan_units, "GROUP_CELLS", request.param)
    return request.param


@pytest.fixture
def time_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units of two t chunks and every x and y chunk: the second holds six whole chunks
    (a zstd batch), among them chunk (2, 1, 1)."""
    monkeypatch.setattr(plan_units, "GROUP_CELLS", 400)


@pytest.fixture(params=["zstandard", "numcodecs"])
def batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The zstd chunks of a unit decoded as one zstandard batch, or each by numcodecs."""
    if request.param == "numcodecs":
        monkeypatch.setattr(chunk_codecs, "_zstandard", lambda: None)
    elif chunk_codecs._zstandard() is None:
        pytest.fail("zstandard is a test dependency (pyproject.toml [test]) and must be installed")
    return request.param


LAYOUTS = {
    "v3-zstd-float32": dict(dtype="float32", fill=float("nan"), compressors=ZstdCodec(level=3)),
    "v3-zstd-checksum-int32": dict(dtype="int32", fill=-7, compressors=ZstdCodec(level=1, checksum=True)),
    "v3-blosc-float64": dict(dtype="float64", fill=float("nan"), compressors=BloscCodec(cname="lz4")),
    "v3-gzip-int16": dict(dtype="int16", fill=3, compressors=GzipCodec()),
    "v3-big-endian-zstd-float32": dict(
        dtype="float32", fill=float("nan"), serializer=BytesCodec(endian="big"), compressors=ZstdCodec()
    ),
    "v3-uncompressed-uint8": dict(dtype="uint8", fill=9, compressors=None),
}


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_grouped_rows_equal_numpy_in_chunk_order(tmp_path: Path, layout: str, batch: str, target: int) -> None:
    spec = dict(LAYOUTS[layout])
    path = tmp_path / "s.zarr"
    fill = spec.pop("fill")
    a = write_store(path, spec.pop("dtype"), fill, **spec)
    check_rows(path, a, fill)


@pytest.mark.parametrize("compressor", ["zstd", "blosc"])
def test_v2_grouped_rows_equal_numpy(tmp_path: Path, compressor: str, batch: str, target: int) -> None:
    import numcodecs

    codec = numcodecs.Zstd(level=2) if compressor == "zstd" else numcodecs.Blosc(cname="zstd")
    path = tmp_path / "s.zarr"
    a = write_store(path, "float32", float("nan"), fmt=2, compressors=codec)
    check_rows(path, a, float("nan"))


def _v_meta(path: Path):
    doc = json.loads((path / "v" / "zarr.json").read_text())
    return parse_v3_array("v", doc)


def test_region_in_chunk_order_matches_numpy_directly(tmp_path: Path, batch: str) -> None:
    """The reader's function itself, over a region starting mid-array on a chunk boundary
    and ending at the ragged edge."""
    path = tmp_path / "s.zarr"
    a = write_store(path, "float32", float("nan"), compressors=ZstdCodec())
    meta = _v_meta(path)
    region = ((2, 7), (4, 9), (3, 11))
    assert chunk_codecs.chunk_order_ok(meta, region, CHUNKS)
    got = chunk_codecs.read_region_in_chunk_order(LocalStore(str(path)), meta, region)
    block = a[2:7, 4:9, 3:11]
    starts = itertools.product(range(0, 5, 2), range(0, 5, 4), range(0, 8, 3))
    want = np.concatenate([block[i : i + 2, j : j + 4, k : k + 3].reshape(-1) for i, j, k in starts])
    assert got.dtype == np.float32
    assert np.array_equal(got, want, equal_nan=True)


def test_regions_the_chunk_order_read_refuses(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    write_store(path, "float32", float("nan"), compressors=ZstdCodec())
    meta = _v_meta(path)
    assert not chunk_codecs.chunk_order_ok(meta, ((1, 7), (0, 9), (0, 11)), CHUNKS)  # not on a chunk boundary
    assert not chunk_codecs.chunk_order_ok(meta, ((0, 7), (0, 9), (0, 11)), (2, 4, 6))  # another grid


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "other-size-frame"],
)
def test_a_bad_chunk_in_a_batch_is_named(tmp_path: Path, batch: str, damage: str, time_pairs: None) -> None:
    """A chunk that does not decode to its chunk's bytes fails by name in either path, also
    a valid zstd frame of the wrong size (which a batch given the sizes must not accept)."""
    import numcodecs

    path = tmp_path / "s.zarr"
    write_store(path, "float32", float("nan"), compressors=ZstdCodec())
    target = path / "v" / "c" / "2" / "1" / "1"  # an interior chunk
    good = target.read_bytes()
    bad = {
        "garbage": b"\x28\xb5\x2f\xfd" + b"not a frame" * 5,
        "truncated": good[: len(good) // 2],
        "other-size-frame": numcodecs.Zstd().encode(np.zeros(10, dtype=np.float32).tobytes()),
    }[damage]
    target.write_bytes(bad)
    with pytest.raises(zarrsql.DecodeError, match=r"chunk 'v/c/2/1/1' of array 'v'"):
        zarrsql.connect().execute(f"SELECT avg(v) FROM read_zarr('{path}')").fetchall()


def test_avg_over_many_small_chunks_equals_numpy(tmp_path: Path, batch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store of the benchmark's chunk shape, (6, 11, 24) float32, over a few hundred chunks,
    grouped by time step as the benchmark's are (a unit of every y and x chunk)."""
    monkeypatch.setattr(plan_units, "GROUP_CELLS", 6 * 33 * 96)
    shape, chunks = (30, 33, 96), (6, 11, 24)
    rng = np.random.default_rng(5)
    a = rng.normal(280, 10, size=shape).astype(np.float32)
    path = tmp_path / "many.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    v = root.create_array(
        "v",
        shape=shape,
        chunks=chunks,
        dtype="float32",
        dimension_names=["t", "x", "y"],
        compressors=ZstdCodec(level=3),
    )
    v[:] = a
    zarr.consolidate_metadata(str(path))
    back = zarr.open_array(str(path / "v"), mode="r")[...]
    sql = f"SELECT avg(v), count(v), min(v), max(v) FROM read_zarr('{path}')"
    ((avg, n, lo, hi),) = zarrsql.connect().sql(sql).fetchall()
    assert n == back.size
    assert avg == pytest.approx(float(back.astype(np.float64).mean()), rel=1e-12)
    assert (lo, hi) == (float(back.min()), float(back.max()))


def test_copy_of_store_with_a_folder_link_outside_is_refused(tmp_path: Path) -> None:
    """The per-folder checks of `LocalStore.get_many`: a chunk folder that is a link out of
    the store is refused by name, once per folder, never read."""
    path = tmp_path / "s.zarr"
    write_store(path, "float32", float("nan"), compressors=ZstdCodec())
    outside = tmp_path / "outside"
    shutil.move(str(path / "v" / "c" / "2"), str(outside))
    (path / "v" / "c" / "2").symlink_to(outside, target_is_directory=True)
    store = LocalStore(str(path))
    with pytest.raises(zarrsql.ZarrSQLError, match="outside the store"):
        store.get_many(["v/c/1/0/0", "v/c/2/0/0"])
    with pytest.raises(zarrsql.ZarrSQLError, match="not a plain path"):
        store.get_many(["v/c/1/0/0", "v/c/1/0/.."])
    assert store.get_many(["v/c/1/0/0", "v/c/0/1/1"])[1] is None  # absent: never written


def test_get_many_reads_every_file_whole_whatever_its_siblings_sizes(tmp_path: Path) -> None:
    """A read sized from earlier files of the same call (`_read_file`'s hint) still reads a
    larger file whole, an empty one as empty, and a folder where a file should be as absent."""
    rng = np.random.default_rng(3)
    sizes = [100, 0, 50_000, 3, 9_000_000, 10, 4096 * 2 + 200, 1]
    folder = tmp_path / "a" / "c" / "0"
    folder.mkdir(parents=True)
    data = {}
    for i, n in enumerate(sizes):
        data[f"a/c/0/{i}"] = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        (folder / str(i)).write_bytes(data[f"a/c/0/{i}"])
    (folder / "dir").mkdir()
    keys = [*data, "a/c/0/dir", "a/c/0/missing", *reversed(list(data))]
    got = LocalStore(str(tmp_path)).get_many(keys)
    want = [*data.values(), None, None, *reversed(list(data.values()))]
    assert [None if g is None else len(g) for g in got] == [None if w is None else len(w) for w in want]
    assert got == want


def test_get_many_follows_a_sibling_folder_link_only_inside_the_store(tmp_path: Path) -> None:
    """Sibling chunk folders are resolved from their parent with one `lstat`; a sibling that
    is a link still takes the full check: followed inside the store, refused outside."""
    path = tmp_path / "s.zarr"
    write_store(path, "float32", float("nan"), compressors=ZstdCodec())
    chunks_t2 = path / "v" / "c" / "2"
    outside = tmp_path / "outside"
    shutil.move(str(chunks_t2 / "1"), str(outside))
    (chunks_t2 / "1").symlink_to(outside, target_is_directory=True)
    shutil.move(str(chunks_t2 / "2"), str(tmp_path / "unused"))
    (chunks_t2 / "2").symlink_to(chunks_t2 / "0", target_is_directory=True)  # inside the store
    store = LocalStore(str(path))
    first, linked = store.get_many(["v/c/2/0/0", "v/c/2/2/0"])
    assert first is not None
    assert linked == first == (chunks_t2 / "0" / "0").read_bytes()
    with pytest.raises(zarrsql.ZarrSQLError, match="outside the store"):
        store.get_many(["v/c/2/0/0", "v/c/2/1/0"])
