"""An engine-neutral predicate tree over dimension columns, evaluated with SQL's three values.

Leaves compare one column with constants already in the column's domain (numbers, strings,
microseconds for timestamps; None is SQL's NULL). Evaluation yields `(true, null)` boolean
arrays: a row is kept only where `true`; `null` carries SQL's unknown through NOT, AND and OR
so that `NOT (time < x)` never keeps a row whose time is NULL, and `NOT (x = NULL)` keeps no
row. Floating-point comparisons follow DuckDB: NaN equals NaN and sorts above every other
number. A tree built by hand (not by an engine's translator) is checked by `check` first.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.errors import ParameterError

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True, slots=True)
class Cmp:
    column: str
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class InSet:
    column: str
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class IsNull:
    column: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Atom:
    """A leaf whose truth the caller supplies (an engine evaluated it over the coordinate
    values of `column`'s axis); `key` tells the caller which one it is."""

    column: str
    key: int


@dataclass(frozen=True, slots=True)
class And:
    children: tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class Or:
    children: tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class Not:
    child: Predicate


Leaf = Cmp | InSet | IsNull | Atom
Predicate = Cmp | InSet | IsNull | Atom | And | Or | Not
Truth = tuple[np.ndarray, np.ndarray]


def _subtrees(p: Predicate) -> Iterator[Predicate]:
    """`p` and every predicate under it, walked with a stack: a tree nested a thousand levels
    deep (an OR chain as DuckDB builds it) is walked without Python's recursion limit."""
    pending = [p]
    while pending:
        current = pending.pop()
        yield current
        if isinstance(current, Not):
            pending.append(current.child)
        elif isinstance(current, (And, Or)):
            pending.extend(reversed(current.children))


def columns_of(p: Predicate) -> set[str]:
    return {q.column for q in _subtrees(p) if isinstance(q, (Cmp, InSet, IsNull, Atom))}


def conjoin(parts: Iterable[Predicate | None]) -> Predicate | None:
    """The AND of the given predicates (None ones skipped): None for none, a single one as is."""
    kept = [p for p in parts if p is not None]
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else And(tuple(kept))


def conjuncts(p: Predicate) -> list[Predicate]:
    """The operands of a top-level AND, flattened (a single predicate is its own list)."""
    out: list[Predicate] = []
    pending = [p]
    while pending:
        current = pending.pop()
        if isinstance(current, And):
            pending.extend(reversed(current.children))
        else:
            out.append(current)
    return out


#: What a constant compared with a column of each scalar type may be (None, SQL's NULL, always
#: may): the Python and numpy types the comparison in `compare` is exact for, as SQL means it.
_INTEGER_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
_CONSTANTS: dict[str, tuple[tuple[type, ...], str]] = {
    "bool": ((bool, np.bool_), "True or False"),
    "float32": ((int, float, np.integer, np.floating), "a number"),
    "float64": ((int, float, np.integer, np.floating), "a number"),
    "string": ((str,), "a str"),
    "timestamp_us": (
        (int, np.integer),
        "an int of microseconds since 1970-01-01 (from a datetime64: int(np.datetime64(t, 'us').astype('int64')))",
    ),
    **dict.fromkeys(_INTEGER_TYPES, ((int, np.integer), "an int")),
}
_NODES = (Cmp, InSet, IsNull, Atom, And, Or, Not)


def check(p: object, types: Mapping[str, Any]) -> None:
    """Refuse a tree that evaluation would fail on or read otherwise than SQL: a node that is
    not a predicate, an `And`/`Or` without operands, an unknown operator, a column outside
    `types` (the columns a predicate may name, with their types: `TableScan.filterable()`)
    or a constant of another type than its column's. Each error names the offending node."""
    if not isinstance(p, _NODES):
        raise ParameterError(
            f"a predicate must be a tree of zarrsql.plan.predicate nodes (Cmp, InSet, IsNull, And, Or, "
            f"Not), got {type(p).__name__} {p!r}"
        )
    for node in _subtrees(p):
        if isinstance(node, (And, Or)):
            _check_operands(node)
        elif isinstance(node, Not):
            if not isinstance(node.child, _NODES):
                raise ParameterError(f"{node!r}: its child must be a predicate node, got {type(node.child).__name__}")
        else:
            _check_leaf(node, types)


def _check_operands(node: And | Or) -> None:
    name = type(node).__name__
    if not isinstance(node.children, tuple) or not node.children:
        raise ParameterError(
            f"{node!r}: {name} needs a non-empty tuple of predicates, e.g. {name}((Cmp('x', '>', 0), Cmp('x', '<', 9)))"
        )
    for child in node.children:
        if not isinstance(child, _NODES):
            raise ParameterError(f"{node!r}: every operand must be a predicate node, got {type(child).__name__}")


def _check_leaf(leaf: Leaf, types: Mapping[str, Any]) -> None:
    if leaf.column not in types:
        raise ParameterError(
            f"{leaf!r}: a scan predicate may name dimension and coordinate columns only "
            f"({', '.join(sorted(types))}); {leaf.column!r} is not one: filter it after reading"
        )
    if isinstance(leaf, Cmp):
        if leaf.op not in _OPS:
            meant = {"==": "'='", "<>": "'!='"}.get(leaf.op)
            hint = f" (did you mean {meant}?)" if meant else ""
            raise ParameterError(f"{leaf!r}: op must be one of {', '.join(map(repr, _OPS))}{hint}")
        constants: tuple[Any, ...] = (leaf.value,)
    elif isinstance(leaf, InSet):
        if not isinstance(leaf.values, tuple):
            raise ParameterError(f"{leaf!r}: values must be a tuple of constants, e.g. InSet('x', (1.0, 2.0))")
        constants = leaf.values
    else:
        return
    expected = _CONSTANTS.get(types[leaf.column]) if isinstance(types[leaf.column], str) else None
    if expected is None:
        return  # a column type with no scalar constants to check (not one a translator pushes)
    kinds, wanted = expected
    boolean = types[leaf.column] == "bool"  # True is an int to Python, but no number to SQL
    wrong = [c for c in constants if c is not None and (not isinstance(c, kinds) or _is_bool(c) != boolean)]
    if wrong:
        raise ParameterError(
            f"{leaf!r}: {leaf.column!r} is a {types[leaf.column]} column, so its constant must be {wanted} "
            f"(or None for NULL), got {type(wrong[0]).__name__} {wrong[0]!r}"
        )


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and v != v


def compare(values: np.ndarray, op: str, v: Any) -> np.ndarray:
    """`values op v` elementwise with DuckDB's semantics (NULLs are handled by the caller)."""
    if values.dtype.kind == "f":
        vals = values.astype(np.float64, copy=False)
        nan = np.isnan(vals)
        if _is_nan(v):
            return {"=": nan, "!=": ~nan, "<": ~nan, "<=": np.ones_like(nan), ">": np.zeros_like(nan), ">=": nan}[op]
        out = _OPS[op](vals, v)
        if nan.any():
            out = out.copy()
            out[nan] = op in ("!=", ">", ">=")
        return out
    if values.dtype == object:
        return np.fromiter((v2 is not None and _OPS[op](v2, v) for v2 in values), bool, len(values))
    return np.asarray(_OPS[op](values, v), dtype=bool)


def member(values: np.ndarray, candidates: tuple[Any, ...]) -> np.ndarray:
    if values.dtype == object and candidates and all(type(c) is str for c in candidates):
        # names (cells, genes, stations): one hash lookup per value, not one pass per candidate
        wanted = frozenset(candidates)
        return np.fromiter((isinstance(v, str) and v in wanted for v in values.reshape(-1)), bool, values.size).reshape(
            values.shape
        )
    out = np.zeros(values.shape, dtype=bool)
    for c in candidates:
        out |= compare(values, "=", c)
    return out


def evaluate(p: Predicate, leaf: Callable[[Leaf], Truth]) -> Truth:
    """Three-valued evaluation of `p`, with `leaf` giving each leaf's (true, null)."""
    if isinstance(p, (Cmp, InSet, IsNull, Atom)):
        return leaf(p)
    if isinstance(p, Not):
        t, n = evaluate(p.child, leaf)
        return ~t & ~n, n
    parts = [evaluate(c, leaf) for c in p.children]
    t, n = parts[0]
    for t2, n2 in parts[1:]:
        if isinstance(p, And):
            f = (~t & ~n) | (~t2 & ~n2)
            t, n = t & t2, (n | n2) & ~f
        else:
            t, n = t | t2, (n | n2) & ~(t | t2)
    return t, n


def leaves_of(p: Predicate) -> list[Leaf]:
    """The distinct leaves of `p`, in first-seen order."""
    leaves = (q for q in _subtrees(p) if isinstance(q, (Cmp, InSet, IsNull, Atom)))
    return list(dict.fromkeys(leaves))


def leaf_truth(p: Leaf, values: np.ndarray, nulls: np.ndarray | None) -> Truth:
    """(true, null) of one leaf over a coordinate's decoded values and null mask."""
    if isinstance(p, Atom):
        raise TypeError("an Atom's truth comes from the caller, not from coordinate values")
    null = nulls if nulls is not None else np.zeros(values.shape, dtype=bool)
    if isinstance(p, IsNull):
        return (~null if p.negated else null.copy()), np.zeros_like(null)
    if isinstance(p, Cmp):
        if p.value is None:  # a comparison with NULL is unknown on every row
            return np.zeros(values.shape, dtype=bool), np.ones(values.shape, dtype=bool)
        return compare(values, p.op, p.value) & ~null, null
    known = tuple(v for v in p.values if v is not None)
    t = member(values, known) & ~null
    if len(known) < len(p.values):  # `x IN (1, NULL)`: unknown, not false, where x is not 1
        return t, ~t
    return t, null
