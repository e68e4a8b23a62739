"""Aggregates answered from the coordinates: `SELECT count(*), min(time), ... FROM <one
zarrsql table> [WHERE ...]`.

A dense table has one row per cell, so DuckDB counting a 10^12-cell array, or finding its
first time, would have to receive 10^12 rows. When a statement only aggregates dimension
columns of one zarrsql table, optionally filtered on them, the answer comes from the 1-D
coordinate columns instead, without reading a data chunk:

1. The statement's tree (`json_serialize_sql`) must be exactly `SELECT <item> [, ...] FROM
   read_zarr(...) | a view that is `SELECT * FROM read_zarr(...)` (a `'x.zarr'` string, a
   mount) [AS alias] [WHERE cond]`, each item `count(*)`, `count(c)`, `count(DISTINCT c)`,
   `min(c)` or `max(c)` of a coordinate column `c` (a dimension, a derived column, an
   auxiliary coordinate over one dimension): no grouping, modifiers, CTEs or parameters.
2. `DESCRIBE` of the statement binds it as DuckDB would (and registers the scan); the scan
   the binding asked for names the table, and the result's column names and types.
3. The WHERE is split at AND, OR and NOT into *atoms*, each reading the columns of one axis
   only. DuckDB evaluates every atom over that axis' coordinate columns (the Arrow columns
   the scan itself would produce, so types, casts, NULLs and NaN behave identically) and
   groups the positions by their atoms' values: a few classes per axis with their sizes.
4. The predicate, with SQL's three values, is evaluated once per combination of classes
   (`plan/classes.py`): a count is the sum of class-size products where it is true; a
   class of an axis is *live* where it is true with some class of every other axis, and
   min, max and count(DISTINCT) of a column of that axis, which do not depend on how often
   a value occurs, are DuckDB's own aggregates of the column over the live positions. Those
   of a positional dimension no atom reads are its positions' (0, n - 1, n), by arithmetic:
   its axis is never handed over, and one of more than `MAX_POSITIONS_HELD` positions is
   handed over for no atom either (plan/positions.py): such a condition declines.
5. Each value becomes a constant of the statement's result type (`CAST('<text>' AS
   <type>)`, declined unless DuckDB reads the text back as the same value).

The statement then runs as a constant `SELECT` whose `WHERE` is a check of the table's store
(`ConnectionState.answer_check`): the answer came from coordinates decoded when it was computed, so a
relation holding it, fetched again after the store changed (a coordinate rewritten in place,
an append), fails and says to run the statement again instead of repeating an old answer; a
local store's check is a `stat` per document and coordinate chunk of the table, no chunk is
read. Any other shape, or anything unexpected on the way, leaves the statement as it was: it
runs as before, with the same result. A store that fails to open while a rewrite binds the
statement or a part of it (`bind`) is the exception: its error is the statement's own, raised
at once, since running the statement as written would open the store, and wait out its
retries and timeouts, a second time. So is a coordinate chunk that fails to read (a remote
table's coordinates are read on first use, here: `statement_reads`): the statement filters
on or outputs that coordinate, and would read the chunk, and fail, again.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from zarrsql.engine import params, parsetree
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.engine.sqltext import catalog_match, claimable, quote_ident, quote_text, view_body
from zarrsql.errors import MetadataError, QueryInterrupted, StoreReadError, ZarrSQLError
from zarrsql.expand.arrow import to_arrow
from zarrsql.plan.classes import AxisClasses, count_true, from_counts, live_classes
from zarrsql.plan.positions import Positions
from zarrsql.plan.predicate import And, Atom, Cmp, InSet, IsNull, Leaf, Not, Or, Predicate, conjoin, leaf_truth
from zarrsql.scan import Column, TableScan, open_table
from zarrsql.store import using_opener

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection

log = logging.getLogger(__name__)
#: Views followed from the statement to `read_zarr` (a view over a view over a mount...).
MAX_VIEW_DEPTH = 4
_QUICK = re.compile(r"\b(?:count|min|max)\s*\(", re.IGNORECASE)
#: Scalar functions an atom may call: deterministic built-ins (operators are functions too).
_FUNCTIONS = frozenset(
    {
        "+",
        "-",
        "*",
        "/",
        "//",
        "%",
        "**",
        "^",
        "~~",
        "!~~",
        "~~*",
        "!~~*",
        "~~~",
        "!~~~",
        "^@",
        "||",
        "like",
        "ilike",
        "not_like",
        "not_ilike",
        "glob",
        "lower",
        "upper",
        "lcase",
        "ucase",
        "abs",
        "round",
        "round_even",
        "even",
        "mod",
        "fmod",
        "cos",
        "sin",
        "tan",
        "cot",
        "acos",
        "asin",
        "atan",
        "atan2",
        "cosh",
        "sinh",
        "tanh",
        "radians",
        "degrees",
        "pi",
        "gamma",
        "lgamma",
        "factorial",
        "nullif",
        "ifnull",
        "if",
        "floor",
        "ceil",
        "ceiling",
        "trunc",
        "sign",
        "sqrt",
        "cbrt",
        "ln",
        "log",
        "log10",
        "log2",
        "exp",
        "pow",
        "power",
        "isnan",
        "isinf",
        "isfinite",
        "year",
        "month",
        "day",
        "hour",
        "minute",
        "second",
        "millisecond",
        "microsecond",
        "dayofweek",
        "dayofyear",
        "dayofmonth",
        "week",
        "weekofyear",
        "quarter",
        "yearweek",
        "isodow",
        "isoyear",
        "epoch",
        "epoch_ms",
        "epoch_us",
        "epoch_ns",
        "date_part",
        "datepart",
        "extract",
        "date_trunc",
        "datetrunc",
        "strftime",
        "length",
        "strlen",
        "substr",
        "substring",
        "prefix",
        "suffix",
        "starts_with",
        "ends_with",
        "contains",
        "regexp_matches",
        "regexp_full_match",
        "greatest",
        "least",
        "concat",
        "make_date",
        "make_timestamp",
        "date_diff",
        "datediff",
        "date_sub",
        "datesub",
        "date_add",
        "to_days",
        "to_hours",
        "to_minutes",
        "to_seconds",
        "to_microseconds",
        "to_milliseconds",
        "trim",
        "ltrim",
        "rtrim",
        "replace",
        "left",
        "right",
    }
)
_OPERATORS = frozenset(
    {"OPERATOR_NOT", "OPERATOR_IS_NULL", "OPERATOR_IS_NOT_NULL", "COMPARE_IN", "COMPARE_NOT_IN", "OPERATOR_COALESCE"}
)
_LEAF_CLASSES = frozenset({"TYPE", "CONSTANT", "CAST", "COMPARISON", "CONJUNCTION", "BETWEEN", "CASE", "COLLATE"})


class Raised(Exception):
    """An error a rewrite met doing the statement's own work (reading its chunks, opening its
    stores): raised as the statement's error, not declined (running it as written would only
    meet it again, after as many retries and timeouts again).

    `part`: met binding a part of the statement on its own (a join's side, `bind`), which the
    statement binds too unless the part lies in a CTE: DuckDB binds a CTE only where the
    statement reads it. For a statement that may have one, the rewrite declines instead."""

    def __init__(self, error: BaseException, *, part: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.part = part

    def met_as_written(self, query: str) -> bool:
        """Whether `query` run as written meets the error too (see the class docstring)."""
        return not self.part or not _WITH.search(query)


#: Errors binding a read meets when its store cannot be opened: a document that could not
#: be read (after the `retries` and `timeout` of its storage options) or is not valid Zarr.
#: The statement bound as written opens the same store and meets the same error, after the
#: same retries: a rewrite that met one while binding raises it (`bind`).
STORE_FAILURES = (StoreReadError, MetadataError)
#: Text that may start a CTE (`Raised.part`); a store's name holding the word only costs the
#: statement a second bind, as before.
_WITH = re.compile(r"\bwith\b", re.IGNORECASE)


def bind(conn: Connection, probe: str, *args: Any, part: bool = False) -> Any:
    """Run `probe`, a `DESCRIBE` that binds the statement (`part`: a part of it) and opens
    the stores it reads; a store that fails to open is raised as `Raised`, not left for the
    statement to open, and fail, again."""
    try:
        return conn._run(probe, conn._con.execute, probe, *args)
    except STORE_FAILURES as err:
        raise Raised(err, part=part) from None


@contextmanager
def statement_reads() -> Iterator[None]:
    """A block reading what the statement as written reads too: a remote table's coordinates
    (deferred: read by the first use of their values, all together, and read by the scan
    whenever the statement filters on or outputs one), or its chunks. A failure there is the
    statement's own error (`Raised`), not a decline: declined, the statement would read the
    same chunks, and fail the same way, again (after as many retries and timeouts). Ctrl-C
    is raised as KeyboardInterrupt, as the connection raises it."""
    try:
        yield
    except QueryInterrupted as err:
        raise Raised(KeyboardInterrupt(str(err))) from None
    except ZarrSQLError as err:
        raise Raised(err) from None


class _NoView(Decline):
    """No view has the name the statement reads (yet: a `'x.zarr'` string's is made on use)."""


@dataclass(frozen=True)
class _Item:
    """One item of the select list: `count` (of rows when `column` is None, else of a
    dimension column's non-NULL values), `distinct` (count(DISTINCT column)), `min` or `max`."""

    kind: str
    column: str | None


#: How an aggregate that only needs the live positions of its axis is written in SQL.
_AXIS_AGGREGATES = {"min": "min({})", "max": "max({})", "distinct": "count(DISTINCT {})"}
#: Result types a value is carried over as text in (`CAST('...' AS <type>)`).
_TYPE_NAME = re.compile(r"^[A-Z][A-Z0-9_ ]*(?:\(\d+(?:,\s*\d+)?\))?$")
#: Atoms of one axis at most: a position's class is a base-3 number that fits a BIGINT.
MAX_AXIS_ATOMS = 39
#: The column of a sparse matrix's compressed axis that says how many entries each position stores.
_ENTRIES = "__zarrsql_entries"
#: An atom's value by its digit in a class code.
_STATE = (False, True, None)
#: Atoms rendered by DuckDB, kept (the text depends on the tree alone; parses are kept by
#: `parsetree`), so a repeated statement costs no round trips for them.
_RENDERED: dict[str, str] = {}


def rewrite(conn: Connection, query: str, has_args: bool) -> str:
    """The statement to run for `query`: a constant SELECT when it is a count of one zarrsql
    table this module answers (see the module docstring), else `query` itself.

    Called by the connection before a top-level statement runs. A zarrsql error while
    binding is left for the statement itself to raise (a bad parameter), or raised at once
    when its store failed to open (`bind`): the statement would only open it again."""
    return rewritten_or_same(conn, query, has_args, _QUICK, _answer, "count not answered")


def rewritten_or_same(
    conn: Connection,
    query: Any,
    has_args: bool,
    quick: re.Pattern[str],
    rewrite: Callable[[Connection, str], str],
    what: str,
) -> Any:
    """`rewrite(conn, query)` for a top-level statement without parameters whose text
    `quick` matches; on a decline, or anything unexpected, the statement as written; the
    error of a `Raised` the statement as written would meet too."""
    if has_args or not isinstance(query, str) or not quick.search(query) or conn._state.depth:
        return query
    try:
        return rewrite(conn, query)
    except Decline as why:
        log.debug("%s: %s", what, why)
    except Raised as failed:  # the rewrite read the store and met a real error: the statement's
        if failed.met_as_written(query):
            raise failed.error.with_traceback(None) from None
        log.debug("%s: %r", what, failed.error)
    except Exception as err:  # the edge: whatever went wrong, the statement runs as written
        log.debug("%s: %r", what, err)
    return query


def _plain_select(node: dict[str, Any]) -> None:
    """Decline a SELECT with anything beyond a select list, one FROM and a WHERE."""
    if node.get("type") != "SELECT_NODE" or node.get("modifiers") or (node.get("cte_map") or {}).get("map"):
        raise Decline("not a plain SELECT")
    if node.get("group_expressions") or node.get("group_sets") or node.get("having") or node.get("qualify"):
        raise Decline("grouping")
    if node.get("sample") or node.get("aggregate_handling") not in (None, "STANDARD_HANDLING"):
        raise Decline("sample or GROUP BY ALL")


def _items(node: dict[str, Any]) -> list[_Item]:
    items = []
    for item in node["select_list"]:
        if item.get("class") != "FUNCTION" or item.get("schema") or item.get("catalog"):
            raise Decline("not an aggregate")
        if item.get("filter") or (item.get("order_bys") or {}).get("orders"):
            raise Decline("aggregate with FILTER or ORDER BY")
        if item.get("export_state"):
            raise Decline("exported aggregate state")
        # arguments: DuckDB 2.x names them `arguments`, 1.5 `children`
        name, args = item["function_name"].lower(), item.get("arguments", item.get("children")) or []
        if name == "count_star" and not args and not item.get("distinct"):
            items.append(_Item("count", None))
        elif (
            name in ("count", "min", "max") and len(args) == 1 and parsetree.argument(args[0])["class"] == "COLUMN_REF"
        ):
            # min(DISTINCT c) is min(c); count(DISTINCT c) counts values, not rows
            kind = "distinct" if name == "count" and item.get("distinct") else name
            items.append(_Item(kind, parsetree.ref(parsetree.argument(args[0]))))
        else:
            raise Decline("not count(*), count, min or max of a column")
    if not items:
        raise Decline("empty select list")
    return items


def _check_from(con: duckdb.DuckDBPyConnection, table: dict[str, Any], depth: int = 0) -> None:
    """Decline unless `table` is read_zarr(...) or a view that is exactly SELECT * of one."""
    if table.get("sample") or table.get("column_name_alias"):
        raise Decline("sample or column aliases")
    kind = table.get("type")
    if kind == "TABLE_FUNCTION":
        fn = table["function"]
        if fn.get("function_name", "").lower() != "read_zarr" or fn.get("schema") or fn.get("catalog"):
            raise Decline("a table function other than read_zarr")
        if table.get("with_ordinality") not in (None, "WITHOUT_ORDINALITY"):
            raise Decline("WITH ORDINALITY")
        return
    if kind != "BASE_TABLE" or table.get("at_clause") or depth >= MAX_VIEW_DEPTH:
        raise Decline("not a table function or a view")
    body = view_body(_view_sql(con, table))
    inner = parsetree.select_node(con, body)
    _plain_select(inner)
    star = inner["select_list"]
    if len(star) != 1 or star[0].get("class") != "STAR" or inner.get("where_clause") is not None:
        raise Decline("a view that is not SELECT * of one table")
    s = star[0]
    if s.get("relation_name") or s.get("columns") or s.get("expr") or s.get("alias"):
        raise Decline("a view with a qualified or computed star")
    if any(s.get(k) for k in ("exclude_list", "replace_list", "qualified_exclude_list", "rename_list")):
        raise Decline("a view that changes its columns")
    _check_from(con, inner["from_table"], depth + 1)


def _precheck(con: duckdb.DuckDBPyConnection, table: dict[str, Any]) -> None:
    """`_check_from` before binding, which lets a `'x.zarr'` string's view be missing yet."""
    try:
        _check_from(con, table)
    except _NoView:
        literal = table.get("type") == "BASE_TABLE" and not table.get("schema_name") and not table.get("catalog_name")
        if not (literal and claimable(str(table.get("table_name")))):
            raise


def _view_sql(con: duckdb.DuckDBPyConnection, table: dict[str, Any]) -> str:
    """The SQL of the one view `table` can name; decline a table or an ambiguous name."""
    tables_match, args = catalog_match(table, "table_name")
    tables = con.execute(f"SELECT count(*) FROM duckdb_tables() WHERE {tables_match}", args)
    if tables.fetchall()[0][0]:
        raise Decline("a table of that name")
    views_match, _ = catalog_match(table, "view_name")
    views = con.execute(f"SELECT sql FROM duckdb_views() WHERE {views_match}", args).fetchall()
    if not views:
        raise _NoView("no view of that name")
    if len(views) != 1 or not views[0][0]:
        raise Decline("no single view of that name")
    return str(views[0][0])


def _answer(conn: Connection, query: str) -> str:
    con = conn._con
    node = parsetree.select_node(con, query)
    _plain_select(node)
    items = _items(node)
    table = node["from_table"]
    _precheck(con, table)  # binding may perform actions (zarr_unmount): only bind a read
    names, types, scan = _bind(conn, query)
    _check_from(con, table)  # again: binding created the view of a 'x.zarr' string
    if len(names) != len(items):
        raise Decline("select list and result differ")
    by_name = _columns(scan)
    alias = (table.get("alias") or (table.get("table_name") if table.get("type") == "BASE_TABLE" else "")).lower()
    atoms: list[dict[str, Any]] = []
    where = node.get("where_clause")
    predicate = None if where is None else _split(where, by_name, alias, atoms)
    not_null = {  # count(c) counts where also c IS NOT NULL
        i: _not_null(scan, it.column, by_name, alias, atoms)
        for i, it in enumerate(items)
        if it.kind == "count" and it.column is not None
    }
    extra: list[tuple[int, Leaf]] = []
    if scan.base_predicate is not None:  # `bounds :=`: its leaves are evaluated with numpy
        predicate = conjoin((predicate, _as_atoms(scan.base_predicate, scan, extra, len(atoms))))
    wants = [_want(i, it, by_name, alias, predicate, not_null) for i, it in enumerate(items)]
    needed = {w.axis for w in wants if w.axis is not None}
    by_position = {k for k in needed if _by_position(scan, k, wants, atoms, extra)}
    with _axis_tables(conn, scan, atoms, extra, needed - by_position) as axes:
        classes = _classes(conn, axes)
        values = _values(conn, axes, classes, wants, types, by_position)
    check = conn._state.answer_check(conn._con, scan)
    return (
        "SELECT "
        + ", ".join(f"{v} AS {quote_ident(n)}" for v, n in zip(values, names, strict=True))
        + " WHERE "
        + check
    )


@dataclass(frozen=True)
class _Want:
    """An item resolved against the table: the cells it reads (`predicate`; None: all) and,
    for min, max and count(DISTINCT), the column and its axis, where it is aggregated."""

    kind: str
    predicate: Predicate | None
    column: str | None = None
    axis: int | None = None


def _want(
    i: int,
    item: _Item,
    by_name: dict[str, tuple[Column, int]],
    alias: str,
    predicate: Predicate | None,
    not_null: dict[int, Predicate | None],
) -> _Want:
    """count(c) counts the cells where also c IS NOT NULL; the other aggregates read c."""
    if item.kind == "count":
        return _Want("count", conjoin((predicate, not_null.get(i))))
    assert item.column is not None
    col, axis = _resolve(item.column, by_name, alias)
    return _Want(item.kind, predicate, col.name, axis)


def _bind(conn: Connection, query: str, *, as_text: bool = True) -> tuple[list[str], list[str], TableScan]:
    """Bind the statement (registering its scan if needed): its result's column names and
    types, and the table of the one scan the binding asked for. `as_text`: decline a result
    type whose values are not carried over as text (constants of `_values`)."""
    described = bind(conn, "DESCRIBE " + query).fetchall()
    types = [str(row[1]).upper() for row in described]
    if as_text and not all(_TYPE_NAME.match(t) for t in types):
        raise Decline("a result type not carried over as text")
    return [str(row[0]) for row in described], types, bound_scan(conn)


def bound_scan(conn: Connection) -> TableScan:
    """The table of the one zarrsql scan the statement just bound asked for (declined for
    none or several, and for rows that are neither cells nor one sparse matrix's entries)."""
    state = conn._state
    asked = {a: key for a, (gen, key) in list(state.scan_keys.items()) if gen == state.generation}
    if len(set(asked.values())) != 1:
        raise Decline("not exactly one zarrsql scan")
    args = next(iter(asked))
    scan = state.opened.get(args)  # the table the statement's scan opened: not opened twice
    if scan is None:
        with using_opener(state.opener):
            scan = open_table(params.read_request(params.parse_args(args)))
    _entries(scan)  # rows that are neither cells nor one sparse matrix's entries decline
    if scan.rows_are_cells and scan.num_rows != int(np.prod(scan.table.shape, dtype=object)):
        raise Decline("rows are not the cells of the table")
    return scan


def _columns(scan: TableScan) -> dict[str, tuple[Column, int]]:
    """Dimension, derived and one-dimensional auxiliary coordinate columns by lowercase name,
    with their axis; any other column maps to axis -1 (a WHERE on it is not answered)."""
    out: dict[str, tuple[Column, int]] = {}
    for col in scan.columns:
        axis = _axis_of(scan, col)
        if col.name.lower() in out:
            raise Decline("column names equal ignoring case")
        out[col.name.lower()] = (col, axis)
    return out


def _resolve(ref: str, by_name: dict[str, tuple[Column, int]], alias: str) -> tuple[Column, int]:
    qualifier, _, name = ref.rpartition("\0")
    if qualifier and qualifier != alias:
        raise Decline("a column of another relation")
    hit = by_name.get(name.lower())
    if hit is None or hit[1] < 0:
        raise Decline("not a dimension column")
    return hit


def _axes_of(node: Any, by_name: dict[str, tuple[Column, int]], alias: str) -> set[int]:
    """The axes an expression reads; declines anything an atom may not contain."""
    if isinstance(node, list):
        return set().union(*(_axes_of(n, by_name, alias) for n in node))
    if not isinstance(node, dict):
        return set()
    cls = node.get("class")
    if cls == "CONSTANT":
        return set()
    if cls == "COLUMN_REF":
        return {_resolve(parsetree.ref(node), by_name, alias)[1]}
    if cls == "FUNCTION":
        if node.get("function_name", "").lower() not in _FUNCTIONS or node.get("schema") or node.get("catalog"):
            raise Decline("a function that may not be deterministic")
        if node.get("distinct") or node.get("filter") or (node.get("order_bys") or {}).get("orders"):
            raise Decline("an aggregate-like call")
    elif cls == "OPERATOR":
        if node.get("type") not in _OPERATORS:
            raise Decline("an operator not known to be deterministic")
    elif cls is not None and cls not in _LEAF_CLASSES:  # None: a part of a node (a type, an argument)
        raise Decline(f"{cls} in WHERE")
    out: set[int] = set()
    for key, value in node.items():
        if key not in ("class", "type", "alias", "query_location", "query_location_length"):
            out |= _axes_of(value, by_name, alias)
    return out


def _split(node: dict[str, Any], by_name: dict[str, tuple[Column, int]], alias: str, atoms: list) -> Predicate:
    """The boolean structure over atoms (see the module docstring); `atoms` collects
    (axis, expression) of each atom in key order."""
    axes = _axes_of(node, by_name, alias)
    if len(axes) <= 1:
        atoms.append({"axis": min(axes) if axes else 0, "node": _unqualified(node, by_name, alias)})
        return Atom(f"\0axis{min(axes) if axes else 0}", len(atoms) - 1)
    kind = node.get("type")
    if kind in ("CONJUNCTION_AND", "CONJUNCTION_OR"):
        parts = tuple(_split(c, by_name, alias, atoms) for c in node["children"])
        return And(parts) if kind == "CONJUNCTION_AND" else Or(parts)
    if kind == "OPERATOR_NOT" and len(node["children"]) == 1:
        return Not(_split(node["children"][0], by_name, alias, atoms))
    raise Decline("an expression that reads two dimensions at once")


def _unqualified(node: Any, by_name: dict[str, tuple[Column, int]], alias: str) -> Any:
    """A copy of `node` whose column references name the scan's columns alone."""
    if isinstance(node, list):
        return [_unqualified(n, by_name, alias) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("class") == "COLUMN_REF":
        col, _ = _resolve(parsetree.ref(node), by_name, alias)
        return {**node, "column_names": [col.name]}
    return {k: _unqualified(v, by_name, alias) for k, v in node.items()}


def _not_null(
    scan: TableScan, ref: str, by_name: dict[str, tuple[Column, int]], alias: str, atoms: list
) -> Predicate | None:
    """The cells where column `ref` is not NULL: an atom, or None (every cell) for a positional
    dimension's column, whose positions are never NULL (and are not handed over as a table)."""
    col, axis = _resolve(ref, by_name, alias)
    if col.dim is not None and scan.positional[col.dim]:
        return None
    atoms.append({"axis": axis, "sql": f"{quote_ident(col.name)} IS NOT NULL"})
    return Atom(f"\0axis{axis}", len(atoms) - 1)


def _as_atoms(p: Predicate, scan: TableScan, extra: list[tuple[int, Leaf]], offset: int) -> Predicate:
    """`bounds :=`'s predicate with each leaf an Atom (evaluated with numpy, not DuckDB)."""
    if isinstance(p, (Cmp, InSet, IsNull)):
        axis = next(k for k, d in enumerate(scan.dims) if d.name == p.column)
        extra.append((axis, p))
        return Atom(f"\0axis{axis}", offset + len(extra) - 1)
    if isinstance(p, Not):
        return Not(_as_atoms(p.child, scan, extra, offset))
    if isinstance(p, (And, Or)):
        return type(p)(tuple(_as_atoms(c, scan, extra, offset) for c in p.children))
    raise Decline("an unexpected bounds predicate")


@dataclass(frozen=True)
class _Axis:
    """One axis of the table as DuckDB sees it: `table` (None when nothing is asked of the
    axis) is a registered Arrow table of its coordinate columns (and of the `bounds :=`
    leaves), `keys` the atoms on it and `code` the SQL of a position's class: the base-3
    number of its atoms' values (0 false, 1 true, 2 NULL). `total` is how many rows the
    axis multiplies the count by: its length, or for a sparse matrix the entries stored
    along its compressed axis (`weighted`: each position weighs its entries) and 1 along
    the other."""

    index: int
    total: int
    table: str | None
    keys: tuple[int, ...]
    code: str
    weighted: bool = False


@contextmanager
def _axis_tables(
    conn: Connection, scan: TableScan, atoms: list[dict[str, Any]], extra: list[tuple[int, Leaf]], needed: set[int]
) -> Iterator[list[_Axis]]:
    """Every axis, each with its coordinate table registered while the block runs when it
    has atoms or an aggregate of one of its columns is asked for."""
    axes, registered = [], []
    entries = _entries(scan)
    try:
        for k in range(len(scan.table.shape)):
            axis, table = _axis(conn, scan, k, atoms, extra, needed=k in needed, entries=entries)
            if table is not None:
                conn._con.register(str(axis.table), table)
                registered.append(str(axis.table))
            axes.append(axis)
        yield axes
    finally:
        for name in registered:
            conn._con.unregister(name)


def _axis(
    conn: Connection,
    scan: TableScan,
    k: int,
    atoms: list[dict[str, Any]],
    extra: list[tuple[int, Leaf]],
    *,
    needed: bool,
    entries: tuple[int, np.ndarray] | None,
) -> tuple[_Axis, pa.Table | None]:
    """Axis `k` and the Arrow table to register under its name (None when nothing is asked
    of it): the atoms of the WHERE and of count(c) on it, then those of `bounds :=`."""
    mine = [(key, _atom_sql(conn, a)) for key, a in enumerate(atoms) if a["axis"] == k]
    theirs = [(len(atoms) + j, leaf) for j, (axis, leaf) in enumerate(extra) if axis == k]
    selects = mine + [(key, quote_ident(f"__zarrsql_leaf_{key}")) for key, _ in theirs]
    if len(selects) > MAX_AXIS_ATOMS:
        raise Decline("too many conditions on one dimension")
    weighted = entries is not None and k == entries[0]
    if entries is not None and not weighted:
        if selects or needed:  # where its entries lie is in `indices`: data, not planned
            raise Decline("a condition or aggregate on a sparse matrix's uncompressed axis")
        return _Axis(k, 1, None, (), "0"), None
    total = int(entries[1].sum()) if entries is not None else scan.table.shape[k]
    if not selects and not needed:
        return _Axis(k, total, None, (), "0"), None
    table = _axis_table(scan, k, theirs)
    if any("node" in a for a in atoms if a["axis"] == k) and not HAS_SOURCES and _has_nan(table):
        # a WHERE on it: 1.5 hands a pushed filter to Arrow, where NaN is below every number
        raise Decline("a condition on a coordinate holding NaN, on DuckDB 1.5")
    if entries is not None:
        table = table.append_column(_ENTRIES, pa.array(entries[1]))
    terms = [f"coalesce(CAST(CAST(({sql}) AS BOOLEAN) AS BIGINT), 2) * {3**j}" for j, (_, sql) in enumerate(selects)]
    name = "__zarrsql_axis_" + uuid.uuid4().hex[:12]
    keys = tuple(key for key, _ in selects)
    return _Axis(k, total, name, keys, " + ".join(terms) or "0", weighted=weighted), table


def _entries(scan: TableScan) -> tuple[int, np.ndarray] | None:
    """None for a table whose rows are its cells; for the stored entries of one sparse
    matrix, its compressed axis and how many entries each position of it stores (the index
    pointer, read when the table opened); declined for several matrices (their rows are
    the union of their stored positions)."""
    if scan.rows_are_cells:
        return None
    pointers, axis = getattr(scan, "pointers", None), getattr(scan, "axis", None)
    if pointers is None or axis is None or len(pointers) != 1:
        raise Decline("rows that are not one sparse matrix's entries")
    return int(axis), np.diff(np.asarray(pointers[0], dtype=np.int64))


def _axis_table(scan: TableScan, axis: int, leaves: list[tuple[int, Leaf]]) -> pa.Table:
    """The columns of one axis as the scan hands them to DuckDB, and each `bounds :=` leaf's
    truth there. A positional dimension's positions are handed over only up to
    `MAX_POSITIONS_HELD`: a longer axis is declined (the statement runs as written). A
    coordinate that fails to read is the statement's error (`statement_reads`)."""
    with statement_reads():  # the first use of a remote table's coordinates reads them
        values = scan.dims[axis].values
        if isinstance(values, Positions) and not values.holdable:
            raise Decline("a positional dimension too long to hand over as a table")
        columns = {c.name: _coordinate_array(scan, c) for c in scan.columns if _axis_of(scan, c) == axis}
    for key, leaf in leaves:
        t, nl = leaf_truth(leaf, np.asarray(values), scan.dims[axis].nulls)
        columns[f"__zarrsql_leaf_{key}"] = pa.array(t, mask=nl)
    if not columns:
        raise Decline("an axis without a column")
    return pa.table(columns)


def _has_nan(table: pa.Table) -> bool:
    # imported here: pyarrow.compute costs 9 MB of memory, and a query not answered here needs none
    import pyarrow.compute as pc

    return any(pa.types.is_floating(c.type) and pc.any(pc.is_nan(c)).as_py() for c in table.columns)


def _classes(conn: Connection, axes: list[_Axis]) -> list[tuple[AxisClasses, list[int]]]:
    """The classes of every axis (DuckDB groups each axis' positions by their atoms' values,
    all axes in one statement), and each class's code."""
    asked = [a for a in axes if a.keys]
    found: dict[int, list[tuple[int, int]]] = {a.index: [] for a in asked}
    if asked:
        parts = (
            f"(SELECT {a.index} AS axis, code, {f'sum({_ENTRIES})' if a.weighted else 'count(*)'} AS n FROM "
            f"(SELECT {a.code} AS code{f', {_ENTRIES}' if a.weighted else ''} FROM {quote_ident(str(a.table))}) "
            "GROUP BY code)"
            for a in asked
        )
        for axis, code, n in conn._con.execute(" UNION ALL ".join(parts)).fetchall():
            found[axis].append((int(code), int(n)))
    out = []
    for a in axes:
        if not a.keys:
            out.append((from_counts([], [()], [a.total]), [0]))
            continue
        leaves = [Atom(f"\0axis{a.index}", key) for key in a.keys]
        states = [[_STATE[(code // 3**j) % 3] for j in range(len(leaves))] for code, _ in found[a.index]]
        out.append((from_counts(leaves, states, [n for _, n in found[a.index]]), [c for c, _ in found[a.index]]))
    return out


def _values(
    conn: Connection,
    axes: list[_Axis],
    classes: list[tuple[AxisClasses, list[int]]],
    wants: list[_Want],
    types: list[str],
    by_position: set[int],
) -> list[str]:
    """Each item's value as a SQL constant of its result type; those of the axes
    `by_position` by arithmetic over their positions (`_by_position`)."""
    values: dict[int, str] = {}
    per_axis: dict[int, list[int]] = {}
    sizes = [c for c, _ in classes]
    for i, (w, t) in enumerate(zip(wants, types, strict=True)):
        if w.axis is None:
            values[i] = _count_value(w.predicate, axes, sizes, t)
        else:
            per_axis.setdefault(w.axis, []).append(i)
    parts = []
    for k, picked in per_axis.items():
        live = live_classes(wants[picked[0]].predicate, sizes, k)  # every aggregate reads the WHERE's cells
        if live is None:
            raise Decline("too many classes")
        if k in by_position:
            values.update((i, _position_value(wants[i], types[i], axes[k].total, bool(live.any()))) for i in picked)
            continue
        codes = [code for code, alive in zip(classes[k][1], live, strict=True) if alive]
        parts.append(_aggregate_sql(axes[k], codes, [wants[i] for i in picked], [types[i] for i in picked]))
    if parts:  # one statement: a row per axis, joined
        row = conn._con.execute("SELECT * FROM " + ", ".join(parts)).fetchall()[0]
        for k, picked in per_axis.items():
            if k in by_position:
                continue
            texts, row = _constants(row[: 3 * len(picked)], [types[i] for i in picked]), row[3 * len(picked) :]
            values.update(zip(picked, texts, strict=True))
    return [values[i] for i in range(len(wants))]


def _by_position(
    scan: TableScan, k: int, wants: list[_Want], atoms: list[dict[str, Any]], extra: list[tuple[int, Leaf]]
) -> bool:
    """Whether the aggregates of axis `k` are its positions' (min, max, count(DISTINCT) of a
    positional dimension's column, nothing else asked of the axis): answered by arithmetic,
    without handing DuckDB the axis as a table (`_position_value`), however long it is."""
    if not (scan.rows_are_cells and scan.positional[k]):
        return False
    if any(a["axis"] == k for a in atoms) or any(axis == k for axis, _ in extra):
        return False
    return all(w.column == scan.dims[k].name for w in wants if w.axis == k)


def _position_value(want: _Want, kind: str, n: int, live: bool) -> str:
    """min, max or count(DISTINCT) of the positions 0 .. n-1 of an axis that nothing in the
    statement filters (`live`: whether the WHERE keeps any cell at all), as a constant."""
    if kind != "BIGINT":
        raise Decline("an aggregate of positions that is not BIGINT")
    if want.kind == "distinct":
        return f"CAST({n if live else 0} AS BIGINT)"
    if not live or n == 0:
        return "CAST(NULL AS BIGINT)"
    return f"CAST({0 if want.kind == 'min' else n - 1} AS BIGINT)"


def _count_value(predicate: Predicate | None, axes: list[_Axis], classes: list[AxisClasses], kind: str) -> str:
    """The cells where `predicate` holds, as a BIGINT constant."""
    if kind != "BIGINT":
        raise Decline("a count that is not BIGINT")
    n = int(np.prod([a.total for a in axes], dtype=object)) if predicate is None else count_true(predicate, classes)
    if n is None or n >= 2**63:
        raise Decline("too many classes, or beyond BIGINT")
    return f"CAST({n} AS BIGINT)"


def _aggregate_sql(axis: _Axis, codes: list[int], wants: list[_Want], types: list[str]) -> str:
    """A one-row subquery: min, max and count(DISTINCT) of the axis' columns over the
    positions of its live classes `codes`, computed by DuckDB over the coordinate columns
    the scan would produce (so NULLs are skipped and NaN is the largest value, as in the
    full query); per item its text, its type, and whether the text reads back as the value."""
    if not codes:
        keep = "false"
    else:
        keep = "true" if not axis.keys else f"({axis.code}) IN ({', '.join(str(c) for c in codes)})"
    if axis.weighted:  # a position without a stored entry has no row
        keep = f"({keep}) AND {_ENTRIES} > 0"
    inner = ", ".join(
        _AXIS_AGGREGATES[w.kind].format(quote_ident(str(w.column))) + f" AS a{j}" for j, w in enumerate(wants)
    )
    outer = ", ".join(
        f"CAST(a{j} AS VARCHAR) AS s{j}, typeof(a{j}) AS t{j}, "
        f"CAST(CAST(a{j} AS VARCHAR) AS {t}) IS NOT DISTINCT FROM a{j} AS r{j}"
        for j, t in enumerate(types)
    )
    return f"(SELECT {outer} FROM (SELECT {inner} FROM {quote_ident(str(axis.table))} WHERE {keep})) AS x{axis.index}"


def _constants(row: Sequence[Any], types: list[str]) -> list[str]:
    """Each aggregate of `_aggregate_sql`'s row as a constant of its result type; declined
    unless DuckDB typed it as the statement's result column and its text reads back."""
    out = []
    for j, t in enumerate(types):
        text, kind, same = row[3 * j : 3 * j + 3]
        if str(kind).upper() != t or same is not True:
            raise Decline("an aggregate whose type or text differs")
        out.append(f"CAST(NULL AS {t})" if text is None else f"CAST({quote_text(str(text))} AS {t})")
    return out


def _axis_of(scan: TableScan, col: Column) -> int:
    """The axis a column's values lie along, or -1 (a data variable, an auxiliary
    coordinate over several axes)."""
    if col.dim is not None:
        return col.dim
    if col.derived is not None:
        return scan.derived[col.derived][0]
    if col.aux is not None:
        axes = scan.aux[col.aux][1]  # type: ignore[attr-defined]  # a dense scan's, read whole at open
        return axes[0] if len(axes) == 1 else -1
    return -1


def _coordinate_array(scan: TableScan, col: Column) -> pa.Array:
    """A coordinate column along its axis, as the scan hands it to DuckDB."""
    from zarrsql.decode.logical import Labels

    if col.aux is not None:
        _, _, values, nulls = scan.aux[col.aux]  # type: ignore[attr-defined]
    else:
        dv = scan.dims[col.dim] if col.dim is not None else scan.derived[col.derived][1]  # type: ignore[index]
        values, nulls = np.asarray(dv.values), dv.nulls  # positions: held, within `_axis_table`'s limit
        values = np.arange(len(values), dtype=np.int32) if isinstance(col.logical, Labels) else values
    array = to_arrow(values, nulls, col.logical)
    if not HAS_SOURCES and pa.types.is_dictionary(array.type) and pa.types.is_string(array.type.value_type):
        array = array.cast(array.type.value_type)  # the 1.5 dataset shell hands plain strings
    return array


def _atom_sql(conn: Connection, atom: dict[str, Any]) -> str:
    """An atom's SQL text, rendered by DuckDB from its tree."""
    if "sql" in atom:
        return str(atom["sql"])
    return rendered(conn, [atom["node"]])[0]


def rendered(conn: Connection, nodes: Sequence[dict[str, Any]], statement: dict[str, Any] | None = None) -> list[str]:
    """DuckDB's SQL text of each expression tree of `nodes`, then, when given, of the
    statement tree `statement`: all in one round trip, as a rewrite asks for every atom of a
    statement and for its rewritten text at once, each constant keeping its type
    (`parsetree.printable`). The atoms' texts are kept (`_RENDERED`: they depend on the tree
    alone); the statement's is not (it names a result registered for this statement only)."""
    con = conn._con
    frame = parsetree.parsed_text(con, "SELECT 1")
    trees = [parsetree.item_tree(frame, parsetree.retyped(con, node)) for node in nodes]
    texts = parsetree.cached(_RENDERED, trees)
    missing = [tree for tree, text in texts.items() if text is None]
    asked = missing + ([json.dumps(parsetree.printable(con, statement))] if statement is not None else [])
    row: Sequence[Any] = ()
    if asked:
        calls = ", ".join(["json_deserialize_sql(?)"] * len(asked))
        row = con.execute(f"SELECT {calls}", asked).fetchall()[0]
        for tree, text in zip(missing, row, strict=False):
            texts[tree] = parsetree.kept(_RENDERED, tree, str(text))
    out = [parsetree.item_text(str(texts[tree])) for tree in trees]
    return (out + [str(row[-1])]) if statement is not None else out
