"""`ORDER BY <data variable> LIMIT n`: the first rows' cells are found from that column alone,
and every column is read only from the chunks holding them.

Oracle: the same statement run by plain DuckDB over an Arrow table built from the raw arrays
(zarr-python, no decoding by zarrsql): a sentinel cell is NULL, a stored NaN is NaN (or NULL,
as `nan_as_null` asks), times are xarray's. A LIMIT over ties may return any of the tied
rows, so a result is checked to be a valid answer: DuckDB's ORDER BY values in DuckDB's order,
each row a real row of the table, no cell twice; where the ORDER BY keys are unique it must
be DuckDB's answer exactly.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
import zarr

import zarrsql

SHAPE, CHUNKS = (40, 6, 8), (6, 4, 3)  # edge chunks on every axis
UNITS = 7 * 2 * 3
FILL = -9999.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(7)
    t2m = (rng.standard_normal(SHAPE) * 10 + 280).astype("float32")
    t2m[rng.random(SHAPE) < 0.02] = np.nan  # written as the sentinel by xarray: NULL
    cnt = rng.integers(0, 5, SHAPE).astype("int16")  # many ties
    u10 = rng.standard_normal(SHAPE)  # unique values
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m),
            "cnt": (("time", "latitude", "longitude"), cnt),
            "u10": (("time", "latitude", "longitude"), u10),
        },
        coords={
            "time": pd.date_range("2021-03-01", periods=SHAPE[0], freq="h"),
            "latitude": np.linspace(60, 35, SHAPE[1]).astype("float32"),  # descending
            "longitude": np.arange(SHAPE[2], dtype="float32") * 1.5,
        },
    )
    path = Path(tmp_path_factory.mktemp("top")) / "era5.zarr"
    encoding = {
        "t2m": {"chunks": CHUNKS, "_FillValue": FILL},
        "cnt": {"chunks": CHUNKS},
        "u10": {"chunks": CHUNKS},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, encoding=encoding, zarr_format=3, consolidated=False)
    raw = zarr.open_array(path / "t2m", mode="r+")
    values = raw[...]
    nan_at = (values != FILL) & (rng.random(SHAPE) < 0.03)
    values[nan_at] = np.nan  # stored NaN, not the sentinel
    values[3, 1, 2] = values[30, 5, 7] = np.float32(400.0)  # a tie at the top
    raw[...] = values
    return str(path)


def _oracle_table(path: str, nan_as_null: bool) -> pa.Table:
    group = zarr.open_group(path, mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = xr.open_zarr(path, consolidated=False)["time"].values.astype("datetime64[us]")
    t2m = group["t2m"][...]
    t_null = (t2m == FILL) | (np.isnan(t2m) if nan_as_null else False)
    grid = np.meshgrid(np.arange(SHAPE[0]), np.arange(SHAPE[1]), np.arange(SHAPE[2]), indexing="ij")
    lat, lon = group["latitude"][...], group["longitude"][...]
    return pa.table(
        {
            "time": pa.array(times[grid[0].ravel()]),
            "latitude": pa.array(lat[grid[1].ravel()]),
            "longitude": pa.array(lon[grid[2].ravel()]),
            "cnt": pa.array(group["cnt"][...].ravel()),  # zarrsql lists data variables by name
            "t2m": pa.array(t2m.ravel(), mask=t_null.ravel()),
            "u10": pa.array(group["u10"][...].ravel()),
        }
    )


def _norm(row: tuple) -> tuple:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)


def _run(path: str, sql: str, nan_as_null: bool) -> tuple[list[tuple], list[tuple], list[tuple], zarrsql.Trace]:
    args = "" if nan_as_null else ", nan_as_null := false"
    with zarrsql.connect() as con, zarrsql.trace() as tr:
        got = con.sql(sql.format(T=f"read_zarr('{path}'{args})")).fetchall()
    plain = duckdb.connect()
    table = _oracle_table(path, nan_as_null)
    plain.register("frame", table)
    want = plain.sql(sql.format(T="frame")).fetchall()
    every = plain.sql("SELECT * FROM frame").fetchall()
    return got, want, every, tr


# (statement, index of its first ORDER BY key in the select list, unique keys: exact answer)
CASES = [
    ("SELECT * FROM {T} ORDER BY t2m DESC LIMIT 10", 4, False),
    ("SELECT * FROM {T} ORDER BY t2m LIMIT 7 OFFSET 3", 4, False),
    ("SELECT * FROM {T} ORDER BY t2m NULLS FIRST LIMIT 5", 4, False),
    ("SELECT * FROM {T} ORDER BY t2m DESC NULLS FIRST LIMIT 40", 4, False),
    ("SELECT * FROM {T} ORDER BY t2m DESC NULLS LAST LIMIT 1", 4, False),
    ("SELECT * FROM {T} ORDER BY cnt DESC, time, latitude, longitude LIMIT 15", 3, True),
    ("SELECT * FROM {T} ORDER BY cnt, u10 DESC LIMIT 9", 3, True),
    ("SELECT * FROM {T} ORDER BY cnt LIMIT 12", 3, False),
    ("SELECT * FROM {T} ORDER BY u10 DESC LIMIT 3", 5, True),
    ("SELECT time, latitude, longitude, t2m, u10 FROM {T} ORDER BY 4 DESC, 5 LIMIT 4", 3, True),
    ("SELECT time, latitude, longitude, t2m * 2 AS twice FROM {T} ORDER BY t2m DESC, time LIMIT 6", 3, False),
]


@pytest.mark.parametrize("nan_as_null", [True, False], ids=["nan_as_null", "nan_kept"])
@pytest.mark.parametrize(("sql", "key", "exact"), CASES)
def test_first_rows_are_duckdbs(store: str, sql: str, key: int, exact: bool, nan_as_null: bool) -> None:
    got, want, every, _ = _run(store, sql, nan_as_null)
    if exact:
        assert [_norm(r) for r in got] == [_norm(r) for r in want]
        return
    assert len(got) == len(want)
    assert [_norm(r)[key] for r in got] == [_norm(r)[key] for r in want]
    if len(got[0]) == 6:  # whole rows: each a real row, no cell twice
        rows = {_norm(r) for r in every}
        assert all(_norm(r) in rows for r in got)
        assert len({r[:3] for r in got}) == len(got)


@pytest.mark.parametrize(
    ("order", "rows"), [("a DESC", 3), ("b", 2), ("a DESC, b", 4), ("b DESC NULLS FIRST", 1), ("a", 10)]
)
def test_other_columns_are_read_from_few_chunks(tmp_path: Path, order: str, rows: int) -> None:
    """Chunked along time only, as ERA5 is: the ORDER BY column is read whole, once (20
    chunks), then the three data columns of at most `rows` time slabs, where the statement
    as written decodes all 60 chunks of them."""
    got, want, tr = run_on_slabs(tmp_path, f"SELECT * FROM {{T}} ORDER BY {order} LIMIT {rows}")
    assert got == want  # unique values: one answer
    assert tr.chunks_decoded <= 3 + 20 + 3 * rows  # the three coordinates, read when the store opens


def run_on_slabs(tmp_path: Path, sql: str) -> tuple[list[tuple], list[tuple], zarrsql.Trace]:
    """`sql` run by zarrsql (traced) and by plain DuckDB over a store of three unique-valued
    data variables (60 days x 5 x 6) chunked along time only (20 slabs), as ERA5 is."""
    rng = np.random.default_rng(3)
    dims = ("time", "y", "x")
    ds = xr.Dataset(
        {name: (dims, rng.standard_normal((60, 5, 6))) for name in ("a", "b", "c")},
        coords={"time": pd.date_range("2022-01-01", periods=60, freq="D"), "y": np.arange(5.0), "x": np.arange(6)},
    )
    path = tmp_path / "slabs.zarr"
    ds.to_zarr(path, encoding={n: {"chunks": (3, 5, 6)} for n in "abc"}, zarr_format=3, consolidated=False)
    with zarrsql.connect() as con, zarrsql.trace() as tr:
        got = con.sql(sql.format(T=f"read_zarr('{path}')")).fetchall()
    frame = ds.to_dataframe().reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    plain = duckdb.connect()
    plain.register("frame", frame)
    return got, plain.sql(sql.format(T="frame")).fetchall(), tr


def test_statements_of_other_shapes_keep_their_rows(store: str) -> None:
    """A WHERE, a window, an aggregate or an alias shadowing the key: run as written."""
    for sql in [
        "SELECT * FROM {T} WHERE latitude > 40 ORDER BY u10 DESC LIMIT 4",
        "SELECT time, u10, count(*) OVER () AS n FROM {T} ORDER BY u10 DESC LIMIT 3",
        "SELECT u10 AS cnt, time FROM {T} ORDER BY cnt DESC LIMIT 3",
        "SELECT latitude, max(u10) AS m FROM {T} GROUP BY latitude ORDER BY m DESC LIMIT 2",
        "SELECT * FROM {T} ORDER BY u10 DESC LIMIT 1000",  # a large share of the rows
    ]:
        got, want, _, _ = _run(store, sql, True)
        assert got == want, sql


def test_a_relation_fetched_after_the_column_changed_gives_no_stale_rows(tmp_path: Path) -> None:
    """The cells were found in the column as it was: after a chunk of it got a new largest
    value, fetching the relation again must fail and say to run the statement again, not
    return the old cells with their new values."""
    path = tmp_path / "moving.zarr"
    ds = xr.Dataset(
        {"v": (("time", "x"), np.arange(200, dtype="float64").reshape(50, 4))},
        coords={"time": pd.date_range("2020-01-01", periods=50, freq="D"), "x": np.arange(4)},
    )
    ds.to_zarr(path, encoding={"v": {"chunks": (5, 4)}}, zarr_format=3, consolidated=False)
    con = zarrsql.connect()
    relation = con.sql(f"SELECT * FROM read_zarr('{path}') ORDER BY v DESC LIMIT 2")
    assert [r[2] for r in relation.fetchall()] == [199.0, 198.0]
    zarr.open_array(path / "v", mode="r+")[0, 0] = 1000.0
    with pytest.raises(duckdb.Error, match="run the statement again"):
        relation.fetchall()
    assert [r[2] for r in con.sql(f"SELECT * FROM read_zarr('{path}') ORDER BY v DESC LIMIT 2").fetchall()] == [
        1000.0,
        199.0,
    ]
