"""CF time coordinates: `"<unit> since <reference>"` numbers to DuckDB TIMESTAMP microseconds.

Also CF durations: numbers whose `units` is a bare time unit (xarray's spelling of a
timedelta, e.g. a forecast `step` in "hours"), read as microseconds for a DuckDB INTERVAL
(`parse_duration_units`: offsets from the 1970 epoch, converted by the same exact rules).

Owns the parsing of a CF `units`/`calendar` attribute pair (`parse_time_units`), the choice of
what to do with each calendar (`calendar_policy`), and the vectorised, exact conversion of
stored offsets to microseconds since 1970-01-01T00:00 (naive UTC, proleptic Gregorian), the
representation of a DuckDB TIMESTAMP (`to_micros`, `names_real_dates`).

Contract:
- Nothing here raises for odd metadata: an attribute this module cannot read exactly gives
  None, and the caller keeps the stored numbers. Only a non-numeric array given to
  `to_micros` raises (`UnsupportedError`).
- Years are astronomical (year 0 is 1 BC), as in ISO 8601, numpy and DuckDB, except in the
  reference date of the "standard" and "julian" calendars, which (as in CF and cftime) have
  no year 0: there a written year -1 is 1 BC and a written year 0 is refused.
- On the "standard" calendar a reference before 1582-10-15 is a Julian date (so `ref_micros`
  is the true instant); instants before 1582-10-15T00:00 decode to NULL, never to a date.
- Model calendars (noleap, all_leap, 360_day, julian) decode by calendar fields: the offset
  is counted in the model calendar from the reference, and the resulting (year, month, day,
  time) is read as a proleptic-Gregorian date; fields with no such date give NULL.
- Integer offsets use integer arithmetic only. Nanoseconds are rounded toward negative
  infinity to whole microseconds (DuckDB's TIMESTAMP has microsecond resolution). Float
  offsets are split into a whole part (exact integer arithmetic) and a fractional part,
  which is rounded to the nearest microsecond (ties to even); nanosecond fractions floor.
- A reference date's seconds keep nine decimals (digits past the nanosecond are cut, as pandas
  reads them). Its nanoseconds below the microsecond (`ref_nanos`) join each nanosecond
  offset before the floor, so reference + offset is floored to the microsecond exactly
  (xarray writes "nanoseconds since <first value>" with such a reference); an offset in a
  coarser unit is a whole number of microseconds (or rounded to one), which they never move.
- The TIMESTAMP range is the int64 range minus its three reserved values (-2**63 is NULL,
  +-(2**63 - 1) are the infinities): [-(2**63 - 2), 2**63 - 2] microseconds.
- A stored int64 -2**63 is NULL: it is how numpy and xarray write NaT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias, overload

import numpy as np

from zarrsql.errors import UnsupportedError

__all__ = [
    "MAX_MICROS",
    "MIN_MICROS",
    "TimeUnits",
    "calendar_policy",
    "names_real_dates",
    "parse_duration_units",
    "parse_time_units",
    "to_micros",
]

MIN_MICROS = -9_223_372_022_400_000_000  # 290309-12-22 (BC) 00:00: the smallest TIMESTAMP of DuckDB 1.5 and 2.x alike
MAX_MICROS = 2**63 - 2  # 294247-01-10 04:00:54.775806, DuckDB's largest TIMESTAMP

_DAY_US = 86_400_000_000
_DAYS_LIMIT = 2**50  # day counts beyond this are far outside the TIMESTAMP range (~1.1e8 days)
_Ints: TypeAlias = "int | np.ndarray"  # the calendar helpers take Python ints or int64 arrays
# (year, month, day, hour, minute, second, microsecond) of a reference date
_Fields: TypeAlias = "tuple[int, int, int, int, int, int, int]"

_MIN_DAY, _MIN_TOD = divmod(MIN_MICROS, _DAY_US)
_MAX_DAY, _MAX_TOD = divmod(MAX_MICROS, _DAY_US)

_REAL_CALENDARS = frozenset({"standard", "proleptic_gregorian"})
_CALENDAR_NAMES = {
    "standard": "standard",
    "gregorian": "standard",
    "proleptic_gregorian": "proleptic_gregorian",
    "noleap": "noleap",
    "365_day": "noleap",
    "all_leap": "all_leap",
    "366_day": "all_leap",
    "360_day": "360_day",
    "julian": "julian",
}

# Days in each month, and days before the first of each month (index 12 closes the year);
# row 0 of a common year, row 1 of a leap year.
_MONTH_LENGTHS = np.array(
    [
        [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31],
        [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31],
    ],
    dtype=np.int64,
)
_MONTH_STARTS = np.concatenate([np.zeros((2, 1), dtype=np.int64), np.cumsum(_MONTH_LENGTHS, axis=1)], axis=1)


@dataclass(frozen=True, slots=True)
class TimeUnits:
    """A parsed CF time `units` attribute and its calendar.

    `ref_micros` is the reference instant floored to the microsecond; `ref_nanos` (0 to 999)
    the nanoseconds it drops, which `to_micros` adds to nanosecond offsets before flooring.
    """

    unit: str
    ref_micros: int
    ref_fields: _Fields
    tz_offset_minutes: int
    calendar: str
    units_text: str
    ref_nanos: int = 0


@dataclass(frozen=True, slots=True)
class _Unit:
    """One unit of time: `days` per unit (days, weeks) or `per_day` units per day (finer).

    A unit finer than a day lasts `num / den` microseconds.
    """

    days: int
    per_day: int
    num: int
    den: int


_UNITS = {
    "weeks": _Unit(days=7, per_day=0, num=7 * _DAY_US, den=1),
    "days": _Unit(days=1, per_day=0, num=_DAY_US, den=1),
    "hours": _Unit(days=0, per_day=24, num=3_600_000_000, den=1),
    "minutes": _Unit(days=0, per_day=1_440, num=60_000_000, den=1),
    "seconds": _Unit(days=0, per_day=86_400, num=1_000_000, den=1),
    "milliseconds": _Unit(days=0, per_day=86_400_000, num=1_000, den=1),
    "microseconds": _Unit(days=0, per_day=_DAY_US, num=1, den=1),
    "nanoseconds": _Unit(days=0, per_day=_DAY_US * 1_000, num=1, den=1_000),
}

_UNIT_SPELLINGS = {
    "weeks": "weeks week",
    "days": "days day d",
    "hours": "hours hour hr hrs h",
    "minutes": "minutes minute min mins",
    "seconds": "seconds second sec secs s",
    "milliseconds": "milliseconds millisecond msec msecs ms",
    "microseconds": "microseconds microsecond usec usecs us",
    "nanoseconds": "nanoseconds nanosecond nsec nsecs ns",
}
_UNIT_ALIASES = {alias: unit for unit, text in _UNIT_SPELLINGS.items() for alias in text.split()}

_UNITS_RE = re.compile(r"\s*([a-z]+)\s+since\s+(.+?)\s*", re.IGNORECASE)
_REFERENCE_RE = re.compile(
    r"""
    (?P<year>[+-]?\d{1,5})-(?P<month>\d{1,2})-(?P<day>\d{1,2})
    (?:(?:T|\s+)(?P<hour>\d{1,2}):(?P<minute>\d{1,2})
       (?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d+))?)?)?
    (?P<zone>.*)
    """,
    re.IGNORECASE | re.VERBOSE,
)
_SIGNED_OFFSET_RE = re.compile(r"(\d{1,2})(?::(\d{2}))?|(\d{2})(\d{2})")  # +5, +05:00, -0330
_UNSIGNED_OFFSET_RE = re.compile(r"(\d{1,2}):(\d{2})")


# --------------------------------------------------------------------------- calendars


@overload
def _civil_days(year: int, month: int, day: int) -> int: ...
@overload
def _civil_days(year: np.ndarray, month: _Ints, day: _Ints) -> np.ndarray: ...
def _civil_days(year: _Ints, month: _Ints, day: _Ints) -> _Ints:
    """Days from 1970-01-01 to a proleptic-Gregorian date (ints or int64 arrays).

    Linear in `day`, so a day past the end of its month rolls into the next month.
    """
    y = year - (month <= 2)  # count years from March so that leap days end a year
    era = y // 400
    year_of_era = y - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


@overload
def _gregorian_leap(year: int) -> bool: ...
@overload
def _gregorian_leap(year: np.ndarray) -> np.ndarray: ...
def _gregorian_leap(year: _Ints) -> bool | np.ndarray:
    return (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))


@overload
def _julian_days(year: int, month: int, day: int) -> int: ...
@overload
def _julian_days(year: np.ndarray, month: _Ints, day: _Ints) -> np.ndarray: ...
def _julian_days(year: _Ints, month: _Ints, day: _Ints) -> _Ints:
    """Days from Julian-calendar 0000-01-01 (astronomical years) to a Julian date."""
    leap = (year % 4 == 0) * 1
    return 365 * year + (year + 3) // 4 + _MONTH_STARTS[leap, month - 1] + day - 1


def _model_days(calendar: str, year: int, month: int, day: int) -> int:
    """Days from 0000-01-01 of `calendar` to a date of that calendar."""
    if calendar == "360_day":
        return 360 * year + 30 * (month - 1) + day - 1
    if calendar == "julian":
        return int(_julian_days(year, month, day))
    leap = 1 if calendar == "all_leap" else 0
    return (365 + leap) * year + int(_MONTH_STARTS[leap, month - 1]) + day - 1


# Julian 1582-10-05 is Gregorian 1582-10-15: the same day in the two day counts.
_REFORM_DAY = _civil_days(1582, 10, 15)
_JULIAN_TO_CIVIL = _REFORM_DAY - int(_julian_days(1582, 10, 5))


def _days_in_month(calendar: str, year: int, month: int) -> int:
    if calendar == "360_day":
        return 30
    if calendar in ("noleap", "all_leap"):
        return int(_MONTH_LENGTHS[int(calendar == "all_leap"), month - 1])
    if calendar == "julian":
        return int(_MONTH_LENGTHS[int(year % 4 == 0), month - 1])
    return int(_MONTH_LENGTHS[int(_gregorian_leap(year)), month - 1])


def _build_day_of_year_map() -> np.ndarray:
    """Flat table: [model year kind, Gregorian leap, model day of year] -> Gregorian day of year.

    Model year kinds: 0 a 365-day year, 1 a 366-day year, 2 a 360-day year (twelve 30-day
    months). -1 marks model dates (month, day) that a Gregorian year of that kind lacks.
    """
    kinds = (_MONTH_LENGTHS[0], _MONTH_LENGTHS[1], np.full(12, 30))
    table = np.full((3, 2, 366), -1, dtype=np.int64)
    for kind, lengths in enumerate(kinds):
        for leap in (0, 1):
            month_of_day = np.repeat(np.arange(12), lengths)
            day0 = np.arange(month_of_day.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            exists = day0 < _MONTH_LENGTHS[leap, month_of_day]
            civil = _MONTH_STARTS[leap, month_of_day] + day0
            table[kind, leap, : month_of_day.size] = np.where(exists, civil, -1)
    return table.reshape(-1)


_DAY_OF_YEAR_MAP = _build_day_of_year_map()


def _model_year_and_day(days: np.ndarray, calendar: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | int]:
    """(year, day of year from 0, year kind of `_DAY_OF_YEAR_MAP`) of model day counts."""
    if calendar == "julian":
        cycle, rest = np.divmod(days, 1461)  # 4-year cycles starting with a leap year
        leap = rest < 366
        after = rest - 366
        year = 4 * cycle + np.where(leap, 0, 1 + after // 365)
        return year, np.where(leap, rest, after % 365), leap.astype(np.int64)
    kind = {"noleap": 0, "all_leap": 1, "360_day": 2}[calendar]
    year, day_of_year = np.divmod(days, (365, 366, 360)[kind])
    return year, day_of_year, kind


def _year_starts(year: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(day count of January 1st, Gregorian leap) of each year; once per year of the span."""
    low, high = int(year.min()), int(year.max())
    if high - low >= year.size:
        return _civil_days(year, 1, 1), _gregorian_leap(year)
    span = np.arange(low, high + 1, dtype=np.int64)
    index = year - low
    return _civil_days(span, 1, 1)[index], _gregorian_leap(span)[index]


def _model_to_civil(days: np.ndarray, calendar: str) -> tuple[np.ndarray, np.ndarray]:
    """Model day counts (from the model's 0000-01-01) read as proleptic-Gregorian dates.

    Returns (day counts from 1970-01-01, exists); where the model (month, day) does not exist
    in that Gregorian year the day count is meaningless.
    """
    if days.size == 0:
        return days.copy(), np.ones(days.shape, dtype=bool)
    year, day_of_year, kind = _model_year_and_day(days, calendar)
    jan1, leap = _year_starts(year)
    civil_day_of_year = _DAY_OF_YEAR_MAP[(kind * 2 + leap) * 366 + day_of_year]
    return jan1 + civil_day_of_year, civil_day_of_year >= 0


# --------------------------------------------------------------------------- parsing


def _canonical_calendar(calendar: object) -> str | None:
    if calendar is None:
        return "standard"
    if not isinstance(calendar, str):
        return None
    name = calendar.strip().lower()
    return "standard" if not name else _CALENDAR_NAMES.get(name)


def _astronomical_year(year: int, calendar: str) -> int | None:
    """The astronomical year of a written reference year (None: year 0 without a year 0)."""
    if calendar not in ("standard", "julian") or year > 0:
        return year
    return None if year == 0 else year + 1


def _parse_offset(zone: str, has_time: bool) -> int | None:
    """Minutes east of UTC of the text after the reference date/time (None: unreadable)."""
    text = zone.strip()
    if not text or text.upper() in ("Z", "UTC", "GMT"):
        return 0
    if text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        match = _SIGNED_OFFSET_RE.fullmatch(text[1:].strip())
    elif has_time and zone[0].isspace():  # UDUNITS writes a zero offset unsigned: "0:00"
        sign = 1
        match = _UNSIGNED_OFFSET_RE.fullmatch(text)
    else:
        return None
    if match is None:
        return None
    found = [int(group) for group in match.groups() if group is not None]
    hours, minutes = found[0], (found[1] if len(found) > 1 else 0)
    if hours > 23 or minutes > 59:
        return None
    return sign * (hours * 60 + minutes)


def _parse_reference(text: str) -> tuple[_Fields, int, int] | None:
    """((year, month, day, hour, minute, second, microsecond), tz minutes, nanoseconds below
    the microsecond) of a date text; digits past the nanosecond are cut, as pandas does."""
    match = _REFERENCE_RE.fullmatch(text)
    if match is None:
        return None
    has_time = match.group("hour") is not None
    offset = _parse_offset(match.group("zone"), has_time)
    if offset is None:
        return None
    micro, nanos = divmod(int((match.group("fraction") or "")[:9].ljust(9, "0")), 1_000)
    year, month, day, hour, minute, second = (
        int(match.group(name) or 0) for name in ("year", "month", "day", "hour", "minute", "second")
    )
    return (year, month, day, hour, minute, second, micro), offset, nanos


def _valid_date(fields: tuple[int, ...], calendar: str) -> bool:
    """Whether the written reference fields name a date and time of `calendar`."""
    year = _astronomical_year(fields[0], calendar)
    _, month, day, hour, minute, second, _ = fields
    if year is None or not (1 <= month <= 12 and hour < 24 and minute < 60 and second < 60):
        return False
    if calendar == "standard":
        date = (year, month, day)
        if (1582, 10, 5) <= date < (1582, 10, 15):
            return False  # the ten days dropped by the Gregorian reform
        rule = "proleptic_gregorian" if date >= (1582, 10, 15) else "julian"
        return 1 <= day <= _days_in_month(rule, year, month)
    return 1 <= day <= _days_in_month(calendar, year, month)


def _reference_micros(fields: tuple[int, ...], offset: int, calendar: str) -> int:
    """The reference instant in microseconds since 1970 (proleptic Gregorian, UTC).

    A standard-calendar date before the reform is a Julian date; on model calendars (where
    this number is not used) the fields are read as a Gregorian date, a day past the end of
    its month rolling over.
    """
    year = _astronomical_year(fields[0], calendar)
    assert year is not None, "called after _valid_date, which rejects a year 0 the calendar lacks"
    _, month, day, hour, minute, second, micro = fields
    if calendar == "standard" and (year, month, day) < (1582, 10, 15):
        days = int(_julian_days(year, month, day)) + _JULIAN_TO_CIVIL
    else:
        days = _civil_days(year, month, day)
    clock = ((hour * 60 + minute - offset) * 60 + second) * 1_000_000 + micro
    return days * _DAY_US + clock


def parse_time_units(units: object, calendar: object = None) -> TimeUnits | None:
    """The `TimeUnits` of a CF `units` attribute, or None when it is not a readable time unit.

    None for: a non-string, no `"<unit> since <date>"` shape, months/years (no fixed length),
    `m` (metres), any unknown unit, an unknown calendar, or a malformed reference date.
    """
    if not isinstance(units, str):
        return None
    name = _canonical_calendar(calendar)
    match = _UNITS_RE.fullmatch(units)
    if name is None or match is None:
        return None
    unit = _UNIT_ALIASES.get(match.group(1).lower())
    parsed = _parse_reference(match.group(2))
    if unit is None or parsed is None or not _valid_date(parsed[0], name):
        return None
    fields, offset, nanos = parsed
    return TimeUnits(
        unit=unit,
        ref_micros=_reference_micros(fields, offset, name),
        ref_fields=fields,
        tz_offset_minutes=offset,
        calendar=name,
        units_text=units,
        ref_nanos=nanos,
    )


# The bare units xarray decodes as timedeltas (exact spellings only, as xarray: a units text
# such as "days accumulated" or "s" stays a number).
_DURATION_UNITS = ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "nanoseconds")


def parse_duration_units(units: object) -> TimeUnits | None:
    """The `TimeUnits` of a CF duration (`units` exactly one of `_DURATION_UNITS`), or None.

    The result counts from 1970-01-01 on the proleptic Gregorian calendar, so `to_micros`
    gives the duration itself in microseconds.
    """
    if not isinstance(units, str) or units not in _DURATION_UNITS:
        return None
    return TimeUnits(
        unit=units,
        ref_micros=0,
        ref_fields=(1970, 1, 1, 0, 0, 0, 0),
        tz_offset_minutes=0,
        calendar="proleptic_gregorian",
        units_text=units,
    )


def calendar_policy(tu: TimeUnits) -> Literal["decode", "if_all_real", "keep"]:
    """What to do with a time axis of this calendar.

    "decode": every value names a real date (proleptic_gregorian, noleap, standard from
    1582-10-15). "keep": a standard-calendar reference before the reform, so the axis keeps its
    numbers. "if_all_real": decode only when `names_real_dates` holds (360_day, all_leap, julian).
    """
    if tu.calendar in ("proleptic_gregorian", "noleap"):
        return "decode"
    if tu.calendar == "standard":
        year = _astronomical_year(tu.ref_fields[0], "standard")
        reformed = year is not None and (year, *tu.ref_fields[1:3]) >= (1582, 10, 15)
        return "decode" if reformed else "keep"
    return "if_all_real"


# --------------------------------------------------------------------------- conversion


def _split_int(values: np.ndarray, unit: _Unit, ref_nanos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(whole days, microseconds into the day (may reach a day), ok) of integer offsets plus
    the reference's `ref_nanos`, exactly."""
    if values.dtype.kind == "b":
        values = values.astype(np.int64)
    if unit.per_day == 0:
        limit = _DAYS_LIMIT // unit.days
        ok = values <= limit
        if values.dtype.kind == "i":
            ok &= values >= -limit
        days = np.where(ok, values, 0).astype(np.int64) * unit.days
        return days, np.zeros(values.shape, dtype=np.int64), ok
    if values.dtype.kind == "u" and values.dtype.itemsize == 8:  # may not fit in int64
        per_day = np.uint64(unit.per_day)
        days = (values // per_day).astype(np.int64)
        rest = (values % per_day).astype(np.int64)
    else:
        days, rest = np.divmod(values.astype(np.int64), unit.per_day)
    return days, _rest_micros(rest, unit, ref_nanos), np.ones(values.shape, dtype=bool)


def _rest_micros(rest: np.ndarray, unit: _Unit, ref_nanos: int) -> np.ndarray:
    """Microseconds (floored) of a count of sub-day units below one day, plus `ref_nanos`.

    Only nanoseconds (`den` 1000) can gain from `ref_nanos` (< 1000): a whole number of any
    coarser unit is whole microseconds, and adding less than one keeps its floor.
    """
    if unit.den != 1:
        return (rest + ref_nanos) // unit.den
    return rest * unit.num if unit.num != 1 else rest


def _long_divmod(whole: np.ndarray, divisor: int) -> tuple[np.ndarray, np.ndarray]:
    """Floor (quotient, remainder) of integer-valued floats with |x| < 2**96 by `divisor` < 2**47.

    Long division over 16-bit limbs, so that no intermediate leaves int64; the quotient must
    fit in int64 (the caller bounds |x| / divisor).
    """
    magnitude = np.abs(whole)
    limbs = []
    for _ in range(6):
        high = np.floor(magnitude / 65536.0)
        limbs.append((magnitude - high * 65536.0).astype(np.int64))
        magnitude = high
    quotient = np.zeros(whole.shape, dtype=np.int64)
    remainder = np.zeros(whole.shape, dtype=np.int64)
    for limb in reversed(limbs):
        remainder = remainder * 65536 + limb
        quotient = quotient * 65536 + remainder // divisor
        remainder %= divisor
    borrow = (whole < 0) & (remainder > 0)
    quotient = np.where(whole < 0, -quotient - borrow, quotient)
    return quotient, np.where(borrow, divisor - remainder, remainder)


def _float_divmod(whole: np.ndarray, divisor: int) -> tuple[np.ndarray, np.ndarray]:
    """Floor (quotient, remainder) of integer-valued floats by an integer, exactly."""
    small = np.abs(whole) < 2.0**62
    quotient, remainder = np.divmod(np.where(small, whole, 0.0).astype(np.int64), divisor)
    if not small.all():
        big = ~small
        quotient[big], remainder[big] = _long_divmod(whole[big], divisor)
    return quotient, remainder


def _split_float(values: np.ndarray, unit: _Unit, ref_nanos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(whole days, microseconds into the day (may exceed a day), ok) of float offsets plus
    the reference's `ref_nanos` (see `_rest_micros`)."""
    x = values.astype(np.float64)
    ok = np.isfinite(x)
    x[~ok] = 0.0
    whole = np.floor(x)
    fraction = x - whole  # exact, in [0, 1)
    if unit.per_day == 0:
        ok &= np.abs(whole) <= float(_DAYS_LIMIT // unit.days)
        days = np.where(ok, whole, 0.0).astype(np.int64) * unit.days
        clock = np.zeros(x.shape, dtype=np.int64)
    else:
        ok &= np.abs(whole) < float(unit.per_day) * 2.0**40
        days, rest = _float_divmod(np.where(ok, whole, 0.0), unit.per_day)
        clock = _rest_micros(rest, unit, ref_nanos)
    if unit.den == 1:  # nanosecond fractions are below a microsecond: they floor to 0
        clock += np.rint(fraction * float(unit.num)).astype(np.int64)
    return days, clock, ok


def _reference_split(tu: TimeUnits) -> tuple[int, int]:
    """(day count, microseconds into the day) of the reference, in the calendar's own count.

    Real calendars count days from 1970-01-01; model calendars from their 0000-01-01.
    """
    if tu.calendar in _REAL_CALENDARS:
        return divmod(tu.ref_micros, _DAY_US)
    year = _astronomical_year(tu.ref_fields[0], tu.calendar)
    assert year is not None, "parse_time_units rejects a year 0 the calendar lacks"
    _, month, day, hour, minute, second, micro = tu.ref_fields
    clock = ((hour * 60 + minute - tu.tz_offset_minutes) * 60 + second) * 1_000_000 + micro
    carry, clock = divmod(clock, _DAY_US)
    return _model_days(tu.calendar, year, month, day) + carry, clock


def _in_range(days: np.ndarray, clock: np.ndarray) -> np.ndarray:
    """Whether (day, clock) pairs fall inside DuckDB's TIMESTAMP range."""
    if days.size == 0 or (days.min() > _MIN_DAY and days.max() < _MAX_DAY):
        return np.ones(days.shape, dtype=bool)
    above = (days > _MIN_DAY) | ((days == _MIN_DAY) & (clock >= _MIN_TOD))
    below = (days < _MAX_DAY) | ((days == _MAX_DAY) & (clock <= _MAX_TOD))
    return above & below


def _assemble(days: np.ndarray, clock: np.ndarray, ok: np.ndarray, tu: TimeUnits) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (days, clock) from the reference to (micros since 1970, invalid).

    `clock` may exceed a day; all three arrays are fresh and are modified in place.
    """
    ref_day, ref_clock = _reference_split(tu)
    clock += ref_clock
    carry, clock = np.divmod(clock, _DAY_US)
    days += carry
    days += ref_day
    ok &= (days >= -_DAYS_LIMIT) & (days <= _DAYS_LIMIT)
    if not ok.all():
        days[~ok] = ref_day  # keeps the span of day counts (and the per-year tables) small
    if tu.calendar not in _REAL_CALENDARS:
        days, exists = _model_to_civil(days, tu.calendar)
        ok &= exists
    ok &= _in_range(days, clock)
    if tu.calendar == "standard":
        ok &= days >= _REFORM_DAY  # earlier instants are Julian dates on this calendar
    micros = days * _DAY_US  # wraps only in cells that are not ok, which are zeroed
    micros += clock
    invalid = ~ok
    if not ok.all():
        micros[invalid] = 0
    return micros, invalid


def to_micros(values: np.ndarray, tu: TimeUnits) -> tuple[np.ndarray, np.ndarray]:
    """(int64 microseconds since 1970-01-01, invalid) of CF time offsets, in `values`' shape.

    `invalid` marks cells that must be SQL NULL: NaN/inf, outside DuckDB's TIMESTAMP range,
    before 1582-10-15 on the standard calendar, or (model calendars) fields naming no real
    date. Invalid cells hold 0 in the first array.
    """
    array = np.asarray(values)
    flat = array.reshape(-1)
    unit = _UNITS[tu.unit]
    if flat.dtype.kind in "biu":
        days, clock, ok = _split_int(flat, unit, tu.ref_nanos)
    elif flat.dtype.kind == "f":
        days, clock, ok = _split_float(flat, unit, tu.ref_nanos)
    else:
        raise UnsupportedError(
            f"time values with units {tu.units_text!r} have dtype {array.dtype}, "
            "not an integer or floating type; only numbers can be decoded as CF times"
        )
    micros, invalid = _assemble(days, clock, ok, tu)
    if flat.dtype == np.int64:
        nat = flat == np.iinfo(np.int64).min
        if nat.any():
            micros[nat] = 0
            invalid |= nat
    return micros.reshape(array.shape), invalid.reshape(array.shape)


def names_real_dates(values: np.ndarray, tu: TimeUnits, *, missing: np.ndarray | None = None) -> bool:
    """Whether every value (outside `missing`, not NaN) decodes to a real date in range."""
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        return False
    _, invalid = to_micros(array, tu)
    if missing is not None:
        invalid &= ~np.broadcast_to(np.asarray(missing, dtype=bool), array.shape)
    if array.dtype.kind == "f":
        invalid &= ~np.isnan(array)
    return not bool(invalid.any())
