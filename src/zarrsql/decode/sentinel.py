"""The missing-value sentinels of a variable (CF `_FillValue`, `missing_value`, Zarr fill_value).

Rules, in order:
1. Every value of `_FillValue` and of `missing_value` (each may be one value or a list, as
   CF allows) that is readable in the array's type is a sentinel, as in xarray. When
   `_FillValue` is NaN and a `missing_value` exists, the NaN is dropped: xarray writes NaN
   there after replacing the real sentinel in memory.
2. Without any such value, the Zarr `fill_value`, unless it is zero (all its bytes zero, or
   a float -0.0, which compares equal to 0.0), so that 0 and 0.0 stay data; but a packed
   Zarr v2 variable's zero fill counts (`_packed_v2_fill`).
Boolean and string arrays never get a sentinel.

"Readable in the array's type" depends on the spelling. A JSON number is read as the array's
type would read it (an integer must be whole and in range; a float is rounded to the
array's float type, as zarr-python reads a `fill_value`, so the netCDF default
`-9.96921e36` matches float32 data). A base64 text (how xarray writes a float `_FillValue`
in Zarr v3: the 8 little-endian bytes of a float64) is an exact float64 and, as in xarray,
matches only when the array's type holds it exactly.

`_Unsigned` (the netCDF convention for unsigned data in a signed type, and the converse
`"false"`) makes the stored integers read as the other signedness of the same width
(`storage_view`); sentinels are then given in that type, a sentinel written in either
signedness being accepted.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.metadata.arrays import ArrayMeta

_NUMERIC = ("int", "uint", "float")
_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "infinity": math.inf, "-infinity": -math.inf}


@dataclass(frozen=True, slots=True)
class Sentinel:
    """Stored values meaning "missing", in the `view` type when set (see `storage_view`);
    `is_nan` adds every NaN (NaN never equals itself)."""

    values: tuple[Any, ...]
    is_nan: bool
    view: np.dtype | None = None

    def mask(self, raw: np.ndarray) -> np.ndarray:
        found = self.find(raw)
        return np.zeros(raw.shape, dtype=bool) if found is None else found

    def find(self, raw: np.ndarray) -> np.ndarray | None:
        """The mask of missing cells, or None when no cell is missing (most chunks): a NaN
        is looked for only when the chunk's maximum is NaN (NumPy's max propagates NaN, and
        costs less than building the mask)."""
        if self.view is not None and raw.dtype != self.view:
            raw = raw.view(self.view)
        hit = np.isnan(raw) if self.is_nan and has_nan(raw) else None
        for value in self.values:
            same = raw == value
            hit = same if hit is None else np.logical_or(hit, same, out=hit)
        return hit


def has_nan(values: np.ndarray) -> bool:
    """Whether a float array holds a NaN, by one reduction (its maximum is NaN exactly then)."""
    return values.dtype.kind == "f" and values.size > 0 and bool(np.isnan(values.max()))


def storage_view(array: ArrayMeta) -> np.dtype | None:
    """The integer type `_Unsigned` says the stored integers are, when it differs from theirs.

    `"true"` on a signed type gives the unsigned type of the same width, `"false"` on an
    unsigned type the signed one; anything else (other types, other values) gives None.
    """
    flag = array.attrs.get("_Unsigned")
    dt = array.dtype.numpy
    if not isinstance(flag, str) or dt is None:
        return None
    flag = flag.strip().lower()
    if flag == "true" and array.dtype.kind == "int":
        return np.dtype(f"u{dt.itemsize}")
    if flag == "false" and array.dtype.kind == "uint":
        return np.dtype(f"i{dt.itemsize}")
    return None


def _integer(value: int, dt: np.dtype, stored: np.dtype) -> Any:
    """`value` as a `dt` integer, or as a `stored` integer reinterpreted as `dt`; else None."""
    for target in (dt, stored):
        info = np.iinfo(target)
        if info.min <= value <= info.max:
            return np.array(value, dtype=target).view(dt)[()]
    return None


def _base64_float(text: str) -> float | None:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return float(np.frombuffer(raw, "<f8")[0]) if len(raw) == 8 else None


def _float(value: float, dt: np.dtype, *, exact: bool) -> Any:
    """`value` rounded to float type `dt`; None when that overflows or (`exact`) changes it."""
    with np.errstate(over="ignore"):
        cast = dt.type(value)
    if math.isnan(value):
        return cast
    if math.isinf(float(cast)) and not math.isinf(value):
        return None
    return None if exact and float(cast) != value else cast


def _one_value(value: Any, dt: np.dtype, stored: np.dtype) -> Any:
    """One attribute value as a scalar of `dt` by the module's rules, or None."""
    if isinstance(value, str):
        if dt.kind != "f":
            return None
        special = _SPECIAL.get(value.strip().lower())
        if special is not None:
            return dt.type(special)
        decoded = _base64_float(value)
        return None if decoded is None else _float(decoded, dt, exact=True)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if dt.kind == "f":
        return _float(float(value), dt, exact=False)
    if isinstance(value, float) and not value.is_integer():
        return None
    return _integer(int(value), dt, stored)


def _attr_values(value: Any, dt: np.dtype, stored: np.dtype) -> list[Any]:
    """The readable values of a `_FillValue`/`missing_value` attribute (one value or a list)."""
    items = value if isinstance(value, list) else [value]
    found = (_one_value(v, dt, stored) for v in items)
    return [v for v in found if v is not None]


def declared_fill(value: Any, dt: np.dtype) -> Any:
    """The value a `_FillValue` attribute stands for in an array of type `dt`, read by the
    rules above (a base64 double included), or None when it is not readable in that type:
    what a writer must store for a cell the reader is to mask."""
    found = _attr_values(value, dt, dt)
    return found[0] if found else None


def _is_nan(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and math.isnan(float(value))


def _zarr_fill(array: ArrayMeta, dt: np.dtype) -> list[Any]:
    """The Zarr fill_value as a sentinel (in `dt`), unless it is absent or zero, but for the
    zero of a packed Zarr v2 variable (`_packed_v2_fill`)."""
    zf = array.fill_value
    stored = array.dtype.numpy
    if zf is None or stored is None or isinstance(zf, (str, bytes)):
        return []
    value = np.asarray(zf, dtype=stored)
    zero = value.tobytes() == bytes(stored.itemsize) or (stored.kind == "f" and value == 0)
    if zero and not _packed_v2_fill(array):
        return []  # -0.0 too: it equals 0.0, so as a sentinel it would hide every real zero
    return [value.view(dt)[()]]


def _packed_v2_fill(array: ArrayMeta) -> bool:
    """Whether the v2 `fill_value` is the `_FillValue` xarray's writer chose for a packed variable.

    In Zarr v2, xarray stores a variable's `_FillValue` only as the `.zarray` fill_value (and
    reads every v2 fill_value back as `_FillValue`). A zero there is usually a default, not a
    choice (zarr-python 2 filled with 0), so it stays data, except on a variable packed by
    `scale_factor`/`add_offset`: only a CF-aware writer packs, and with `_FillValue: 0` the
    stored 0 stands for no data (read as data, it would become `add_offset`)."""
    return array.zarr_format == 2 and ("scale_factor" in array.attrs or "add_offset" in array.attrs)


def find_sentinel(array: ArrayMeta, *, zarr_fill: bool = True) -> Sentinel | None:
    """The sentinels of `array` by the rules above, None when it has none; without rule 2
    when `zarr_fill` is false (a convention whose missing values are declared otherwise)."""
    if array.dtype.kind not in _NUMERIC:
        return None  # NaT is the missing value of datetime64/timedelta64; handled when decoded
    stored = array.dtype.numpy
    if stored is None:
        return None
    view = storage_view(array)
    dt = view if view is not None else stored
    attrs = array.attrs
    fill = _attr_values(attrs["_FillValue"], dt, stored) if "_FillValue" in attrs else []
    missing = _attr_values(attrs["missing_value"], dt, stored) if "missing_value" in attrs else []
    if missing:
        fill = [v for v in fill if not _is_nan(v)]
    chosen = fill + missing or (_zarr_fill(array, dt) if zarr_fill else [])
    if not chosen:
        return None
    values = tuple(dict.fromkeys(v for v in chosen if not _is_nan(v)))
    return Sentinel(values, any(_is_nan(v) for v in chosen), view)
