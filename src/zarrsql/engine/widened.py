"""Comparisons DuckDB widens: a float32 dimension compared with a DOUBLE value prunes too.

DuckDB compares a FLOAT column with a DOUBLE value (a Python float bound as a parameter,
`5e1`, `x::DOUBLE`) as `CAST(col AS DOUBLE) op value`, and pushes no such condition into a
scan: `WHERE latitude > ?` with `[50.0]` read every chunk of a float32 latitude, while
`WHERE latitude > 50.0` (a DECIMAL, which DuckDB casts to FLOAT) pruned.

So each top-level condition of that shape on a float32 dimension gets a twin in FLOAT, ANDed
beside it, which DuckDB pushes: `col op' F(value)`. F rounds the value to the nearest float32
(±inf beyond float32's range, NaN kept as NaN), and op' is `>=` for `>` and `>=`, `<=` for `<`
and `<=`, `=` for `=`. The twin holds on every row its condition holds on: a float32 above a
double x is at least the smallest float32 above x, which is at least x rounded to nearest
(and likewise below); a float32 equal to x means x is a float32, which F leaves as it is;
NaN, which DuckDB orders above every number and equal to itself, keeps its answers; and
where the condition is NULL the twin is NULL or true. So the rows are the same, and the scan
prunes on the twin. A `BETWEEN` gets one twin per side, and `col IN (...)` of constants and
parameters the twin `col IN (F(value), ...)`.

Only conditions whose value is a constant or a parameter bound to a Python float are twinned,
in statements whose `FROM` is one zarrsql table; anything else (or any error on the way)
leaves the statement as written.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zarrsql.engine.answers import _Decline
from zarrsql.engine.joins import (
    _alias,
    _conjuncts,
    _deserialize,
    _dimension_columns,
    _is_zarr,
    _select_nodes,
    _serialize,
)

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection

#: A statement worth parsing: a WHERE, and a DOUBLE written in it (`::DOUBLE`, `5e1`).
_DOUBLE_TEXT = re.compile(r"\bdouble\b|\bfloat8\b|\d[eE][+-]?\d", re.IGNORECASE)
_WHERE = re.compile(r"\bwhere\b", re.IGNORECASE)
#: The largest finite float32, as a DOUBLE literal.
_FLOAT32_MAX = "3.4028234663852886e38"
#: A comparison's operator as its twin's, by DuckDB's node type; flipped for a value on the left.
_TWIN_OP = {
    "COMPARE_GREATERTHAN": (">=", "<="),
    "COMPARE_GREATERTHANOREQUALTO": (">=", "<="),
    "COMPARE_LESSTHAN": ("<=", ">="),
    "COMPARE_LESSTHANOREQUALTO": ("<=", ">="),
    "COMPARE_EQUAL": ("=", "="),
}
#: The twin's parsed form by operator (it depends on the operator alone).
_TEMPLATES: dict[str, str] = {}
_COLUMN = "__zarrsql_twin_column"
_VALUE = "__zarrsql_twin_value"


def rewrite(conn: Connection, query: Any, args: Sequence[Any] | Mapping[str, Any] | None) -> Any:
    """`query` with FLOAT twins beside its DOUBLE comparisons on float32 dimensions, or
    `query` itself."""
    if not isinstance(query, str) or conn._state.depth or not _WHERE.search(query):
        return query
    if not (_has_float(args) or _DOUBLE_TEXT.search(query)):
        return query
    try:
        return _rewrite(conn, query, args)
    except _Decline:
        return query
    except Exception:  # the edge: whatever went wrong, the statement runs as written
        return query


def _has_float(args: Sequence[Any] | Mapping[str, Any] | None) -> bool:
    values = args.values() if isinstance(args, Mapping) else (args or ())
    return any(isinstance(v, float) for v in values)


def _rewrite(conn: Connection, query: str, args: Sequence[Any] | Mapping[str, Any] | None) -> str:
    doc = _serialize(conn, query, parameters=True)  # twins keep every parameter where it was
    changed = False
    for node in list(_select_nodes(doc["statements"][0]["node"])):
        changed |= _twin(conn, node, args)
    return _deserialize(conn, doc) if changed else query


def _twin(conn: Connection, node: dict[str, Any], args: Sequence[Any] | Mapping[str, Any] | None) -> bool:
    """Add the twins of `node`'s WHERE conditions; whether any was added."""
    table, where = node.get("from_table") or {}, node.get("where_clause")
    if where is None or table.get("type") == "JOIN":
        return False
    found = [c for cond in _conjuncts(where) for c in _comparisons(cond, args)]
    if not found or not _is_zarr(conn, table):
        return False
    alias = _alias(table)
    float32 = {name.lower() for name, logical in _dimension_columns(conn, table).items() if logical == "float32"}
    twins = [_twin_node(conn, column, op, value) for column, op, value in found if _names(column, alias) in float32]
    if not twins:
        return False
    node["where_clause"] = {
        "class": "CONJUNCTION",
        "type": "CONJUNCTION_AND",
        "alias": "",
        "query_location": where.get("query_location", 0),
        "children": [where, *twins],
    }
    return True


def _comparisons(
    cond: dict[str, Any], args: Sequence[Any] | Mapping[str, Any] | None
) -> Iterator[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(column node, twin operator, value node) of a condition that may be twinned."""
    kind = cond.get("class")
    if kind == "COMPARISON" and cond.get("type") in _TWIN_OP:
        left, right = cond["left"], cond["right"]
        ops = _TWIN_OP[cond["type"]]
        if left.get("class") == "COLUMN_REF" and _is_double(right, args):
            yield left, ops[0], right
        elif right.get("class") == "COLUMN_REF" and _is_double(left, args):
            yield right, ops[1], left
    elif kind == "BETWEEN" and cond["input"].get("class") == "COLUMN_REF":
        for bound, op in ((cond["lower"], ">="), (cond["upper"], "<=")):
            if _is_double(bound, args):
                yield cond["input"], op, bound
    elif kind == "OPERATOR" and cond.get("type") == "COMPARE_IN" and cond["children"][0].get("class") == "COLUMN_REF":
        column, *values = cond["children"]
        if any(_is_double(v, args) for v in values) and all(_is_fixed(v) for v in values):
            yield column, "IN", {"class": "LIST", "values": values}


def _is_double(value: dict[str, Any], args: Sequence[Any] | Mapping[str, Any] | None) -> bool:
    """Whether `value` is a DOUBLE the statement fixes: a parameter bound to a Python float, a
    numeric literal in scientific notation, or a cast of a constant or parameter to DOUBLE."""
    kind = value.get("class")
    if kind == "PARAMETER":
        return isinstance(_argument(value.get("identifier", ""), args), float)
    if kind == "CONSTANT":
        literal = value.get("literal") or {}
        return literal.get("kind") == "NUMERIC" and "e" in str(literal.get("text", "")).lower()
    if kind == "CAST" and not value.get("try_cast"):
        target = str((value.get("type_expr") or {}).get("type_name", "")).upper()
        child = value.get("child") or {}
        return target in ("DOUBLE", "FLOAT8") and child.get("class") in ("CONSTANT", "PARAMETER")
    return False


def _is_fixed(value: dict[str, Any]) -> bool:
    """Whether `value` is a constant or a parameter (an IN list item a twin may round)."""
    if value.get("class") == "CAST":
        value = value.get("child") or {}
    return value.get("class") in ("CONSTANT", "PARAMETER")


def _argument(identifier: str, args: Sequence[Any] | Mapping[str, Any] | None) -> Any:
    if isinstance(args, Mapping):
        return args.get(identifier)
    if args is not None and identifier.isdigit() and 0 < int(identifier) <= len(args):
        return args[int(identifier) - 1]
    return None


def _names(column: dict[str, Any], alias: str) -> str:
    """The column a reference names in a table called `alias`; '' for another table's."""
    names = column.get("column_names") or []
    if len(names) == 1:
        return str(names[0]).lower()
    if len(names) == 2 and str(names[0]).lower() == alias:
        return str(names[1]).lower()
    return ""


def _twin_node(conn: Connection, column: dict[str, Any], op: str, value: dict[str, Any]) -> dict[str, Any]:
    """`column op F(value)`, F rounding a DOUBLE to float32 (see the module docstring)."""
    x = f"CAST({_VALUE} AS DOUBLE)"
    rounded = (
        f"CAST(CASE WHEN isnan({x}) THEN {x} WHEN {x} > {_FLOAT32_MAX} THEN CAST('inf' AS DOUBLE) "
        f"WHEN {x} < -{_FLOAT32_MAX} THEN CAST('-inf' AS DOUBLE) ELSE {x} END AS FLOAT)"
    )
    if op not in _TEMPLATES:
        template = (
            f"SELECT 1 WHERE {_COLUMN} IN ({rounded})" if op == "IN" else f"SELECT 1 WHERE {_COLUMN} {op} {rounded}"
        )
        _TEMPLATES[op] = conn._con.execute("SELECT json_serialize_sql(?)", [template]).fetchall()[0][0]
    twin = json.loads(_TEMPLATES[op])["statements"][0]["node"]["where_clause"]
    if op == "IN":  # one rounded item per item of the list
        _, item = twin["children"]
        twin["children"] = [copy.deepcopy(column)] + [_substituted(item, {_VALUE: v}) for v in value["values"]]
        return twin  # type: ignore[no-any-return]
    return _substituted(twin, {_COLUMN: column, _VALUE: value})  # type: ignore[no-any-return]


def _substituted(tree: Any, nodes: dict[str, dict[str, Any]]) -> Any:
    """`tree` with each column reference named in `nodes` replaced by a copy of its node."""
    if isinstance(tree, dict):
        if tree.get("class") == "COLUMN_REF" and len(tree.get("column_names") or []) == 1:
            name = tree["column_names"][0]
            if name in nodes:
                return copy.deepcopy(nodes[name])
        return {k: _substituted(v, nodes) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_substituted(v, nodes) for v in tree]
    return tree
