"""Latest rows: `ORDER BY <dimension> LIMIT n` reads only the work units of the first values.

DuckDB answers `SELECT ... ORDER BY time DESC LIMIT 5` with a Top-N operator whose dynamic
filter never reaches a Python scan, so the scan read every work unit of the table (all
58,400 of a 10-year hourly 721 x 1440 store, where the last time slab is 16). The connection
therefore adds the bound itself before the statement runs.

The reasoning: in a table whose rows are its cells, every position along an axis holds the
same number of rows, `per_value` = the product of the other axes' lengths. The first `n + m`
rows of `ORDER BY dim ... LIMIT n OFFSET m` therefore lie among the cells of the first `k =
ceil((n + m) / per_value)` positions in that order: those positions alone hold `k * per_value
>= n + m` rows that sort at or before the k-th value `v`. So `WHERE dim >= v` (`<=` when
ascending; `OR dim IS NULL` too when NULLs sort first) keeps every row that can be among
them, ties at `v` included, whatever the further ORDER BY keys are, and the result is the
statement's own. `v` is found by DuckDB ordering the coordinate column as the scan hands it
(`answers._axis_tables`: the decoded coordinate, no data chunk), with the statement's
direction and NULL placement (the session's defaults where it names none), so NaN, NULL
(NaT), duplicate values and descending axes sort exactly as in the statement. It is written
as a literal of the column's own type (`CAST('<text>' AS <type>)`, declined unless the text
reads back as the value), which DuckDB pushes into the scan. On a positional dimension `v` is
the k-th position, worked out without handing the axis over (it may be 10^12 long).

With one ORDER BY key and `k = 1`, all the rows wanted sort equal (the first value's cells),
and SQL leaves open which of them come out; the other axes are then bounded to the first of
those cells in storage order (`_first_cells`). Without that, a dimension that is not chunked
(`ORDER BY latitude LIMIT 10` on a store chunked by time) kept every chunk.

Only this shape is rewritten: the top-level `SELECT <items> FROM <one zarrsql table>
ORDER BY <dimension column> [ASC|DESC] [NULLS FIRST|LAST] [, any keys] LIMIT <n> [OFFSET
<m>]`, the table `read_zarr(...)`, a `'x.zarr'` string or a view that is `SELECT *` of one,
whose rows are its cells (no `bounds :=`, no sparse matrix). Declined: any `WHERE` (a
condition on other dimensions leaves fewer rows per value, so `k` would have to grow; an
ORDER BY data variable takes a WHERE on dimensions, `topn_values`), joins,
grouping, aggregates, window functions, `DISTINCT`, `QUALIFY`, subqueries, macros, parameters,
a select item aliased to the dimension's name (ORDER BY would sort by the item), a string
(categorical) dimension, a NaN or NULL `v`, and on DuckDB 1.5 a coordinate holding NaN (1.5
applies a pushed filter with Arrow's NaN rules). Anything else, or any error on the way,
leaves the statement as written.

The bound comes from the coordinates as they were when the statement was rewritten, while a
relation fetched again reads the store as it is then (`scan/validity.py`): after a coordinate
was rewritten, the old bound could drop every row. So the bound is checked as a constant
answer is (`ConnectionState.answer_check`, in a scalar subquery DuckDB evaluates once): a relation
fetched after its store changed fails and says to run the statement again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrsql.decode.logical import Labels
from zarrsql.engine import parsetree, topn_values
from zarrsql.engine.answers import (
    _axis_tables,
    _bind,
    _check_from,
    _columns,
    _precheck,
    rewritten_or_same,
)
from zarrsql.engine.exact_literals import exact_texts
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.engine.sqltext import quote_ident, quote_text

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection
    from zarrsql.expand.columns import Column
    from zarrsql.scan import TableScan

#: Dimension types whose first positions a comparison can select (`_first_cells`).
_BOUNDABLE = frozenset(
    {"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "timestamp_us"}
)
_QUICK = re.compile(r"\border\s+by\b.*\blimit\b", re.IGNORECASE | re.DOTALL)
#: Expression classes a select item or ORDER BY key may contain: no window, subquery or
#: parameter (a FUNCTION is checked to be scalar by name, `_check_scalar`).
_SCALAR_CLASSES = frozenset(
    {"COLUMN_REF", "CONSTANT", "CAST", "COMPARISON", "CONJUNCTION", "OPERATOR", "BETWEEN", "CASE", "COLLATE", "TYPE"}
)
#: The session's `default_null_order` as whether NULLs sort first, (ascending, descending).
_NULLS_FIRST = {
    "NULLS_FIRST": (True, True),
    "NULLS_LAST": (False, False),
    "NULLS_FIRST_ON_ASC_LAST_ON_DESC": (True, False),
    "NULLS_LAST_ON_ASC_FIRST_ON_DESC": (False, True),
}


def rewrite(conn: Connection, query: Any, has_args: bool) -> Any:
    """`query` with `WHERE <dimension> >= <k-th value>` added when it is the shape of the module
    docstring, else `query` itself."""
    return rewritten_or_same(conn, query, has_args, _QUICK, _rewrite, "top-n not bounded")


@dataclass(frozen=True, slots=True)
class _Order:
    """The first ORDER BY key: the dimension column it names, its direction and where its
    NULLs sort, as the session resolves defaults."""

    column: str
    axis: int
    descending: bool
    nulls_first: bool
    alone: bool  # the only ORDER BY key: SQL leaves the order of its ties open
    data: Column | None = None  # a data variable's column (then `axis` is -1)


def _rewrite(conn: Connection, query: str) -> str:
    doc = parsetree.serialize(conn._con, query)
    node = doc["statements"][0]["node"]
    rows_wanted = _check_shape(node)
    _check_scalar(conn, node)
    table = node["from_table"]
    _precheck(conn._con, table)  # binding may perform actions (zarr_unmount): only bind a read
    _, _, scan = _bind(conn, query, as_text=False)
    _check_from(conn._con, table)  # again: binding created the view of a 'x.zarr' string
    order = _order(conn, node, parsetree.alias(table), scan)
    chunks: list[tuple[str, str | None]] = []
    where = node.get("where_clause")
    if order.data is not None:  # a WHERE on dimensions: the first cells among those it keeps
        bound, chunks = topn_values.bound(
            conn,
            scan,
            order.data,
            (order.descending, order.nulls_first, order.alone),
            rows_wanted,
            None if where is None else (where, parsetree.alias(table)),
        )
    elif where is not None:
        raise Decline("a WHERE: fewer rows per value may pass it")
    else:
        bound = _bound(conn, scan, order, rows_wanted)
    state = conn._state
    if not state.check_function:
        raise Decline("no check function installed")
    # a scalar subquery: DuckDB runs the check once per execution, not once per row
    check = f"(SELECT {state.answer_check(conn._con, scan, chunks)})"
    added = parsetree.select_node(conn._con, f"SELECT 1 WHERE {bound} AND {check}", keep=False)["where_clause"]
    node["where_clause"] = added if where is None else _both(where, added)
    return parsetree.deserialize(conn._con, doc)


def _both(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The tree of `first AND second`."""
    return {
        "class": "CONJUNCTION",
        "type": "CONJUNCTION_AND",
        "alias": "",
        "query_location": first.get("query_location", 0),
        "children": [first, second],
    }


def _check_shape(node: dict[str, Any]) -> int:
    """Decline all but `SELECT ... FROM <one table> [WHERE ...] ORDER BY ... LIMIT n [OFFSET m]`
    (which ORDER BY keys take a WHERE is decided once they are known); the rows the statement
    needs sorted, n + m."""
    if node.get("type") != "SELECT_NODE" or (node.get("cte_map") or {}).get("map"):
        raise Decline("not a plain SELECT")
    if node.get("group_expressions") or node.get("group_sets") or node.get("having") or node.get("qualify"):
        raise Decline("grouping")
    if node.get("sample") or node.get("aggregate_handling") not in (None, "STANDARD_HANDLING"):
        raise Decline("sample or GROUP BY ALL")
    kinds = [m.get("type") for m in node.get("modifiers") or []]
    if kinds != ["ORDER_MODIFIER", "LIMIT_MODIFIER"]:
        raise Decline("not ORDER BY then LIMIT alone")
    limit = node["modifiers"][1]
    if limit.get("limit_type", "ROW_COUNT") != "ROW_COUNT":
        raise Decline("LIMIT of a percentage")
    count = _integer(limit.get("limit"))
    offset = 0 if limit.get("offset") is None else _integer(limit["offset"])
    if count is None or offset is None or count + offset == 0:
        raise Decline("LIMIT or OFFSET not a positive integer constant")
    return count + offset


def _integer(node: dict[str, Any] | None) -> int | None:
    """A non-negative integer constant's value, else None."""
    value = parsetree.constant(node)
    return int(value.text) if value is not None and value.kind == "integer" and value.text.isdigit() else None


def _check_scalar(conn: Connection, node: dict[str, Any]) -> None:
    """Decline unless every select item and ORDER BY key is scalar: columns, constants,
    operators and scalar functions (no aggregate, window function, macro or subquery, which
    would read rows the bound removes)."""
    names: set[str] = set()
    for item in node["select_list"]:
        if item.get("class") == "STAR":
            if any(item.get(k) for k in ("relation_name", "columns", "expr")) or any(
                item.get(k) for k in ("exclude_list", "replace_list", "qualified_exclude_list", "rename_list")
            ):
                raise Decline("a star that changes its columns")
            continue
        _collect_functions(item, names)
    for key in node["modifiers"][0]["orders"]:
        _collect_functions(key["expression"], names)
    if not names:
        return
    listed = ", ".join(quote_text(n) for n in sorted(names))
    found = conn._con.execute(
        "SELECT lower(function_name), bool_and(function_type = 'scalar') FROM duckdb_functions() "
        f"WHERE lower(function_name) IN ({listed}) GROUP BY 1"
    ).fetchall()
    if len(found) != len(names) or not all(scalar for _, scalar in found):
        raise Decline("a function that is not scalar")


def _collect_functions(tree: Any, names: set[str]) -> None:
    """Add the names of the functions `tree` calls to `names`; decline what is not scalar."""
    if isinstance(tree, list):
        for value in tree:
            _collect_functions(value, names)
        return
    if not isinstance(tree, dict):
        return
    kind = tree.get("class")
    if kind == "FUNCTION":
        if tree.get("schema") or tree.get("catalog") or tree.get("distinct") or tree.get("filter"):
            raise Decline("a qualified or aggregate-like call")
        if (tree.get("order_bys") or {}).get("orders") or tree.get("export_state"):
            raise Decline("an aggregate-like call")
        names.add(str(tree.get("function_name", "")).lower())
    elif kind is not None and kind not in _SCALAR_CLASSES:
        raise Decline(f"{kind} in the select list or ORDER BY")
    for key, value in tree.items():
        if key != "class":
            _collect_functions(value, names)


def _order(conn: Connection, node: dict[str, Any], alias: str, scan: TableScan) -> _Order:
    """The first ORDER BY key as a dimension column of the table (named, or a position in the
    select list), with the session's defaults applied; declined when it names a select item's
    alias (ORDER BY binds a name to the item first) or is not a dimension's coordinate."""
    key = node["modifiers"][0]["orders"][0]
    items, expression = node["select_list"], key["expression"]
    position = _integer(expression)
    if position is not None:
        if any(item.get("class") == "STAR" for item in items) or not 1 <= position <= len(items):
            raise Decline("ORDER BY a position with a star, or out of range")
        expression = items[position - 1]
    if expression.get("class") != "COLUMN_REF":
        raise Decline("ORDER BY an expression, not a column")
    column, axis = _ordered_column(parsetree.ref(expression), _columns(scan), alias)
    name = column.name.lower()
    for item in items:
        named = str(item.get("alias") or "").lower() == name
        if named and not (
            item.get("class") == "COLUMN_REF" and parsetree.ref(item).rpartition("\0")[2].lower() == name
        ):
            raise Decline("a select item aliased to the ORDER BY column's name")
    alone = len(node["modifiers"][0]["orders"]) == 1
    if column.data is not None:  # a data variable: its first cells are looked for (`topn_values`)
        return _Order(column.name, axis, *_direction(conn, key), alone, data=column)
    if column.dim is None or isinstance(column.logical, Labels):
        raise Decline("not a dimension column, or a string one (its order may be its labels')")
    descending, nulls_first = _direction(conn, key)
    return _Order(column.name, axis, descending, nulls_first, alone)


def _ordered_column(ref: str, by_name: dict[str, tuple[Column, int]], alias: str) -> tuple[Column, int]:
    """The table's column an ORDER BY key names, with its axis (-1: not along one axis)."""
    qualifier, _, name = ref.rpartition("\0")
    if qualifier and qualifier != alias:
        raise Decline("a column of another relation")
    hit = by_name.get(name.lower())
    if hit is None:
        raise Decline("not a column of the table")
    return hit


def _direction(conn: Connection, key: dict[str, Any]) -> tuple[bool, bool]:
    """Whether an ORDER BY key sorts descending, and whether its NULLs come first, the
    session's `default_order` and `default_null_order` filling what it leaves out."""
    default_order, default_nulls = conn._con.execute(
        "SELECT current_setting('default_order'), current_setting('default_null_order')"
    ).fetchall()[0]
    direction = key.get("type")
    if direction == "ORDER_DEFAULT":
        direction = "DESCENDING" if str(default_order).upper().startswith("DESC") else "ASCENDING"
    if direction not in ("ASCENDING", "DESCENDING"):
        raise Decline("an unknown sort direction")
    descending = direction == "DESCENDING"
    nulls = str(key.get("null_order", "ORDER_DEFAULT")).upper().replace(" ", "_")
    if nulls == "ORDER_DEFAULT":
        placement = _NULLS_FIRST.get(str(default_nulls).upper())
        if placement is None:
            raise Decline("an unknown default NULL order")
        return descending, placement[descending]
    if nulls not in ("NULLS_FIRST", "NULLS_LAST"):
        raise Decline("an unknown NULL order")
    return descending, nulls == "NULLS_FIRST"


def _bound(conn: Connection, scan: TableScan, order: _Order, rows_wanted: int) -> str:
    """The condition keeping every row that can be among the first `rows_wanted` (see the
    module docstring), as SQL text; declined when it would keep (nearly) every row."""
    if not scan.rows_are_cells or scan.base_predicate is not None or not scan.num_rows:
        raise Decline("rows that are not all the cells of the table, or none")
    length = scan.table.shape[order.axis]
    per_value = scan.num_rows // length
    positions = -(-rows_wanted // per_value)  # k: the first positions that hold the rows wanted
    if positions >= length:
        raise Decline("the rows wanted span every value")
    column = quote_ident(order.column)
    if scan.positional[order.axis]:  # positions: the k-th in order by arithmetic, never NULL, never repeated
        kind, text, nulls, holding = "BIGINT", str(length - positions if order.descending else positions - 1), 0, 1
    else:
        kind, text, nulls, holding = _bounding_value(conn, scan, order, positions)
    condition = f"{column} {'>=' if order.descending else '<='} CAST({quote_text(str(text))} AS {kind})"
    if order.nulls_first and nulls:
        return f"({condition} OR {column} IS NULL)"
    if order.alone and positions == 1:
        tied = per_value * max(1, holding)  # every cell at a position holding the first value in order
        ties = _first_cells(conn, scan, order.axis, tied, rows_wanted)
        return condition if ties is None else f"{condition} AND {ties}"
    return condition


def _bounding_value(conn: Connection, scan: TableScan, order: _Order, positions: int) -> tuple[str, str, int, int]:
    """The type, the text and the NULL count of the coordinate value at `positions` in the
    statement's order, and how many positions hold that value (a coordinate may repeat one:
    [5, 5, 1, 2], or 0 and 360 under `longitude := 180`), found by DuckDB over the coordinate
    column (see the module docstring)."""
    column = quote_ident(order.column)
    with _axis_tables(conn, scan, [], [], {order.axis}) as axes:
        table = quote_ident(str(axes[order.axis].table))
        sort = f"{column} {'DESC' if order.descending else 'ASC'} NULLS {'FIRST' if order.nulls_first else 'LAST'}"
        kth = f"SELECT {column} AS v FROM {table} ORDER BY {sort} LIMIT 1 OFFSET {positions - 1}"
        kind, texts = exact_texts(conn, kth)
        nans = f"count(*) FILTER (isnan({column}))" if kind in ("FLOAT", "DOUBLE") else "0"
        nulls, nan_count, holding = conn._con.execute(
            f"SELECT count(*) FILTER ({column} IS NULL), {nans}, count(*) FILTER ({column} = ({kth})) FROM {table}"
        ).fetchall()[0]
    if nan_count and not HAS_SOURCES:
        raise Decline("a coordinate holding NaN, on DuckDB 1.5 (Arrow's NaN rules filter it)")
    return kind, texts[0], int(nulls), int(holding)


def _first_cells(conn: Connection, scan: TableScan, axis: int, tied: int, rows_wanted: int) -> str | None:
    """Bounds on the other axes keeping at least `rows_wanted` of the `tied` rows that share the
    first value of `axis`: the first cells among them in storage order. Every one of those rows
    is a first row of the statement's only ORDER BY key, and SQL leaves open which of them it
    returns; bounded, the scan reads the chunks of the first ones, where it read every chunk
    holding the value (every chunk, when `axis` is not chunked: `ORDER BY latitude LIMIT 10`).

    The tied cells are a box (those positions of `axis` by every position of the others), so
    going through the other axes slowest first, an axis keeps its first position while one
    position still holds `rows_wanted` of them, else the first positions that do, and the
    faster axes stay whole. An axis whose coordinate is not strictly monotonic numbers or
    times (no comparison selects its first positions) stays whole; None when nothing is kept
    out."""
    bounds = []
    for k, n in enumerate(scan.table.shape):
        if k == axis or n < 2:
            continue
        per_position = tied // n
        keep = -(-rows_wanted // per_position)
        if keep >= n:
            break
        ascending = _monotonic(scan, k)
        if ascending is None:
            continue
        literal = _position_value(conn, scan, k, keep - 1)
        if literal is None:
            continue
        column, value = literal
        bounds.append(f"{column} {'<=' if ascending else '>='} {value}")
        if keep > 1:
            break
        tied = per_position
    return " AND ".join(bounds) or None


def _position_value(conn: Connection, scan: TableScan, k: int, position: int) -> tuple[str, str] | None:
    """Axis `k`'s coordinate column (as SQL) and its value at `position` in storage order, as a
    literal of the column's type; None when the value has no such literal (`exact_literals`)."""
    column = quote_ident(next(c.name for c in scan.columns if c.dim == k and c.derived is None))
    if scan.positional[k]:  # the position itself
        return column, f"CAST({quote_text(str(position))} AS BIGINT)"
    with _axis_tables(conn, scan, [], [], {k}) as axes:
        table = quote_ident(str(axes[k].table))
        try:  # in storage order
            kind, texts = exact_texts(conn, f"SELECT {column} AS v FROM {table} LIMIT 1 OFFSET {position}")
        except Decline:
            return None
    return column, f"CAST({quote_text(texts[0])} AS {kind})"


def _monotonic(scan: TableScan, axis: int) -> bool | None:
    """True when the axis' coordinate strictly increases, False when it strictly decreases,
    None otherwise (or when it holds labels, NaN or NaT)."""
    if scan.positional[axis]:
        return True  # positions strictly increase
    if isinstance(scan.dim_logical[axis], Labels) or scan.dim_logical[axis] not in _BOUNDABLE:
        return None
    values = np.asarray(scan.dims[axis].values)
    if values.dtype.kind not in "iufM" or len(values) < 2:
        return None
    if values.dtype.kind == "M" and np.isnat(values).any():
        return None
    # compared, not subtracted: a difference of unsigned values wraps (a descending uint16
    # axis would look ascending), and one of int64 values far apart overflows
    before, after = values[:-1], values[1:]
    if bool((after > before).all()):
        return True
    if bool((after < before).all()):
        return False
    return None
