"""`bounds := [[dimension, low, high], ...]`: inclusive coordinate ranges as predicates.

Each entry becomes `low <= dim AND dim <= high` (NULL leaves an end open) and joins the
same pruning as a pushed WHERE. An end is text or a number; it is read as DuckDB reads a
constant compared with the column: in the coordinate's own type, so on a float32 (FLOAT)
coordinate it is rounded to the nearest float32 first, and `bounds` selects exactly the
rows of `WHERE dim BETWEEN low AND high`. Refused rather than answered approximately:
positional, string and duration (INTERVAL) dimensions, unknown dimensions, unparseable
values, low above high, and (for integer and time coordinates) any endpoint or coordinate
value of magnitude 2^53 or more, which a 64-bit float cannot hold exactly.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from zarrsql.errors import ParameterError
from zarrsql.plan.predicate import Cmp, Predicate, conjoin
from zarrsql.plan.units import DimValues

_TIME = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?)?\s*$")
_LIMIT = 2**53
_EPOCH = _dt.datetime(1970, 1, 1)


def parse_time(text: str) -> int:
    """`YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]` as microseconds since 1970-01-01."""
    m = _TIME.match(text)
    if not m:
        raise ValueError(text)
    y, mo, d, h, mi, s, frac = m.groups()
    moment = _dt.datetime(
        int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), int((frac or "0").ljust(6, "0"))
    )
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _entries(bounds: Any) -> list[list[Any]]:
    if not isinstance(bounds, list) or not all(isinstance(b, list) for b in bounds):
        raise ParameterError(
            "bounds := must be a list of [dimension, low, high] lists, e.g. "
            "[['lat', '-30', '30'], ['time', '2020-01-01', NULL]]"
        )
    for b in bounds:
        if len(b) != 3 or not isinstance(b[0], str) or not all(_is_end(v) for v in b[1:]):
            raise ParameterError(f"bounds := entry {b!r} must be [dimension, low, high] with strings, numbers or NULL")
    return [[b[0], *(_text(v) for v in b[1:])] for b in bounds]


def _is_end(value: Any) -> bool:
    return value is None or isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _text(value: Any) -> str | None:
    """An end as text: a number (from the Python API or a STRUCT) by its shortest spelling."""
    return value if value is None or isinstance(value, str) else repr(value)


def nearest_float32(text: str) -> float:
    """The float32 nearest to the decimal `text` (ties to even), as a Python float.

    Rounding through float64 can differ from rounding the decimal once when the float64 lands
    exactly halfway between two float32 values; that tie is settled on the decimal itself.
    Beyond float32's range the float64 value is kept (it compares as the number it is).
    """
    wide = float(text)
    with np.errstate(over="ignore"):
        near = np.float32(wide)
    if math.isinf(near) and not math.isinf(wide):
        return wide
    if float(near) == wide or math.isnan(wide):
        return float(near)
    other = np.nextafter(near, np.float32(math.copysign(math.inf, wide - float(near))))
    middle = (float(near) + float(other)) / 2  # exact: float32 values have 24-bit mantissas
    if middle != wide:
        return float(near)
    exact = decimal.Decimal(text.strip())
    if exact == decimal.Decimal(middle):
        return float(near)  # a true tie: numpy rounded it to even
    above = exact > decimal.Decimal(middle)
    return float(max(near, other) if above else min(near, other))


def _parse_end(text: str, logical: str, dim: str) -> Any:
    try:
        if logical == "timestamp_us":
            return parse_time(text)
        if logical.startswith(("int", "uint")):
            try:
                return int(text)
            except ValueError:
                pass
        if logical == "float32":
            return nearest_float32(text)
        value: Any = float(text)
        if logical.startswith(("int", "uint")) and value.is_integer():
            value = int(value)
        return value
    except ValueError as err:
        kind = "a time (YYYY-MM-DD[ HH:MM[:SS[.ffffff]]])" if logical == "timestamp_us" else "a number"
        raise ParameterError(f"bounds := value {text!r} for dimension '{dim}' is not {kind}") from err


def _check_exact(d: DimValues, logical: str, ends: list[Any]) -> None:
    if logical == "timestamp_us" or logical.startswith(("int", "uint")):
        vals = d.values if d.nulls is None else d.values[~d.nulls]
        big = any(abs(e) >= _LIMIT for e in ends if e is not None)
        if big or (vals.size and max(abs(int(vals.min())), abs(int(vals.max()))) >= _LIMIT):
            raise ParameterError(
                f"bounds := on dimension '{d.name}' is refused: its values reach 2^53 or more, which "
                "bounds compares inexactly; filter this dimension with WHERE instead"
            )


def bounds_predicate(
    bounds: Any, dims: Sequence[DimValues], logical: Sequence[str], positional: Sequence[bool]
) -> Predicate | None:
    """The predicate of a `bounds :=` argument over a table's dimensions."""
    parts: list[Predicate] = []
    names = [d.name for d in dims]
    for dim, low, high in _entries(bounds):
        if dim not in names:
            raise ParameterError(
                f"bounds := names dimension '{dim}', which the table does not have; its dimensions: {names}"
            )
        k = names.index(dim)
        if positional[k] or logical[k] in ("string", "duration_us", "interval_months"):
            duration = "a duration (INTERVAL) dimension"
            kind = {"string": "a string dimension", "duration_us": duration, "interval_months": duration}.get(
                logical[k], "positional (no coordinate array)"
            )
            kind = "positional (no coordinate array)" if positional[k] else kind
            raise ParameterError(f"bounds := cannot bound '{dim}': it is {kind}; filter it with WHERE instead")
        lo = None if low is None else _parse_end(low, logical[k], dim)
        hi = None if high is None else _parse_end(high, logical[k], dim)
        _check_exact(dims[k], logical[k], [lo, hi])
        if lo is not None and hi is not None and lo > hi:
            raise ParameterError(f"bounds := for '{dim}': low {low!r} is above high {high!r}")
        if logical[k] in ("float32", "float64"):
            lo = None if lo is None else float(lo)
            hi = None if hi is None else float(hi)
        if lo is not None:
            parts.append(Cmp(dim, ">=", lo))
        if hi is not None:
            parts.append(Cmp(dim, "<=", hi))
    return conjoin(parts)
