"""Stores written by real writers, in every codec and layout, read exactly through SQL.

Each store is written into `tmp_path` by zarr-python (`zarr.open_group(...).create_array`, with
`dimension_names` for v3 and `_ARRAY_DIMENSIONS` for v2) or by xarray (`to_zarr`), then read
with `SELECT ... FROM read_zarr('<path>')` and compared with the same array read back by
zarr-python or xarray (the oracle). Rows are compared after `ORDER BY` the dimensions: a scan
emits rows work unit by work unit, not in global row-major order.

The matrix: Zarr v2 and v3 x {no compression, gzip, zstd, blosc (lz4, shuffle), crc32c,
transpose, sharding, big-endian, F order, '/' separators, v2-style keys in v3}, shapes with a
ragged edge chunk in every dimension, a dimension of length 1, 1-D/2-D/4-D, chunks never
written, zero-length dimensions, float16 and strings. The last section reads a store of
millions of cells over many work units: aggregates against numpy, the order the parallel
reader streams in, and a LIMIT that stops after a few work units.
"""

from __future__ import annotations

import itertools
import json
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from oracles import assert_frames_equal, xarray_frame
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
)

import zarrsql


@pytest.fixture(scope="module")
def con() -> Iterator[zarrsql.Connection]:
    """One connection for the module: every store has its own path, so reads never share state."""
    with zarrsql.connect() as c:
        yield c


# --------------------------------------------------------------------------------------
# writing and reading back
# --------------------------------------------------------------------------------------


def write_array(group: zarr.Group, name: str, dims: list[str | None] | None, *,
                shape: tuple[int, ...], data: np.ndarray | None = None,
                region: Any = None, **kwargs: Any) -> zarr.Array:
    """Create `name` in `group` with dimension names in the format's own way; write `data`
    (all of it, or only `region`, leaving other chunks unwritten)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if group.metadata.zarr_format == 3:
            arr = group.create_array(name, shape=shape, dimension_names=dims, **kwargs)
        else:
            attrs = dict(kwargs.pop("attributes", {}))
            if dims is not None:
                attrs["_ARRAY_DIMENSIONS"] = dims
            arr = group.create_array(name, shape=shape, attributes=attrs, **kwargs)
        if data is not None:
            arr[... if region is None else region] = data
    return arr


def new_group(path: Path, fmt: int) -> zarr.Group:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(str(path), mode="w", zarr_format=fmt)


def oracle_read(path: Path, name: str) -> np.ndarray:
    """The whole array as zarr-python reads it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(zarr.open_group(str(path), mode="r")[name][...])


def array_meta_text(path: Path, name: str) -> str:
    """The array's metadata document, normalized JSON text."""
    for key in ("zarr.json", ".zarray"):
        doc = path / name / key
        if doc.exists():
            return json.dumps(json.loads(doc.read_text()))
    raise FileNotFoundError(path / name)


def grid_frame(values: dict[str, np.ndarray], dims: list[str],
               coords: dict[str, np.ndarray] | None = None,
               nulls: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """The expected table: one row per cell in row-major order; a dimension column holds its
    coordinate values, or positions (int64) when it has no coordinate."""
    coords = coords or {}
    nulls = nulls or {}
    shape = next(iter(values.values())).shape
    index = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), dtype=np.int64)
    cols: dict[str, Any] = {}
    for k, d in enumerate(dims):
        pos = index[k].astype(np.int64)
        cols[d] = coords[d][pos] if d in coords else pos
    for name, v in values.items():
        flat = v.reshape(-1)
        if name in nulls:
            flat = flat.astype(object)
            flat[nulls[name].reshape(-1)] = None
        cols[name] = flat
    return pd.DataFrame(cols)


def column_types(con: zarrsql.Connection, path: Path, **params: str) -> dict[str, str]:
    rel = zarrsql.read_zarr(str(path), connection=con, **params)
    return dict(zip(rel.columns, [str(t) for t in rel.types], strict=True))


def read_sorted(con: zarrsql.Connection, path: Path, dims: list[str], **params: Any) -> pd.DataFrame:
    rel = zarrsql.read_zarr(str(path), connection=con, **params)
    return rel.order(", ".join(f'"{d}"' for d in dims)).df()


SQL_TYPE = {"f8": "DOUBLE", ">f8": "DOUBLE", "i4": "INTEGER", ">i4": "INTEGER", "f2": "FLOAT",
            "f4": "FLOAT", "i8": "BIGINT"}


# --------------------------------------------------------------------------------------
# the codec x format matrix
# --------------------------------------------------------------------------------------

# (7, 5, 3) in chunks of (3, 2, 2): the last chunk of every dimension is ragged (1 of 3,
# 1 of 2, 1 of 2 cells used).
SHAPE = (7, 5, 3)
CHUNKS = (3, 2, 2)


@dataclass(frozen=True)
class Layout:
    """One way of storing the same array; `marker` must appear in its metadata document,
    proving the writer really produced that layout."""

    id: str
    fmt: int
    marker: str
    dtype: str = "f8"
    kwargs: dict[str, Any] = field(default_factory=dict)


LAYOUTS = [
    Layout("v3-none", 3, '"codecs": [{"name": "bytes"', kwargs={"compressors": None}),
    Layout("v3-gzip", 3, '"name": "gzip"', kwargs={"compressors": GzipCodec(level=5)}),
    Layout("v3-zstd", 3, '"name": "zstd"', kwargs={"compressors": ZstdCodec(level=3)}),
    Layout("v3-blosc-lz4-shuffle", 3, '"shuffle": "shuffle"',
           kwargs={"compressors": BloscCodec(cname="lz4", shuffle="shuffle")}),
    Layout("v3-crc32c", 3, '"name": "crc32c"', kwargs={"compressors": Crc32cCodec()}),
    Layout("v3-zstd-crc32c", 3, '"name": "crc32c"', kwargs={"compressors": [ZstdCodec(), Crc32cCodec()]}),
    Layout("v3-transpose-F", 3, '"order": [2, 1, 0]', kwargs={"filters": [TransposeCodec(order=(2, 1, 0))]}),
    Layout("v3-transpose-201-gzip", 3, '"order": [2, 0, 1]',
           kwargs={"filters": [TransposeCodec(order=(2, 0, 1))], "compressors": GzipCodec()}),
    Layout("v3-sharding", 3, '"sharding_indexed"', kwargs={"shards": (6, 4, 2)}),
    Layout("v3-sharding-i4", 3, '"sharding_indexed"', dtype="i4", kwargs={"shards": (3, 4, 2)}),
    Layout("v3-big-endian-f8", 3, '"endian": "big"', kwargs={"serializer": BytesCodec(endian="big")}),
    Layout("v3-big-endian-i4", 3, '"endian": "big"', dtype="i4",
           kwargs={"serializer": BytesCodec(endian="big"), "compressors": BloscCodec(cname="lz4", shuffle="shuffle")}),
    Layout("v3-v2-keys-dot", 3, '"name": "v2", "configuration": {"separator": "."}',
           kwargs={"chunk_key_encoding": {"name": "v2", "separator": "."}}),
    Layout("v3-v2-keys-slash", 3, '"name": "v2", "configuration": {"separator": "/"}',
           kwargs={"chunk_key_encoding": {"name": "v2", "separator": "/"}}),
    Layout("v3-default-keys-dot", 3, '"name": "default", "configuration": {"separator": "."}',
           kwargs={"chunk_key_encoding": {"name": "default", "separator": "."}}),
    Layout("v2-none", 2, '"compressor": null', kwargs={"compressors": None}),
    Layout("v2-gzip", 2, '"id": "gzip"', kwargs={"compressors": numcodecs.GZip(level=5)}),
    Layout("v2-zstd", 2, '"id": "zstd"', kwargs={"compressors": numcodecs.Zstd(level=3)}),
    Layout("v2-blosc-lz4-shuffle", 2, '"cname": "lz4"',
           kwargs={"compressors": numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE)}),
    Layout("v2-order-F", 2, '"order": "F"', kwargs={"order": "F", "compressors": None}),
    Layout("v2-order-F-zstd-i4", 2, '"order": "F"', dtype="i4",
           kwargs={"order": "F", "compressors": numcodecs.Zstd()}),
    Layout("v2-slash-separator", 2, '"dimension_separator": "/"',
           kwargs={"chunk_key_encoding": {"name": "v2", "separator": "/"}}),
    Layout("v2-delta-filter-zstd", 2, '"id": "delta"', dtype="i4",
           kwargs={"filters": [numcodecs.Delta(dtype="i4")], "compressors": numcodecs.Zstd()}),
    Layout("v2-shuffle-filter-zlib", 2, '"id": "shuffle"',
           kwargs={"filters": [numcodecs.Shuffle(elementsize=8)], "compressors": numcodecs.Zlib()}),
    Layout("v2-big-endian-f8", 2, '">f8"', dtype=">f8"),
    Layout("v2-big-endian-i4", 2, '">i4"', dtype=">i4", kwargs={"compressors": numcodecs.GZip()}),
    Layout("v2-big-endian-i4-F-blosc", 2, '">i4"', dtype=">i4",
           kwargs={"order": "F", "compressors": numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE)}),
]


def sample(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Distinct values, negative and positive, never equal to a zero fill value."""
    n = int(np.prod(shape))
    if np.dtype(dtype).kind == "f":
        return (np.arange(n) * 1.25 - 40.125).reshape(shape).astype(dtype)
    return (np.arange(n) * 37 - 2001).reshape(shape).astype(dtype)


def coord_kwargs(layout: Layout) -> dict[str, Any]:
    """The layout's options for its 1-D coordinate: the same codecs and key encoding."""
    kw = {k: v for k, v in layout.kwargs.items() if k != "filters"}
    if "shards" in kw:
        kw["shards"] = (kw["shards"][0],)
    return kw


@pytest.mark.parametrize("layout", LAYOUTS, ids=[lay.id for lay in LAYOUTS])
def test_codec_layout_reads_exactly(layout: Layout, tmp_path: Path, con: zarrsql.Connection) -> None:
    path = tmp_path / f"{layout.id}.zarr"
    g = new_group(path, layout.fmt)
    # a coordinate for the first dimension, chunked raggedly with the same codecs
    x = (100 + 10 * np.arange(SHAPE[0])).astype(layout.dtype)
    write_array(g, "x", ["x"], shape=x.shape, data=x, chunks=(3,), dtype=layout.dtype, **coord_kwargs(layout))
    write_array(g, "v", ["x", "y", "z"], shape=SHAPE, data=sample(SHAPE, layout.dtype), chunks=CHUNKS,
                dtype=layout.dtype, **layout.kwargs)
    assert layout.marker in array_meta_text(path, "v")

    expected = grid_frame({"v": oracle_read(path, "v")}, ["x", "y", "z"], coords={"x": oracle_read(path, "x")})
    actual = con.sql(f"SELECT * FROM read_zarr('{path}') ORDER BY x, y, z").df()
    assert_frames_equal(actual, expected)
    sql_type = SQL_TYPE[layout.dtype]
    assert column_types(con, path) == {"x": sql_type, "y": "BIGINT", "z": "BIGINT", "v": sql_type}
    # aggregates see every cell once: the edge chunks' padding never leaks into a sum
    data = expected["v"].to_numpy(dtype=np.float64)
    got = con.sql(f"SELECT count(*), sum(v), min(v), max(v), count(DISTINCT (x, y, z)) FROM read_zarr('{path}')")
    assert got.fetchall()[0] == (data.size, data.sum(), data.min(), data.max(), data.size)


def test_variables_of_one_table_in_different_layouts(tmp_path: Path, con: zarrsql.Connection) -> None:
    """One table whose variables differ in chunk shape and codecs: the work-unit grid is the
    largest chunk per dimension, and every variable is read into it exactly."""
    path = tmp_path / "mixed.zarr"
    g = new_group(path, 3)
    specs = {
        "plain": {"chunks": (3, 2), "dtype": "f8"},
        "transposed_be": {"chunks": (2, 5), "dtype": "i4", "filters": [TransposeCodec(order=(1, 0))],
                          "serializer": BytesCodec(endian="big")},
        "sharded": {"chunks": (2, 3), "shards": (4, 3), "dtype": "f4"},
        "crc": {"chunks": (7, 1), "dtype": "f8", "compressors": [GzipCodec(), Crc32cCodec()]},
    }
    for name, kw in specs.items():
        write_array(g, name, ["x", "y"], shape=(7, 5), data=sample((7, 5), kw["dtype"]), **kw)
    grid = con.sql(f"SELECT chunk_shape FROM read_zarr_tables('{path}')").fetchall()
    assert grid == [([7, 5],)]  # the largest chunk length of each dimension, clipped to the shape
    expected = grid_frame({n: oracle_read(path, n) for n in sorted(specs)}, ["x", "y"])
    assert_frames_equal(read_sorted(con, path, ["x", "y"]), expected)


# --------------------------------------------------------------------------------------
# shapes: 1-D, a dimension of length 1, 4-D (with F order / transpose in 4-D)
# --------------------------------------------------------------------------------------

SHAPES = [
    # (id, shape, chunks, v3 extra, v2 extra)
    ("1d-ragged", (11,), (4,), {}, {}),
    ("2d-length-1-last", (9, 1), (4, 1), {}, {}),
    ("2d-length-1-first-chunk-larger", (1, 6), (2, 4), {}, {}),
    ("4d-ragged", (5, 3, 1, 4), (2, 2, 1, 3), {}, {}),
    ("4d-ragged-transposed", (5, 3, 2, 4), (2, 2, 1, 3),
     {"filters": [TransposeCodec(order=(3, 1, 0, 2))]}, {"order": "F"}),
    ("4d-ragged-sharded", (5, 3, 2, 4), (2, 2, 1, 3), {"shards": (4, 2, 2, 3)}, {"dimension_separator": "/"}),
]


@pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])
@pytest.mark.parametrize(("case_id", "shape", "chunks", "v3_extra", "v2_extra"), SHAPES, ids=[s[0] for s in SHAPES])
def test_shapes_read_exactly(fmt: int, case_id: str, shape: tuple[int, ...], chunks: tuple[int, ...],
                             v3_extra: dict, v2_extra: dict, tmp_path: Path, con: zarrsql.Connection) -> None:
    path = tmp_path / f"{case_id}.zarr"
    dims = ["a", "b", "c", "d"][: len(shape)]
    extra = dict(v3_extra if fmt == 3 else v2_extra)
    if "dimension_separator" in extra:
        extra = {"chunk_key_encoding": {"name": "v2", "separator": extra["dimension_separator"]}}
    g = new_group(path, fmt)
    write_array(g, "v", dims, shape=shape, data=sample(shape, "f8"), chunks=chunks, dtype="f8", **extra)
    # the last dimension gets a descending coordinate: the ORDER BY below must not rely on
    # coordinates rising with position
    last = dims[-1]
    coord = np.arange(shape[-1], 0, -1).astype("f8") * 0.5
    write_array(g, last, [last], shape=coord.shape, data=coord, chunks=(max(1, chunks[-1]),), dtype="f8")

    expected = grid_frame({"v": oracle_read(path, "v")}, dims, coords={last: oracle_read(path, last)})
    expected = expected.sort_values(dims, kind="mergesort").reset_index(drop=True)
    actual = read_sorted(con, path, dims)
    assert_frames_equal(actual, expected)


# --------------------------------------------------------------------------------------
# chunks never written
# --------------------------------------------------------------------------------------


def chunk_files(path: Path, name: str) -> list[Path]:
    meta = {"zarr.json", ".zarray", ".zattrs"}
    return [p for p in (path / name).rglob("*") if p.is_file() and p.name not in meta]


UNWRITTEN = [
    # (id, dtype, fill_value (None: the writer's default), does the fill read as NULL?)
    ("float-nan-fill", "f8", np.nan, True),
    ("int-nonzero-fill", "i4", -7, True),
    ("float-nonzero-fill", "f8", -9999.0, True),
    ("float-default-zero-fill", "f8", None, False),
    ("int-default-zero-fill", "i4", None, False),
]


# (format, sharded): Zarr v2 has no sharding
STORAGE = pytest.mark.parametrize(("fmt", "sharded"), [(2, False), (3, False), (3, True)],
                                  ids=["v2", "v3", "v3-sharded"])


@STORAGE
@pytest.mark.parametrize(("case_id", "dtype", "fill", "masked"), UNWRITTEN, ids=[u[0] for u in UNWRITTEN])
def test_unwritten_chunks_read_as_fill_value(case_id: str, dtype: str, fill: Any, masked: bool, fmt: int,
                                             sharded: bool, tmp_path: Path, con: zarrsql.Connection) -> None:
    """A chunk that was never written reads as the fill value; a fill value that is not all
    zero bytes is the variable's sentinel and reads as NULL (NaN reads as NULL too), a zero
    fill stays a value."""
    path = tmp_path / "partial.zarr"
    g = new_group(path, fmt)
    kwargs: dict[str, Any] = {"chunks": (3, 2), "dtype": dtype}
    if fill is not None:
        kwargs["fill_value"] = fill
    if sharded:
        kwargs["shards"] = (6, 2)
    shape = (8, 5)  # 3 x 3 chunks, ragged in both dimensions
    block = sample((3, 2), dtype)
    # write only chunk (1, 1) and the ragged corner chunk (2, 2)
    arr = write_array(g, "v", ["x", "y"], shape=shape, data=block, region=(slice(3, 6), slice(2, 4)), **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr[6:8, 4:5] = sample((2, 1), dtype) + 1
    assert len(chunk_files(path, "v")) == 2  # two chunks (or two shards) on disk, not 9

    raw = oracle_read(path, "v")
    written = np.zeros(shape, dtype=bool)
    written[3:6, 2:4] = True
    written[6:8, 4:5] = True
    null = ~written if masked else np.zeros(shape, dtype=bool)
    if fill is None:
        assert (raw[~written] == 0).all()
    expected = grid_frame({"v": raw}, ["x", "y"], nulls={"v": null})
    actual = read_sorted(con, path, ["x", "y"])
    assert_frames_equal(actual, expected)
    nulls = con.sql(f"SELECT count(*) - count(v) FROM read_zarr('{path}')").fetchall()[0][0]
    assert nulls == int(null.sum())


def test_array_with_no_chunk_written_at_all(tmp_path: Path, con: zarrsql.Connection) -> None:
    path = tmp_path / "nothing.zarr"
    g = new_group(path, 3)
    write_array(g, "v", ["x", "y"], shape=(5, 4), chunks=(2, 3), dtype="i4", fill_value=42)
    write_array(g, "w", ["x", "y"], shape=(5, 4), chunks=(2, 3), dtype="f8")
    assert chunk_files(path, "v") == [] and chunk_files(path, "w") == []
    rows = con.sql(f"SELECT count(*), count(v), count(w), sum(w) FROM read_zarr('{path}')").fetchall()[0]
    # 42 is v's sentinel (its Zarr fill value, not all zero bytes): every cell NULL; w's
    # default fill 0.0 is a value
    assert rows == (20, 0, 20, 0.0)


# --------------------------------------------------------------------------------------
# empty arrays (a zero-length dimension)
# --------------------------------------------------------------------------------------


@STORAGE
def test_zero_length_dimension_reads_no_rows(fmt: int, sharded: bool, tmp_path: Path,
                                             con: zarrsql.Connection) -> None:
    path = tmp_path / "empty.zarr"
    g = new_group(path, fmt)
    extra = {"shards": (4, 4)} if sharded else {}
    write_array(g, "v", ["x", "y"], shape=(0, 4), chunks=(2, 2), dtype="f8", **extra)
    write_array(g, "x", ["x"], shape=(0,), chunks=(2,), dtype="i8")
    write_array(g, "y", ["y"], shape=(4,), data=np.arange(4) * 10, chunks=(2,), dtype="i8")
    assert oracle_read(path, "v").shape == (0, 4)
    assert column_types(con, path) == {"x": "BIGINT", "y": "BIGINT", "v": "DOUBLE"}
    assert con.sql(f"SELECT * FROM read_zarr('{path}')").fetchall() == []
    assert con.sql(f"SELECT count(*), sum(v), min(y) FROM read_zarr('{path}')").fetchall()[0] == (0, None, None)
    tables = con.sql(f"SELECT table_name, shape FROM read_zarr_tables('{path}')").fetchall()
    assert tables == [("x_y", [0, 4])]


@pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])
def test_zero_length_dimension_written_by_xarray(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    path = tmp_path / "xr_empty.zarr"
    ds = xr.Dataset({"v": (("time", "lat"), np.zeros((0, 3), dtype="f4"))},
                    coords={"time": pd.DatetimeIndex([]), "lat": [1.0, 2.0, 3.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=fmt, mode="w", consolidated=False)
    assert column_types(con, path) == {"time": "TIMESTAMP", "lat": "DOUBLE", "v": "FLOAT"}
    assert con.sql(f"SELECT count(*) FROM read_zarr('{path}')").fetchall()[0] == (0,)
    assert len(xarray_frame(path)) == 0


# --------------------------------------------------------------------------------------
# float16 and strings
# --------------------------------------------------------------------------------------

F16 = np.array([0.1, -2.5, 65504.0, np.nan, 1e-4, -0.0, 6.0e-8, 3.140625, -65504.0], dtype="f2")


@pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])
def test_float16_widens_exactly(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    path = tmp_path / "f16.zarr"
    g = new_group(path, fmt)
    write_array(g, "h", ["i"], shape=F16.shape, data=F16, chunks=(4,), dtype="f2")
    assert column_types(con, path) == {"i": "BIGINT", "h": "FLOAT"}
    raw = oracle_read(path, "h")
    got = [v for (v,) in con.sql(f"SELECT h FROM read_zarr('{path}') ORDER BY i").fetchall()]
    # float16 -> float32 is exact; NaN is NULL
    assert got == [None if np.isnan(v) else float(np.float32(v)) for v in raw]


STRINGS = np.array(["a", "", "héllo wörld", "日本語", "x" * 300, "tab\tand\nnewline", "z", "emoji 🎉",
                    "quote ' and \"", "last"], dtype=object)


@pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])
def test_strings_in_ragged_chunks(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    path = tmp_path / "strings.zarr"
    g = new_group(path, fmt)
    # 1-D: 10 strings in chunks of 3 (the last chunk holds one string)
    write_array(g, "s", ["i"], shape=(10,), data=STRINGS, chunks=(3,), dtype=str)
    # 2-D: (5, 3) in chunks of (2, 2), only the first row of chunks written
    grid = np.array([f"r{r}c{c}" for r in range(5) for c in range(3)], dtype=object).reshape(5, 3)
    write_array(g, "t", ["r", "c"], shape=(5, 3), data=grid[0:2], region=(slice(0, 2), slice(None)),
                chunks=(2, 2), dtype=str)
    assert column_types(con, path, table_name="i") == {"i": "BIGINT", "s": "VARCHAR"}
    got = [v for (v,) in con.sql(f"SELECT s FROM read_zarr('{path}', table_name := 'i') ORDER BY i").fetchall()]
    assert got == oracle_read(path, "s").tolist()

    expected = grid_frame({"t": oracle_read(path, "t").astype(object)}, ["r", "c"])
    assert_frames_equal(read_sorted(con, path, ["r", "c"], table_name="r_c"), expected)


# --------------------------------------------------------------------------------------
# stores written by xarray
# --------------------------------------------------------------------------------------


def xr_dataset() -> xr.Dataset:
    rng = np.random.default_rng(7)
    ds = xr.Dataset(
        {
            "t4": (("time", "level", "station", "lon"), rng.normal(size=(5, 2, 5, 4))),
            "half": (("time", "station", "lon"), rng.normal(size=(5, 5, 4)).astype("f2")),
            "temp": (("time", "station", "lon"), rng.normal(size=(5, 5, 4)).astype("f4")),
            "count": (("time", "station", "lon"), rng.integers(-5, 100, size=(5, 5, 4)).astype("i4")),
            "label": (("time", "station", "lon"),
                      np.array([f"s{k}" for k in range(100)], dtype=object).reshape(5, 5, 4)),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=5, freq="6h"),
            "level": [850, 500],
            "station": ["alpha", "béta", "γ", "", "delta-long-name"],
            "lon": np.array([10.0, 20.0, 30.0, 40.0]),
        },
    )
    ds["temp"][0, 0, 0] = np.nan
    ds["count"][1, 1, 1] = -5  # the _FillValue below: xarray reads it as missing
    return ds


def xr_encoding(fmt: int, codec: str) -> dict[str, dict[str, Any]]:
    if codec == "none":
        comp: Any = None
    elif fmt == 3:
        comp = {"zstd": ZstdCodec(level=1), "gzip": GzipCodec(),
                "blosc": BloscCodec(cname="lz4", shuffle="shuffle")}[codec]
    else:
        comp = {"zstd": numcodecs.Zstd(level=1), "gzip": numcodecs.GZip(),
                "blosc": numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE)}[codec]
    enc: dict[str, dict[str, Any]] = {
        "t4": {"chunks": (2, 1, 2, 3)},
        "half": {"chunks": (2, 2, 3)},
        "temp": {"chunks": (3, 2, 4)},
        "count": {"chunks": (2, 3, 3), "_FillValue": -5},
        "label": {"chunks": (2, 2, 3)},
        "station": {"chunks": (2,)},
        "lon": {"chunks": (3,)},
    }
    for v in enc.values():
        v["compressors"] = None if comp is None else (comp,)
    return enc


@pytest.mark.parametrize("codec", ["none", "zstd", "gzip", "blosc"])
@pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])
def test_xarray_written_store_equals_xarray(fmt: int, codec: str, tmp_path: Path, con: zarrsql.Connection) -> None:
    path = tmp_path / f"xr_{fmt}_{codec}.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr_dataset().to_zarr(path, zarr_format=fmt, encoding=xr_encoding(fmt, codec), mode="w",
                             consolidated=codec != "none")
    for table, dims in [("time_level_station_lon", ["time", "level", "station", "lon"]),
                        ("time_station_lon", ["time", "station", "lon"])]:
        actual = zarrsql.read_zarr(str(path), connection=con, table_name=table).df()
        expected = xarray_frame(path, dims=dims)
        assert_frames_equal(actual, expected[list(actual.columns)], sort_by=dims, check_column_order=True)
    types = column_types(con, path, table_name="time_station_lon")
    assert types == {"time": "TIMESTAMP", "station": "VARCHAR", "lon": "DOUBLE", "count": "INTEGER",
                     "half": "FLOAT", "label": "VARCHAR", "temp": "FLOAT"}


# --------------------------------------------------------------------------------------
# a large store: millions of cells over many work units, two variables
# --------------------------------------------------------------------------------------

NT, NY, NX = 40, 240, 260       # 2,496,000 cells per variable
GRID = (8, 48, 52)              # 5 x 5 x 5 = 125 work units of 19,968 cells


@dataclass(frozen=True)
class Big:
    path: Path
    a: np.ndarray   # float64 holding exact integers: sums are exact in any order
    b: np.ndarray   # int32
    t: np.ndarray   # coordinate of the first dimension (int64)
    y: np.ndarray   # coordinate of the second dimension (float64); x is positional


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Big:
    path = tmp_path_factory.mktemp("big") / "big.zarr"
    i, j, k = np.indices((NT, NY, NX))
    a = (i * 1_000_000 + j * 1_000 + k).astype("f8")
    b = ((i * 7 + j * 3 + k * 11) % 2001 - 1000).astype("i4")
    t = np.arange(NT, dtype="i8") * 10
    y = np.arange(NY) * 0.5 - 60.0
    g = new_group(path, 3)
    write_array(g, "t", ["t"], shape=t.shape, data=t, chunks=(16,), dtype="i8")
    write_array(g, "y", ["y"], shape=y.shape, data=y, chunks=(100,), dtype="f8")
    write_array(g, "a", ["t", "y", "x"], shape=a.shape, data=a, chunks=GRID, dtype="f8")
    write_array(g, "b", ["t", "y", "x"], shape=b.shape, data=b, chunks=GRID,
                dtype="i4", compressors=BloscCodec(cname="lz4", shuffle="shuffle"))
    return Big(path, a, b, t, y)


def test_large_totals_match_numpy(big: Big, con: zarrsql.Connection) -> None:
    got = con.sql(
        f"SELECT count(*), sum(a), sum(b), min(a), max(a), min(b), max(b) FROM read_zarr('{big.path}')"
    ).fetchall()[0]
    a, b = big.a, big.b.astype(np.int64)
    assert got == (a.size, a.sum(), b.sum(), a.min(), a.max(), b.min(), b.max())


def test_large_dimension_ranges_match_numpy(big: Big, con: zarrsql.Connection) -> None:
    got = con.sql(
        f"SELECT min(t), max(t), min(y), max(y), min(x), max(x), count(DISTINCT t), count(DISTINCT y), "
        f"count(DISTINCT x) FROM read_zarr('{big.path}')"
    ).fetchall()[0]
    assert got == (big.t.min(), big.t.max(), big.y.min(), big.y.max(), 0, NX - 1, NT, NY, NX)


@pytest.mark.parametrize(("dim", "axis"), [("t", 0), ("y", 1), ("x", 2)])
def test_large_group_by_each_dimension(dim: str, axis: int, big: Big, con: zarrsql.Connection) -> None:
    rows = con.sql(
        f"SELECT {dim}, count(*), sum(a), min(a), max(a), sum(b), min(b), max(b) "
        f"FROM read_zarr('{big.path}') GROUP BY {dim} ORDER BY {dim}"
    ).fetchall()
    others = tuple(k for k in range(3) if k != axis)
    labels = {0: big.t, 1: big.y, 2: np.arange(NX)}[axis]
    b = big.b.astype(np.int64)
    expected = list(zip(labels.tolist(), [big.a.size // big.a.shape[axis]] * big.a.shape[axis],
                        big.a.sum(axis=others).tolist(), big.a.min(axis=others).tolist(),
                        big.a.max(axis=others).tolist(), b.sum(axis=others).tolist(),
                        b.min(axis=others).tolist(), b.max(axis=others).tolist(), strict=True))
    assert rows == expected


def test_large_every_row_pairs_values_with_its_coordinates(big: Big, con: zarrsql.Connection) -> None:
    """Units decoded on different threads still put each cell beside its own coordinates."""
    bad = con.sql(
        f"SELECT count(*) FROM read_zarr('{big.path}') WHERE "
        "a <> (t // 10) * 1000000 + CAST((y + 60) * 2 AS BIGINT) * 1000 + x "
        "OR b <> ((t // 10) * 7 + CAST((y + 60) * 2 AS BIGINT) * 3 + x * 11) % 2001 - 1000"
    ).fetchall()[0]
    assert bad == (0,)


def work_unit_order(shape: tuple[int, ...], grid: tuple[int, ...]) -> np.ndarray:
    """Flat cell indices in scan order: work units in row-major order of the chunk grid,
    each unit's cells in row-major order (the field guide's "Plan: work units")."""
    flat = np.arange(int(np.prod(shape))).reshape(shape)
    parts = []
    for index in itertools.product(*[range(-(-n // g)) for n, g in zip(shape, grid, strict=True)]):
        sl = tuple(slice(i * g, (i + 1) * g) for i, g in zip(index, grid, strict=True))
        parts.append(flat[sl].reshape(-1))
    return np.concatenate(parts)


def test_large_stream_keeps_plan_order(big: Big, con: zarrsql.Connection) -> None:
    """The parallel reader decodes units concurrently but yields them in plan order."""
    got = con.sql(f"SELECT a, x FROM read_zarr('{big.path}')").fetchnumpy()
    order = work_unit_order(big.a.shape, GRID)
    assert len(got["a"]) == big.a.size
    assert np.array_equal(np.asarray(got["a"]), big.a.reshape(-1)[order])
    xs = np.broadcast_to(np.arange(NX), big.a.shape).reshape(-1)[order]
    assert np.array_equal(np.asarray(got["x"]), xs)


def test_large_limit_reads_few_work_units(big: Big, con: zarrsql.Connection) -> None:
    n_units = int(np.prod([-(-n // g) for n, g in zip(big.a.shape, GRID, strict=True)]))
    start = time.perf_counter()
    with zarrsql.trace() as tr:
        rows = con.sql(f"SELECT t, y, x, a, b FROM read_zarr('{big.path}') LIMIT 5").fetchall()
    elapsed = time.perf_counter() - start
    # the first 5 rows of the first work unit: t = 0, y = -60, x = 0..4
    assert rows == [(0, -60.0, k, float(k), int(big.b[0, 0, k])) for k in range(5)]
    assert tr.work_units_planned == n_units == 125
    # bounded prefetch: a few units in flight, not the whole table
    assert 1 <= tr.work_units_read <= n_units // 4, tr
    assert elapsed < 5.0
