"""A TIMESTAMP dimension compared with a TIMESTAMPTZ value (a literal, a Python datetime with a
tzinfo, `now() - INTERVAL ...`) or a TIMESTAMP_NS one prunes (`engine/widened.py`), and its rows
are DuckDB's in every session TimeZone: each statement is compared with plain DuckDB over
xarray's frame of the store, around the DST changes of 2021 in New York, in zones a day apart
(Kolkata, Kiritimati at +14), for NULLs, infinities and values outside the axis."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

UTC, NEW_YORK = dt.UTC, ZoneInfo("America/New_York")
ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "Pacific/Kiritimati"]
#: Hourly times over the spring and autumn DST changes of 2021, in chunks of 6 hours.
TIMES = np.concatenate(
    [
        pd.date_range("2021-03-12", periods=120, freq="h").values,
        pd.date_range("2021-11-05", periods=120, freq="h").values,
    ]
)
CHUNK = 6
VALUES = [
    dt.datetime(2021, 3, 14, 7, tzinfo=UTC),  # 2 a.m. in New York, where the clocks jump to 3
    dt.datetime(2021, 3, 14, 2, 30, tzinfo=NEW_YORK),  # a wall time New York skips
    dt.datetime(2021, 11, 7, 1, 30, tzinfo=NEW_YORK),  # a wall time New York has twice: the first
    dt.datetime(2021, 11, 7, 1, 30, fold=1, tzinfo=NEW_YORK),  # ... and the second
    dt.datetime(2021, 11, 7, 6, 0, 0, 1, tzinfo=UTC),  # a microsecond after an axis value
    dt.datetime(2021, 3, 13, 5, 30, tzinfo=ZoneInfo("Asia/Kolkata")),
    dt.datetime(2021, 11, 8, tzinfo=ZoneInfo("Pacific/Kiritimati")),
    dt.datetime(1999, 1, 1, tzinfo=UTC),  # before the axis
    dt.datetime(2050, 1, 1, tzinfo=UTC),  # after it
    None,
]
CONDITIONS = [
    "time > ?",
    "time >= ?",
    "time < ?",
    "time <= ?",
    "time = ?",
    "? <= time",
    "time BETWEEN ? AND TIMESTAMPTZ '2021-11-07 12:00:00+00'",
    "time IN (?, TIMESTAMPTZ '2021-03-14 07:00:00+00')",
]
LITERALS = [
    "time >= TIMESTAMPTZ '2021-03-14 02:30:00-05'",
    "time < TIMESTAMPTZ '2021-11-07 01:30:00 America/New_York'",
    "time = TIMESTAMPTZ '2021-11-07 06:00:00+00'",
    "TIMESTAMPTZ '2021-03-14 07:00:00+00' > time",
    "time BETWEEN TIMESTAMPTZ '2021-03-13 00:00:00+14' AND TIMESTAMPTZ '2021-03-15 00:00:00+05:30'",
    "time IN (TIMESTAMPTZ '2021-03-14 07:00:00+00', TIMESTAMPTZ '2021-11-07 05:00:00+00', NULL)",
    "time >= '2021-03-14 02:30:00-05'::TIMESTAMP WITH TIME ZONE",
    "time >= TIMESTAMPTZ 'infinity'",
    "time <= TIMESTAMPTZ 'infinity'",
    "time > TIMESTAMPTZ '-infinity'",
    "time >= TIMESTAMPTZ '0001-01-01 12:00:00+00'",
    "time <= TIMESTAMPTZ '9999-12-31 00:00:00+00'",
    "time >= to_timestamp(1615705200) - INTERVAL 90 MINUTE",
    "time < date_trunc('day', TIMESTAMPTZ '2021-11-07 12:00:00+00') + INTERVAL 1 HOUR",
    "time >= TIMESTAMP_NS '2021-03-14 01:00:00.0000005'",
    "time > TIMESTAMP_NS '2021-03-14 01:00:00'",
    "time <= TIMESTAMP_NS '2021-03-14 01:00:00.0000005'",
    "time < TIMESTAMP_NS '2021-03-14 01:00:00.000000001'",
    "time = TIMESTAMP_NS '2021-03-14 01:00:00'",
    "time = TIMESTAMP_NS '2021-03-14 01:00:00.000000001'",
    "time BETWEEN TIMESTAMP_NS '1677-09-22' AND TIMESTAMP_NS '2021-03-13 00:00:00.999999999'",
    "time IN (TIMESTAMP_NS '2021-11-06 00:00:00', TIMESTAMP_NS '2021-11-06 01:00:00.5')",
    "time >= TIMESTAMP_MS '2021-03-14 01:00:00.001'",
    "time <= TIMESTAMP_S '2021-03-14 01:00:00'",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, duckdb.DuckDBPyConnection, zarrsql.Connection]:
    ds = xr.Dataset({"v": (("time",), np.arange(TIMES.size, dtype="float64"))}, coords={"time": TIMES})
    path = tmp_path_factory.mktemp("zoned") / "t.zarr"
    ds.chunk({"time": CHUNK}).to_zarr(path, consolidated=True)
    frame = xr.open_zarr(path).to_dataframe().reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")  # DuckDB's TIMESTAMP, as the store's
    plain = duckdb.connect()
    plain.register("frame", frame)
    plain.execute("CREATE TABLE cells AS SELECT time, v FROM frame")
    assert plain.sql("SELECT typeof(time) FROM cells LIMIT 1").fetchall() == [("TIMESTAMP",)]
    con = zarrsql.connect()
    yield str(path), plain, con
    con.close()


def _both(store, zone: str, condition: str, args=None) -> tuple[list, list]:
    """(zarrsql's rows, DuckDB's rows) of `condition` in session time zone `zone`."""
    path, plain, con = store
    sql = "SELECT time, v FROM {src} WHERE " + condition + " ORDER BY v"
    plain.execute(f"SET TimeZone = '{zone}'")
    con.execute(f"SET TimeZone = '{zone}'")
    expected = plain.execute(sql.format(src="cells"), args).fetchall()
    return con.execute(sql.format(src=f"read_zarr('{path}')"), args).fetchall(), expected


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("value", VALUES, ids=str)
def test_zoned_python_datetimes_give_duckdbs_rows(store, zone, condition, value) -> None:
    got, expected = _both(store, zone, condition, [value])
    assert got == expected


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("condition", LITERALS)
def test_zoned_and_nanosecond_literals_give_duckdbs_rows(store, zone, condition) -> None:
    got, expected = _both(store, zone, condition)
    assert got == expected


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("args", [[dt.date(2021, 3, 14)], [dt.datetime(2021, 3, 14, 1)], ["2021-03-14 01:00"]], ids=str)
def test_dates_naive_datetimes_and_text_give_duckdbs_rows(store, zone, args) -> None:
    got, expected = _both(store, zone, "time >= ? AND time < TIMESTAMPTZ '2021-11-06 00:00:00+00'", args)
    assert got == expected


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(
    "condition",
    [
        "time >= now() - INTERVAL (?) DAY",
        "time < current_timestamp - to_days(?)",
        "time <= get_current_timestamp() - INTERVAL (?) DAY",
    ],
)
def test_clock_values_give_duckdbs_rows(store, zone, condition) -> None:
    """`now()` is the transaction's start: both statements run in one transaction so they see
    the same clock, which falls inside the axis `days` days ago."""
    path, _, con = store
    days = (dt.date.today() - dt.date(2021, 3, 14)).days
    con.execute(f"SET TimeZone = '{zone}'")
    con.register("frame", xr.open_zarr(path).to_dataframe().reset_index().astype({"time": "datetime64[us]"}))
    sql = "SELECT time, v FROM {src} WHERE " + condition + " ORDER BY v"
    con.execute("BEGIN TRANSACTION")
    try:
        expected = con.execute(sql.format(src="frame"), [days]).fetchall()
        got = con.execute(sql.format(src=f"read_zarr('{path}')"), [days]).fetchall()
    finally:
        con.execute("COMMIT")
        con.unregister("frame")
    assert got == expected
    assert 0 < len(expected) < TIMES.size  # the clock's bound fell inside the axis


def _units_in(low: np.datetime64, high: np.datetime64) -> int:
    """The chunks holding a time in [low, high]: those a twin with that range reads."""
    inside = np.flatnonzero((low <= TIMES) & (high >= TIMES))
    return len(set(inside // CHUNK))


DAY = np.timedelta64(1, "D")
START, END = TIMES[0] - DAY, TIMES[-1] + DAY


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati"])
@pytest.mark.parametrize(
    ("condition", "args", "low", "high"),
    [  # the twin's range: a TIMESTAMPTZ value's UTC time widened by a day, a TIMESTAMP_NS value's exact
        ("time >= ?", [dt.datetime(2021, 11, 7, 6, tzinfo=UTC)], np.datetime64("2021-11-06T06:00"), END),
        ("time < TIMESTAMPTZ '2021-03-14 07:00:00+00'", None, START, np.datetime64("2021-03-15T07:00")),
        (
            "time = $t",
            {"t": dt.datetime(2021, 11, 7, 1, 30, fold=1, tzinfo=NEW_YORK)},  # 06:30 UTC
            np.datetime64("2021-11-06T06:30"),
            np.datetime64("2021-11-08T06:30"),
        ),
        (
            "time BETWEEN ? AND ?",
            [dt.datetime(2021, 3, 13, tzinfo=UTC), dt.datetime(2021, 3, 13, 12, tzinfo=UTC)],
            np.datetime64("2021-03-12T00:00"),
            np.datetime64("2021-03-14T12:00"),
        ),
        ("time > TIMESTAMP_NS '2021-11-09 12:00:00.5'", None, np.datetime64("2021-11-09T12:00:00.000001"), END),
        (
            "time = TIMESTAMP_NS '2021-03-12 09:00:00'",
            None,
            np.datetime64("2021-03-12T09:00"),
            np.datetime64("2021-03-12T09:00"),
        ),
    ],
)
def test_a_zoned_or_nanosecond_value_prunes(store, zone, condition, args, low, high) -> None:
    got, expected = _both(store, zone, condition, args)
    assert got == expected
    path, _, con = store
    with zarrsql.trace() as t:
        con.execute(f"SELECT time, v FROM read_zarr('{path}') WHERE {condition}", args).fetchall()
    assert t.work_units_read == _units_in(low, high) < t.work_units_planned


@pytest.mark.skipif(not HAS_SOURCES, reason="DuckDB 1.5 hands a Python dataset no OR of ranges (the IN's twin)")
def test_an_in_list_of_zoned_values_reads_the_units_around_each(store) -> None:
    values = [dt.datetime(2021, 3, 12, 3, tzinfo=NEW_YORK), dt.datetime(2021, 11, 9, 20, tzinfo=NEW_YORK)]
    got, expected = _both(store, "America/New_York", "time IN (?, ?, NULL)", values)
    assert got == expected
    assert len(expected) == 2
    path, _, con = store
    with zarrsql.trace() as t:
        con.execute(f"SELECT v FROM read_zarr('{path}') WHERE time IN (?, ?, NULL)", values).fetchall()
    utc = [np.datetime64(v.astimezone(UTC).replace(tzinfo=None)) for v in values]
    assert t.work_units_read == sum(_units_in(u - DAY, u + DAY) for u in utc) < t.work_units_planned
