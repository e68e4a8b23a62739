"""DuckDB's pushed predicate nodes (`duckdb._sources.nodes`) to the core's predicate tree.

Only what the scan applies exactly as DuckDB would is translated: comparisons, IN, IS [NOT]
NULL, NOT, AND and OR over dimension columns, with constants of exactly the column's type.
Anything else raises `Untranslatable`, the source declines it, and DuckDB applies it.

DuckDB hands a chain `a OR b OR c ...` over nested one level per term (a join's keys are a
thousand of them), so a chain of one operator is flattened without recursion into one `Or`
(or `And`) of all its terms; what still nests deeper than `MAX_DEPTH` is declined, so every
walk over the translated tree stays far from Python's recursion limit.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Or, Predicate

SQL_TYPES = {
    "bool": "BOOLEAN",
    "int8": "TINYINT",
    "int16": "SMALLINT",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "uint8": "UTINYINT",
    "uint16": "USMALLINT",
    "uint32": "UINTEGER",
    "uint64": "UBIGINT",
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "string": "VARCHAR",
    "timestamp_us": "TIMESTAMP",
}
_EPOCH = _dt.datetime(1970, 1, 1)

#: The deepest nesting of NOT and of alternating AND / OR a translated predicate may have.
#: Chains of one operator are flattened and do not count; the core walks the tree recursively
#: (about three frames a level), so 100 levels stay well inside Python's limit of 1,000.
MAX_DEPTH = 100


class Untranslatable(ValueError):
    """A predicate the scan cannot apply exactly."""


def _micros(value: _dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _literal(node: Any, logical: str) -> Any:
    from duckdb._sources import nodes

    if not isinstance(node, nodes.Lit) or node.type != SQL_TYPES.get(logical) or not nodes.exact_value(node):
        raise Untranslatable("constant of another type")
    if logical == "timestamp_us":
        assert isinstance(node.value, _dt.datetime), "exact_value admits only a naive datetime as a TIMESTAMP"
        return _micros(node.value)
    return node.value


def _column(node: Any, dims: Mapping[str, str]) -> tuple[str, str]:
    from duckdb._sources import nodes

    if not isinstance(node, nodes.Col) or len(node.parts) != 1 or node.parts[0] not in dims:
        raise Untranslatable("not a dimension column")
    name = node.parts[0]
    return name, dims[name]


def translate(node: Any, dims: Mapping[str, str]) -> Predicate:
    """Translate one pushed node; `dims` maps dimension column names to logical types."""
    return _translate(node, dims, 0)


def _translate(node: Any, dims: Mapping[str, str], depth: int) -> Predicate:
    from duckdb._sources import nodes

    if depth > MAX_DEPTH:
        raise Untranslatable("nested too deeply")
    if isinstance(node, nodes.Binary):
        op = node.op.upper()
        if op in ("AND", "OR"):
            parts = tuple(_translate(term, dims, depth + 1) for term in _chain(node, op))
            return And(parts) if op == "AND" else Or(parts)
        if op not in ("=", "!=", "<", "<=", ">", ">="):
            raise Untranslatable(op)
        name, logical = _column(node.left, dims)
        return Cmp(name, op, _literal(node.right, logical))
    if isinstance(node, nodes.Unary) and node.op.upper() == "NOT":
        return Not(_translate(node.operand, dims, depth + 1))
    if isinstance(node, nodes.Postfix) and node.op.upper() in ("IS NULL", "IS NOT NULL"):
        name, _ = _column(node.operand, dims)
        return IsNull(name, negated=node.op.upper() == "IS NOT NULL")
    if isinstance(node, nodes.In):
        name, logical = _column(node.operand, dims)
        return InSet(name, tuple(_literal(v, logical) for v in node.values))
    raise Untranslatable(type(node).__name__)


def _chain(node: Any, op: str) -> list[Any]:
    """The terms of the chain of `op` (AND or OR) rooted at `node`, left to right, however
    deeply DuckDB nested it: found with a stack, not by recursion."""
    from duckdb._sources import nodes

    terms, pending = [], [node]
    while pending:
        current = pending.pop()
        if isinstance(current, nodes.Binary) and current.op.upper() == op:
            pending.extend((current.right, current.left))
        else:
            terms.append(current)
    return terms
