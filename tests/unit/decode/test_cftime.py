"""Tests of `zarrsql.decode.cftime`: CF time units and calendars to TIMESTAMP microseconds.

Expected values come from independent oracles: `cftime.num2date` (dates and fields),
`xarray.coding.times.decode_cf_datetime` (time-zone offsets, nanoseconds), DuckDB itself
(the TIMESTAMP range) and exact rational arithmetic with `fractions.Fraction` (the definition
of an exact conversion). Literals appear only where the definition implies them.
"""

from __future__ import annotations

import calendar as stdlib_calendar
import datetime as dt
import math
from fractions import Fraction

import cftime
import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xarray.coding.times import decode_cf_datetime

from zarrsql.decode.cftime import (
    MAX_MICROS,
    MIN_MICROS,
    TimeUnits,
    calendar_policy,
    names_real_dates,
    parse_time_units,
    to_micros,
)
from zarrsql.errors import UnsupportedError

ONE_US = dt.timedelta(microseconds=1)
DAY_US = 86_400 * 10**6

# (our spelling, canonical unit)
ALIASES = [
    (alias, unit)
    for unit, aliases in {
        "weeks": "weeks week",
        "days": "days day d",
        "hours": "hours hour hr hrs h",
        "minutes": "minutes minute min mins",
        "seconds": "seconds second sec secs s",
        "milliseconds": "milliseconds millisecond msec msecs ms",
        "microseconds": "microseconds microsecond usec usecs us",
        "nanoseconds": "nanoseconds nanosecond nsec nsecs ns",
    }.items()
    for alias in aliases.split()
]
CFTIME_UNITS = ["days", "hours", "minutes", "seconds", "milliseconds", "microseconds"]


# --------------------------------------------------------------------------- oracles


def cftime_dates(values, units: str, calendar: str) -> list:
    return list(
        cftime.num2date(
            np.asarray(values), units, calendar=calendar, only_use_cftime_datetimes=True
        )
    )


def cftime_micros(values, units: str, calendar: str) -> list[int]:
    """Microseconds since 1970-01-01 of cftime's dates (real calendars only)."""
    out = []
    for date in cftime_dates(values, units, calendar):
        epoch = cftime.datetime(
            1970, 1, 1, calendar=date.calendar, has_year_zero=date.has_year_zero
        )
        out.append((date - epoch) // ONE_US)
    return out


def fields(date) -> tuple[int, ...]:
    return (
        date.year, date.month, date.day, date.hour, date.minute, date.second, date.microsecond,
    )


def cftime_fields(values, units: str, calendar: str) -> list[tuple[int, ...]]:
    return [fields(d) for d in cftime_dates(values, units, calendar)]


def micros_fields(micros) -> list[tuple[int, ...]]:
    """Proleptic-Gregorian fields (astronomical years) of microsecond counts, via cftime."""
    epoch = cftime.datetime(1970, 1, 1, calendar="proleptic_gregorian", has_year_zero=True)
    return [fields(epoch + dt.timedelta(microseconds=int(m))) for m in np.ravel(micros)]


def xarray_micros(values, units: str) -> list[int]:
    """xarray's (pandas') decoding in nanoseconds, floored to microseconds."""
    decoded = decode_cf_datetime(np.asarray(values), units, "proleptic_gregorian")
    nanos = np.asarray(decoded).astype("datetime64[ns]").view(np.int64)
    return [int(n) // 1000 for n in nanos]


def exists_in_gregorian(year: int, month: int, day: int) -> bool:
    return day <= stdlib_calendar.monthrange(year, month)[1]


#: DuckDB 1.5 starts its TIMESTAMP range at 290309-12-22 (BC) 00:00; 2.x a few hours earlier.
#: zarrsql supports both, so a timestamp is valid only where both have it.
OLDEST_SUPPORTED = -9_223_372_022_400_000_000


def duckdb_accepts(micros: int) -> bool:
    """Whether every supported DuckDB has a TIMESTAMP at this many microseconds since the epoch."""
    if not OLDEST_SUPPORTED <= micros < 2**63:
        return False
    try:
        duckdb.sql(f"SELECT make_timestamp({micros}::BIGINT)").fetchall()
    except duckdb.Error:
        return False
    return True


def decode(units: str, values, calendar: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    tu = parse_time_units(units, calendar)
    assert tu is not None, units
    return to_micros(np.asarray(values), tu)


def valid_micros(units: str, values, calendar: str | None = None) -> list[int]:
    micros, invalid = decode(units, values, calendar)
    assert not invalid.any(), (units, values, invalid)
    return micros.tolist()


# --------------------------------------------------------------------------- parsing: units


@pytest.mark.parametrize(("alias", "unit"), ALIASES)
def test_every_unit_spelling_parses_to_its_canonical_unit(alias: str, unit: str) -> None:
    tu = parse_time_units(f"{alias} since 2000-01-01", "proleptic_gregorian")
    assert tu is not None
    assert tu.unit == unit
    assert tu.units_text == f"{alias} since 2000-01-01"
    upper = parse_time_units(f"  {alias.upper()}  SINCE  2000-01-01  ", "proleptic_gregorian")
    assert upper is not None
    assert upper.unit == unit


@pytest.mark.parametrize(("alias", "unit"), [a for a in ALIASES if a[1] in CFTIME_UNITS])
def test_cftime_units_decode_like_cftime(alias: str, unit: str) -> None:
    values = np.array([0, 1, -1, 59, -3_600, 86_401, 10**7], dtype=np.int64)
    for calendar in ("proleptic_gregorian", "standard"):
        ours = valid_micros(f"{alias} since 1990-05-17 06:30:00", values, calendar)
        assert ours == cftime_micros(values, f"{unit} since 1990-05-17 06:30:00", calendar)


@pytest.mark.parametrize("alias", ["weeks", "week"])
def test_weeks_are_seven_days(alias: str) -> None:
    values = np.array([0, 1, -1, 52, -5_000, 10_000], dtype=np.int64)
    ours = valid_micros(f"{alias} since 1990-05-17", values, "proleptic_gregorian")
    # a week is 7 days by definition; cftime does not know weeks
    assert ours == cftime_micros(values * 7, "days since 1990-05-17", "proleptic_gregorian")


@pytest.mark.parametrize("alias", ["nanoseconds", "nanosecond", "nsec", "nsecs", "ns"])
def test_nanoseconds_floor_to_microseconds_like_xarray(alias: str) -> None:
    values = np.array([0, 1, -1, 999, 1_000, 1_001, -999, -1_000, -1_001, 123_456_789_012_345])
    ours = valid_micros(f"{alias} since 2000-01-01", values, "proleptic_gregorian")
    assert ours == xarray_micros(values, "nanoseconds since 2000-01-01")


@pytest.mark.parametrize(
    "units",
    [
        "months since 2000-01-01",
        "month since 2000-01-01",
        "years since 2000-01-01",
        "year since 2000-01-01",
        "common_years since 2000-01-01",
        "m since 2000-01-01",
        "w since 2000-01-01",
        "fortnights since 2000-01-01",
        "days",
        "days since",
        "since 2000-01-01",
        "days after 2000-01-01",
        "days since2000-01-01",
        "",
        "degrees_north",
    ],
)
def test_refused_units_give_none(units: str) -> None:
    assert parse_time_units(units) is None
    assert parse_time_units(units, "noleap") is None


@pytest.mark.parametrize("units", [None, 5, 1.5, b"days since 2000-01-01", ["days since 2000"]])
def test_non_string_units_give_none(units: object) -> None:
    assert parse_time_units(units) is None


# --------------------------------------------------------------------------- parsing: calendars


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        (None, "standard"),
        ("", "standard"),
        ("standard", "standard"),
        ("gregorian", "standard"),
        ("GREGORIAN", "standard"),
        ("proleptic_gregorian", "proleptic_gregorian"),
        ("noleap", "noleap"),
        (" 365_day ", "noleap"),
        ("all_leap", "all_leap"),
        ("366_day", "all_leap"),
        ("360_day", "360_day"),
        ("Julian", "julian"),
    ],
)
def test_calendar_names_are_canonical(given: str | None, canonical: str) -> None:
    tu = parse_time_units("days since 2000-01-01", given)
    assert tu is not None
    assert tu.calendar == canonical


@pytest.mark.parametrize("calendar", ["none", "gregorian_tai", "utc", "lunar", 360, b"noleap"])
def test_unknown_calendars_give_none(calendar: object) -> None:
    assert parse_time_units("days since 2000-01-01", calendar) is None


# --------------------------------------------------------------------------- parsing: dates


@pytest.mark.parametrize(
    ("units", "ref_fields"),
    [
        # ref_fields are the written fields, by definition
        ("days since 1900-01-01", (1900, 1, 1, 0, 0, 0, 0)),
        ("hours since 1800-01-01 00:00:00", (1800, 1, 1, 0, 0, 0, 0)),
        ("seconds since 1970-01-01T00:00:00Z", (1970, 1, 1, 0, 0, 0, 0)),
        ("days since 0001-1-1 0:0:0", (1, 1, 1, 0, 0, 0, 0)),
        ("seconds since 2000-01-01 00:00:00.5", (2000, 1, 1, 0, 0, 0, 500_000)),
        ("minutes since 1999-12-31 23:59:58.123456", (1999, 12, 31, 23, 59, 58, 123_456)),
        ("hours since 1980-2-29 7:05", (1980, 2, 29, 7, 5, 0, 0)),
    ],
)
def test_reference_date_spellings_decode_like_cftime(
    units: str, ref_fields: tuple[int, ...]
) -> None:
    tu = parse_time_units(units, "proleptic_gregorian")
    assert tu is not None
    assert tu.ref_fields == ref_fields
    assert tu.tz_offset_minutes == 0
    values = np.array([0, 1, -7, 100_000], dtype=np.int64)
    ours = to_micros(values, tu)[0].tolist()
    assert ours == cftime_micros(values, units, "proleptic_gregorian")
    assert tu.ref_micros == ours[0]


@pytest.mark.parametrize(
    ("units", "offset"),
    [
        # tz_offset_minutes is the written offset, by definition
        ("hours since 2000-01-01 00:00 +05:00", 300),
        ("hours since 2000-01-01 00:00:00 -0330", -210),
        ("hours since 2000-01-01 00:00 +5", 300),
        ("hours since 2000-01-01 12:00:00 -03:30", -210),
        ("hours since 2000-01-01 00:00:00 UTC", 0),
        ("hours since 2000-01-01T00:00:00Z", 0),
        ("days since 1970-01-01 00:00:00 0:00", 0),
        ("days since 1970-01-01 06:00:00 +01", 60),
    ],
)
def test_time_zone_offsets_decode_like_xarray(units: str, offset: int) -> None:
    tu = parse_time_units(units, "proleptic_gregorian")
    assert tu is not None
    assert tu.tz_offset_minutes == offset
    values = np.array([0, 1, -1, 1_000], dtype=np.int64)
    assert to_micros(values, tu)[0].tolist() == xarray_micros(values, units)


def test_positive_offset_is_east_of_utc() -> None:
    # by definition: midnight at UTC+5 is 19:00 UTC the day before
    micros, invalid = decode("hours since 2000-01-01 00:00 +05:00", [0])
    expected = dt.datetime(1999, 12, 31, 19) - dt.datetime(1970, 1, 1)
    assert micros.tolist() == [expected // ONE_US]
    assert not invalid.any()


def test_offset_applies_on_model_calendars_like_cftime() -> None:
    values = np.array([0, 1, 30], dtype=np.int64)
    units = "hours since 2000-03-01 00:00 +05:00"
    micros, invalid = decode(units, values, "noleap")
    assert not invalid.any()
    assert micros_fields(micros) == cftime_fields(values, units, "noleap")


@pytest.mark.parametrize(
    "units",
    [
        "days since 2000-13-01",
        "days since 2000-00-10",
        "days since 2000-01-32",
        "days since 2001-02-29",
        "days since 2000-01-01 24:00",
        "days since 2000-01-01 00:60",
        "days since 2000-01-01 00:00:60",
        "days since 2000-01-01 +530",
        "days since 2000-01-01 00:00 +24:00",
        "days since 2000-01-01 00:00 +05:60",
        "days since 2000-01-01 5:00 UTC extra",
        "days since 2000-01-01 0:00 5",
        "days since 2000-01-01 0",
        "days since 2000-01-01 00",
        "days since 2000-01-01 foo",
        "days since 2000/01/01",
        "days since 2000-01",
        "days since 20000101",
        "days since 123456-01-01",
        "days since 2000-01-01 00:00:00.",
        "days since yesterday",
    ],
)
def test_malformed_reference_dates_give_none(units: str) -> None:
    assert parse_time_units(units, "proleptic_gregorian") is None


def test_unsigned_offset_must_follow_a_time() -> None:
    # "1970-01-01 0:00" is a time of day, not an offset
    tu = parse_time_units("days since 1970-01-01 5:00", "proleptic_gregorian")
    assert tu is not None
    assert tu.ref_fields[3:5] == (5, 0)
    assert tu.tz_offset_minutes == 0


def test_day_of_month_is_checked_in_the_calendar() -> None:
    assert parse_time_units("days since 2000-02-30", "standard") is None
    assert parse_time_units("days since 2000-02-30", "360_day") is not None
    assert parse_time_units("days since 1900-02-29", "proleptic_gregorian") is None
    assert parse_time_units("days since 1900-02-29", "julian") is not None
    assert parse_time_units("days since 2001-02-29", "all_leap") is not None
    assert parse_time_units("days since 2004-02-29", "noleap") is None
    assert parse_time_units("days since 2001-02-30", "360_day") is not None
    assert parse_time_units("days since 2000-01-31", "360_day") is None
    assert parse_time_units("days since 2000-04-31", "all_leap") is None
    # the ten days the Gregorian reform dropped do not exist on the standard calendar
    assert parse_time_units("days since 1582-10-10", "standard") is None
    assert parse_time_units("days since 1582-10-10", "proleptic_gregorian") is not None
    # 1500 is a Julian leap year, so its Feb 29 exists before the reform
    assert parse_time_units("days since 1500-02-29", "standard") is not None


@pytest.mark.parametrize("year", [10000, 12345, 99999, 1, 0, -1, -4713, -12345])
def test_wide_and_negative_years_on_proleptic_gregorian(year: int) -> None:
    units = f"days since {year:05d}-03-01 12:00"
    tu = parse_time_units(units, "proleptic_gregorian")
    assert tu is not None
    assert tu.ref_fields[0] == year
    epoch = cftime.DatetimeProlepticGregorian(1970, 1, 1)
    expected = cftime.DatetimeProlepticGregorian(year, 3, 1, 12) - epoch
    assert tu.ref_micros == expected // ONE_US
    values = np.array([0, 1, -400, 20_000], dtype=np.int64)
    assert to_micros(values, tu)[0].tolist() == [
        (cftime.DatetimeProlepticGregorian(year, 3, 1, 12) + dt.timedelta(days=int(v)) - epoch)
        // ONE_US
        for v in values
    ]


@pytest.mark.filterwarnings("ignore::cftime.CFWarning")  # cftime warns about BC years
@pytest.mark.parametrize("units", ["days since -0001-01-01", "days since -0100-07-04 03:00"])
def test_negative_years_on_the_standard_calendar_have_no_year_zero(units: str) -> None:
    values = np.array([700_000, 800_123], dtype=np.int64)  # land after the 1582 reform
    assert valid_micros(units, values, "standard") == cftime_micros(values, units, "standard")


def test_year_zero_does_not_exist_on_standard_and_julian() -> None:
    assert parse_time_units("days since 0000-01-01", "standard") is None
    assert parse_time_units("days since 0000-01-01", "julian") is None
    assert parse_time_units("days since 0000-01-01", "proleptic_gregorian") is not None
    assert parse_time_units("days since 0000-01-01", "noleap") is not None


def test_time_units_is_a_frozen_record() -> None:
    tu = parse_time_units("days since 2000-01-01")
    assert isinstance(tu, TimeUnits)
    with pytest.raises(AttributeError):
        tu.unit = "hours"  # type: ignore[misc]


# --------------------------------------------------------------------------- calendar policy


@pytest.mark.parametrize(
    ("units", "calendar", "policy"),
    [
        ("days since 1900-01-01", "proleptic_gregorian", "decode"),
        ("days since 1000-01-01", "proleptic_gregorian", "decode"),
        ("days since 1000-01-01", "noleap", "decode"),
        ("days since 2000-01-01", "365_day", "decode"),
        ("days since 1582-10-15", "standard", "decode"),
        ("days since 1970-01-01", "gregorian", "decode"),
        ("days since 1970-01-01", None, "decode"),
        ("days since 1582-10-04", "standard", "keep"),
        ("days since 0001-01-01", "standard", "keep"),
        ("days since 1500-01-01", "gregorian", "keep"),
        ("days since 2000-01-01", "360_day", "if_all_real"),
        ("days since 2000-01-01", "all_leap", "if_all_real"),
        ("days since 2000-01-01", "366_day", "if_all_real"),
        ("days since 2000-01-01", "julian", "if_all_real"),
    ],
)
def test_calendar_policy(units: str, calendar: str | None, policy: str) -> None:
    tu = parse_time_units(units, calendar)
    assert tu is not None
    assert calendar_policy(tu) == policy


# --------------------------------------------------------------------------- standard calendar


def test_standard_calendar_values_before_the_reform_are_invalid() -> None:
    values = np.array([0, -1, -152_384, -152_385, -152_386, -500_000, 10], dtype=np.int64)
    units = "days since 1999-12-31"
    micros, invalid = decode(units, values, "standard")
    reform = cftime.DatetimeGregorian(1582, 10, 15)
    dates = cftime_dates(values, units, "standard")
    assert invalid.tolist() == [d < reform for d in dates]
    kept = ~invalid
    assert micros[kept].tolist() == cftime_micros(values[kept], units, "standard")
    assert micros[invalid].tolist() == [0] * int(invalid.sum())


def test_standard_calendar_reference_before_the_reform_is_a_julian_date() -> None:
    units = "days since 1500-01-01"
    tu = parse_time_units(units, "standard")
    assert tu is not None
    assert calendar_policy(tu) == "keep"
    values = np.array([0, 30_000, 30_212, 30_213, 200_000], dtype=np.int64)
    micros, invalid = to_micros(values, tu)
    reform = cftime.DatetimeGregorian(1582, 10, 15)
    assert invalid.tolist() == [d < reform for d in cftime_dates(values, units, "standard")]
    kept = ~invalid
    assert micros[kept].tolist() == cftime_micros(values[kept], units, "standard")


def test_proleptic_gregorian_decodes_before_1582() -> None:
    values = np.array([-10**6, -1, 0, 1, 200_000, 300_000], dtype=np.int64)
    for units in ("days since 1000-01-01", "hours since 0001-01-01 00:00:00"):
        expected = cftime_micros(values, units, "proleptic_gregorian")
        assert valid_micros(units, values, "proleptic_gregorian") == expected


# --------------------------------------------------------------------------- integer vs float


def test_integer_valued_floats_match_integers() -> None:
    ints = np.array([0, 1, -1, 10**6, -(10**6), 2**40], dtype=np.int64)
    for unit in ("weeks", "days", "hours", "seconds", "milliseconds", "microseconds", "ns"):
        units = f"{unit} since 1800-01-01"
        int_result = decode(units, ints, "proleptic_gregorian")
        for dtype in (np.float64, np.float32):
            float_result = decode(units, ints.astype(dtype), "proleptic_gregorian")
            np.testing.assert_array_equal(float_result[0], int_result[0])
            np.testing.assert_array_equal(float_result[1], int_result[1])


@pytest.mark.parametrize(
    "dtype",
    ["int8", "uint8", "int16", "uint16", "int32", "uint32", "uint64", ">i8", ">i4", ">f8", "<f4"],
)
def test_numeric_dtypes_decode_like_cftime(dtype: str) -> None:
    values = np.arange(0, 120, 7).astype(dtype)
    units = "hours since 2010-06-01"
    expected = cftime_micros(values.astype(np.int64), units, "proleptic_gregorian")
    assert valid_micros(units, values, "proleptic_gregorian") == expected


def _far_from_half(values: np.ndarray, unit_us: int) -> np.ndarray:
    """Values whose exact microsecond count is not within 1/100 µs of a rounding tie."""
    keep = []
    for v in values.tolist():
        exact = Fraction(v) * unit_us
        keep.append(abs(exact - math.floor(exact) - Fraction(1, 2)) > Fraction(1, 100))
    return values[np.array(keep)]


@pytest.mark.parametrize(("unit", "unit_us"), [("days", DAY_US), ("hours", 3_600 * 10**6)])
def test_large_fractional_days_since_1800_match_cftime(unit: str, unit_us: int) -> None:
    rng = np.random.default_rng(1800)
    values = np.concatenate(
        [
            rng.uniform(-1e6, 1e6, 300),
            rng.uniform(7e4, 9e4, 300),  # today's dates: ~7e15 µs from 1800
            np.array([80_000.123456789, 81_234.000001, -0.1, 44_000.99999999]),
        ]
    )
    values = _far_from_half(values, unit_us)
    units = f"{unit} since 1800-01-01"
    expected = cftime_micros(values, units, "proleptic_gregorian")
    assert valid_micros(units, values, "proleptic_gregorian") == expected


@pytest.mark.parametrize(
    ("unit", "unit_us"),
    [("weeks", 7 * DAY_US), ("days", DAY_US), ("seconds", 10**6), ("microseconds", 1)],
)
def test_floats_are_exact_to_the_nearest_microsecond(unit: str, unit_us: int) -> None:
    rng = np.random.default_rng(7)
    limit = 9e18 / unit_us  # stays inside the TIMESTAMP range from 1970
    values = np.concatenate([rng.uniform(-limit, limit, 500), rng.uniform(-1e3, 1e3, 500)])
    values = _far_from_half(values, unit_us)
    micros, invalid = decode(f"{unit} since 1970-01-01", values, "proleptic_gregorian")
    assert not invalid.any()
    # the exact product rounded to the nearest integer (no ties left after filtering)
    assert micros.tolist() == [round(Fraction(v) * unit_us) for v in values.tolist()]


def test_nanosecond_floats_floor_exactly_even_beyond_int64() -> None:
    values = np.array([1e20, -1e20, 2.0**64, 1.5e21, -0.5, 1234.9, 9.2e18, 9.3e18])
    micros, invalid = decode("ns since 1970-01-01", values, "proleptic_gregorian")
    assert not invalid.any()
    assert micros.tolist() == [math.floor(Fraction(v) / 1000) for v in values.tolist()]


@pytest.mark.parametrize("dtype", ["<u8", ">u8"])
def test_uint64_beyond_int64(dtype: str) -> None:
    values = np.array([2**64 - 1, 2**63, 2**63 - 1], dtype=dtype)
    micros, invalid = decode("ns since 1970-01-01", values, "proleptic_gregorian")
    assert not invalid.any()
    assert micros.tolist() == [int(v) // 1000 for v in values]
    # microseconds from far in the past: 2**63 µs after year -99999 is inside the range
    micros, invalid = decode("us since -99999-01-01", values, "proleptic_gregorian")
    epoch = cftime.DatetimeProlepticGregorian(1970, 1, 1)
    ref = (cftime.DatetimeProlepticGregorian(-99999, 1, 1) - epoch) // ONE_US
    expected = [ref + int(v) for v in values]
    assert invalid.tolist() == [not duckdb_accepts(e) for e in expected]
    assert micros[~invalid].tolist() == [e for e in expected if duckdb_accepts(e)]


# --------------------------------------------------------------------------- invalid cells


def test_nan_and_inf_are_invalid() -> None:
    values = np.array([0.0, np.nan, np.inf, -np.inf, 1.5])
    micros, invalid = decode("days since 2000-01-01", values)
    assert invalid.tolist() == [False, True, True, True, False]
    expected = cftime_micros([0.0, 1.5], "days since 2000-01-01", "standard")
    assert micros[~invalid].tolist() == expected


def test_timestamp_range_matches_duckdb() -> None:
    candidates = [
        MAX_MICROS, MAX_MICROS + 1, MIN_MICROS, MIN_MICROS - 1, -(2**63), 0, 2**62, -(2**62),
    ]
    values = np.array(candidates, dtype=np.int64)
    micros, invalid = decode("microseconds since 1970-01-01", values, "proleptic_gregorian")
    assert invalid.tolist() == [not duckdb_accepts(c) for c in candidates]
    assert micros[~invalid].tolist() == [c for c in candidates if duckdb_accepts(c)]


@pytest.mark.parametrize(
    ("unit", "unit_us"),
    [("weeks", 7 * DAY_US), ("days", DAY_US), ("hours", 3_600 * 10**6), ("seconds", 10**6)],
)
def test_out_of_range_offsets_are_invalid(unit: str, unit_us: int) -> None:
    edge = MAX_MICROS // unit_us
    offsets = [edge, edge + 1, -edge, -edge - 1, 2**63 - 1, -(2**63), 2**62, 12_345]
    micros, invalid = decode(
        f"{unit} since 1970-01-01", np.array(offsets, dtype=np.int64), "proleptic_gregorian"
    )
    expected = [o * unit_us for o in offsets]  # exact products, then DuckDB decides
    assert invalid.tolist() == [not duckdb_accepts(e) for e in expected]
    assert micros[~invalid].tolist() == [e for e in expected if duckdb_accepts(e)]
    floats = np.array([float(o) for o in offsets] + [1e300, -1e300])
    _, float_invalid = decode(f"{unit} since 1970-01-01", floats, "proleptic_gregorian")
    exact = [Fraction(f) * unit_us for f in floats.tolist()]
    assert float_invalid.tolist() == [not duckdb_accepts(round(e)) for e in exact]


def test_out_of_range_on_model_calendars_is_invalid() -> None:
    values = np.array([0, 2**62, -(2**62), 10**16], dtype=np.int64)
    for calendar in ("noleap", "all_leap", "360_day", "julian"):
        _, invalid = decode("days since 2000-01-01", values, calendar)
        assert invalid.tolist() == [False, True, True, True]


def test_shapes_and_dtypes_are_kept() -> None:
    values = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    micros, invalid = decode("hours since 2000-01-01", values)
    assert micros.shape == invalid.shape == (2, 3, 4)
    assert micros.dtype == np.int64
    assert invalid.dtype == np.bool_
    expected = cftime_micros(values.ravel(), "hours since 2000-01-01", "standard")
    assert micros.ravel().tolist() == expected
    scalar, scalar_invalid = decode("hours since 2000-01-01", np.float64(5.0))
    assert scalar.shape == scalar_invalid.shape == ()
    empty, empty_invalid = decode("days since 2000-01-01", np.zeros((0, 3)), "noleap")
    assert empty.shape == empty_invalid.shape == (0, 3)


def test_input_is_neither_modified_nor_required_writable() -> None:
    for values in (np.array([1.5, np.nan, 1e300]), np.array([3, -(2**63)], dtype=np.int64)):
        values.flags.writeable = False
        before = values.copy()
        for calendar in ("standard", "noleap", "360_day"):
            decode("hours since 2000-01-01", values, calendar)
        np.testing.assert_array_equal(values, before)


def test_non_numeric_values_are_unsupported() -> None:
    tu = parse_time_units("days since 2000-01-01")
    assert tu is not None
    with pytest.raises(UnsupportedError, match="days since 2000-01-01"):
        to_micros(np.array(["2000-01-01"]), tu)
    assert not names_real_dates(np.array(["2000-01-01"]), tu)


# --------------------------------------------------------------------------- model calendars


@pytest.mark.parametrize("calendar", ["noleap", "365_day"])
def test_noleap_decodes_by_fields_across_many_years(calendar: str) -> None:
    rng = np.random.default_rng(365)
    values = np.concatenate(
        [np.arange(-800, 800), rng.integers(-365 * 1500, 365 * 6000, 3000), np.array([59])]
    )
    units = "days since 2000-01-01"
    micros = valid_micros(units, values, calendar)
    assert micros_fields(micros) == cftime_fields(values, units, calendar)
    # the definition's example: day 59 of noleap 2000 is March 1st, not Feb 29
    assert micros_fields(micros[-1:]) == [(2000, 3, 1, 0, 0, 0, 0)]


def test_noleap_fractional_and_subdaily_values_match_cftime_fields() -> None:
    rng = np.random.default_rng(12)
    days = _far_from_half(rng.uniform(-30_000, 30_000, 500), DAY_US)
    hours = rng.integers(-10**7, 10**7, 500)
    for units, values in (("days since 1850-01-01", days), ("hours since 1850-01-01 06:00", hours)):
        micros = valid_micros(units, values, "noleap")
        assert micros_fields(micros) == cftime_fields(values, units, "noleap")


@pytest.mark.parametrize(
    ("calendar", "units"),
    [
        ("360_day", "days since 2000-01-01"),
        ("360_day", "hours since 1999-02-30 12:00"),
        ("all_leap", "days since 1899-12-01"),
        ("366_day", "days since 2000-01-01"),
        ("julian", "days since 1850-01-01"),
        ("julian", "hours since 1899-02-01 06:00"),
    ],
)
def test_model_calendars_decode_real_fields_and_null_the_rest(calendar: str, units: str) -> None:
    values = np.arange(-20_000, 20_000)
    if units.startswith("hours"):
        values = values * 7
    micros, invalid = decode(units, values, calendar)
    expected = cftime_fields(values, units, calendar)
    real = [exists_in_gregorian(*f[:3]) for f in expected]
    assert invalid.tolist() == [not r for r in real]
    assert any(real)
    assert not all(real)
    assert micros_fields(micros[~invalid]) == [f for f, r in zip(expected, real, strict=True) if r]
    tu = parse_time_units(units, calendar)
    assert tu is not None
    assert not names_real_dates(values, tu)
    assert names_real_dates(values[np.array(real)], tu)
    assert names_real_dates(values, tu, missing=~np.array(real))


def test_named_non_real_dates() -> None:
    cases = [
        ("360_day", "days since 2000-02-29", 1, False),  # 360_day 2000-02-30
        ("360_day", "days since 2000-02-29", 0, True),
        ("all_leap", "days since 1900-02-28", 1, False),  # all_leap 1900-02-29
        ("all_leap", "days since 2000-02-28", 1, True),  # 2000 is a Gregorian leap year
        ("julian", "days since 1900-02-28", 1, False),  # Julian 1900-02-29
        ("julian", "days since 1900-02-28", 2, True),
    ]
    for calendar, units, value, real in cases:
        (date,) = cftime_dates([value], units, calendar)
        assert exists_in_gregorian(date.year, date.month, date.day) is real
        tu = parse_time_units(units, calendar)
        assert tu is not None
        assert names_real_dates(np.array([value]), tu) is real
        assert to_micros(np.array([value]), tu)[1].tolist() == [not real]


def test_names_real_dates_skips_missing_and_nan() -> None:
    tu = parse_time_units("days since 2000-01-01", "360_day")
    assert tu is not None
    values = np.array([0.0, 59.0, np.nan, 31.0])  # 59 is 360_day 2000-02-30
    assert not names_real_dates(values, tu)
    assert names_real_dates(values, tu, missing=np.array([False, True, False, False]))
    assert not names_real_dates(np.array([0.0, np.inf]), tu)
    assert names_real_dates(np.array([], dtype=np.float64), tu)
    assert not names_real_dates(np.array([0, 10**17]), tu)  # out of the TIMESTAMP range


def test_names_real_dates_on_real_calendars() -> None:
    tu = parse_time_units("days since 2000-01-01", "noleap")
    assert tu is not None
    assert names_real_dates(np.arange(-10_000, 10_000), tu)
    standard = parse_time_units("days since 1900-01-01", "standard")
    assert standard is not None
    assert names_real_dates(np.arange(0, 1_000), standard)
    assert not names_real_dates(np.array([0, -200_000]), standard)  # before the reform


# --------------------------------------------------------------------------- properties

reference_dates = st.tuples(
    st.integers(1, 9999), st.integers(1, 12), st.integers(1, 28),
    st.integers(0, 23), st.integers(0, 59), st.integers(0, 59),
)
units_and_offsets = st.sampled_from(
    [
        ("days", 10**6),
        ("hours", 24 * 10**6),
        ("minutes", 1_440 * 10**6),
        ("seconds", 86_400 * 10**6),
        ("milliseconds", 86_400 * 10**9),
        ("microseconds", 86_400 * 10**12),
    ]
).flatmap(lambda u: st.tuples(st.just(u[0]), st.lists(st.integers(-u[1], u[1]), max_size=20)))


def _units_text(unit: str, ref: tuple[int, ...]) -> str:
    y, mo, d, h, mi, s = ref
    return f"{unit} since {y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}"


@settings(max_examples=150, deadline=None)
@given(ref=reference_dates, unit_values=units_and_offsets)
def test_property_proleptic_gregorian_matches_cftime(ref, unit_values) -> None:
    unit, values = unit_values
    units = _units_text(unit, ref)
    array = np.array(values, dtype=np.int64)
    micros, invalid = decode(units, array, "proleptic_gregorian")
    assert not invalid.any()
    assert micros.tolist() == cftime_micros(array, units, "proleptic_gregorian")


@settings(max_examples=150, deadline=None)
@given(ref=reference_dates, unit_values=units_and_offsets)
def test_property_noleap_matches_cftime_fields(ref, unit_values) -> None:
    unit, values = unit_values
    units = _units_text(unit, ref)
    array = np.array(values, dtype=np.int64)
    micros, invalid = decode(units, array, "noleap")
    assert not invalid.any()
    assert micros_fields(micros) == cftime_fields(array, units, "noleap")
