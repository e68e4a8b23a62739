"""Joins that prune when the other side is not small, or holds keys of a type DuckDB widens.

An other side with more than `MAX_KEYS` distinct keys used to prune nothing; now each
dimension is listed alone (its values, or its range). Keys from a pandas column
(`datetime64[ns]`, DuckDB's TIMESTAMP_NS) or a zoned one (TIMESTAMPTZ) on a TIMESTAMP
dimension used to prune nothing at any size, since DuckDB casts the dimension to compare.
Every answer is checked against plain DuckDB running the same statement over xarray's frame
of the store, with the same other side and the same session time zone.
"""

from __future__ import annotations

import warnings

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

TIME = pd.date_range("2020-01-01", periods=730, freq="D")
LAT = np.linspace(-45, 45, 19).astype("float32")
LON = np.arange(0, 360, 12.0)
DAYS_PER_UNIT = 31  # the time chunk; lat and lon are whole: one work unit per 31 days


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(5)
    values = rng.random((len(TIME), len(LAT), len(LON))).astype("float32")
    ds = xr.Dataset({"v": (("time", "lat", "lon"), values)}, coords={"time": TIME, "lat": LAT, "lon": LON}).chunk(
        {"time": DAYS_PER_UNIT}
    )
    path = tmp_path_factory.mktemp("wide") / "w.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path)
    return str(path)


@pytest.fixture(scope="module")
def cells(store: str) -> pd.DataFrame:
    return xr.open_zarr(store).to_dataframe().reset_index()


def _units(times: pd.Series | pd.DatetimeIndex) -> int:
    """The work units holding the store's days among `times` (naive, any precision)."""
    days = pd.DatetimeIndex(times).as_unit("ns")
    positions = np.flatnonzero(TIME.isin(days))
    return len(set((positions // DAYS_PER_UNIT).tolist()))


def _days_between(low: pd.Timestamp, high: pd.Timestamp) -> pd.DatetimeIndex:
    return TIME[TIME.to_series().between(low, high).to_numpy()]


def _both(store: str, cells: pd.DataFrame, sql: str, keys: pd.DataFrame, zone: str = "UTC") -> tuple[list, list, int]:
    """(zarrsql's rows, plain DuckDB's rows, work units zarrsql read) for `sql` naming the store
    as `{src}` and the pandas frame `keys` as the table `k`."""
    with zarrsql.connect() as con:
        con.execute(f"SET TimeZone = '{zone}'")
        con.register("k_frame", keys)
        con.execute("CREATE TABLE k AS SELECT * FROM k_frame")
        with zarrsql.trace() as t:
            got = con.sql(sql.replace("{src}", f"read_zarr('{store}')")).fetchall()
    plain = duckdb.connect()
    plain.execute(f"SET TimeZone = '{zone}'")
    plain.register("cells_frame", cells)
    plain.execute("CREATE TABLE cells AS SELECT * FROM cells_frame")
    plain.register("k_frame", keys)
    plain.execute("CREATE TABLE k AS SELECT * FROM k_frame")
    want = plain.sql(sql.replace("{src}", "cells")).fetchall()
    return got, want, t.work_units_read


def _random_keys(n: int, first_day: int, days: int, seed: int = 1) -> pd.DataFrame:
    """`n` keys (some repeated) over the given days and the whole grid, with lat as float64."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "time": TIME[first_day + rng.integers(0, days, n)],
            "lat": LAT[rng.integers(0, len(LAT), n)].astype("float64"),
            "lon": LON[rng.integers(0, len(LON), n)],
        }
    )


JOIN = "SELECT z.time, z.lat, z.lon, z.v FROM {src} z JOIN k USING (time, lat, lon) ORDER BY ALL"


def test_a_join_with_more_than_a_thousand_keys_reads_only_their_days(store, cells):
    keys = _random_keys(4000, first_day=40, days=20)
    assert len(keys.drop_duplicates()) > 1000
    got, want, units = _both(store, cells, JOIN, keys)
    assert got == want
    assert len(want) == len(keys)
    if HAS_SOURCES:
        assert units == _units(keys["time"]) == 1


def test_an_in_subquery_with_more_than_a_thousand_times_reads_their_range(store, cells):
    """1,500 distinct times, most of them between the store's days: one range on time."""
    keys = pd.DataFrame({"time": pd.date_range("2020-03-10", periods=1500, freq="37min")})
    sql = "SELECT time, lat, lon, v FROM {src} WHERE time IN (SELECT time FROM k) ORDER BY ALL"
    got, want, units = _both(store, cells, sql, keys)
    assert got == want
    assert len(want) > 0
    if HAS_SOURCES:
        span = _days_between(keys["time"].min(), keys["time"].max())
        assert units == _units(span) < 730 // DAYS_PER_UNIT


def test_wide_keys_on_several_dimensions_give_lists_and_ranges(store, cells):
    """Times beyond a thousand (a range), latitudes as a list, longitudes with values between
    the grid's: every combination passes the pushed filter, the join keeps the pairs."""
    rng = np.random.default_rng(3)
    n = 3000
    keys = pd.DataFrame(
        {
            "time": pd.date_range("2021-06-01", periods=n, freq="h"),
            "lat": LAT[rng.integers(0, 5, n)].astype("float64") + np.where(rng.random(n) < 0.1, 1e-9, 0.0),
            "lon": rng.choice(np.concatenate([LON, LON + 6.0]), n),
        }
    )
    got, want, units = _both(store, cells, JOIN, keys)
    assert got == want
    assert len(want) > 0
    if HAS_SOURCES:
        span = _days_between(keys["time"].min(), keys["time"].max())
        assert units == _units(span)


def test_nan_and_null_keys_among_many(store, cells):
    """NaN sorts above every number in DuckDB, and matches NaN: no range is pushed on a
    column holding one; NULL keys match nothing."""
    keys = _random_keys(3000, first_day=100, days=40, seed=9)
    keys.loc[::7, "lon"] = np.nan
    keys.loc[::11, "lat"] = None
    got, want, units = _both(store, cells, JOIN, keys)
    assert got == want
    assert len(want) > 0
    if HAS_SOURCES:
        assert units == _units(keys["time"])


@pytest.mark.parametrize("n", [5, 300, 3000])
def test_pandas_nanosecond_times_prune(store, cells, n):
    """A pandas frame's times are TIMESTAMP_NS: a key that is a whole microsecond matches its
    day; one with a part of a microsecond matches nothing, as in DuckDB."""
    times = pd.Series(TIME[200 + np.arange(n) % 25])
    times.iloc[::4] += pd.Timedelta(nanoseconds=1)
    keys = pd.DataFrame({"time": times.to_numpy(dtype="datetime64[ns]")})
    sql = "SELECT z.time, z.lat, z.v FROM {src} z JOIN k USING (time) ORDER BY ALL"
    got, want, units = _both(store, cells, sql, keys)
    assert got == want
    assert len(want) > 0
    if HAS_SOURCES:
        assert units == _units(times[times.dt.nanosecond == 0])


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata"])
@pytest.mark.parametrize("n", [40, 2000])
def test_zoned_keys_prune_to_their_days_in_any_session_zone(store, cells, zone, n):
    """TIMESTAMPTZ keys compare with a naive time read in the session's zone: the pushed range
    is the keys' UTC span widened by a day, and the rows are DuckDB's own in every zone."""
    keys = pd.DataFrame({"time": pd.date_range("2020-07-01", periods=n, freq="30min", tz="UTC")})
    sql = "SELECT z.time, z.lat, z.lon, z.v FROM {src} z JOIN k USING (time) ORDER BY ALL"
    got, want, units = _both(store, cells, sql, keys, zone)
    assert got == want
    assert len(want) > 0
    if HAS_SOURCES:
        naive = keys["time"].dt.tz_localize(None)
        widened = _days_between(naive.min() - pd.Timedelta(days=1), naive.max() + pd.Timedelta(days=1))
        assert units <= _units(widened) < 730 // DAYS_PER_UNIT


def test_a_kept_relation_over_wide_keys_refuses_keys_outside_them(store, cells):
    """A relation fetched again runs the other side again: a key outside the listed range
    fails with the run-again error, a new key inside it gives the join as it is now."""
    keys = _random_keys(3000, first_day=300, days=30, seed=4)
    with zarrsql.connect() as con:
        con.register("k_frame", keys)
        con.execute("CREATE TABLE k AS SELECT * FROM k_frame")
        rel = con.sql(JOIN.replace("{src}", f"read_zarr('{store}')"))
        assert len(rel.fetchall()) == len(keys)
        inside = (TIME[310], float(LAT[0]), LON[0])
        con.execute("DELETE FROM k")
        con.execute("INSERT INTO k VALUES (?, ?, ?)", list(inside))
        assert rel.fetchall() == [(TIME[310].to_pydatetime(), LAT[0], LON[0], _value(cells, *inside))]
        con.execute("INSERT INTO k VALUES (?, ?, ?)", [TIME[600], float(LAT[0]), LON[0]])
        with pytest.raises(duckdb.Error, match="run the statement again"):  # a DuckDB relation's own error
            rel.fetchall()


def _value(cells: pd.DataFrame, time: pd.Timestamp, lat: float, lon: float) -> float:
    row = cells[(cells["time"] == time) & (cells["lat"] == np.float32(lat)) & (cells["lon"] == lon)]
    assert len(row) == 1
    return float(row["v"].iloc[0])
