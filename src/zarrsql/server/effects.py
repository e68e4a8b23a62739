"""The functions a query calls, and which of them change something beyond its own result.

A SELECT can change what every client shares through the functions it calls: `nextval`
advances a sequence (persisted in a database file), `checkpoint()` writes the file,
`enable_logging(storage_path := ...)` and `enable_profiling(save_location := ...)` write files
wherever they are told and turn on settings every connection shares. A read-only server
refuses a statement that calls one (`policy.classify`).

The calls are read from DuckDB's own parse tree (`json_serialize_sql`), so quoting, schema
names, method syntax (`'seq'.nextval()`), subqueries, CTEs and lambdas hide none of them.
`query('...')` runs its string, which is judged as a statement of its own; a `query` whose
text is not a literal string is refused (nothing here can see what it runs). So are the points
of `zarr_sample(store, points)`, a query (or a table name) it runs to read them. Text DuckDB
cannot serialize (PIVOT) is read instead for every `name(` outside strings and comments,
which refuses more calls, never fewer.

Which calls change state:
- scalar functions DuckDB flags `has_side_effects`, except those in `_HARMLESS_SCALARS`
  (random numbers, ids, the current query, `error`): a flagged function a later DuckDB adds
  is refused until someone adds it there;
- table functions in `_STATE_TABLE_FUNCTIONS`, and any whose name starts with a verb of
  change (`_CHANGE_VERBS`): DuckDB flags no table function, but names them for what they do
  (`enable_logging`, `register_external_resource`, `add_grammar_extension`, ...).
Functions of extensions the server's owner loaded are judged by the same names and verbs.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import duckdb

from zarrsql.engine.parsetree import constant

#: Scalar functions DuckDB flags as having side effects that change nothing a client shares:
#: they draw random numbers or ids, report the current query, raise, or wait.
_HARMLESS_SCALARS = frozenset(
    {
        "current_connection_id",
        "current_query",
        "current_query_id",
        "current_transaction_id",
        "currval",
        "error",
        "gen_random_uuid",
        "random",
        "setseed",  # the session's own random sequence
        "sleep_ms",  # bounded by the query time limit
        "stats",
        "uuid",
        "uuidv4",
        "uuidv7",
        "vector_type",
    }
)
#: Scalar functions refused whatever DuckDB's flag says (a version that does not flag them).
_STATE_SCALARS = frozenset({"nextval", "setval", "write_log"})
#: Table functions that write the database file, change the settings every connection
#: shares, run SQL this module cannot see, or read memory at an address a client gives.
_STATE_TABLE_FUNCTIONS = frozenset(
    {
        "checkpoint",
        "force_checkpoint",
        "enable_logging",
        "disable_logging",
        "truncate_duckdb_logs",
        "enable_profiling",
        "disable_profiling",
        "json_execute_serialized_sql",
        "arrow_scan",
        "arrow_scan_dumb",
        "python_arrow_scan",
        "pandas_scan",
        "python_map_function",
    }
)
_CHANGE_VERBS = (
    "add_",
    "alter_",
    "attach_",
    "checkpoint",
    "create_",
    "delete_",
    "deregister_",
    "destroy_",
    "detach_",
    "disable_",
    "drop_",
    "enable_",
    "force_",
    "insert_",
    "install_",
    "load_",
    "register_",
    "remove_",
    "reset_",
    "set_",
    "truncate_",
    "unregister_",
    "update_",
    "write_",
)
#: Table functions that run a text argument as a query: (its position, its keyword name).
_RUNS_TEXT = {"query": (0, "query"), "zarr_sample": (1, "points")}
#: `query('...')` strings judged inside one another at most this deep.
_MAX_NESTING = 8

_STRINGS = re.compile(r"'(?:[^']|'')*'")
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_CALL_NAMES = re.compile(r'([A-Za-z_][A-Za-z0-9_$]*)"?\s*\(')

_parser_lock = threading.Lock()
_parser: duckdb.DuckDBPyConnection | None = None
_flagged_scalars: frozenset[str] | None = None


def bare_text(sql: str) -> str:
    """`sql` without its strings and comments (each string left as `''`)."""
    return _COMMENTS.sub(" ", _STRINGS.sub("''", sql))


def state_changes(sql: str, *, depth: int = 0) -> list[str]:
    """The calls in `sql` that change state (as `name()`), in the order found; empty when it
    only reads. `sql` is a query's text (SELECT, WITH, VALUES, DESCRIBE, ...)."""
    tree = _serialized(sql)
    if tree is None:
        names = {name.lower() for name in _CALL_NAMES.findall(bare_text(sql))}
        return sorted(f"{n}()" for n in names if n == "query" or _changes_scalar(n) or _changes_table(n))
    found: list[str] = []
    for kind, name, call in _calls(tree):
        if kind == "table" and name in _RUNS_TEXT:
            found += _inside_query(call, name, depth)
        elif _changes_table(name) if kind == "table" else _changes_scalar(name):
            found.append(f"{name}()")
    return list(dict.fromkeys(found))


def _inside_query(call: dict[str, Any], name: str, depth: int) -> list[str]:
    position, keyword = _RUNS_TEXT[name]
    text = _text_argument(call, position, keyword)
    if text is None or depth >= _MAX_NESTING:
        return [f"{name}() of a text that is not a literal string"]
    return state_changes(text, depth=depth + 1)


def _changes_scalar(name: str) -> bool:
    return name in _STATE_SCALARS or (name in _side_effect_scalars() and name not in _HARMLESS_SCALARS)


def _changes_table(name: str) -> bool:
    return name in _STATE_TABLE_FUNCTIONS or name.startswith(_CHANGE_VERBS)


def _serialized(sql: str) -> Any:
    """DuckDB's parse tree of `sql` as JSON, or None when DuckDB does not serialize it (a
    statement other than a plain query, or a build without the json extension)."""
    try:
        with _parser_lock:
            (text,) = _parser_connection().execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone() or (None,)
        tree = json.loads(text) if isinstance(text, str) else None
    except (duckdb.Error, ValueError, RecursionError):
        return None
    if not isinstance(tree, dict) or tree.get("error"):
        return None
    return tree


def _parser_connection() -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB that parses (never runs) client statements; call with
    `_parser_lock` held."""
    global _parser
    if _parser is None:
        _parser = duckdb.connect(":memory:")
    return _parser


def _side_effect_scalars() -> frozenset[str]:
    """The scalar functions DuckDB flags `has_side_effects` (read once)."""
    global _flagged_scalars
    if _flagged_scalars is None:
        with _parser_lock:
            rows = (
                _parser_connection()
                .execute("SELECT DISTINCT lower(function_name) FROM duckdb_functions() WHERE has_side_effects")
                .fetchall()
            )
        _flagged_scalars = frozenset(name for (name,) in rows)
    return _flagged_scalars


def _calls(tree: Any) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(kind, lower-case name, node) of every function call in a serialized statement: kind
    "table" for a table function, else "scalar" (aggregates and window functions too).
    Walked with a stack: a deeply nested expression must not exhaust Python's recursion."""
    stack: list[tuple[Any, bool]] = [(tree, False)]
    while stack:
        node, table_function = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in node)
        elif isinstance(node, dict):
            name = node.get("function_name")
            if isinstance(name, str):
                yield ("table" if table_function else "scalar"), name.lower(), node
            is_reference = node.get("type") == "TABLE_FUNCTION"
            stack.extend((value, is_reference and key == "function") for key, value in node.items())


def _text_argument(call: dict[str, Any], position: int, keyword: str) -> str | None:
    """The serialized call's argument named `keyword`, or else its unnamed argument at
    `position`, when it is a literal string; None otherwise. DuckDB 2 lists `arguments` of
    {name, expression} with a `literal`; 1.5 lists `children` (named by their `alias`) with a
    typed `value`."""
    arguments = call.get("arguments")
    if isinstance(arguments, list):
        pairs = [(a.get("name") or "", a.get("expression")) for a in arguments if isinstance(a, dict)]
    else:
        children = call.get("children")
        items = children if isinstance(children, list) else []
        pairs = [((c.get("alias") or "") if isinstance(c, dict) else "", c) for c in items]
    named = [expression for name, expression in pairs if name.lower() == keyword]
    unnamed = [expression for name, expression in pairs if not name]
    chosen = named[0] if named else unnamed[position] if len(unnamed) > position else None
    value = constant(chosen)
    return value.text if value is not None and value.kind == "string" else None
