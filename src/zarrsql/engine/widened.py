"""Comparisons DuckDB widens: a float32 or TIMESTAMP dimension compared with a value of a wider
type prunes too.

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

A TIMESTAMP dimension compared with a TIMESTAMPTZ value (`now() - INTERVAL 7 DAY`, a
TIMESTAMPTZ literal, a Python datetime with a tzinfo) or a TIMESTAMP_NS one is compared the
same way, `CAST(time AS TIMESTAMPTZ) op value`, and gets a twin in TIMESTAMP. For TIMESTAMPTZ
the cast reads the naive time t in the session's TimeZone: it is the instant t - o for one of
the zone's UTC offsets o, and ICU keeps every offset within a day. So with u the value's UTC
wall time (`timezone('UTC', value)`, the same in every session zone), t - o >= u gives
t > u - 1 day, and t - o <= u gives t < u + 1 day, whatever the zone, its DST folds and gaps:
the twin is `time >= u - 1 day` for `>` and `>=`, `time <= u + 1 day` for `<` and `<=`, both
for `=`. For TIMESTAMP_NS the twin is exact: `>` and `<=` compare with the value floored to a
microsecond, `>=` and `<` with it ceiled, `=` with both. A TIMESTAMPTZ bound outside the years
1 to 9999 (beyond them DuckDB hands a Python scan no constant anyway) or NULL becomes
±infinity, which every time satisfies: a twin never overflows where its condition computes
(and a twin casts its value to the value's type, so a NULL parameter binds too). `IN` gets an
`OR` of the `=` twins of its items, and a `BETWEEN` or `IN` is twinned only when all its
values have one such type (or are NULL), so that DuckDB compares them all in that type.

A float32 twin may also stand for an OR: the OR of its branches' twins, when every branch has
one (a comparison of a dimension with a constant, pushed as it is, is its own twin there), and
`NOT (x < v)` is twinned as `x >= v` (NaN sorts above every number, so the order is total).

Only conditions whose value is a constant or a parameter bound to a Python float are twinned
for float32; for times, the value may be any expression of constants, parameters and
functions that give one value per statement (`now()`, `current_timestamp`, interval
arithmetic, casts), and DuckDB, asked for its type, must call it TIMESTAMPTZ or TIMESTAMP_NS.
Either applies in statements whose `FROM` is one zarrsql table; anything else (or any error on
the way) leaves the statement as written, except a store that fails to open, whose error is the
statement's own (`answers.bind`: running it as written would open the store, and fail, again).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zarrsql.engine import parsetree
from zarrsql.engine.answers import Raised
from zarrsql.engine.joins import (
    _dimension_columns,
    _is_zarr,
    _select_nodes,
)
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.time_bounds import BOUNDS

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection

_Args = Sequence[Any] | Mapping[str, Any] | None
#: (column node, operator as if the column were on the left, value nodes, the condition's other values).
_Found = tuple[dict[str, Any], str, list[dict[str, Any]], list[dict[str, Any]]]

#: A statement worth parsing: a WHERE, and a DOUBLE written in it (`::DOUBLE`, `5e1`).
_DOUBLE_TEXT = re.compile(r"\bdouble\b|\bfloat8\b|\d[eE][+-]?\d", re.IGNORECASE)
#: ... or something that gives a TIMESTAMPTZ or a TIMESTAMP_NS.
_TIME_TEXT = re.compile(
    r"timestamptz|time\s+zone|timestamp_ns|current_timestamp|\bnow\s*\(|transaction_timestamp|"
    r"to_timestamp|make_timestamp",
    re.IGNORECASE,
)
_WHERE = re.compile(r"\bwhere\b", re.IGNORECASE)
#: The largest finite float32, as a DOUBLE literal.
_FLOAT32_MAX = "3.4028234663852886e38"
#: A comparison's operator by DuckDB's node type, and as seen from the other side.
_OPS = {
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_EQUAL": "=",
}
_FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "=": "="}
#: A float32 twin's operator by its condition's.
_FLOAT_OP = {">": ">=", ">=": ">=", "<": "<=", "<=": "<=", "=": "=", "IN": "IN"}
_ZONED, _NANOS, _NULL = "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS", {'"NULL"', "NULL"}
#: A time condition's twin, by the value's type and the condition's operator: (operator, bound) pairs, ANDed.
_TIME_TWINS = {
    _ZONED: {
        ">": ((">=", "low"),),
        ">=": ((">=", "low"),),
        "<": (("<=", "high"),),
        "<=": (("<=", "high"),),
        "=": ((">=", "low"), ("<=", "high")),
    },
    _NANOS: {
        ">": ((">", "floor"),),
        ">=": ((">=", "ceil"),),
        "<": (("<", "ceil"),),
        "<=": (("<=", "floor"),),
        "=": ((">=", "ceil"), ("<=", "floor")),
    },
}
#: Functions that give one value wherever a statement calls them with the same arguments
#: (the clock ones give the transaction's start), so a twin computes what its condition does.
_STEADY = frozenset(
    {
        *("now", "get_current_timestamp", "transaction_timestamp", "current_timestamp", "timezone"),
        *("to_timestamp", "make_timestamp", "make_timestamptz", "make_timestamp_ns", "date_trunc", "trunc"),
        *("+", "-", "*", "to_years", "to_months", "to_weeks", "to_days", "to_hours", "to_minutes"),
        *("to_seconds", "to_milliseconds", "to_microseconds"),
    }
)
#: The twins' parsed forms (they depend on the operator and bound alone).
_TEMPLATES: dict[tuple[str, str], str] = {}
_COLUMN = "__zarrsql_twin_column"
_VALUE = "__zarrsql_twin_value"


def rewrite(conn: Connection, query: Any, args: _Args) -> Any:
    """`query` with twins that prune beside its comparisons of float32 dimensions with DOUBLE
    values and of TIMESTAMP dimensions with TIMESTAMPTZ or TIMESTAMP_NS ones, or `query` itself."""
    if not isinstance(query, str) or conn._state.depth or not _WHERE.search(query):
        return query
    if not (_has_float(args) or _has_zoned(args) or _DOUBLE_TEXT.search(query) or _TIME_TEXT.search(query)):
        return query
    try:
        return _rewrite(conn, query, args)
    except Decline:
        return query
    except Raised as failed:  # a store of the statement failed to open (`answers.bind`)
        if failed.met_as_written(query):
            raise failed.error.with_traceback(None) from None
        return query
    except Exception:  # the edge: whatever went wrong, the statement runs as written
        return query


def _values(args: _Args) -> Iterator[Any]:
    yield from args.values() if isinstance(args, Mapping) else (args or ())


def _has_float(args: _Args) -> bool:
    return any(isinstance(v, float) for v in _values(args))


def _has_zoned(args: _Args) -> bool:
    return any(isinstance(v, dt.datetime) and v.utcoffset() is not None for v in _values(args))


def _rewrite(conn: Connection, query: str, args: _Args) -> str:
    doc = parsetree.serialize(conn._con, query, parameters=True)  # twins keep every parameter where it was
    parameters = list({str(p.get("identifier")): p for p in _parameters(doc)}.values())
    changed = False
    for node in list(_select_nodes(doc["statements"][0]["node"])):
        changed |= _twin(conn, node, args, parameters)
    return parsetree.deserialize(conn._con, doc) if changed else query


def _twin(conn: Connection, node: dict[str, Any], args: _Args, parameters: list[dict[str, Any]]) -> bool:
    """Add the twins of `node`'s WHERE conditions; whether any was added."""
    table, where = node.get("from_table") or {}, node.get("where_clause")
    if where is None or table.get("type") == "JOIN":
        return False
    conditions = parsetree.conjuncts(where)
    doubled = [cond for cond in conditions if _any_double(cond, args)]
    times = [c for cond in conditions for c in _comparisons(cond, _is_steady, _is_steady)]
    if not (doubled or times) or not _is_zarr(conn, table):
        return False
    alias, dims = parsetree.alias(table), _dimension_columns(conn, table)
    float32 = {name.lower() for name, logical in dims.items() if logical == "float32"}
    kinds = {name.lower(): logical for name, logical in dims.items()}
    twins = [t for cond in doubled for t in _float_twins(conn, cond, args, alias, float32, {*kinds})]
    times = [c for c in times if kinds.get(_names(c[0], alias)) == "timestamp_us"]
    if times:
        twins += _time_twins(conn, table, times, args, parameters)
    if not twins:
        return False
    node["where_clause"] = _joined("CONJUNCTION_AND", [where, *twins], where.get("query_location", 0))
    return True


#: A comparison's type under NOT: DuckDB orders NaN above every number, so the order is total
#: and NOT (x < v) holds exactly where x >= v does (NULL where it is NULL).
_COMPLEMENT = {
    "COMPARE_LESSTHAN": "COMPARE_GREATERTHANOREQUALTO",
    "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHAN",
    "COMPARE_GREATERTHAN": "COMPARE_LESSTHANOREQUALTO",
    "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHAN",
}


def _any_double(cond: Any, args: _Args) -> bool:
    """Whether a DOUBLE the statement fixes appears anywhere in `cond` (worth a closer look)."""
    if isinstance(cond, dict):
        return _is_double(cond, args) or any(_any_double(v, args) for v in cond.values())
    return isinstance(cond, list) and any(_any_double(v, args) for v in cond)


def _float_twins(
    conn: Connection,
    cond: dict[str, Any],
    args: _Args,
    alias: str,
    float32: set[str],
    dims: set[str],
    *,
    branch: bool = False,
) -> list[dict[str, Any]]:
    """FLOAT twins that hold wherever `cond` does: one per comparison of a float32 dimension
    with a DOUBLE; for `NOT (x < v)`, the twin of `x >= v`; for an OR, the OR of its branches'
    twins (ANDed within a branch), when every branch has one (else none: a branch without a
    twin may hold anywhere). Within a branch, a comparison of a dimension with constants that
    DuckDB pushes as it is (`lat = 58.5`) is its own twin."""
    if cond.get("class") == "CONJUNCTION" and cond.get("type") == "CONJUNCTION_OR":
        branches = []
        for part in cond["children"]:
            twins = [
                t
                for c in parsetree.conjuncts(part)
                for t in _float_twins(conn, c, args, alias, float32, dims, branch=True)
            ]
            if not twins:
                return []
            branches.append(twins[0] if len(twins) == 1 else _joined("CONJUNCTION_AND", twins, 0))
        return [_joined("CONJUNCTION_OR", branches, 0)]
    if cond.get("class") == "OPERATOR" and cond.get("type") == "OPERATOR_NOT" and len(cond["children"]) == 1:
        inner = cond["children"][0]
        if inner.get("class") != "COMPARISON" or inner.get("type") not in _COMPLEMENT:
            return []
        cond = {**inner, "type": _COMPLEMENT[inner["type"]]}
    twins = [
        _float_twin(conn, column, _FLOAT_OP[op], values)
        for column, op, values, _ in _comparisons(cond, lambda v: _is_double(v, args), _is_fixed)
        if _names(column, alias) in float32
    ]
    if twins or not branch:
        return twins
    as_is = list(_comparisons(cond, lambda v: v.get("class") == "CONSTANT", _is_fixed))
    if as_is and all(_names(column, alias) in dims for column, *_ in as_is):
        return [copy.deepcopy(cond)]
    return []


def _comparisons(
    cond: dict[str, Any],
    wanted: Callable[[dict[str, Any]], bool],
    fixed: Callable[[dict[str, Any]], bool],
) -> Iterator[_Found]:
    """The comparisons of a column with a `wanted` value in a condition, BETWEEN one per side;
    an IN list when one of its items is `wanted` and all are `fixed`."""
    kind = cond.get("class")
    if kind == "COMPARISON" and cond.get("type") in _OPS:
        left, right, op = cond["left"], cond["right"], _OPS[cond["type"]]
        if left.get("class") == "COLUMN_REF" and wanted(right):
            yield left, op, [right], []
        elif right.get("class") == "COLUMN_REF" and wanted(left):
            yield right, _FLIPPED[op], [left], []
    elif kind == "BETWEEN" and cond["input"].get("class") == "COLUMN_REF":
        lower, upper = cond["lower"], cond["upper"]
        for bound, op, other in ((lower, ">=", upper), (upper, "<=", lower)):
            if wanted(bound):
                yield cond["input"], op, [bound], [other]
    elif kind == "OPERATOR" and cond.get("type") == "COMPARE_IN" and cond["children"][0].get("class") == "COLUMN_REF":
        column, *values = cond["children"]
        if any(wanted(v) for v in values) and all(fixed(v) for v in values):
            yield column, "IN", values, []


def _is_double(value: dict[str, Any], args: _Args) -> bool:
    """Whether `value` is a DOUBLE the statement fixes: a parameter bound to a Python float, a
    numeric literal in scientific notation, or a cast of a constant or parameter to DOUBLE."""
    kind = value.get("class")
    if kind == "PARAMETER":
        return isinstance(_argument(value.get("identifier", ""), args), float)
    if kind == "CONSTANT":
        written = parsetree.constant(value)
        return written is not None and written.double
    if kind == "CAST" and not value.get("try_cast"):
        target = _cast_target(value)
        child = value.get("child") or {}
        return target in ("DOUBLE", "FLOAT8") and child.get("class") in ("CONSTANT", "PARAMETER")
    return False


def _cast_target(cast: dict[str, Any]) -> str:
    """The upper-case name of the type a serialized CAST casts to: DuckDB 2 spells it as a
    `type_expr` with a `type_name`, 1.5 as a `cast_type` with an `id`."""
    if "type_expr" in cast:
        return str((cast.get("type_expr") or {}).get("type_name", "")).upper()
    return str((cast.get("cast_type") or {}).get("id", "")).upper()


def _is_fixed(value: dict[str, Any]) -> bool:
    """Whether `value` is a constant or a parameter (an IN list item a twin may round)."""
    if value.get("class") == "CAST":
        value = value.get("child") or {}
    return value.get("class") in ("CONSTANT", "PARAMETER")


def _is_steady(value: dict[str, Any]) -> bool:
    """Whether `value` has one value wherever the statement computes it: constants, parameters,
    casts and `_STEADY` functions of those (a twin computes it a second time)."""
    kind = value.get("class")
    if kind in ("CONSTANT", "PARAMETER"):
        return True
    if kind == "CAST":
        return _is_steady(value.get("child") or {})
    if kind == "COLUMN_REF":  # DuckDB reads `current_timestamp` as a column if the table has one
        return [str(n).lower() for n in value.get("column_names") or []] == ["current_timestamp"]
    if kind != "FUNCTION" or value.get("schema") or value.get("catalog") or value.get("distinct"):
        return False
    if value.get("filter") is not None or str(value.get("function_name", "")).lower() not in _STEADY:
        return False
    return all(_is_steady(a) for a in _arguments(value))


def _arguments(function: dict[str, Any]) -> list[dict[str, Any]]:
    """A function node's arguments (DuckDB 2 wraps each in `{name, expression}`, 1.5 does not)."""
    if "arguments" in function:
        return [a.get("expression") or {} for a in function["arguments"]]
    return list(function.get("children") or [])


def _parameters(tree: Any) -> Iterator[dict[str, Any]]:
    if isinstance(tree, dict):
        if tree.get("class") == "PARAMETER":
            yield tree
        for value in tree.values():
            yield from _parameters(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _parameters(value)


def _argument(identifier: str, args: _Args) -> Any:
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


def _float_twin(conn: Connection, column: dict[str, Any], op: str, values: list[dict[str, Any]]) -> dict[str, Any]:
    """`column op F(value)`, F rounding a DOUBLE to float32 (see the module docstring)."""
    x = f"CAST({_VALUE} AS DOUBLE)"
    rounded = (
        f"CAST(CASE WHEN isnan({x}) THEN {x} WHEN {x} > {_FLOAT32_MAX} THEN CAST('inf' AS DOUBLE) "
        f"WHEN {x} < -{_FLOAT32_MAX} THEN CAST('-inf' AS DOUBLE) ELSE {x} END AS FLOAT)"
    )
    twin = _template(conn, ("float", op), f"{_COLUMN} IN ({rounded})" if op == "IN" else f"{_COLUMN} {op} {rounded}")
    if op == "IN":  # one rounded item per item of the list
        _, item = twin["children"]
        twin["children"] = [copy.deepcopy(column)] + [_substituted(item, {_VALUE: v}) for v in values]
        return twin
    return _substituted(twin, {_COLUMN: column, _VALUE: values[0]})  # type: ignore[no-any-return]


def _time_twins(
    conn: Connection, table: dict[str, Any], found: list[_Found], args: _Args, parameters: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The TIMESTAMP twins of the time comparisons `found` whose values DuckDB types as
    TIMESTAMPTZ or TIMESTAMP_NS (all of one of these, or NULL, in a BETWEEN or an IN)."""
    probed = [v for _, _, values, others in found for v in (*values, *others)]
    types = iter(_types(conn, table, probed, args, parameters))
    twins = []
    for column, op, values, others in found:
        value_types = [next(types) for _ in values]
        kinds = {t for t in (*value_types, *(next(types) for _ in others)) if t not in _NULL}
        kind = kinds.pop() if len(kinds) == 1 else ""
        if kind not in _TIME_TWINS:
            continue
        if op != "IN":
            if value_types[0] == kind:  # a NULL side of a BETWEEN gets no twin
                twins.append(_time_twin(conn, column, _TIME_TWINS[kind][op], values[0]))
            continue
        equal = _TIME_TWINS[kind]["="]
        items = [_time_twin(conn, column, equal, v) for v, t in zip(values, value_types, strict=True) if t == kind]
        twins.append(_joined("CONJUNCTION_OR", items, 0) if len(items) > 1 else items[0])
    return twins


def _types(
    conn: Connection, table: dict[str, Any], values: list[dict[str, Any]], args: _Args, parameters: list[dict[str, Any]]
) -> list[str]:
    """DuckDB's types of `values`, bound as in the statement: selected from its table (where
    `current_timestamp` may be a column) with every parameter of the statement beside them."""
    doc = parsetree.serialize(conn._con, "SELECT 1 FROM t")
    node = doc["statements"][0]["node"]
    node["select_list"] = [
        dict(copy.deepcopy(v), alias=f"__zarrsql_v{i}") for i, v in enumerate([*values, *parameters])
    ]
    node["from_table"] = copy.deepcopy(table)
    probe = "DESCRIBE " + parsetree.deserialize(conn._con, doc)
    rows = conn._run(probe, conn._con.execute, probe, args if parameters else None).fetchall()
    return [str(row[1]) for row in rows[: len(values)]]


def _time_twin(
    conn: Connection, column: dict[str, Any], sides: tuple[tuple[str, str], ...], value: dict[str, Any]
) -> dict[str, Any]:
    """`column op bound(value)` for each (op, bound) of `sides`, ANDed."""
    parts = [
        _substituted(
            _template(conn, (op, bound), f"{_COLUMN} {op} {BOUNDS[bound].format(v=_VALUE)}"),
            {_COLUMN: column, _VALUE: value},
        )
        for op, bound in sides
    ]
    return _joined("CONJUNCTION_AND", parts, 0) if len(parts) > 1 else parts[0]  # type: ignore[no-any-return]


def _template(conn: Connection, key: tuple[str, str], condition: str) -> dict[str, Any]:
    """A fresh copy of the parsed `condition`, parsed once per `key`."""
    if key not in _TEMPLATES:
        (parsed,) = conn._con.execute("SELECT json_serialize_sql(?)", [f"SELECT 1 WHERE {condition}"]).fetchone() or (
            "",
        )
        _TEMPLATES[key] = parsed
    return json.loads(_TEMPLATES[key])["statements"][0]["node"]["where_clause"]  # type: ignore[no-any-return]


def _joined(conjunction: str, children: list[dict[str, Any]], location: int) -> dict[str, Any]:
    return {"class": "CONJUNCTION", "type": conjunction, "alias": "", "query_location": location, "children": children}


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
