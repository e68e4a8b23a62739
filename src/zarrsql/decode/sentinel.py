"""The missing-value sentinel of a variable (CF `_FillValue`, `missing_value`, Zarr fill_value).

Rules, in order: `_FillValue` when present and exactly representable in the array's type
(when it is NaN and a `missing_value` exists, `missing_value` wins: xarray writes NaN there
after replacing the real sentinel in memory); else `missing_value`; else the Zarr
`fill_value` unless all its bytes are zero (so 0 and 0.0 stay data). Boolean and string
arrays never get a sentinel. v3 stores written by xarray hold a float `_FillValue` as the
base64 text of its 8 little-endian bytes; that is decoded here.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.metadata.arrays import ArrayMeta

_NUMERIC = ("int", "uint", "float", "datetime", "timedelta")


@dataclass(frozen=True, slots=True)
class Sentinel:
    """A stored value meaning "missing"; `is_nan` sentinels match every NaN."""

    value: Any
    is_nan: bool

    def mask(self, raw: np.ndarray) -> np.ndarray:
        if self.is_nan:
            return np.isnan(raw)
        return raw == self.value


def _attr_value(value: Any, dt: np.dtype) -> Any:
    """`value` as a scalar of `dt`, or None when it is not exactly representable."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, str):
        if dt.kind == "f":
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raw = b""
            if len(raw) == 8:
                return dt.type(np.frombuffer(raw, "<f8")[0])
            special = {
                "nan": math.nan,
                "inf": math.inf,
                "-inf": -math.inf,
                "infinity": math.inf,
                "-infinity": -math.inf,
            }
            if value.strip().lower() in special:
                return dt.type(special[value.strip().lower()])
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        if dt.kind in "iu":
            if isinstance(value, float) and not value.is_integer():
                return None
            info = np.iinfo(dt)
            return dt.type(int(value)) if info.min <= int(value) <= info.max else None
        if dt.kind == "f":
            cast = dt.type(value)
            return cast if math.isnan(value) or float(cast) == float(value) else None
    except (OverflowError, ValueError):
        return None
    return None


def _is_nan(value: Any) -> bool:
    return isinstance(value, (float, np.floating)) and math.isnan(float(value))


def find_sentinel(array: ArrayMeta) -> Sentinel | None:
    """The sentinel of `array` by the rules above, None when it has none."""
    kind = array.dtype.kind
    if kind not in _NUMERIC:
        return None
    dt = array.dtype.numpy
    if kind in ("datetime", "timedelta"):
        return None  # NaT is their missing value; handled when they are decoded
    attrs = array.attrs
    fill = _attr_value(attrs["_FillValue"], dt) if "_FillValue" in attrs else None
    missing = _attr_value(attrs["missing_value"], dt) if "missing_value" in attrs else None
    if fill is not None and _is_nan(fill) and missing is not None:
        fill = missing
    chosen = fill if fill is not None else missing
    if chosen is None:
        zf = array.fill_value
        if zf is not None and np.asarray(zf, dtype=dt).tobytes() != bytes(dt.itemsize):
            chosen = dt.type(zf)
    if chosen is None:
        return None
    return Sentinel(chosen, _is_nan(chosen))
