"""`zarr_sample` / `zarrsql.sample` with TIMESTAMPTZ points: each point is read as DuckDB's
`CAST(point AS TIMESTAMP)` reads it, in the session's TimeZone, so it matches the cell a join
or a WHERE on the same value matches. The oracle is plain DuckDB's cast of the same points
(another connection, the same TimeZone) and xarray's `.sel(method="nearest")` / `.reindex`
on those naive times, or plain DuckDB's join over xarray's frame of the store; the points
cross the daylight-saving changes of 2020 in New York and on Lord Howe Island (half an hour)."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import ParameterError

#: Hourly over March to mid-November 2020: both DST changes of New York (8 March, 1 November)
#: and of Lord Howe Island (5 April, 4 October, by half an hour).
TIME = pd.date_range("2020-03-01", "2020-11-15", freq="h")
ZONES = ["UTC", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
#: Instants every 20 minutes (every other one 7 seconds later) for three days around each
#: change, in UTC: some fall on an hour of some zone's wall clock, none halfway between two.
POINTS = """
    SELECT row_number() OVER (ORDER BY time) - 1 AS id, time FROM (
        SELECT start + INTERVAL 20 MINUTE * i + INTERVAL 7 SECOND * (i % 2) AS time
        FROM (VALUES (TIMESTAMPTZ '2020-03-07 00:00:00+00'), (TIMESTAMPTZ '2020-04-03 12:00:00+00'),
                     (TIMESTAMPTZ '2020-10-02 12:00:00+00'), (TIMESTAMPTZ '2020-10-31 00:00:00+00')) w(start),
             range(216) r(i)
    )
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    ds = xr.Dataset({"v": (("time",), np.arange(len(TIME), dtype="float64"))}, coords={"time": TIME})
    path = tmp_path_factory.mktemp("sample_tz") / "tz.zarr"
    ds.chunk({"time": 240}).to_zarr(path, consolidated=True)
    return str(path)


def _connection(zone: str) -> zarrsql.Connection:
    con = zarrsql.connect()
    con.execute(f"SET TimeZone = '{zone}'")
    con.execute(f"CREATE TEMP TABLE pts AS {POINTS}")
    return con


def _duckdb_wall_times(zone: str) -> np.ndarray:
    """Plain DuckDB's `CAST(time AS TIMESTAMP)` of the points, in `zone`, by id."""
    plain = duckdb.connect()
    plain.execute(f"SET TimeZone = '{zone}'")
    frame = plain.sql(f"SELECT id, CAST(time AS TIMESTAMP) AS wall FROM ({POINTS}) ORDER BY id").df()
    assert frame.id.tolist() == list(range(len(frame)))
    return frame.wall.to_numpy(dtype="datetime64[ns]")


def _sample(con: zarrsql.Connection, store: str, method: str) -> pd.DataFrame:
    got = con.sql(f"SELECT * FROM zarr_sample('{store}', 'SELECT * FROM pts', method := '{method}')").df()
    assert got.id.tolist() == list(range(len(got)))  # one row per point, in point order
    return got


@pytest.mark.parametrize("zone", ZONES)
def test_nearest_matches_xarray_on_duckdbs_cast_of_the_points(store: str, zone: str) -> None:
    wall = _duckdb_wall_times(zone)
    expected = xr.open_zarr(store).v.sel(time=xr.DataArray(wall, dims="p"), method="nearest")
    with _connection(zone) as con:
        got = _sample(con, store, "nearest")
    np.testing.assert_array_equal(got.time.to_numpy(dtype="datetime64[ns]"), expected.time.values)
    np.testing.assert_array_equal(got.v.to_numpy(), expected.values)


@pytest.mark.parametrize("zone", ZONES)
def test_exact_matches_xarray_reindex_on_duckdbs_cast_of_the_points(store: str, zone: str) -> None:
    wall = _duckdb_wall_times(zone)
    expected = xr.open_zarr(store).v.reindex(time=wall).values  # NaN where no time is equal
    with _connection(zone) as con:
        got = _sample(con, store, "exact")
    # at +05:30 no point falls on an hour (the instants are on whole 20 minutes in UTC)
    assert (~np.isnan(expected)).any() == (zone != "Asia/Kolkata")
    np.testing.assert_array_equal(got.v.to_numpy(dtype="float64"), expected)
    matched = ~np.isnan(expected)
    np.testing.assert_array_equal(got.time.to_numpy(dtype="datetime64[ns]")[matched], wall[matched])


@pytest.mark.parametrize("zone", ["America/New_York", "Australia/Lord_Howe"])
def test_exact_matches_what_duckdbs_join_matches(store: str, zone: str) -> None:
    frame = xr.open_zarr(store).to_dataframe().reset_index()
    plain = duckdb.connect()
    plain.execute(f"SET TimeZone = '{zone}'")
    plain.register("frame", frame)
    joined = plain.sql(f"SELECT p.id, f.v FROM ({POINTS}) p LEFT JOIN frame f ON f.time = p.time ORDER BY p.id").df()
    with _connection(zone) as con:
        got = _sample(con, store, "exact")
    np.testing.assert_array_equal(got.v.to_numpy(dtype="float64"), joined.v.to_numpy(dtype="float64"))


def test_a_python_frame_in_another_zone_is_read_in_the_sessions(store: str) -> None:
    """A pandas column in Berlin time, sampled in a New York session: the session decides."""
    instants = pd.to_datetime(
        ["2020-03-08 06:40:00", "2020-03-08 07:20:00", "2020-11-01 05:40:00", "2020-11-01 06:20:00"]
    )
    points = pd.DataFrame({"time": instants.tz_localize("UTC").tz_convert("Europe/Berlin")})
    plain = duckdb.connect()
    plain.execute("SET TimeZone = 'America/New_York'")
    plain.register("points", points)
    wall = plain.sql("SELECT CAST(time AS TIMESTAMP) AS wall FROM points").df().wall.to_numpy(dtype="datetime64[ns]")
    expected = xr.open_zarr(store).v.sel(time=xr.DataArray(wall, dims="p"), method="nearest")
    with zarrsql.connect() as con:
        con.execute("SET TimeZone = 'America/New_York'")
        got = zarrsql.sample(store, points, connection=con).df()
    np.testing.assert_array_equal(got.time.to_numpy(dtype="datetime64[ns]"), expected.time.values)
    np.testing.assert_array_equal(got.v.to_numpy(), expected.values)


def test_infinite_points_stay_after_and_before_every_time(store: str) -> None:
    points = "SELECT TIMESTAMPTZ 'infinity' AS time UNION ALL SELECT TIMESTAMPTZ '-infinity' ORDER BY time DESC"
    with zarrsql.connect() as con:
        con.execute("SET TimeZone = 'Asia/Kolkata'")
        got = con.sql(f"SELECT time, v FROM zarr_sample('{store}', $${points}$$)").df()
    axis = xr.open_zarr(store).time.values
    np.testing.assert_array_equal(got.time.to_numpy(dtype="datetime64[ns]"), [axis[-1], axis[0]])


def test_a_point_with_no_local_timestamp_is_refused_by_name(store: str) -> None:
    # TIMESTAMP's last second in UTC is past it at +05:30: DuckDB's own CAST fails on it too
    points = "SELECT TIMESTAMPTZ '294247-01-10 04:00:54+00' AS time"
    with zarrsql.connect() as con:
        con.execute("SET TimeZone = 'Asia/Kolkata'")
        with pytest.raises(ParameterError, match=r"'time' holds a TIMESTAMPTZ with no TIMESTAMP in the session"):
            con.sql(f"SELECT * FROM zarr_sample('{store}', $${points}$$)").fetchall()
