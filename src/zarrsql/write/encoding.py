"""How a column is stored in a grid store, the way xarray writes (and reads back) it.

Floats keep their dtype with NaN as fill value (`_FillValue` NaN, as xarray records it);
integers and booleans keep theirs when every cell has a value and become float64 with NaN
otherwise (as `to_xarray` does); times are int64 counts of `<unit> since 1970-01-01` with
calendar `proleptic_gregorian`, NaT stored as the int64 minimum (which xarray reads as NaT),
also the array's fill value so a chunk never written reads as NaT; text is Zarr's
variable-length UTF-8 and must have no missing cell (an empty string would read back in its
place). Every array is compressed with zstd.

An append writes into arrays as another writer stored them (`grid_append`): CF-packed ones
(`scale_factor` / `add_offset`) get their values packed as xarray packs them, code =
(value - add_offset) / scale_factor, rounded for an integer dtype, NULL as `_FillValue`; a
time axis stored as float counts of `<unit> since <origin>` gets float counts. Whatever the
stored dtype cannot hold is refused, never wrapped or made infinite by numpy's cast: a time
count outside an integer dtype's range (2100 as seconds since 2000 in int32), a NaT where an
integer array has no code for it (neither a `_FillValue` nor int64's NaT), a finite number
beyond a narrower float's range (1e300 into float32). So is a time 'infinity' (DuckDB's
largest count), new store or append: no datetime64 holds it.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.errors import AppendSchemaError, UnwritableColumnError, WriteError

__all__ = ["ArraySpec", "missing_text_error", "spec_for", "time_unit"]

NAT = np.iinfo(np.int64).min
#: DuckDB's count of a time 'infinity' (its negation: '-infinity'), in any unit.
_INFINITE = np.iinfo(np.int64).max
#: Units a time coordinate is written in, coarsest first: the first that holds every value
#: exactly is used, as xarray does, so `days since ...` for daily data.
_UNITS = (("days", "D"), ("hours", "h"), ("minutes", "m"), ("seconds", "s"), ("milliseconds", "ms"),
          ("microseconds", "us"), ("nanoseconds", "ns"))  # fmt: skip


#: Nanoseconds in one of each numpy time unit used here.
def _whole_micros(origin: np.datetime64 | None) -> bool:
    """Whether a time origin is a whole number of microseconds (then counts work in them)."""
    if origin is None or np.datetime_data(origin.dtype)[0] not in ("ps", "fs", "as", "ns"):
        return True
    return int(origin.astype("datetime64[ns]").astype(np.int64)) % 1000 == 0


_NS = {"D": 86_400 * 10**9, "h": 3_600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
#: zstd level: 3 is zstd's own default, a good speed/size balance for numeric arrays.
ZSTD_LEVEL = 3


@dataclass(frozen=True)
class ArraySpec:
    """One array to create: stored dtype, fill value, attributes and the kind of its values."""

    name: str
    kind: str  # float, int, bool, time, string (as the relation holds it)
    dtype: np.dtype[Any] | str
    fill_value: Any
    attributes: dict[str, Any]
    time_code: str | None = None  # numpy unit of a time array
    time_origin: np.datetime64 | None = None  # the `since` of its units (None: 1970-01-01)
    packing: tuple[float, float] | None = None  # CF (scale_factor, add_offset) of a packed array

    @property
    def packed(self) -> bool:
        return self.packing is not None

    @property
    def promoted(self) -> bool:
        return self.kind in ("int", "bool") and np.dtype(self.dtype).kind == "f" and not self.packed

    def encode(self, data: np.ndarray, nulls: np.ndarray | None) -> np.ndarray:
        """Values of the relation's kind as the stored dtype (NULLs as the fill value)."""
        if self.kind == "time":
            return self._encode_time(data)
        if self.packing is not None:
            return self._pack(data, nulls, *self.packing)
        if self.promoted:
            out = data.astype(np.float64)
            if nulls is not None:
                out[nulls] = np.nan
            return self._narrow_floats(out, data)  # an integer beyond float16's range too
        if self.kind == "string":
            return np.asarray(data, dtype=object)
        if np.dtype(self.dtype).kind == "f":
            return self._narrow_floats(data, data)
        return data

    def _narrow_floats(self, floats: np.ndarray, given: np.ndarray, packed: str = "") -> np.ndarray:
        """`floats` in the stored float dtype, refused when a finite one becomes infinite there
        (numpy would store inf and warn). `given` are the relation's values, named in the refusal;
        an infinity or NaN they hold is kept as it is."""
        stored = np.dtype(self.dtype)
        if floats.dtype == stored:
            return floats
        with np.errstate(over="ignore"):
            out = floats.astype(stored)
        grown = np.isinf(out) & np.isfinite(floats)
        if grown.any():
            bad = given[np.argmax(grown)]
            limit = np.finfo(stored).max
            raise AppendSchemaError(
                f"column '{self.name}' has the value {bad}{packed}, beyond the largest value ({limit:g}) of the "
                f"store's {stored} array '{self.name}', where it would become infinite; filter or clip the "
                "values, or write a new store"
            )
        return out

    def _pack(self, data: np.ndarray, nulls: np.ndarray | None, scale: float, offset: float) -> np.ndarray:
        """Values as CF codes, as xarray packs them: (value - offset) / scale, rounded half to
        even into an integer dtype; NULL (and NaN, into integers) as the fill value. A code the
        integer dtype cannot hold is refused: numpy would wrap it."""
        stored = np.dtype(self.dtype)
        codes = (data.astype(np.float64) - offset) / scale
        missing = np.zeros(codes.shape, dtype=bool) if nulls is None else nulls.copy()
        if stored.kind == "f":
            codes[missing] = np.nan
            return self._narrow_floats(codes, data, f" (packed code (value - {offset}) / {scale})")
        codes = np.around(codes)
        missing |= np.isnan(codes)
        if missing.any() and self.fill_value is None:
            raise AppendSchemaError(
                f"column '{self.name}' has a NULL, which the packed {stored} array '{self.name}' cannot mark (it "
                "has no _FillValue); COALESCE it to a value, or write a new store"
            )
        info = np.iinfo(stored)
        outside = ~missing & ((codes < info.min) | (codes > info.max))
        if outside.any():
            bad = data[np.argmax(outside)]
            raise AppendSchemaError(
                f"column '{self.name}' has the value {bad}, whose packed code (value - {offset}) / {scale} the "
                f"store's {stored} array '{self.name}' cannot hold (its range is {info.min} to {info.max}); filter "
                "or clip the values, or write a new store"
            )
        codes[missing] = 0
        out = codes.astype(stored)
        out[missing] = self.fill_value
        return out

    def _encode_time(self, data: np.ndarray) -> np.ndarray:
        """Counts of the unit since the origin; a value the unit cannot hold exactly is refused
        (it would be truncated), unless the counts are floats (NaT as NaN). An integer count
        outside the stored dtype's range, or a NaT the array has no code for, is refused too: the
        cast into the stored dtype would wrap it (2100-01-01 as int32 seconds since 2000 would
        read back as 1963)."""
        stored = np.dtype(self.dtype)
        self._check_finite(data)
        finite = ~np.isnat(data)
        # counted in microseconds (int64: 292,000 years each way, so "days since 0001-01-01"
        # fits) unless the unit or the origin is finer; nanoseconds span only 1677-2262
        res = "us" if _NS[self.time_code or "us"] % 1000 == 0 and _whole_micros(self.time_origin) else "ns"
        step = _NS[self.time_code or "us"] // (1000 if res == "us" else 1)
        if res == "us" and data.dtype == np.dtype("datetime64[ns]"):
            finer = finite & (data.view(np.int64) % 1000 != 0)
            if finer.any():
                raise self._time_inexact(data[np.argmax(finer)])
        unit = np.dtype(f"datetime64[{res}]")
        raw = data.astype(unit).view(np.int64)
        start = np.int64(0 if self.time_origin is None else self.time_origin.astype(unit).astype(np.int64))
        with np.errstate(over="ignore"):
            delta = np.where(finite, raw, start) - start
        # the distance to the origin must itself fit int64 (292 years of nanoseconds): it wrapped
        # when raw and origin differ in sign and the difference's sign is not raw's
        far = finite & (((raw ^ start) & (raw ^ delta)) < 0)
        if far.any():
            span = "292" if res == "ns" else "292,000"
            raise self._time_refused(data[np.argmax(far)], f"more than {span} years from the origin")
        if stored.kind == "f":
            fractional = delta.astype(np.float64) / step
            fractional[~finite] = np.nan
            return fractional.astype(stored)
        if (delta[finite] % step).any():
            raise self._time_inexact(data[finite][np.argmax(delta[finite] % step != 0)])
        counts = delta // step
        info = np.iinfo(stored)
        outside = finite & ((counts < info.min) | (counts > info.max))
        if outside.any():
            at = int(np.argmax(outside))
            raise self._time_refused(data[at], f"{counts[at]}, outside {stored}'s range ({info.min} to {info.max})")
        nat = self._missing_time()
        if nat is None and not finite.all():
            raise AppendSchemaError(
                f"time column '{self.name}' has a NULL (NaT), which the store's {stored} time array '{self.name}' "
                "cannot mark (it has no _FillValue, and only int64 has a NaT code); COALESCE it to a time, or "
                "write a new store"
            )
        counts[~finite] = 0 if nat is None else nat
        return counts.astype(stored)

    def _check_finite(self, data: np.ndarray) -> None:
        """Refuse a TIMESTAMP_NS 'infinity' or '-infinity' (DuckDB's largest count, negated or
        not): as nanoseconds it is a valid datetime64, 2262-04-11 (other units' infinities are
        refused earlier, beyond datetime64[ns]'s years), which a reader would take for a date."""
        counts = data.view(np.int64)
        infinite = (counts == _INFINITE) | (counts == -_INFINITE)
        if infinite.any():
            value = "infinity" if counts[np.argmax(infinite)] > 0 else "-infinity"
            raise WriteError(
                f"column '{self.name}' holds the time '{value}', which a grid store cannot hold (a datetime64 array "
                f'has no infinite time); filter such rows out (WHERE isfinite("{self.name}")) or CAST the column '
                "to text"
            )

    def _time_inexact(self, value: np.datetime64) -> WriteError:
        """The refusal of a time the array's unit cannot hold exactly (it would be truncated)."""
        units = self.attributes.get("units")
        return WriteError(
            f"time column '{self.name}' has the value {value}, which the array's units '{units}' cannot hold "
            "exactly; round it (date_trunc) or write to a new store"
        )

    def _time_refused(self, value: np.datetime64, count: str) -> AppendSchemaError:
        """The refusal of a time whose count the stored array cannot hold (`count` says why)."""
        units = self.attributes.get("units")
        return AppendSchemaError(
            f"time column '{self.name}' has the value {value}, whose count of '{units}' is {count}: the store's "
            f"{np.dtype(self.dtype)} array '{self.name}' cannot hold it; filter such times out, or write them to a "
            "new store (zarrsql writes int64 counts)"
        )

    def _missing_time(self) -> Any:
        """What a NaT (a NULL, or a cell no row fills) is stored as in a time array: NaN in a
        float one; in an integer one its fill value (what xarray masks: `_FillValue`), else
        int64's minimum in an int64 array (xarray reads it as NaT whatever the attributes say);
        None when the array has no code for it."""
        stored = np.dtype(self.dtype)
        if stored.kind == "f":
            return np.nan
        if self.fill_value is not None:
            return self.fill_value
        return NAT if stored == np.dtype(np.int64) else None

    def empty(self, shape: tuple[int, ...]) -> np.ndarray:
        """A chunk buffer holding only the fill value."""
        if self.kind == "string":
            return np.full(shape, "", dtype=object)
        fill = self._missing_time() if self.kind == "time" else self.fill_value
        return np.full(shape, 0 if fill is None else fill, dtype=self.dtype)


def time_unit(values: np.ndarray) -> tuple[str, str]:
    """The coarsest CF unit (name, numpy code) holding every datetime64 value exactly."""
    finite = values[~np.isnat(values)].astype("datetime64[ns]").view(np.int64)
    for name, code in _UNITS:
        step = _NS[code]
        if not len(finite) or not (finite % step).any():
            return name, code
    return "nanoseconds", "ns"


def _float_fill(dtype: np.dtype[Any], zarr_format: int) -> dict[str, Any]:
    """The `_FillValue` attribute xarray writes for a float array (v3: NaN as a little-endian
    double in base64, whatever the float's width; v2 keeps it in the array's fill_value)."""
    if zarr_format == 2:
        return {}
    return {"_FillValue": base64.standard_b64encode(struct.pack("<d", float("nan"))).decode()}


def spec_for(
    name: str, kind: str, dtype: np.dtype[Any] | None, *, complete: bool, zarr_format: int, time_code: str | None
) -> ArraySpec:
    """The array for a column; `complete` says every cell gets a non-NULL value."""
    if kind == "float":
        assert dtype is not None
        return ArraySpec(name, kind, dtype, np.nan, _float_fill(dtype, zarr_format))
    if kind in ("int", "bool"):
        assert dtype is not None
        if complete:  # v2: no fill value, as xarray reads a v2 fill value as `_FillValue` (a mask)
            return ArraySpec(name, kind, dtype, None if zarr_format == 2 else (False if kind == "bool" else 0), {})
        f8 = np.dtype(np.float64)
        return ArraySpec(name, kind, f8, np.nan, _float_fill(f8, zarr_format))
    if kind == "time":
        code = time_code or "us"
        unit = dict((c, n) for n, c in _UNITS)[code]
        attrs = {"units": f"{unit} since 1970-01-01", "calendar": "proleptic_gregorian"}
        return ArraySpec(name, kind, np.dtype(np.int64), NAT, attrs, code)
    if not complete:
        raise missing_text_error(name)
    # v2: no fill value, as xarray writes text: xarray reads a v2 fill value "" as `_FillValue`,
    # so an empty string would come back as NaN
    return ArraySpec(name, kind, "str", None if zarr_format == 2 else "", {})


def missing_text_error(name: str) -> UnwritableColumnError:
    """The refusal of text with a missing cell, for a new grid store and an append alike."""
    return UnwritableColumnError(
        f"text column '{name}' would have missing cells (the grid has holes or the column is NULL), which a "
        "Zarr text array cannot mark; COALESCE it to a value of your choice, or write with layout='table'"
    )
