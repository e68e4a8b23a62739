"""A session's `SET default_order = 'DESC'` (and `default_null_order`) applies to every ORDER BY
without a direction, the ones zarrsql writes itself included. Several internal statements
read positions, class codes, time-zone offsets or chunk keys back "in order" and relied on
ascending: under DESC the top-n search looked in mirrored cells (no rows, or the wrong
ones), and sampling TIMESTAMPTZ points, the points' order and a grid written from a relation
depended on it too. Each statement here is run on a connection with the defaults reversed
and checked against an oracle that does not depend on them: plain DuckDB over the raw
arrays, xarray, or the same call on a connection with DuckDB's defaults.
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

REVERSED = ["SET default_order = 'DESC'", "SET default_null_order = 'NULLS_FIRST'"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, xr.Dataset]:
    rng = np.random.default_rng(4)
    ds = xr.Dataset(
        {"v": (("time", "lat", "lon"), rng.standard_normal((12, 7, 5)))},
        coords={
            "time": pd.date_range("2021-03-27", periods=12, freq="6h"),
            "lat": np.arange(7.0) * 10,
            "lon": np.arange(5.0),
        },
    )
    path = tmp_path_factory.mktemp("order") / "d.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, encoding={"v": {"chunks": (5, 3, 5)}}, zarr_format=3)
    return str(path), ds


def _reversed() -> zarrsql.Connection:
    con = zarrsql.connect()
    for setting in REVERSED:
        con.execute(setting)
    return con


def _oracle(ds: xr.Dataset) -> duckdb.DuckDBPyConnection:
    frame = ds.to_dataframe().reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    plain = duckdb.connect()
    for setting in REVERSED:
        plain.execute(setting)
    plain.register("frame", frame)
    return plain


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT lat, lon, v FROM {T} WHERE lat > 0 ORDER BY v ASC LIMIT 5",
        "SELECT * FROM {T} WHERE lon IN (1, 4) AND time >= '2021-03-28' ORDER BY v DESC NULLS LAST LIMIT 4",
        "SELECT * FROM {T} ORDER BY v ASC LIMIT 3",
        "SELECT time, v FROM {T} ORDER BY time ASC NULLS LAST LIMIT 6",
    ],
)
def test_top_rows(store: tuple[str, xr.Dataset], sql: str) -> None:
    path, ds = store
    got = _reversed().sql(sql.format(T=f"read_zarr('{path}')")).fetchall()
    assert got == _oracle(ds).sql(sql.format(T="frame")).fetchall()  # unique values: one answer


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT lat, round(avg(v), 9) AS a, count(*) AS n FROM {T} WHERE lon > 1 AND time < '2021-03-29' GROUP BY lat",
        "SELECT lat, lon, round(sum(v), 9) AS s FROM {T} WHERE lon IN (1, 3) AND lat <> 20 GROUP BY lat, lon",
        "SELECT hour(time) AS h, round(max(v), 9) AS m FROM {T} WHERE lat BETWEEN 10 AND 40 GROUP BY h",
    ],
)
def test_groups_computed_by_the_scan(store: tuple[str, xr.Dataset], sql: str) -> None:
    path, ds = store
    got = _reversed().sql(sql.format(T=f"read_zarr('{path}')")).fetchall()
    assert sorted(got) == sorted(_oracle(ds).sql(sql.format(T="frame")).fetchall())


def test_sampled_points_keep_their_order_and_time_zone(tmp_path: Path) -> None:
    """Points every 20 minutes over New York's change to summer time, as TIMESTAMPTZ: each is
    read as `CAST(point AS TIMESTAMP)` in the session's zone (the offsets of the instants are
    worked out in order), and the rows come in the points' order."""
    times = pd.date_range("2021-03-13", "2021-03-16", freq="h")
    ds = xr.Dataset({"v": (("time",), np.arange(len(times), dtype="float64"))}, coords={"time": times})
    path = tmp_path / "tz.zarr"
    ds.to_zarr(path, zarr_format=3)
    points = "SELECT i AS id, TIMESTAMPTZ '2021-03-14 03:00:00+00' + INTERVAL 20 MINUTE * i AS time FROM range(30) r(i)"
    frames = []
    for settings in ([], REVERSED):
        con = zarrsql.connect()
        con.execute("SET TimeZone = 'America/New_York'")
        for setting in settings:
            con.execute(setting)
        con.execute(f"CREATE TEMP TABLE pts AS {points}")
        frames.append(
            con.sql(f"SELECT id, v FROM zarr_sample('{path}', 'SELECT * FROM pts', method := 'nearest')").df()
        )
    plain = duckdb.connect()
    plain.execute("SET TimeZone = 'America/New_York'")
    wall = plain.sql(f"SELECT CAST(time AS TIMESTAMP) AS w FROM ({points}) ORDER BY id ASC").df().w
    want = ds.v.sel(time=wall.to_numpy(dtype="datetime64[ns]"), method="nearest").values
    for got in frames:
        assert got.id.tolist() == list(range(30))  # the points' order
        np.testing.assert_array_equal(got.v.to_numpy(), want)


def test_a_grid_written_from_a_relation(tmp_path: Path) -> None:
    con = _reversed()
    # coordinates keep the order of first appearance: ascending, as the statement says; the
    # writer then streams the rows by their chunk (its own ORDER BY)
    relation = con.sql("SELECT t, x, t * 10 + x AS v FROM range(6) a(t), range(4) b(x) ORDER BY t ASC, x ASC")
    out = tmp_path / "grid.zarr"
    zarrsql.to_zarr(relation, str(out), dims=["t", "x"], chunks={"t": 4, "x": 3}, connection=con)
    back = xr.open_zarr(out)
    np.testing.assert_array_equal(back.t.values, np.arange(6))
    np.testing.assert_array_equal(back.x.values, np.arange(4))
    np.testing.assert_array_equal(back.v.values, np.arange(6)[:, None] * 10 + np.arange(4)[None, :])
