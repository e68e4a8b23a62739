"""How each variable's stored values become column values: one `ColumnCodec` per variable.

The rules are small and applied in one visible order by `ColumnCodec.decode`:
0. `_Unsigned` reinterprets the stored integers as the other signedness (`storage_view`);
1. the sentinel mask, on the stored values (so a packed sentinel is compared before scaling);
2. CF packing (`scale_factor`/`add_offset` on integers, or floats → floating point, as
   xarray chooses; each attribute one number or a one-element list, as netCDF writes it);
3. CF time (numbers, unpacked first when packed, with `<unit> since <date>` units →
   microseconds since 1970), CF
   durations (numbers with a bare unit such as `hours`, as xarray writes timedeltas → exact
   microseconds, an INTERVAL), or numpy datetime64/timedelta64 → microseconds (a value
   outside DuckDB's TIMESTAMP range, or a duration whose microseconds overflow int64, is
   NULL, never wrapped), and timedelta64 in months or years → whole months;
4. strings (variable-length, fixed bytes, fixed unicode) → Python str; fixed-width ones read
   invalid UTF-8 bytes or code points that are no character as U+FFFD, never failing a scan;
5. NaN → NULL when `nan_as_null` (the default).
The result is `(values, nulls)` with `nulls` None when no cell is missing. `logical` names the
column type for the engine adapter ("float64", "timestamp_us", "string", ...); "interval_months"
is a calendar interval whose values are `INTERVAL_MONTHS` records (Arrow's month_day_nano
layout), for durations counted in months or years, which have no length in microseconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from zarrsql.decode import cftime
from zarrsql.decode.sentinel import Sentinel, find_sentinel, has_nan, storage_view
from zarrsql.errors import MetadataError
from zarrsql.metadata.arrays import ArrayMeta


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """Per-read switches: `decode_times` (CF time → TIMESTAMP, CF duration → INTERVAL),
    `nan_as_null`,
    `geometry`: "native" (GeoArrow-style nested types) or "wkb" (well-known binary BLOBs)
    for the table convention's point, linestring and polygon columns,
    `longitude`: None (as stored), 180 ([-180, 180)) or 360 ([0, 360)) for longitude
    coordinates, and `cell_bounds`: CF `bounds` of the coordinates as `<dim>_lower` /
    `<dim>_upper` columns. `zarr_fill_missing` is set by the table, not a parameter: false
    where the Zarr `fill_value` is a real value (the table convention marks missing values
    by `missing_value`, a mask or code -1 only), so it is never a NULL sentinel there."""

    decode_times: bool = True
    nan_as_null: bool = True
    geometry: str = "native"
    longitude: int | None = None
    cell_bounds: bool = False
    zarr_fill_missing: bool = True


def _packing_number(array: ArrayMeta, name: str) -> Any:
    """The value of packing attribute `name` (None when absent or null), a one-element list
    unwrapped as xarray unwraps it (netCDF attributes are arrays: converters write `[0.01]`).

    Anything else that is no number (a longer or empty list, text) is refused, as xarray
    fails to open it, rather than leaving the packed integers unscaled. A bool is returned
    as it is: the caller declines it (the stored values then equal xarray's, times 1 or 0).
    """
    value = array.attrs.get(name)
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None or isinstance(value, (int, float)):
        return value
    raise MetadataError(
        f"array '{array.path}' has {name} {array.attrs.get(name)!r}, which is not one number; CF packing "
        f"takes a number or a one-element list (as netCDF writes it), as xarray does: set {name} to one "
        "number in the array's attributes"
    )


def _packing(array: ArrayMeta) -> tuple[Any, Any, np.dtype] | None:
    """(scale, offset, float dtype) for a packed variable, following xarray's choice: an
    integer one, or a float one (xarray scales those too; the result is float64 then, as the
    JSON attributes are)."""
    attrs = array.attrs
    if array.dtype.kind not in ("int", "uint", "float") or not ("scale_factor" in attrs or "add_offset" in attrs):
        return None
    scale, offset = _packing_number(array, "scale_factor"), _packing_number(array, "add_offset")
    if isinstance(scale, bool) or isinstance(offset, bool):
        return None
    types = {np.dtype(type(v)) for v in (scale, offset) if v is not None}
    native = array.dtype.numpy
    assert native is not None, "an int, uint or float DType always has its numpy dtype"
    out: np.dtype = np.dtype(np.float64)
    if array.dtype.kind == "float":
        return scale, offset, out
    if scale is not None and offset is not None and len(types) == 1 and types <= {np.dtype(np.float32)}:
        out = np.dtype(np.float32) if native.itemsize <= 2 else out
    elif offset is None and np.dtype(type(scale)) == np.float32:
        out = np.dtype(np.float32)
    return scale, offset, out


def _logical_of(dt: np.dtype) -> str:
    if dt.kind == "b":
        return "bool"
    if dt == np.float16:
        return "float32"
    return dt.name


@dataclass(frozen=True, slots=True)
class ColumnCodec:
    """The decoding rule of one variable (see the module docstring for the order)."""

    array: ArrayMeta
    logical: str
    sentinel: Sentinel | None
    packing: tuple[Any, Any, np.dtype] | None
    time: cftime.TimeUnits | None
    nan_as_null: bool
    view: np.dtype | None = None

    def decode(self, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        if self.view is not None:
            raw = raw.view(self.view)
        nulls = self.sentinel.find(raw) if self.sentinel is not None else None
        kind = self.array.dtype.kind
        if self.packing is not None:
            values = _unpacked(raw, self.packing)
            if self.time is not None:  # a packed CF time: unpacked first, as xarray does
                values, invalid = cftime.to_micros(values, self.time)
                nulls = invalid if nulls is None else (nulls | invalid)
        elif self.time is not None:
            values, invalid = cftime.to_micros(raw, self.time)
            nulls = invalid if nulls is None else (nulls | invalid)
        elif kind in ("datetime", "timedelta"):
            values, nulls = _months(raw) if self.logical == "interval_months" else _to_micros64(raw)
        elif kind in ("fixed_bytes", "fixed_unicode", "string"):
            return _strings(raw, kind), _none_mask(raw) if kind == "string" else None
        elif raw.dtype == np.float16:
            values = raw.astype(np.float32)
        else:
            values = raw
        # a NaN sentinel has already marked every NaN of values still as stored
        nan_marked = values is raw and self.sentinel is not None and self.sentinel.is_nan
        if self.nan_as_null and not nan_marked and has_nan(values):
            nan = np.isnan(values)
            nulls = nan if nulls is None else (nulls | nan)
        if nulls is not None and not nulls.any():
            nulls = None
        return values, nulls


def _unpacked(raw: np.ndarray, packing: tuple[Any, Any, np.dtype]) -> np.ndarray:
    """`raw * scale_factor + add_offset` in the float type xarray would choose."""
    scale, offset, out = packing
    values = raw.astype(out, copy=True)
    if scale is not None:
        values *= out.type(scale) if out == np.float32 else scale
    if offset is not None:
        values += out.type(offset) if out == np.float32 else offset
    return values


_INT64 = np.iinfo(np.int64)
#: Microseconds in one of each fixed-length numpy time unit (months and years have none).
_MICROS_PER_UNIT = {
    "W": Fraction(7 * 86_400_000_000),
    "D": Fraction(86_400_000_000),
    "h": Fraction(3_600_000_000),
    "m": Fraction(60_000_000),
    "s": Fraction(1_000_000),
    "ms": Fraction(1_000),
    "us": Fraction(1),
    "ns": Fraction(1, 10**3),
    "ps": Fraction(1, 10**6),
    "fs": Fraction(1, 10**9),
    "as": Fraction(1, 10**12),
}
#: Months in one of numpy's calendar time units.
_MONTHS_PER_UNIT = {"M": 1, "Y": 12}
#: The calendar interval of Arrow (month_day_nano) and DuckDB: whole months here, days and
#: nanoseconds 0.
INTERVAL_MONTHS = np.dtype([("months", "<i4"), ("days", "<i4"), ("nanoseconds", "<i8")])


@functools.lru_cache(maxsize=64)
def _stored_range(dtype: np.dtype) -> tuple[int, int]:
    """The stored int64 values of a datetime64/timedelta64 `dtype` that convert exactly to
    microseconds a DuckDB TIMESTAMP (datetime) or INTERVAL (timedelta) can hold.

    numpy's cast to microseconds wraps silently past int64, so values outside these bounds
    must be NULL, never converted. NaT (the int64 minimum) is always outside. A time point's
    microseconds must fall in [MIN_MICROS, MAX_MICROS], a duration's anywhere in int64 but
    its minimum. A calendar unit (months, years) of a time point converts by numpy's calendar
    rules, so its bounds are the periods holding the TIMESTAMP limits; MIN_MICROS (22
    December) starts no month, so the first whole period in range is the one after.
    """
    unit, count = np.datetime_data(dtype)
    low, high = (cftime.MIN_MICROS, cftime.MAX_MICROS) if dtype.kind == "M" else (_INT64.min + 1, _INT64.max)
    if unit in _MONTHS_PER_UNIT:
        periods = np.array([low, high], dtype="M8[us]").astype(np.dtype(f"M8[{count}{unit}]")).view(np.int64)
        return int(periods[0]) + 1, int(periods[1])
    per_unit = _MICROS_PER_UNIT[unit] * count
    # numpy floors a finer unit to microseconds: stored v gives floor(v * per_unit)
    first = -((-low) // per_unit)  # the least v with v * per_unit >= low
    last = -(-(high + 1) // per_unit) - 1  # the greatest v with v * per_unit < high + 1
    return max(int(first), int(_INT64.min) + 1), min(int(last), int(_INT64.max))


@functools.lru_cache(maxsize=64)
def _cast_range(dtype: np.dtype) -> tuple[int, int]:
    """The part of `_stored_range(dtype)` that numpy's cast to microseconds converts exactly.

    numpy scales a stored v by its reduced factor num/denom as `(v * num - (denom - 1)) //
    denom` for a negative v (`v * num // denom` otherwise) in int64, wrapping silently where
    `v * num - denom + 1` or `v * num` passes int64: a nanosecond value within 999 ns above
    NaT (pandas' Timestamp.min) would read as a date in 2262. Held values outside this part go to `_exact_micros`. A
    calendar unit (months, years) is converted by numpy's calendar rules, left to numpy.
    """
    first, last = _stored_range(dtype)
    unit, count = np.datetime_data(dtype)
    if unit in _MONTHS_PER_UNIT:
        return first, last
    per_unit = _MICROS_PER_UNIT[unit] * count
    num, denom = per_unit.numerator, per_unit.denominator
    cast_first = -(-(int(_INT64.min) + denom - 1) // num)  # the least v with v * num - denom + 1 >= int64 min
    cast_last = int(_INT64.max) // num
    return max(first, cast_first), min(last, cast_last)


def _exact_micros(stored: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Microseconds of the stored counts `stored` of `dtype` (a fixed-length unit), floored
    as numpy floors, in Python integers: for the few held values near int64's ends that
    numpy's cast would wrap (see `_cast_range`)."""
    unit, count = np.datetime_data(dtype)
    per_unit = _MICROS_PER_UNIT[unit] * count
    num, denom = per_unit.numerator, per_unit.denominator
    return np.array([v * num // denom for v in stored.tolist()], dtype=np.int64)


def _time_ints(raw: np.ndarray) -> np.ndarray:
    """The stored int64 counts of a datetime64/timedelta64 array, in native byte order."""
    stored = raw.view(np.dtype(np.int64).newbyteorder(raw.dtype.byteorder))
    return stored if stored.dtype.isnative else stored.astype(np.int64)


def _to_micros64(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 microseconds, nulls) of a datetime64/timedelta64 array; NaT and values that
    cannot be held (see `_stored_range`) are NULL. In-range data costs a min and a max; held
    values numpy would wrap (see `_cast_range`) are converted exactly, one by one."""
    letter = "M" if raw.dtype.kind == "M" else "m"
    micros_type = np.dtype(f"{letter}8[us]")
    stored = _time_ints(raw)
    cast_first, cast_last = _cast_range(raw.dtype)
    # the common nanosecond or microsecond duration has no upper bound to check but int64's
    if stored.size == 0 or (stored.min() >= cast_first and (cast_last == _INT64.max or stored.max() <= cast_last)):
        return raw.astype(micros_type).view(np.int64), None
    first, last = _stored_range(raw.dtype)
    invalid = (stored < first) | (stored > last)
    uncastable = ~invalid & ((stored < cast_first) | (stored > cast_last))
    held = np.where(invalid | uncastable, 0, stored).astype(np.int64, copy=False).view(raw.dtype.newbyteorder("="))
    micros = held.astype(micros_type).view(np.int64)
    if uncastable.any():
        micros[uncastable] = _exact_micros(stored[uncastable], raw.dtype)
    return micros, invalid


def _months(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(`INTERVAL_MONTHS` records, nulls) of a timedelta64 in months or years: exact whole
    months (numpy's own cast would use an average month of 30.436875 days). NaT and counts
    beyond an int32 of months (DuckDB's INTERVAL field) are NULL."""
    unit, count = np.datetime_data(raw.dtype)
    stored = _time_ints(raw)
    per_unit = _MONTHS_PER_UNIT[unit] * count
    limit = np.iinfo(np.int32).max // per_unit
    invalid = (stored < -limit) | (stored > limit)
    records = np.zeros(stored.shape, dtype=INTERVAL_MONTHS)
    records["months"] = np.where(invalid, 0, stored * per_unit)
    return records, invalid if invalid.any() else None


def _strings(raw: np.ndarray, kind: str) -> np.ndarray:
    """Python str values; text that is not valid Unicode reads with U+FFFD in its place
    (invalid UTF-8 bytes, code points that are no character), so a scan never fails on it."""
    if kind == "fixed_bytes":
        return np.char.decode(raw, "utf-8", errors="replace").astype(object)
    if kind == "fixed_unicode":
        return _valid_code_points(raw).astype(object)
    return raw


#: Below the first surrogate every UTF-32 code unit is a character: text there needs no check.
_FIRST_SURROGATE, _LAST_SURROGATE = 0xD800, 0xDFFF
_LAST_CODE_POINT = 0x10FFFF
_REPLACEMENT_CHARACTER = 0xFFFD


def _valid_code_points(raw: np.ndarray) -> np.ndarray:
    """`raw` (fixed-width unicode, UTF-32) with each code unit that is no Unicode character
    (a surrogate, or past U+10FFFF) replaced by U+FFFD. numpy and zarr-python store those
    unchecked, but Arrow and DuckDB refuse them (a raw error, failing the whole scan). Valid
    text costs a max over the code units, and a mask if it holds characters from U+D800 on
    (private use, CJK compatibility, emoji); only an array holding invalid ones is copied."""
    if raw.size == 0 or raw.dtype.itemsize == 0:
        return raw
    codes = np.ascontiguousarray(raw).view(np.dtype(np.uint32).newbyteorder(raw.dtype.byteorder))
    if codes.max() < _FIRST_SURROGATE:
        return raw
    invalid = ((codes >= _FIRST_SURROGATE) & (codes <= _LAST_SURROGATE)) | (codes > _LAST_CODE_POINT)
    if not invalid.any():
        return raw
    replaced = codes.copy()
    replaced[invalid] = _REPLACEMENT_CHARACTER
    return replaced.view(raw.dtype).reshape(raw.shape)


def _none_mask(raw: np.ndarray) -> np.ndarray | None:
    if raw.size == 0:
        return None
    mask = np.frompyfunc(lambda v: v is None, 1, 1)(raw).astype(bool)
    return mask if mask.any() else None


def time_units_of(array: ArrayMeta) -> cftime.TimeUnits | None:
    """CF time units of a numeric variable, or None."""
    if array.dtype.kind not in ("int", "uint", "float"):
        return None
    return cftime.parse_time_units(array.attrs.get("units"), array.attrs.get("calendar"))


def duration_units_of(array: ArrayMeta) -> cftime.TimeUnits | None:
    """CF duration units (a bare time unit such as "hours") of a numeric variable, or None."""
    if array.dtype.kind not in ("int", "uint", "float"):
        return None
    return cftime.parse_duration_units(array.attrs.get("units"))


def column_codec(
    array: ArrayMeta, options: DecodeOptions, *, is_coord: bool = False, coord_values: np.ndarray | None = None
) -> ColumnCodec:
    """Choose the decoding rule of `array`.

    Time decoding follows `cftime.calendar_policy`: real-world calendars and noleap always
    decode; 360_day, all_leap and julian decode only for a coordinate whose every value is a
    real date (`coord_values` holds the raw coordinate to check); otherwise numbers stay.
    """
    sentinel = find_sentinel(array, zarr_fill=options.zarr_fill_missing)
    packing = _packing(array)
    view = storage_view(array)
    if view is not None and coord_values is not None:
        coord_values = coord_values.view(view)
    time = duration = None
    if options.decode_times:
        time = time_units_of(array)
        if time is not None:
            policy = cftime.calendar_policy(time)
            if coord_values is not None and packing is not None:
                coord_values = _unpacked(coord_values, packing)
            if policy == "keep" or (policy == "if_all_real" and not _all_real(time, sentinel, is_coord, coord_values)):
                time = None
        else:
            duration = duration_units_of(array)
    if time is not None or array.dtype.kind == "datetime":
        logical = "timestamp_us"
    elif array.dtype.kind == "timedelta" and array.dtype.unit in _MONTHS_PER_UNIT:
        logical = "interval_months"
    elif duration is not None or array.dtype.kind == "timedelta":
        logical = "duration_us"
    elif packing is not None:
        logical = packing[2].name
    elif array.dtype.kind in ("string", "fixed_bytes", "fixed_unicode"):
        logical = "string"
    else:
        native = view if view is not None else array.dtype.numpy
        assert native is not None, "unsupported dtypes never get a codec: the catalog leaves them out"
        logical = _logical_of(native)
    return ColumnCodec(array, logical, sentinel, packing, time or duration, options.nan_as_null, view)


def type_needs_values(array: ArrayMeta, options: DecodeOptions) -> bool:
    """Whether `column_codec`'s column type for coordinate `array` depends on its values: a
    CF time whose calendar decodes only when every value is a real date (the policy
    "if_all_real" above). Any other coordinate's type comes from its metadata alone."""
    if not options.decode_times:
        return False
    time = time_units_of(array)
    return time is not None and cftime.calendar_policy(time) == "if_all_real"


def _all_real(time: cftime.TimeUnits, sentinel: Sentinel | None, is_coord: bool, values: np.ndarray | None) -> bool:
    if not is_coord or values is None:
        return False
    missing = sentinel.mask(values) if sentinel is not None else None
    return cftime.names_real_dates(values, time, missing=missing)
