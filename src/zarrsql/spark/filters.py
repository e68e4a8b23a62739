"""Spark's pushed filters (`pyspark.sql.datasource.Filter`) to the core's predicate tree.

Two translations. `exact` accepts a filter only when the scan applies it row by row exactly
as Spark would, since Spark then drops it from its plan: comparisons, IN, IS [NOT] NULL,
null-safe equality and NOT over dimension columns, with a constant of the column's own kind
(a datetime for a time column, a string for a string column, ...). The core's comparisons
follow the same rules as Spark's (NaN equals NaN and sorts above every number; strings
compare by code point, which is UTF-8 byte order). `pruning` gives, for some filters the
scan cannot apply exactly (a LIKE prefix), a weaker predicate that every row the filter
keeps satisfies: it is safe to prune with, and Spark still applies the filter itself.
Every other filter raises `Untranslatable`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from pyspark.sql import datasource as ds

from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Predicate

_EPOCH = _dt.datetime(1970, 1, 1)
#: Integers a float64 holds exactly: a larger one compared with a float column is declined.
_FLOAT_EXACT = 2**53
_OPS: dict[type, str] = {
    ds.EqualTo: "=",
    ds.GreaterThan: ">",
    ds.GreaterThanOrEqual: ">=",
    ds.LessThan: "<",
    ds.LessThanOrEqual: "<=",
}
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")


class Untranslatable(ValueError):
    """A filter the scan cannot apply (exactly, for `exact`; at all, for `pruning`)."""


def _micros(value: _dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _constant(value: Any, logical: str) -> Any:
    """`value` in the column's domain, or `Untranslatable` when it is of another kind."""
    if logical == "bool" and isinstance(value, bool):
        return value
    if isinstance(value, bool) or value is None:
        raise Untranslatable("a boolean or NULL constant for a column of another type")
    if logical in _INTEGERS and isinstance(value, int):
        return value
    exact_float = isinstance(value, float) or (isinstance(value, int) and abs(value) < _FLOAT_EXACT)
    if logical in ("float32", "float64") and exact_float:
        return value
    if logical == "string" and isinstance(value, str):
        return value
    if logical == "timestamp_us" and isinstance(value, _dt.datetime) and value.tzinfo is None:
        return _micros(value)
    raise Untranslatable(f"a constant {value!r} for a {logical} column")


def _column(f: Any, dims: Mapping[str, str]) -> tuple[str, str]:
    path = f.attribute
    if len(path) != 1 or path[0] not in dims:
        raise Untranslatable("not a dimension column")
    return path[0], dims[path[0]]


def exact(f: ds.Filter, dims: Mapping[str, str]) -> Predicate:
    """The predicate the scan applies exactly for `f`; `dims` maps filterable columns
    (dimensions and derived coordinates) to their logical types."""
    op = _OPS.get(type(f))
    if op is not None:
        name, logical = _column(f, dims)
        return Cmp(name, op, _constant(f.value, logical))  # type: ignore[attr-defined]
    if isinstance(f, ds.EqualNullSafe):
        name, logical = _column(f, dims)
        if f.value is None:
            return IsNull(name)
        # never NULL: false (not unknown) where the column is NULL, so NOT keeps those rows
        return And((IsNull(name, negated=True), Cmp(name, "=", _constant(f.value, logical))))
    if isinstance(f, ds.In):
        name, logical = _column(f, dims)
        if not f.value:
            raise Untranslatable("an empty IN list")
        return InSet(name, tuple(_constant(v, logical) for v in f.value))
    if isinstance(f, (ds.IsNull, ds.IsNotNull)):
        name, _ = _column(f, dims)
        return IsNull(name, negated=isinstance(f, ds.IsNotNull))
    if isinstance(f, ds.Not):
        return Not(exact(f.child, dims))
    raise Untranslatable(type(f).__name__)


def pruning(f: ds.Filter, dims: Mapping[str, str]) -> Predicate:
    """A predicate implied by `f`, to prune with while Spark applies `f` itself."""
    if isinstance(f, ds.StringStartsWith):
        name, logical = _column(f, dims)
        if logical != "string" or not f.value:
            raise Untranslatable("a prefix of a column that is not a string")
        low = Cmp(name, ">=", f.value)
        last = ord(f.value[-1])
        if last >= 0x10FFFF:
            return low
        # every string starting with the prefix sorts below the prefix with its last
        # character incremented
        return And((low, Cmp(name, "<", f.value[:-1] + chr(last + 1))))
    raise Untranslatable(type(f).__name__)
