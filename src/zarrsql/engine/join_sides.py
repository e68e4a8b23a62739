"""The other side of a pruned join: whether its keys, listed by a statement of their own, are
the keys the join compares with.

`joins` runs a join's other side (or an `IN` subquery) on its own for its distinct keys and
pushes them into the zarr side as literals. That is only the join's own filter when three
things hold, and each check here declines (`Decline`) when it cannot show one of them:

1. Every name the other side reads resolves alone as in the statement. A name the statement
   defines as a CTE (anywhere in it) resolves, alone, to a table or view of that name, or to
   nothing; such a side is declined (`check_side`), and so is a zarr side named like a CTE.
2. The other side gives the same rows when run twice. Declined: a function DuckDB marks
   volatile (`random()`, `uuid()`, `nextval`, `setseed`, ...) or only consistent within one
   query (`now()`, `current_date`: the two runs are two queries), a macro (its body is not
   read), an aggregate whose value depends on row order (`first`, `any_value`, `arg_max`,
   `list`, `string_agg`, ...), a window function, `LIMIT` / `OFFSET` (which pick among ties),
   `DISTINCT ON`, `USING SAMPLE` / `TABLESAMPLE`, and table functions not known to read the
   same rows each time. Views the side reads are followed (their SQL from `duckdb_views()`)
   and checked alike.
3. The keys compare without a collation: the literals are plain `VARCHAR`s, compared
   case- and accent-sensitively, where a join under `COLLATE NOCASE` would match more.
   DuckDB shows a column's collation in neither `DESCRIBE` nor `duckdb_columns()`, only in its
   table's `CREATE` text, so declined are: a non-empty `default_collation` setting, a
   `COLLATE` anywhere in the statement or in a view the side reads (`check_statement`,
   `check_side`), and a side reading a table whose `CREATE` text names a collation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from zarrsql.engine import parsetree
from zarrsql.engine.functions import FUNCTIONS
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.sqltext import catalog_match, quote_text, view_body

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection

#: Views followed from the other side into the views they read (a view over a view ...).
MAX_VIEW_DEPTH = 8
#: Aggregates whose value depends on the order rows arrive in (or on a random sample), which
#: DuckDB's parallel scans do not fix: two runs may give two values.
_ORDER_DEPENDENT = frozenset(
    {
        "first",
        "last",
        "any_value",
        "arbitrary",
        "arg_min",
        "arg_max",
        "argmin",
        "argmax",
        "arg_min_null",
        "arg_max_null",
        "min_by",
        "max_by",
        "list",
        "array_agg",
        "string_agg",
        "group_concat",
        "listagg",
        "mode",
        "json_group_array",
        "json_group_object",
        "approx_quantile",
        "approx_top_k",
        "reservoir_quantile",
    }
)
#: Table functions that read the same rows each time they run (files, registered Python
#: objects, series); any other (`query`, `query_table`, a scanner of another database, a
#: table macro) may hide what the checks look for.
_STEADY_TABLE_FUNCTIONS = frozenset(
    {
        "read_parquet",
        "parquet_scan",
        "read_csv",
        "read_csv_auto",
        "read_json",
        "read_json_auto",
        "read_ndjson",
        "read_ndjson_auto",
        "pandas_scan",
        "arrow_scan",
        "arrow_scan_dumb",
        "range",
        "generate_series",
        "unnest",
        *FUNCTIONS,
    }
)


def check_statement(conn: Connection, doc: dict[str, Any]) -> frozenset[str]:
    """Decline a statement whose comparisons may be under a collation (the setting, or a
    `COLLATE` anywhere in it); else the names its CTEs define, lower-cased."""
    (setting,) = conn._con.execute("SELECT current_setting('default_collation')").fetchall()[0]
    if str(setting or ""):
        raise Decline("a default_collation is set")
    ctes: set[str] = set()
    for node in _dicts(doc):
        if node.get("class") == "COLLATE":
            raise Decline("a COLLATE in the statement")
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            ctes.update(str(entry.get("key", "")).lower() for entry in cte_map.get("map") or [])
    return frozenset(ctes)


def check_zarr_side(table: dict[str, Any], ctes: frozenset[str]) -> None:
    """Decline a zarr side named like one of the statement's CTEs: alone it is the zarrsql
    table, in the statement the CTE, whose columns may compare otherwise."""
    if table.get("type") == "BASE_TABLE" and str(table.get("table_name", "")).lower() in ctes:
        raise Decline("the zarr side is named like a CTE")


def check_side(conn: Connection, tree: dict[str, Any], ctes: frozenset[str]) -> None:
    """Decline unless `tree` (a join's other side, or an `IN` subquery's node), run on its own,
    gives the rows it gives in the statement, compared without a collation (module docstring)."""
    functions: set[str] = set()
    _check_tree(conn, tree, ctes, functions, depth=0)
    if not functions:
        return
    listed = ", ".join(quote_text(name) for name in sorted(functions))
    found = conn._con.execute(
        "SELECT lower(function_name), bool_or(stability = 'VOLATILE'), bool_or(stability = 'CONSISTENT') "
        f"FROM duckdb_functions() WHERE lower(function_name) IN ({listed}) GROUP BY 1"
    ).fetchall()
    if len(found) != len(functions) or any(volatile or not steady for _, volatile, steady in found):
        raise Decline("a function that may give another value in another query")


def _check_tree(conn: Connection, tree: Any, ctes: frozenset[str], functions: set[str], *, depth: int) -> None:
    """Walk `tree`: decline what cannot run twice alike, collect the scalar and aggregate
    functions it calls into `functions`, and follow the tables and views it reads."""
    for node in _dicts(tree, skip_table_function_names=True):
        kind = node.get("class")
        if kind in ("WINDOW", "COLLATE"):
            raise Decline(f"{kind} in the other side")
        if kind == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            if name in _ORDER_DEPENDENT:
                raise Decline(f"{name}() depends on the order of rows")
            functions.add(name)
        if node.get("sample"):
            raise Decline("a sample")
        for modifier in node.get("modifiers") or []:
            if not isinstance(modifier, dict):
                continue
            if str(modifier.get("type", "")).startswith("LIMIT") or modifier.get("distinct_on_targets"):
                raise Decline("LIMIT, OFFSET or DISTINCT ON")
        if node.get("type") == "TABLE_FUNCTION":
            _check_table_function(conn, node)
        elif node.get("type") == "BASE_TABLE":
            if str(node.get("table_name", "")).lower() in ctes:
                raise Decline("a name the statement defines as a CTE")
            _check_table(conn, node, functions, depth=depth)


def _check_table_function(conn: Connection, node: dict[str, Any]) -> None:
    function = node.get("function") or {}
    name = str(function.get("function_name", "")).lower()
    if function.get("schema") or function.get("catalog") or name not in _STEADY_TABLE_FUNCTIONS:
        raise Decline(f"table function {name}")


def _check_table(conn: Connection, table: dict[str, Any], functions: set[str], *, depth: int) -> None:
    """Follow every view `table` may name (in any schema, when unqualified) into its SQL, and
    decline a table whose `CREATE` text names a collation or is not DuckDB's own."""
    tables_match, args = catalog_match(table, "table_name")
    views_match, _ = catalog_match(table, "view_name")
    con = conn._con
    for (sql,) in con.execute(f"SELECT sql FROM duckdb_tables() WHERE {tables_match}", args).fetchall():
        if not sql or "collate" in str(sql).lower():
            raise Decline("a table with a collation, or of another database")
    views = con.execute(f"SELECT sql FROM duckdb_views() WHERE {views_match}", args).fetchall()
    for (sql,) in views:
        if not sql:  # DuckDB 1.5's view of a registered Python object
            continue
        if depth >= MAX_VIEW_DEPTH:
            raise Decline("views nested too deep")
        _check_tree(conn, parsetree.select_node(con, view_body(str(sql))), frozenset(), functions, depth=depth + 1)


def _dicts(tree: Any, *, skip_table_function_names: bool = False) -> Iterator[dict[str, Any]]:
    """Every dict node of `tree`, outer first; with `skip_table_function_names`, a table
    function's own call node is passed over (its arguments are not), so its name is not taken
    for a scalar function's."""
    if isinstance(tree, list):
        for value in tree:
            yield from _dicts(value, skip_table_function_names=skip_table_function_names)
        return
    if not isinstance(tree, dict):
        return
    yield tree
    for key, value in tree.items():
        if skip_table_function_names and key == "function" and tree.get("type") == "TABLE_FUNCTION":
            arguments = value.get("arguments", value.get("children")) if isinstance(value, dict) else None
            yield from _dicts(arguments, skip_table_function_names=True)
            continue
        yield from _dicts(value, skip_table_function_names=skip_table_function_names)
