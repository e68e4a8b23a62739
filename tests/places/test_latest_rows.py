"""`ORDER BY <dimension> [DESC] LIMIT n` (the latest values) reads only the work units of the
first values in that order, and returns DuckDB's own rows.

DuckDB's Top-N filter never reaches a Python scan, so such a statement read every work unit;
the connection now bounds the dimension to its first ceil(n / cells per value) values. Oracle:
the same statement run by plain DuckDB over a pandas copy of the dataset (xarray's
`to_dataframe`); every ORDER BY is made unique with further keys, so the rows compare as lists.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql

#: The fixture's grid and chunks: time 50 x latitude 9 (stored descending) x longitude 8, in
#: chunks of 7 x 4 x 3, so ceil(50/7) x ceil(9/4) x ceil(8/3) = 8 x 3 x 3 = 72 work units, and
#: one value of time spans 3 x 3 = 9 of them.
SHAPE, CHUNKS = (50, 9, 8), (7, 4, 3)
UNITS = 72
TIME_SLAB = 9


def _write(ds: xr.Dataset, path: Path, chunks: tuple[int, ...], encoding: dict | None = None) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        encoding = {"t2m": {"chunks": chunks}, **(encoding or {})}
        ds.to_zarr(path, mode="w", encoding=encoding, zarr_format=3, consolidated=False)
    return str(path)


def _frame(ds: xr.Dataset) -> pd.DataFrame:
    frame = ds.to_dataframe().reset_index()
    if "time" in frame and frame["time"].dtype.kind == "M":
        frame["time"] = frame["time"].astype("datetime64[us]")
    return frame


def _oracle(frame: pd.DataFrame, sql: str, setup: str = "") -> list[tuple]:
    con = duckdb.connect()
    if setup:
        con.execute(setup)
    con.register("frame", frame)
    return con.sql(sql.format(T="frame")).fetchall()


def _zarrsql(path: str, sql: str, setup: str = "", args: str = "") -> tuple[list[tuple], zarrsql.Trace]:
    con = zarrsql.connect()
    if setup:
        con.execute(setup)
    with zarrsql.trace() as tr:
        rows = con.sql(sql.format(T=f"read_zarr('{path}'{args})")).fetchall()
    return rows, tr


def era5_like(shape: tuple[int, int, int], seed: int) -> xr.Dataset:
    """An ERA5-like dataset (latitude descending) whose t2m values are unique."""
    rng = np.random.default_rng(seed)
    t2m = rng.permutation(np.prod(shape)).reshape(shape).astype("float32")
    return xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), t2m)},
        coords={
            "time": pd.date_range("2020-01-01", periods=shape[0], freq="6h"),
            "latitude": np.linspace(80, -80, shape[1]).astype("float32"),
            "longitude": np.arange(0, 360, 360 / shape[2]).astype("float32"),
        },
    )


@pytest.fixture(scope="module")
def era5(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    """An ERA5-like store (latitude stored descending) and its pandas copy; t2m values unique."""
    ds = era5_like(SHAPE, 7)
    return _write(ds, tmp_path_factory.mktemp("latest") / "era5.zarr", CHUNKS), _frame(ds)


def test_latest_values_read_one_time_slab(era5: tuple[str, pd.DataFrame]) -> None:
    path, frame = era5
    sql = "SELECT time, latitude, longitude, t2m FROM {T} ORDER BY time DESC, latitude, longitude LIMIT 5"
    rows, tr = _zarrsql(path, sql)
    assert rows == _oracle(frame, sql)
    assert (tr.work_units_read, tr.work_units_planned) == (TIME_SLAB, UNITS)


#: (statement, units read at most): ORDER BY keys made unique by the further keys.
SHAPES = [
    ("SELECT * FROM {T} ORDER BY time, latitude, longitude LIMIT 3", TIME_SLAB),
    ("SELECT * FROM {T} ORDER BY time ASC, t2m LIMIT 80 OFFSET 70", TIME_SLAB),  # rows 70..149: values 0..2
    ("SELECT time, t2m FROM {T} ORDER BY time DESC, t2m DESC LIMIT 72", 2 * TIME_SLAB),  # spans 2 time chunks
    ("SELECT t2m, time FROM {T} ORDER BY 2 DESC, 1 LIMIT 4", TIME_SLAB),
    ("SELECT * FROM {T} ORDER BY latitude DESC, time, longitude LIMIT 10", 8 * 3),  # 80: 1st latitude chunk
    # 400 rows per latitude: -80 and -60, in the last two of its chunks ([0 .. -60], [-80])
    ("SELECT * FROM {T} ORDER BY latitude ASC, time DESC, longitude LIMIT 500", 2 * 8 * 3),
    ("SELECT * FROM {T} ORDER BY longitude DESC NULLS FIRST, t2m LIMIT 7", 8 * 3),
    ("SELECT round(t2m / 2) AS half, t2m, time FROM {T} ORDER BY time DESC, t2m LIMIT 3", TIME_SLAB),
    ("SELECT * FROM {T} ORDER BY time DESC, t2m LIMIT 5000", UNITS),  # more rows than the table
    ("SELECT * FROM {T} ORDER BY time DESC, t2m LIMIT 0", UNITS),
]


@pytest.mark.parametrize(("sql", "most"), SHAPES)
def test_rows_are_duckdbs_and_fewer_units_are_read(era5: tuple[str, pd.DataFrame], sql: str, most: int) -> None:
    path, frame = era5
    rows, tr = _zarrsql(path, sql)
    assert rows == _oracle(frame, sql)
    assert tr.work_units_read <= most


@pytest.mark.parametrize(
    "setup",
    [
        "SET default_order = 'desc'",
        "SET default_null_order = 'nulls_first'",
        "SET default_null_order = 'nulls_last_on_asc_first_on_desc'",
    ],
)
def test_session_defaults_decide_the_order(era5: tuple[str, pd.DataFrame], setup: str) -> None:
    path, frame = era5
    sql = "SELECT * FROM {T} ORDER BY time, t2m LIMIT 6"
    rows, tr = _zarrsql(path, sql, setup)
    assert rows == _oracle(frame, sql, setup)
    assert tr.work_units_read == TIME_SLAB


#: Statements the bound would change: each must keep its rows (and reads every unit).
DECLINED = [
    "SELECT time, count(*) OVER () AS n FROM {T} ORDER BY time DESC, t2m LIMIT 2",  # a window over all rows
    "SELECT t2m AS time FROM {T} ORDER BY time DESC LIMIT 3",  # ORDER BY the alias, a data column
    "SELECT time, t2m FROM {T} WHERE t2m < 100 ORDER BY time DESC, t2m LIMIT 3",  # fewer rows per value
    "SELECT time, (SELECT max(t2m) FROM {T}) AS m FROM {T} ORDER BY time DESC LIMIT 1",
    "SELECT DISTINCT time FROM {T} ORDER BY time DESC LIMIT 3",
    "SELECT t2m FROM {T} ORDER BY t2m DESC LIMIT 3",  # a data column
]


@pytest.mark.parametrize("sql", DECLINED)
def test_other_statements_keep_their_rows(era5: tuple[str, pd.DataFrame], sql: str) -> None:
    path, frame = era5
    rows, _ = _zarrsql(path, sql)
    assert rows == _oracle(frame, sql)


def test_duplicate_coordinate_values_keep_every_tie(tmp_path: Path) -> None:
    # time repeats: 0, 1, 1, 2, 2, 2, 3, 3, 3, 3 (hours); the last value spans 4 positions
    hours = np.repeat(np.arange(4), np.arange(1, 5))
    ds = xr.Dataset(
        {"t2m": (("time", "x"), np.arange(hours.size * 3, dtype="float32").reshape(-1, 3))},
        coords={"time": pd.Timestamp("2021-01-01") + pd.to_timedelta(hours, "h"), "x": np.arange(3)},
    )
    path = _write(ds, tmp_path / "dup.zarr", (2, 3))
    for sql in (
        "SELECT * FROM {T} ORDER BY time DESC, t2m LIMIT 11",
        "SELECT * FROM {T} ORDER BY time, t2m DESC LIMIT 4",
    ):
        rows, tr = _zarrsql(path, sql)
        assert rows == _oracle(_frame(ds), sql)
        assert tr.work_units_read < tr.work_units_planned


@pytest.mark.parametrize("nulls", ["NULLS FIRST", "NULLS LAST"])
@pytest.mark.parametrize("direction", ["ASC", "DESC"])
def test_missing_times_sort_where_duckdb_puts_them(tmp_path: Path, direction: str, nulls: str) -> None:
    times = pd.to_datetime(["2021-01-01", "NaT", "2021-01-03", "2021-01-02", "NaT", "2021-01-05", "2021-01-04"])
    ds = xr.Dataset(
        {"t2m": (("time", "x"), np.arange(14, dtype="float32").reshape(7, 2))},
        coords={"time": times.values, "x": np.arange(2)},
    )
    path = _write(ds, tmp_path / "nat.zarr", (1, 2))
    frame = _frame(ds)
    for limit in (1, 3, 5, 9):
        sql = f"SELECT * FROM {{T}} ORDER BY time {direction} {nulls}, t2m LIMIT {limit}"
        rows, _ = _zarrsql(path, sql)
        assert rows == _oracle(frame, sql)


@pytest.mark.parametrize("stored", ["as the fill value", "as a value"])
@pytest.mark.parametrize("nulls", ["NULLS FIRST", "NULLS LAST"])
@pytest.mark.parametrize("direction", ["ASC", "DESC"])
def test_nan_coordinates_sort_where_duckdb_puts_them(tmp_path: Path, direction: str, nulls: str, stored: str) -> None:
    level = np.array([3.0, np.nan, 1.0, 7.0, np.nan, 5.0])
    ds = xr.Dataset(
        {"t2m": (("level", "x"), np.arange(12, dtype="float32").reshape(6, 2))},
        coords={"level": level, "x": np.arange(2)},
    )
    fill = {"level": {"_FillValue": None}} if stored == "as a value" else {}
    path = _write(ds, tmp_path / "nan.zarr", (1, 2), fill)
    # zarrsql reads a NaN coordinate as NULL (with nan_as_null := false too): pandas' nullable
    # floats give the copy the same NULLs
    frame = _frame(ds).astype({"level": "Float64"})
    assert frame["level"].isna().sum() == 4
    for limit in (1, 3, 5, 9):
        sql = f"SELECT * FROM {{T}} ORDER BY level {direction} {nulls}, t2m LIMIT {limit}"
        for args in ("", ", nan_as_null := false"):
            rows, _ = _zarrsql(path, sql, args=args)
            assert rows == _oracle(frame, sql)


def test_a_relation_fetched_after_its_coordinates_changed_gives_no_stale_rows(tmp_path: Path) -> None:
    """The bound is the old coordinates' value: fetched again after the time axis moved a year
    back (so the old bound admits no row), the relation must fail and say to run the statement
    again, not return the empty list."""

    def days(start: str) -> xr.Dataset:
        return xr.Dataset(
            {"t2m": (("time", "x"), np.arange(20, dtype="float32").reshape(10, 2))},
            coords={"time": pd.date_range(start, periods=10, freq="D"), "x": np.arange(2)},
        )

    path = tmp_path / "moved.zarr"
    sql = "SELECT time, t2m FROM {T} ORDER BY time DESC, t2m LIMIT 3"
    _write(days("2020-01-01"), path, (1, 2))
    con = zarrsql.connect()
    relation = con.sql(sql.format(T=f"read_zarr('{path}')"))
    assert relation.fetchall() == _oracle(_frame(days("2020-01-01")), sql)
    _write(days("2019-01-01"), path, (1, 2))
    with pytest.raises(duckdb.Error, match="run the statement again"):
        relation.fetchall()
