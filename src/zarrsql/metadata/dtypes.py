"""Zarr data types (v2 numpy strings and v3 names) parsed into one `DType` record.

The record says what kind of values an array holds and which numpy dtype its decoded chunks
have; it never decides SQL types (that is `decode/columns.py`). An unknown or unsupported type
still parses, with `kind="unsupported"` and a reason, so listings can show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Kind = Literal[
    "bool",
    "int",
    "uint",
    "float",
    "string",
    "fixed_bytes",
    "fixed_unicode",
    "datetime",
    "timedelta",
    "unsupported",
]

_V3_NAMES = {
    "bool": "|b1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
}


@dataclass(frozen=True, slots=True)
class DType:
    """An array's element type.

    `numpy` is the dtype of a decoded chunk (native byte order; `object` for variable-length
    strings); `name` is the spelling shown to users; `unit` is the datetime/timedelta unit.
    """

    name: str
    kind: Kind
    numpy: np.dtype | None
    unit: str | None = None
    reason: str | None = None

    @property
    def supported(self) -> bool:
        return self.kind != "unsupported"


def _unsupported(name: str, reason: str) -> DType:
    return DType(name=name, kind="unsupported", numpy=None, reason=reason)


def _from_numpy(name: str, dt: np.dtype) -> DType:
    """Classify a numpy dtype; `name` is kept for display."""
    native = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    if dt.fields is not None:
        return _unsupported(name, "structured (record) data types are not supported")
    code = dt.kind
    if code == "b":
        return DType(name, "bool", native)
    if code == "i":
        return DType(name, "int", native)
    if code == "u":
        return DType(name, "uint", native)
    if code == "f":
        return DType(name, "float", native)
    if code == "S":
        return DType(name, "fixed_bytes", native)
    if code == "U":
        return DType(name, "fixed_unicode", native)
    if code in ("M", "m"):
        unit, _ = np.datetime_data(dt)
        if unit == "generic":
            return _unsupported(name, "datetime64 without a unit is not supported")
        return DType(name, "datetime" if code == "M" else "timedelta", native, unit=unit)
    if code == "c":
        return _unsupported(name, "complex numbers have no SQL type")
    return _unsupported(name, f"numpy dtype {dt.str!r} is not supported")


def parse_v2_dtype(spec: object, filters: list[dict] | None) -> DType:
    """Parse a v2 `.zarray` dtype; `|O` is a string only with a vlen-utf8 filter."""
    if isinstance(spec, list):
        return _unsupported(str(spec), "structured (record) data types are not supported")
    if not isinstance(spec, str):
        return _unsupported(repr(spec), "the dtype is not a string")
    if spec == "|O":
        ids = [f.get("id") for f in filters or [] if isinstance(f, dict)]
        if "vlen-utf8" in ids:
            return DType("|O", "string", np.dtype(object))
        return _unsupported(spec, "object arrays are supported only with the vlen-utf8 filter")
    try:
        dt = np.dtype(spec)
    except (TypeError, ValueError, OverflowError):
        return _unsupported(spec, f"unknown dtype {spec!r}")
    if dt.itemsize > _MAX_ITEM_BYTES:
        return _unsupported(spec, f"dtype {spec!r} has elements of more than {_MAX_ITEM_BYTES} bytes")
    return _from_numpy(spec, dt)


def parse_v3_dtype(spec: object) -> DType:
    """Parse a v3 `data_type` (a name, or an object with `name` and `configuration`)."""
    if isinstance(spec, str):
        if spec in _V3_NAMES:
            return _from_numpy(spec, np.dtype(_V3_NAMES[spec]))
        if spec == "string":
            return DType("string", "string", np.dtype(object))
        return _unsupported(spec, f"data type {spec!r} is not supported")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        return _unsupported(repr(spec), "data_type must be a name or an object with a name")
    name, config = spec["name"], spec.get("configuration") or {}
    if not isinstance(config, dict):
        return _unsupported(name, f"data type {name!r} has a configuration that is not an object")
    if name in ("numpy.datetime64", "numpy.timedelta64"):
        return _v3_time(name, config)
    length = config.get("length_bytes")
    if name in ("fixed_length_utf32", "null_terminated_bytes"):
        if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= _MAX_ITEM_BYTES:
            return _unsupported(name, f"data type {name!r} needs a length_bytes from 0 to {_MAX_ITEM_BYTES}")
        if name == "fixed_length_utf32":
            return _from_numpy(f"{name}[{length}]", np.dtype(f"<U{length // 4}"))
        return _from_numpy(f"{name}[{length}]", np.dtype(f"|S{length}"))
    if name == "string":
        return DType("string", "string", np.dtype(object))
    return _unsupported(name, f"data type {name!r} is not supported")


#: The longest fixed-length string element accepted (numpy's own limit is 2**31 - 1).
_MAX_ITEM_BYTES = 2**30
_TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as")


def _v3_time(name: str, config: dict) -> DType:
    unit, scale = config.get("unit"), config.get("scale_factor", 1)
    if isinstance(scale, bool) or scale != 1:
        return _unsupported(name, "datetime types with a scale_factor are not supported")
    if unit not in _TIME_UNITS:
        return _unsupported(name, f"datetime unit {unit!r} is not one of {list(_TIME_UNITS)}")
    letter = "M" if name.endswith("datetime64") else "m"
    return _from_numpy(f"{name}[{unit}]", np.dtype(f"<{letter}8[{unit}]"))
