"""GROUP BY on coordinates, computed by the scan: the engine receives one row per group.

A dense table has one row per cell, so `SELECT latitude, avg(t2m) ... GROUP BY latitude`
hands DuckDB tens of millions of rows to hash into 121 groups, which costs it more than
decoding the chunks does. When the statement has this shape:

    SELECT <items> FROM <one zarrsql table> [AS a] [WHERE <conditions>]
    [GROUP BY <keys> | GROUP BY ALL] [HAVING ...] [ORDER BY ...] [LIMIT ...]

where every group key reads the coordinates of one axis (`latitude`, `month(time)`), the
WHERE is an AND of conditions that each read one axis, and every aggregate is `count(*)` or
`count`, `sum`, `avg`/`mean`, `min` or `max` of a data variable (optionally times a float
factor of one axis: `sum(t2m * cos(radians(latitude)))`) or of an expression of one axis'
coordinates, the groups of cells are products of position sets per axis, and
`scan.aggregate.reduce_groups` computes the data aggregates with numpy while it decodes.

1. DuckDB parses the statement (`json_serialize_sql`) and binds it (`DESCRIBE`, which also
   registers the scan): its result's names and types.
2. Per axis, DuckDB evaluates the keys, the conditions, the factors and the aggregates of
   coordinate expressions over that axis' coordinate columns (the Arrow columns the scan
   itself would produce, so types, NULLs and NaN behave as in the full statement), grouping
   the axis' kept positions by their keys.
3. The scan reduces the data aggregates over the product groups; the result, one row per
   group (its key values as DuckDB computed them), is registered as an Arrow table.
4. The statement is rewritten over that table: aggregates and keys become its columns, the
   HAVING a WHERE, ORDER BY and LIMIT kept, every item keeping its name. It must bind to the
   same names and types as the original, or the original runs as written.

Anything else (another aggregate, a condition on a data variable, a sparse table, grouping
sets, a window, a key, condition or factor on a positional dimension of more than
`MAX_POSITIONS_HELD` positions, an error while planning) leaves the statement as it was; a
chunk that fails to read, a coordinate's included, is the statement's error (it would read the
chunk again: `answers.statement_reads`). Floating-point
sums are added in another order than DuckDB's (which varies with its threads too), so they
may differ from it in the last bits. The result is computed when the statement is prepared:
`con.sql(...)` returns a relation over it, which can be fetched again for as long as it
lives (it holds the result), and `execute()` runs the statement over the result registered
on the connection, where the oldest results are dropped beyond `MAX_RESULTS_KEPT` results or
`MAX_BYTES_KEPT` bytes.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from zarrsql.engine import parsetree
from zarrsql.engine.answers import (
    HAS_SOURCES,
    Raised,
    _axes_of,
    _axis_table,
    _check_from,
    _columns,
    _has_nan,
    _precheck,
    _split,
    _unqualified,
    bound_scan,
    rendered,
    rewritten_or_same,
    statement_reads,
)
from zarrsql.engine.duckdb_version import MAJOR
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.sqltext import AGGREGATE_CALL, quote_ident, quote_text
from zarrsql.expand.arrow import to_arrow, to_numpy
from zarrsql.expand.columns import Column
from zarrsql.plan.positions import Positions
from zarrsql.plan.predicate import And, Atom
from zarrsql.scan import TableScan
from zarrsql.scan.aggregate import AxisGroups, Reduced, Reduction, Weight, reduce_groups
from zarrsql.settings import get_option

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection

#: The aggregates computed here, by DuckDB's function name.
_AGGREGATES = {
    "count_star": "count",
    "count": "count",
    "sum": "sum",
    "avg": "avg",
    "mean": "avg",
    "min": "min",
    "max": "max",
}
#: Functions a statement's items may apply to keys and aggregates (DuckDB evaluates them over
#: the result): scalar built-ins. An aggregate or window function there would see the groups
#: as rows, so anything not listed leaves the statement as it was.
_SCALARS = frozenset(
    {
        "+", "-", "*", "/", "//", "%", "**", "^", "abs", "round", "round_even", "floor", "ceil", "ceiling",
        "trunc", "sign", "sqrt", "cbrt", "ln", "log", "log10", "log2", "exp", "pow", "power", "cos", "sin",
        "tan", "acos", "asin", "atan", "atan2", "radians", "degrees", "pi", "greatest", "least", "isnan",
        "isinf", "isfinite", "nullif", "ifnull", "coalesce", "if", "concat", "lower", "upper", "year",
        "month", "day", "hour", "minute", "second", "dayofweek", "dayofyear", "week", "quarter", "epoch",
        "date_part", "datepart", "date_trunc", "datetrunc", "strftime", "length", "substr", "substring",
        "||", "to_timestamp", "make_date", "make_timestamp", "date_diff", "datediff", "date_add", "date_sub",
        "to_days", "to_hours", "to_minutes", "to_seconds", "prefix", "suffix", "starts_with", "contains",
        "~~", "!~~", "like", "ilike", "not_like", "not_ilike", "glob", "regexp_matches",
    }
)  # fmt: skip
#: Expression classes a rewritten item may hold (FUNCTION is checked against `_SCALARS`).
_CLASSES = frozenset(
    {"COLUMN_REF", "CONSTANT", "FUNCTION", "OPERATOR", "CAST", "COMPARISON", "CONJUNCTION", "BETWEEN", "CASE", "TYPE"}
)
#: Rows a scan must produce (at most, by `_rows_at_most`) for its aggregates to be computed
#: here: below it, DuckDB aggregates them in less time than this module's own statements take.
MIN_ROWS = 1 << 20
#: Groups at most: a result this large is barely smaller than the rows DuckDB would hash.
MAX_GROUPS = 1 << 22
#: Results kept registered per connection, for relations fetched later (see the docstring).
MAX_RESULTS_KEPT = 64
MAX_BYTES_KEPT = 512 << 20
#: DuckDB 2's `relation.query()` binds over the relation itself, not a view (`_relation`).
_OWN_QUERY = MAJOR >= 2
#: Logical types whose sums the scan adds in int64 without overflow on any table it accepts.
_SMALL_INTEGERS = frozenset({"int8", "int16", "int32", "uint8", "uint16", "uint32"})
_FLOATS = frozenset({"float32", "float64"})
_ORDERED = _FLOATS | _SMALL_INTEGERS | {"int64", "uint64", "timestamp_us", "duration_us"}
_KEY_PREFIX, _VALUE_PREFIX = "__zarrsql_k", "__zarrsql_v"


def rewrite(conn: Connection, query: Any, has_args: bool) -> Any:
    """The statement to run for `query`: over its groups computed by the scan when it has
    the shape of the module docstring, else `query` itself."""
    if not get_option("scan_aggregates"):
        return query
    return rewritten_or_same(conn, query, has_args, AGGREGATE_CALL, _rewrite, "aggregate not computed by the scan")


@dataclass
class _Aggregate:
    """One distinct aggregate of the statement: `kind` (count, sum, avg, min, max) of a data
    column (`column`, times `weight`, an expression of `axis`), or of an expression of
    `axis` alone (`expr`), or `count(*)` (neither)."""

    kind: str
    column: Column | None = None
    weight: dict[str, Any] | None = None
    expr: dict[str, Any] | None = None
    axis: int | None = None
    name: str = ""


@dataclass
class _Key:
    """One group key: an expression of one axis' coordinates (`node`, its column references
    naming the table's columns; `text`, its canonical form, what equal expressions share)."""

    node: dict[str, Any]
    text: str
    axis: int
    name: str = ""


@dataclass
class _Shape:
    """What the statement asks, resolved against the table."""

    keys: list[_Key] = field(default_factory=list)
    aggregates: list[_Aggregate] = field(default_factory=list)
    atoms: list[dict[str, Any]] = field(default_factory=list)


def _rewrite(conn: Connection, query: str) -> str:
    con = conn._con
    node = parsetree.select_node(con, query)
    _check_node(node)
    table = node["from_table"]
    _precheck(con, table)  # binding may perform actions (zarr_unmount): only bind a read
    names, types, scan = _bound(conn, query)
    _check_from(con, table)  # again: binding created the view of a 'x.zarr' string
    if not scan.rows_are_cells or scan.base_predicate is not None:
        raise Decline("not a table of cells, or bounds :=")
    by_name = _columns(scan)
    alias = (table.get("alias") or (table.get("table_name") if table.get("type") == "BASE_TABLE" else "")).lower()
    _check_aliases(node, by_name)
    shape = _Shape()
    for key in _key_nodes(node, by_name, alias):
        axes = _axes_of(key, by_name, alias)
        if len(axes) != 1:
            raise Decline("a group key that reads no axis, or several")
        text = json.dumps(_canonical(key, by_name, alias), sort_keys=True)
        shape.keys.append(_Key(_unqualified(key, by_name, alias), text, axes.pop(), f"{_KEY_PREFIX}{len(shape.keys)}"))
    where = node.get("where_clause")
    if where is not None:
        _conditions(where, by_name, alias, shape.atoms)
    if _rows_at_most(scan, shape.atoms, by_name) < MIN_ROWS:
        raise Decline("a scan small enough for DuckDB to aggregate")
    rewritten = _substituted(conn, node, names, shape, scan, by_name, alias)
    if not shape.aggregates and not shape.keys:
        raise Decline("no aggregate and no GROUP BY")
    name = "__zarrsql_grouped_" + uuid.uuid4().hex[:16]
    # one round trip renders every expression DuckDB evaluates per axis, and the statement
    nodes = _axis_nodes(shape)
    *texts, statement = rendered(conn, nodes, _over_result(conn, query, rewritten, name))
    by_node = dict(zip((_node_key(n) for n in nodes), texts, strict=True))
    result = _compute(conn, scan, shape, _axes(conn, scan, shape, by_node))
    return _finish(conn, statement, name, result, names, types)


def _bound(conn: Connection, query: str) -> tuple[list[str], list[str], TableScan]:
    """Bind the statement as a relation (registering its scan): its result's names and types,
    and the table it reads. The relation is kept for the connection, which runs it as it is
    when the statement is not rewritten (`Connection.prepared`): a statement this module
    declines costs no second binding."""
    try:
        relation = conn._run(query, conn._con.sql, query)
    except Exception as err:  # the statement's own error: running it again would only meet it again
        raise Raised(err) from None
    conn._state.prepared = (query, conn._state.generation, relation)
    names = [str(c) for c in relation.columns]
    types = [str(t).upper() for t in relation.types]
    return names, types, bound_scan(conn)


def _check_node(node: dict[str, Any]) -> None:
    """Decline a statement beyond one SELECT with groups, ORDER BY, LIMIT and DISTINCT."""
    if node.get("type") != "SELECT_NODE" or (node.get("cte_map") or {}).get("map"):
        raise Decline("not a plain SELECT")
    if (
        node.get("sample")
        or node.get("qualify")
        or node.get("aggregate_handling")
        not in (
            "STANDARD_HANDLING",
            "FORCE_AGGREGATES",
            None,
        )
    ):
        raise Decline("SAMPLE or QUALIFY")
    for m in node.get("modifiers") or []:
        if m.get("type") not in ("ORDER_MODIFIER", "LIMIT_MODIFIER", "DISTINCT_MODIFIER"):
            raise Decline(f"a {m.get('type')}")
    exprs, sets = node.get("group_expressions") or [], node.get("group_sets") or []
    if exprs and (len(sets) != 1 or sorted(sets[0]) != list(range(len(exprs)))):
        raise Decline("grouping sets, ROLLUP or CUBE")


def _check_aliases(node: dict[str, Any], by_name: dict[str, tuple[Column, int]]) -> None:
    """Decline an item named like a column of the table that it is not: ORDER BY, HAVING and
    GROUP BY would then mean the item in one place and the column in another."""
    for item in node["select_list"]:
        name = (item.get("alias") or "").lower()
        if not name or name not in by_name:
            continue
        if item.get("class") != "COLUMN_REF" or item["column_names"][-1].lower() != name:
            raise Decline("an item named like another column of the table")


def _key_nodes(node: dict[str, Any], by_name: dict[str, tuple[Column, int]], alias: str) -> list[dict[str, Any]]:
    """The group keys' expressions: GROUP BY's (positions and item names resolved to the
    items), or for GROUP BY ALL every item without an aggregate."""
    items = node["select_list"]
    if node.get("aggregate_handling") == "FORCE_AGGREGATES":
        return [item for item in items if not _has_aggregate(item)]
    out = []
    named = {(item.get("alias") or "").lower(): item for item in items if item.get("alias")}
    for expr in node.get("group_expressions") or []:
        position = parsetree.constant(expr)
        if position is not None:
            if position.kind != "integer" or not position.text.isdigit() or not 1 <= int(position.text) <= len(items):
                raise Decline("a constant group key")
            expr = items[int(position.text) - 1]
        elif expr.get("class") == "COLUMN_REF" and len(expr["column_names"]) == 1:
            name = expr["column_names"][0].lower()
            if name not in by_name and name in named:
                expr = named[name]
        out.append({**expr, "alias": ""})
    return out


def _has_aggregate(node: Any) -> bool:
    if isinstance(node, list):
        return any(_has_aggregate(n) for n in node)
    if not isinstance(node, dict):
        return False
    if node.get("class") == "FUNCTION" and node.get("function_name", "").lower() not in _SCALARS:
        return True  # an aggregate, or a function GROUP BY ALL might take for one: declined later
    if node.get("class") == "WINDOW":
        return True
    return any(_has_aggregate(v) for k, v in node.items() if k not in ("class", "type"))


def _conditions(
    where: dict[str, Any], by_name: dict[str, tuple[Column, int]], alias: str, atoms: list[dict[str, Any]]
) -> None:
    """The WHERE as conditions on one axis each (an AND of them), collected in `atoms`."""
    predicate = _split(where, by_name, alias, atoms)
    parts = predicate.children if isinstance(predicate, And) else (predicate,)
    for part in parts:
        if isinstance(part, And):
            _flatten_and(part)
        elif not isinstance(part, Atom):
            raise Decline("a WHERE that is not an AND of conditions on one axis each")


def _flatten_and(p: And) -> None:
    for c in p.children:
        if isinstance(c, And):
            _flatten_and(c)
        elif not isinstance(c, Atom):
            raise Decline("a WHERE that is not an AND of conditions on one axis each")


def _canonical(node: Any, by_name: dict[str, tuple[Column, int]], alias: str) -> Any:
    """`node` without its aliases and places in the text, its column references naming the
    table's columns alone: equal expressions compare equal."""
    if isinstance(node, list):
        return [_canonical(n, by_name, alias) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("class") == "COLUMN_REF":
        found = _table_column(node, by_name, alias)
        if found is not None:
            return {"class": "COLUMN_REF", "type": "COLUMN_REF", "alias": "", "column_names": [found[0].name]}
    return {
        k: ("" if k == "alias" else _canonical(v, by_name, alias))
        for k, v in node.items()
        if k not in ("query_location", "query_location_length")
    }


def _table_column(
    node: dict[str, Any], by_name: dict[str, tuple[Column, int]], alias: str
) -> tuple[Column, int] | None:
    """The table's column a COLUMN_REF names (None: an item's name, or another relation's)."""
    ref = parsetree.ref(node)
    qualifier, _, name = ref.rpartition("\0")
    if qualifier and qualifier != alias:
        raise Decline("a column of another relation")
    return by_name.get(name.lower())


def _substituted(
    conn: Connection,
    node: dict[str, Any],
    names: list[str],
    shape: _Shape,
    scan: TableScan,
    by_name: dict[str, tuple[Column, int]],
    alias: str,
) -> dict[str, Any]:
    """The statement over the result: keys and aggregates as its columns (collected into
    `shape.aggregates` on the way), the HAVING as its WHERE, every item keeping its name."""
    keys = {k.text: k.name for k in shape.keys}
    found: dict[str, _Aggregate] = {}

    def cast(ref: dict[str, Any]) -> dict[str, Any]:
        """`ref` as DuckDB's sum of integers: a HUGEINT (the scan adds them in int64)."""
        frame = parsetree.parsed(conn._con, _HUGEINT)
        node = frame["statements"][0]["node"]["select_list"][0]
        return {**node, "alias": ref["alias"], "child": {**ref, "alias": ""}}

    def walk(n: Any) -> Any:
        if isinstance(n, list):
            return [walk(x) for x in n]
        if not isinstance(n, dict):
            return n
        cls = n.get("class")
        if cls is None:  # a part of a node: an ORDER BY term, a type, a function's argument
            return {k: walk(v) for k, v in n.items()}
        if cls not in _CLASSES:
            raise Decline(f"{cls} in the select list")
        text = json.dumps(_canonical({**n, "alias": ""}, by_name, alias), sort_keys=True)
        if text in keys:
            return _column_ref(keys[text], n.get("alias", ""))
        if cls == "FUNCTION":
            fname = n.get("function_name", "").lower()
            if n.get("schema") or n.get("catalog"):
                raise Decline("a function of a schema")
            if fname in _AGGREGATES:
                agg = found.get(text)
                if agg is None:
                    agg = found[text] = _aggregate(n, by_name, alias, f"{_VALUE_PREFIX}{len(found)}")
                ref = _column_ref(agg.name, n.get("alias", ""))
                return cast(ref) if agg.kind == "sum" and _integer_sum(agg) else ref
            if fname not in _SCALARS:
                raise Decline(f"the function {fname}")
        if cls == "COLUMN_REF" and _table_column(n, by_name, alias) is not None:
            raise Decline("a column neither grouped nor aggregated")
        return {k: walk(v) for k, v in n.items()}

    out = copy.deepcopy(node)
    out["select_list"] = [{**walk(item), "alias": name} for item, name in zip(node["select_list"], names, strict=True)]
    having = node.get("having")
    if having is not None:
        items = {
            (i.get("alias") or "").lower(): s for i, s in zip(node["select_list"], out["select_list"], strict=True)
        }
        out["where_clause"] = walk(_items_named(having, items, by_name, alias))
    else:
        out["where_clause"] = None
    out["having"] = None
    out["modifiers"] = walk(node.get("modifiers") or [])
    out["group_expressions"], out["group_sets"] = [], []
    out["aggregate_handling"] = "STANDARD_HANDLING"
    shape.aggregates = list(found.values())
    return out


def _items_named(node: Any, items: dict[str, Any], by_name: dict[str, tuple[Column, int]], alias: str) -> Any:
    """HAVING with each reference to an item by its name (not a column's) made that item."""
    if isinstance(node, list):
        return [_items_named(n, items, by_name, alias) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("class") == "COLUMN_REF" and _table_column(node, by_name, alias) is None:
        name = node["column_names"][-1].lower()
        if len(node["column_names"]) == 1 and name in items:
            return {**items[name], "alias": ""}
    return {k: _items_named(v, items, by_name, alias) for k, v in node.items()}


#: DuckDB's "no place in the text" for a node's query_location.
_NOWHERE = 2**64 - 1


def _column_ref(name: str, alias: str = "") -> dict[str, Any]:
    return {
        "class": "COLUMN_REF",
        "type": "COLUMN_REF",
        "alias": alias,
        "query_location": _NOWHERE,
        "query_location_length": 0,
        "column_names": [name],
    }


def _aggregate(n: dict[str, Any], by_name: dict[str, tuple[Column, int]], alias: str, name: str) -> _Aggregate:
    """One aggregate call of the statement, resolved (or declined)."""
    fname = n["function_name"].lower()
    kind = _AGGREGATES[fname]
    if n.get("filter") or (n.get("order_bys") or {}).get("orders") or n.get("export_state"):
        raise Decline("an aggregate with FILTER, ORDER BY or an exported state")
    if n.get("distinct") and kind not in ("min", "max"):  # min(DISTINCT x) is min(x)
        raise Decline("a DISTINCT aggregate")
    args = [parsetree.argument(a) for a in (n.get("arguments", n.get("children")) or [])]
    if fname == "count_star":
        if args:
            raise Decline("count_star with arguments")
        return _Aggregate("count", name=name)
    if len(args) != 1:
        raise Decline("an aggregate of several arguments")
    arg = args[0]
    data = _data_column(arg, by_name, alias)
    if data is not None:
        return _Aggregate(kind, column=data, name=name)
    if arg.get("class") == "FUNCTION" and arg.get("function_name") == "*" and not arg.get("schema"):
        factors = [parsetree.argument(a) for a in (arg.get("arguments", arg.get("children")) or [])]
        if len(factors) == 2:
            for i in (0, 1):
                data = _data_column(factors[i], by_name, alias)
                if data is not None:
                    other = factors[1 - i]
                    axes = _axes_of(other, by_name, alias)
                    if len(axes) != 1:
                        raise Decline("a factor that reads no axis, or several")
                    weight = _unqualified({**other, "alias": ""}, by_name, alias)
                    return _Aggregate(kind, column=data, weight=weight, axis=axes.pop(), name=name)
    axes = _axes_of(arg, by_name, alias)
    if len(axes) != 1:
        raise Decline("an aggregate of an expression of no axis, or of several")
    return _Aggregate(kind, expr=_unqualified({**arg, "alias": ""}, by_name, alias), axis=axes.pop(), name=name)


#: The frame of a cast to HUGEINT, DuckDB's type of a sum of integers.
_HUGEINT = "SELECT CAST(__zarrsql_value AS HUGEINT)"


def _integer_sum(agg: _Aggregate) -> bool:
    """Whether DuckDB's sum of the aggregate's values is a HUGEINT (integers, no factor)."""
    return agg.column is not None and agg.weight is None and agg.column.logical in _SMALL_INTEGERS


def _data_column(node: dict[str, Any], by_name: dict[str, tuple[Column, int]], alias: str) -> Column | None:
    """The data column a COLUMN_REF names, or None (anything else)."""
    if node.get("class") != "COLUMN_REF":
        return None
    found = _table_column(node, by_name, alias)
    if found is None:
        raise Decline("an aggregate of an unknown column")
    col, axis = found
    return col if axis < 0 and col.data is not None else None


@dataclass
class _AxisResult:
    """What DuckDB worked out over one axis: its groups (`AxisGroups`), the key values and
    the aggregates of its coordinate expressions per group (Arrow columns, one row per
    group), the kept positions per group, and its factors (float64 per position)."""

    groups: AxisGroups
    table: pa.Table | None = None
    sizes: np.ndarray | None = None
    weights: dict[str, tuple[np.ndarray, np.ndarray | None]] = field(default_factory=dict)


_AXIS, _POSITION = "__zarrsql_axis", "__zarrsql_position"


def _axes(conn: Connection, scan: TableScan, shape: _Shape, texts: dict[str, str]) -> list[_AxisResult]:
    """Every axis' groups, values and factors (see `_AxisResult`), from one statement over
    the coordinate columns of the axes asked something: one registered table with a row per
    position of each such axis (`_AXIS` says which), grouped by axis and keys. `texts` holds
    the SQL text of each expression of `_axis_nodes`, by `_node_key`."""
    asked = {k: _Asked.of(shape, k) for k in range(len(scan.table.shape))}
    asked = {k: a for k, a in asked.items() if not a.empty}
    out = [_AxisResult(AxisGroups.whole(), None, np.array([n], dtype=np.int64)) for n in scan.table.shape]
    if not asked:
        return out
    tables = []
    for k, a in asked.items():
        table = _axis_table(scan, k, [])
        if a.atoms and not HAS_SOURCES and _has_nan(table):
            # 1.5 hands a pushed filter to Arrow, where NaN is below every number
            raise Decline("a condition on a coordinate holding NaN, on DuckDB 1.5")
        n = scan.table.shape[k]
        table = table.append_column(_AXIS, _arrow(np.full(n, k, dtype=np.int32)))
        tables.append(table.append_column(_POSITION, _arrow(np.arange(n, dtype=np.int64))))
    keys = [key for a in asked.values() for key in a.keys]
    exprs = [x for a in asked.values() for x in a.exprs]
    weights = [(k, text, w) for k, a in asked.items() for text, w in a.weights.items()]

    def on(k: int, sql: str) -> str:
        return f"CASE WHEN {_AXIS} = {k} THEN {sql} END"

    def text(node: dict[str, Any]) -> str:
        return texts[_node_key(node)]

    selects = [_AXIS]
    selects += [f"{on(key.axis, text(key.node))} AS {quote_ident(key.name)}" for key in keys]
    for x in exprs:
        assert x.axis is not None
        assert x.expr is not None
        selects.append(f"{_AXIS_SQL[x.kind].format(on(x.axis, text(x.expr)))} AS {quote_ident(x.name)}")
    factors = ", ".join([f"{quote_text('p')}: {_POSITION}"] + [
        f"{quote_text(f'w{i}')}: {on(k, text(w))}" for i, (k, _, w) in enumerate(weights)
    ])  # fmt: skip
    selects.append(f"list({{{factors}}}) AS {_POSITION}")
    kept = " OR ".join(
        "(" + " AND ".join([f"{_AXIS} = {k}", *(f"({text(x['node'])})" for x in a.atoms)]) + ")"
        for k, a in asked.items()
    )
    group = ", ".join(str(i + 1) for i in range(1 + len(keys)))
    name = "__zarrsql_axes_" + uuid.uuid4().hex[:12]
    conn._con.register(name, pa.concat_tables(tables, promote_options="default"))
    try:
        sql = f"SELECT {', '.join(selects)} FROM {quote_ident(name)} WHERE {kept} GROUP BY {group} ORDER BY 1 ASC"
        found = _fetch(conn, sql)
    finally:
        conn._con.unregister(name)
    axis_of = to_numpy(found.column(_AXIS))[0].astype(np.int64)  # sorted: each axis' rows are a slice
    for k, a in asked.items():
        start, stop = np.searchsorted(axis_of, [k, k + 1])
        rows = found.slice(int(start), int(stop - start))
        out[k] = a.result(rows, scan.table.shape[k], [(i, text) for i, (j, text, _) in enumerate(weights) if j == k])
    return out


def _axis_nodes(shape: _Shape) -> list[dict[str, Any]]:
    """Every expression `_axes` has DuckDB evaluate per axis: keys, aggregated expressions,
    factors and conditions."""
    nodes = [key.node for key in shape.keys]
    nodes += [a.expr for a in shape.aggregates if a.expr is not None]
    nodes += [a.weight for a in shape.aggregates if a.weight is not None]
    return nodes + [atom["node"] for atom in shape.atoms]


def _node_key(node: dict[str, Any]) -> str:
    return json.dumps(node, sort_keys=True)


@dataclass
class _Asked:
    """What the statement asks of one axis: its keys, conditions, aggregates of its
    expressions and factors."""

    keys: list[_Key]
    atoms: list[dict[str, Any]]
    exprs: list[_Aggregate]
    weights: dict[str, dict[str, Any]]

    @staticmethod
    def of(shape: _Shape, k: int) -> _Asked:
        return _Asked(
            [key for key in shape.keys if key.axis == k],
            [a for a in shape.atoms if a["axis"] == k],
            [a for a in shape.aggregates if a.axis == k and a.expr is not None],
            {json.dumps(a.weight, sort_keys=True): a.weight for a in shape.aggregates if a.axis == k and a.weight},
        )

    @property
    def empty(self) -> bool:
        return not (self.keys or self.atoms or self.exprs or self.weights)

    def result(self, rows: pa.Table, n: int, weights: list[tuple[int, str]]) -> _AxisResult:
        """The axis' groups from its rows of the statement: one per group (none when no
        position is kept), each with its key values, aggregates and (position, factors)."""
        packed = rows.column(_POSITION).combine_chunks()
        table = rows.drop_columns([_AXIS, _POSITION])
        out = _AxisResult(AxisGroups(np.full(n, -1, dtype=np.int64), 1), table)
        if len(rows) == 0:  # nothing kept
            out.sizes = np.zeros(0 if self.keys else 1, dtype=np.int64)
            return out
        entries = packed.values
        positions = to_numpy(entries.field("p"))[0].astype(np.int64)
        sizes: np.ndarray = np.diff(to_numpy(packed.offsets)[0].astype(np.int64))
        groups = out.groups.groups
        assert groups is not None
        groups[positions] = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        out.groups = AxisGroups(groups, len(sizes) if self.keys else 1)
        out.sizes = sizes
        for i, text in weights:
            column = entries.field(f"w{i}")
            values = np.zeros(n, dtype=np.float64)
            values[positions] = _floats(column)
            nulls = None
            if column.null_count:
                nulls = np.zeros(n, dtype=bool)
                nulls[positions] = to_numpy(column)[1]
            out.weights[text] = (values, nulls)
        return out


#: How an aggregate of an axis' expression is taken over one group's positions of that axis
#: (a count and a sum are multiplied by the cells the other axes give each position).
_AXIS_SQL = {"count": "count({})", "sum": "sum({})", "avg": "avg({})", "min": "min({})", "max": "max({})"}


def _fetch(conn: Connection, sql: str) -> pa.Table:
    relation = conn._con.sql(sql)
    fetch = getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table  # 1.5 has only the latter
    return fetch()


def _floats(column: pa.Array) -> np.ndarray:
    if not pa.types.is_float64(column.type):
        raise Decline("a factor that is not DOUBLE")
    values, nulls = to_numpy(column)
    return np.where(nulls, 0.0, values) if nulls is not None else values.astype(np.float64)


def _compute(conn: Connection, scan: TableScan, shape: _Shape, per_axis: list[_AxisResult]) -> pa.Table:
    """The result: one row per group, the keys' and aggregates' columns."""
    key_axes = sorted({key.axis for key in shape.keys})
    sizes = [per_axis[k].groups.size for k in key_axes]
    empty = any(r.sizes is not None and int(r.sizes.sum()) == 0 for r in per_axis)
    rows = (0 if empty else int(np.prod(sizes, dtype=np.int64))) if key_axes else 1
    if rows > MAX_GROUPS:
        raise Decline("too many groups")
    index = dict(zip(key_axes, np.unravel_index(np.arange(rows), sizes), strict=True)) if key_axes else {}
    columns: dict[str, Any] = {}
    for key in shape.keys:
        table = per_axis[key.axis].table
        assert table is not None
        columns[key.name] = _take(table.column(key.name), index[key.axis])
    reductions, slots = _reductions(scan, shape, per_axis)
    with statement_reads():  # the statement reads the same chunks: their failure is its own
        reduced = reduce_groups(scan, [r.groups for r in per_axis], reductions)
    cells = _cells_per_group(per_axis)
    for agg in shape.aggregates:
        columns[agg.name] = _value_column(agg, reduced, slots, cells, per_axis, index, rows, scan)
    return pa.table(columns) if columns else pa.table({"__zarrsql_none": pa.nulls(rows)})


def _reductions(scan: TableScan, shape: _Shape, per_axis: list[_AxisResult]) -> tuple[list[Reduction], dict[str, int]]:
    """The scan's reductions for the data aggregates (avg takes a sum, whose counts it
    divides by), and each aggregate's place among them."""
    out: list[Reduction] = []
    slots: dict[str, int] = {}
    for agg in shape.aggregates:
        if agg.column is None:
            continue
        logical = agg.column.logical
        weighted = agg.weight is not None
        if not isinstance(logical, str) or (logical not in _ORDERED and (agg.kind != "count" or weighted)):
            raise Decline(f"an aggregate of a {logical!r} column")
        if agg.kind in ("sum", "avg") and not weighted and logical not in _FLOATS | _SMALL_INTEGERS:
            raise Decline(f"a sum of a {logical} column")
        if agg.kind in ("sum", "avg") and logical in _SMALL_INTEGERS and (scan.num_rows or 0) >= 2**31:
            raise Decline("an integer sum that could overflow int64")
        if weighted and logical not in _FLOATS | _SMALL_INTEGERS | {"int64"}:
            raise Decline(f"a weighted {logical} column")
        weight = None
        if agg.weight is not None:
            assert agg.axis is not None
            values, nulls = per_axis[agg.axis].weights[json.dumps(agg.weight, sort_keys=True)]
            weight = Weight(agg.axis, values, nulls)
        kind = "sum" if agg.kind == "avg" else agg.kind
        slots[agg.name] = len(out)
        out.append(Reduction(kind, agg.column, weight))
    return out, slots


def _cells_per_group(per_axis: list[_AxisResult]) -> np.ndarray:
    """Cells per group of the grid: the product of each axis' kept positions per group."""
    out = np.ones([r.groups.size for r in per_axis], dtype=np.int64)
    for k, r in enumerate(per_axis):
        sizes = r.sizes if r.sizes is not None else np.ones(1, dtype=np.int64)
        view = [1] * len(per_axis)
        view[k] = -1
        out = out * sizes.reshape(view)
    return out


def _value_column(
    agg: _Aggregate,
    reduced: list[Reduced],
    slots: dict[str, int],
    cells: np.ndarray,
    per_axis: list[_AxisResult],
    index: dict[int, np.ndarray],
    rows: int,
    scan: TableScan,
) -> pa.Array:
    """One aggregate's column of the result, in the result's row order."""
    if agg.column is None and agg.expr is None:  # count(*)
        return _arrow(_flat(cells, rows).astype(np.int64))
    if agg.column is not None:
        got = reduced[slots[agg.name]]
        counts = _flat(got.counts, rows)
        if agg.kind == "count":
            return _arrow(counts.astype(np.int64))
        assert got.values is not None
        values = _flat(got.values, rows)
        missing = counts == 0
        if agg.kind == "avg":
            with np.errstate(all="ignore"):
                values = values.astype(np.float64) / np.where(missing, 1, counts)
            return _arrow(values.astype(np.float64), missing)
        if agg.weight is not None or agg.kind == "sum":
            return _arrow(values, missing)
        return to_arrow(values, missing if missing.any() else None, agg.column.logical)
    # an aggregate of one axis' expression, taken by DuckDB per group of that axis
    assert agg.axis is not None
    r = per_axis[agg.axis]
    assert r.table is not None
    column = r.table.column(agg.name).combine_chunks()
    at = index.get(agg.axis, np.zeros(rows, dtype=np.int64))
    nothing = _flat(cells, rows) == 0  # a group without a cell (another axis keeps no position)
    if agg.kind not in ("count", "sum"):
        return _take(column, at, nothing)
    # a count or a sum over the axis' positions, times the cells each stands for
    sizes = r.sizes if r.sizes is not None else np.ones(1, dtype=np.int64)
    view = [1] * len(per_axis)
    view[agg.axis] = -1
    times = _flat(cells // np.maximum(sizes, 1).reshape(view), rows)
    values, nulls = to_numpy(column)
    values = values[at]
    if agg.kind == "count":
        return _arrow(values.astype(np.int64) * times)
    if not pa.types.is_float64(column.type):
        raise Decline("a sum of an axis' expression that is not DOUBLE")
    missing = nothing if nulls is None else (nulls[at] | nothing)
    with np.errstate(all="ignore"):
        values = np.where(missing, 0.0, values.astype(np.float64)) * times
    return _arrow(values.astype(np.float64), missing)


def _take(column: pa.Array | pa.ChunkedArray, at: np.ndarray, nulls: np.ndarray | None = None) -> pa.Array:
    """`column`'s values at positions `at` (NULL where `nulls`), as a dictionary array over
    `column`, which DuckDB reads as the values' type: `take` imports pyarrow.compute (9 MB)."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    indices = _arrow(at.astype(np.int32 if len(values) < 2**31 else np.int64), nulls)
    if pa.types.is_dictionary(values.type):  # no dictionary of a dictionary: Arrow's take
        return values.take(indices)
    return pa.DictionaryArray.from_arrays(indices, values)


def _arrow(values: np.ndarray, nulls: np.ndarray | None = None) -> pa.Array:
    """A numpy array as Arrow, wrapped without a copy (`pa.array` with a mask imports pandas:
    a quarter of a second inside the first query of a process)."""
    if values.dtype == np.bool_:  # `pa.array` of booleans imports pandas too: packed by hand
        assert nulls is None
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return to_arrow(values, nulls if nulls is not None and nulls.any() else None, values.dtype.name)


def _flat(grid: np.ndarray, rows: int) -> np.ndarray:
    """A grid over the groups (size 1 along axes without keys) in the result's row order."""
    flat = np.ascontiguousarray(grid).reshape(-1)
    return flat[:rows] if rows < len(flat) else flat


def _over_result(conn: Connection, query: str, node: dict[str, Any], name: str) -> dict[str, Any]:
    """The tree of the rewritten statement `node`, reading the result named `name`."""
    doc = parsetree.parsed(conn._con, query)
    frame = parsetree.parsed(conn._con, _FRAME)
    from_table = frame["statements"][0]["node"]["from_table"]
    renamed = {**from_table, "table_name": name}
    if "qualified_name" in renamed:  # DuckDB 2.x names it twice
        renamed["qualified_name"] = {"path": [name]}
    doc["statements"][0]["node"] = {**node, "from_table": renamed}
    return doc


def _finish(conn: Connection, text: str, name: str, result: pa.Table, names: list[str], types: list[str]) -> str:
    """Register the result under `name` and check that the rewritten statement `text` binds
    to the original's names and types; the relation bound over it is what `con.sql()`
    returns."""
    _keep(conn, name, result)
    try:
        relation = _relation(conn, name, text, result)
    except Exception as err:
        _drop(conn, name)
        raise Decline(f"the rewritten statement does not bind: {err}") from err
    if [str(c) for c in relation.columns] != names or [str(t).upper() for t in relation.types] != types:
        _drop(conn, name)
        raise Decline("the rewritten statement's columns differ")
    conn._state.prepared = (text, conn._state.generation, relation)
    return text


def _relation(conn: Connection, name: str, text: str, result: pa.Table) -> Any:
    """The rewritten statement bound as a relation that can be fetched as long as it lives.

    DuckDB 2 binds `text` over the result itself (`from_arrow(...).query`: the relation holds
    the table, so it and any relation made from it never depend on the registered name).
    DuckDB 1.5's `query` goes through a view that the next such call replaces, so there the
    relation reads the registered name, which stays registered while the relation lives."""
    if _OWN_QUERY:
        return conn._con.from_arrow(result).query(name, text)
    relation = conn._con.sql(text)
    conn._state.pin(relation, [name])
    return relation


#: A statement whose FROM is a base table: its node is the frame of the rewritten FROM.
_FRAME = "SELECT * FROM __zarrsql_frame"


def _keep(conn: Connection, name: str, result: pa.Table) -> None:
    """Register a result for the statement (an `execute()` of it, a relation on DuckDB 1.5),
    dropping the oldest beyond `MAX_RESULTS_KEPT` or `MAX_BYTES_KEPT`: never the newest,
    nor one a live relation reads (`_relation`)."""
    kept = conn._state.grouped
    conn._con.register(name, result)
    kept.append((name, result.nbytes))

    def over() -> bool:
        return len(kept) > MAX_RESULTS_KEPT or sum(b for _, b in kept) > MAX_BYTES_KEPT

    for old, _ in conn._state.let_go(kept, over, {name}):
        conn._con.unregister(old)


def _drop(conn: Connection, name: str) -> None:
    kept = conn._state.grouped
    for entry in list(kept):
        if entry[0] == name:
            kept.remove(entry)
    conn._con.unregister(name)


def _rows_at_most(scan: TableScan, atoms: list[dict[str, Any]], by_name: dict[str, tuple[Column, int]]) -> int:
    """An upper bound of the rows the statement reads: the positions kept along each axis
    by the conditions numpy can evaluate (a coordinate compared with a number, or a time
    with a date), all of an axis' positions where a condition is of any other form. Only
    decides whether computing here pays off; the groups themselves come from DuckDB."""
    kept: dict[int, np.ndarray] = {}
    for atom in atoms:
        mask = _estimate(scan, atom.get("node"), by_name)
        if mask is not None:
            k = atom["axis"]
            kept[k] = mask if k not in kept else (kept[k] & mask)
    counts = [int(kept[k].sum()) if k in kept else n for k, n in enumerate(scan.table.shape)]
    return int(np.prod(counts, dtype=object))


_COMPARE = {
    "COMPARE_EQUAL": np.equal,
    "COMPARE_LESSTHAN": np.less,
    "COMPARE_GREATERTHAN": np.greater,
    "COMPARE_LESSTHANOREQUALTO": np.less_equal,
    "COMPARE_GREATERTHANOREQUALTO": np.greater_equal,
}
_FLIPPED = {"COMPARE_LESSTHAN": "COMPARE_GREATERTHAN", "COMPARE_GREATERTHAN": "COMPARE_LESSTHAN",
            "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHANOREQUALTO",
            "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHANOREQUALTO", "COMPARE_EQUAL": "COMPARE_EQUAL"}  # fmt: skip


def _estimate(scan: TableScan, node: Any, by_name: dict[str, tuple[Column, int]]) -> np.ndarray | None:
    """Positions of the axis where a condition may hold (a superset), or None: unknown.

    A string coordinate is estimated only where it equals a string constant or one of a
    list of them (`station = 'ST00010'`, a point query): compared as the binary collation
    compares. Under a collation that makes more strings equal the estimate is too small,
    which only has DuckDB aggregate the rows (a matter of time, not of rows)."""
    if not isinstance(node, dict):
        return None
    kind = node.get("type")
    if kind == "CONJUNCTION_AND":
        masks = [m for m in (_estimate(scan, c, by_name) for c in node.get("children") or []) if m is not None]
        return np.logical_and.reduce(masks) if masks else None
    if kind == "COMPARE_BETWEEN":
        values = _coordinate(scan, node.get("input"), by_name)
        lo, hi = _number(node.get("lower"), values), _number(node.get("upper"), values)
        if values is None or lo is None or hi is None:
            return None
        return (values[0] >= lo) & (values[0] <= hi)
    if kind == "COMPARE_IN":
        return _in_list(scan, node.get("children") or [], by_name)
    if kind in _COMPARE:
        left, right = node.get("left"), node.get("right")
        values, other = _coordinate(scan, left, by_name), right
        if values is None:
            values, other, kind = _coordinate(scan, right, by_name), left, _FLIPPED[kind]
        value = _number(other, values)
        if values is None or value is None or (values[1] == "string" and kind != "COMPARE_EQUAL"):
            return None
        return _COMPARE[kind](values[0], value)  # type: ignore[no-any-return]
    return None


def _in_list(scan: TableScan, children: list[Any], by_name: dict[str, tuple[Column, int]]) -> np.ndarray | None:
    """Positions where a coordinate may equal one of a list of constants (`x IN (...)`)."""
    values = _coordinate(scan, children[0], by_name) if children else None
    if values is None:
        return None
    constants = [_number(c, values) for c in children[1:]]
    if not constants or any(c is None for c in constants):
        return None
    return np.logical_or.reduce([values[0] == c for c in constants])  # type: ignore[no-any-return]


def _coordinate(scan: TableScan, node: Any, by_name: dict[str, tuple[Column, int]]) -> tuple[np.ndarray, str] | None:
    """A dimension's numeric, time or string values (and their type) when `node` names it."""
    if not isinstance(node, dict) or node.get("class") != "COLUMN_REF":
        return None
    found = by_name.get(node["column_names"][-1].lower())
    if found is None or found[0].dim is None:
        return None
    k = found[0].dim
    logical = scan.dim_logical[k]
    if (logical not in _ORDERED and logical != "string") or logical == "duration_us":
        return None
    with statement_reads():  # the first use of a remote table's coordinates reads them
        values = scan.dims[k].values
    if isinstance(values, Positions) and not values.holdable:
        return None  # not estimated: the axis is declined whole when the statement asks of it
    return np.asarray(values), logical


def _number(node: Any, values: tuple[np.ndarray, str] | None) -> Any:
    """A constant as the coordinate's values compare with it: a number, for a time a date's
    microseconds since 1970, for a string coordinate a string constant (not cast: a cast
    may change it); None when it is anything else."""
    if values is not None and values[1] == "string":
        return _string(node)
    while isinstance(node, dict) and node.get("class") == "CAST":
        node = node.get("child")
    value = parsetree.constant(node)
    if values is None or value is None or value.kind not in ("string", "integer", "number"):
        return None
    try:
        if values[1] == "timestamp_us":
            return _micros(value.text)
        return float(value.text)
    except (TypeError, ValueError):
        return None


#: A UTC offset ending a time's text (`+01:00`, `-0530`, `+01`, `Z`), after a time of day.
_OFFSET = re.compile(r"(?<=\d)(?:[+-]\d{2}(?::?\d{2})?|Z)$")


def _micros(text: str) -> int:
    """A time's text as microseconds since 1970, as DuckDB casts it to TIMESTAMP: a UTC offset
    after the time of day is dropped, not applied (numpy would apply it, and warn that its
    parsing of offsets may stop). Only an estimate of the rows read uses it (`_rows_at_most`)."""
    text = text.strip()
    if re.search(r"\d[T ]\d", text):  # a time of day: a '-' after it starts an offset, not a date's part
        text = _OFFSET.sub("", text).rstrip()
    return int(np.datetime64(text.replace(" ", "T"), "us").astype(np.int64))


def _string(node: Any) -> str | None:
    """A string constant's text, else None."""
    value = parsetree.constant(node)
    return value.text if value is not None and value.kind == "string" else None
