"""How each variable's stored values become column values: one `ColumnCodec` per variable.

The rules are small and applied in one visible order by `ColumnCodec.decode`:
0. `_Unsigned` reinterprets the stored integers as the other signedness (`storage_view`);
1. the sentinel mask, on the stored values (so a packed sentinel is compared before scaling);
2. CF packing (`scale_factor`/`add_offset` on integers, or floats → floating point, as
   xarray chooses);
3. CF time (numbers, unpacked first when packed, with `<unit> since <date>` units →
   microseconds since 1970), CF
   durations (numbers with a bare unit such as `hours`, as xarray writes timedeltas → exact
   microseconds, an INTERVAL), or numpy datetime64/timedelta64 → microseconds;
4. strings (variable-length, fixed bytes, fixed unicode) → Python str;
5. NaN → NULL when `nan_as_null` (the default).
The result is `(values, nulls)` with `nulls` None when no cell is missing. `logical` names the
column type for the engine adapter ("float64", "timestamp_us", "string", ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.decode import cftime
from zarrsql.decode.sentinel import Sentinel, find_sentinel, has_nan, storage_view
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


def _packing(array: ArrayMeta) -> tuple[Any, Any, np.dtype] | None:
    """(scale, offset, float dtype) for a packed variable, following xarray's choice: an
    integer one, or a float one (xarray scales those too; the result is float64 then, as the
    JSON attributes are)."""
    attrs = array.attrs
    if array.dtype.kind not in ("int", "uint", "float") or not ("scale_factor" in attrs or "add_offset" in attrs):
        return None
    scale, offset = attrs.get("scale_factor"), attrs.get("add_offset")
    for v in (scale, offset):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
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
            values, nat = _to_micros64(raw)
            nulls = nat if nat.any() else None
        elif kind in ("fixed_bytes", "fixed_unicode", "string"):
            return _strings(raw, kind), _none_mask(raw) if kind == "string" else None
        elif raw.dtype == np.float16:
            values = raw.astype(np.float32)
        else:
            values = raw
        if self.nan_as_null and has_nan(values):
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


def _to_micros64(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nat = np.isnat(raw)
    letter = "M" if raw.dtype.kind == "M" else "m"
    micros = raw.astype(f"{letter}8[us]").view(np.int64)
    return micros, nat


def _strings(raw: np.ndarray, kind: str) -> np.ndarray:
    if kind == "fixed_bytes":
        return np.char.decode(raw, "utf-8", errors="replace").astype(object)
    if kind == "fixed_unicode":
        return raw.astype(object)
    return raw


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
