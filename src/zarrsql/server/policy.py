"""What a read-only server runs: queries, read PRAGMAs and zarrsql's reading functions.

DuckDB's own parser classifies the text (`duckdb.extract_statements`), so a statement is
judged by what it is, not by its first word: `SELECT 1; DROP TABLE t` is two statements and
is refused whole. Allowed when read-only:
- SELECT-type statements: SELECT, WITH, VALUES, FROM-first, TABLE, DESCRIBE, SHOW, SUMMARIZE,
  and the zarrsql table functions (`read_zarr`, `read_zarr_tables`, ..., `zarr_mounts`);
- EXPLAIN of such a statement, in any of its forms (`EXPLAIN ANALYZE`, `EXPLAIN (FORMAT
  json)`, ...; EXPLAIN ANALYZE runs it, so its body is judged too);
- the PRAGMAs in `READ_PRAGMAS` and `SHOW_PRAGMAS`, which only report (run as the SELECT or
  SHOW that gives the same rows).
Refused: everything else (CREATE, INSERT, COPY, ATTACH, SET, USE, LOAD, CALL, ...);
`zarr_mount` / `zarr_unmount`, which attach and detach databases every client shares; and a
query that calls a function changing state (`nextval`, `checkpoint()`, `enable_logging(...)`,
...: see `effects`). Comments before a statement (or before its body) change nothing.
`--allow-writes` lifts the refusal; the classification still tells queries from writes.
A PIVOT without an IN list (`PIVOT t ON lon USING sum(air)`) is a write to DuckDB: it first
creates an ENUM type of the ON column's values (DuckDB 2 parses it as one MULTI statement, 1.5
as CREATE statements and a SELECT); it is refused by name with the IN list that avoids the type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import duckdb

from zarrsql.errors import ZarrSQLError
from zarrsql.server.effects import bare_text, state_changes

#: PRAGMAs that only report something, run as their table-function twins (`PRAGMA
#: table_info('t')` as `SELECT * FROM pragma_table_info('t')`): a SELECT streams like any
#: query on every DuckDB version, where DuckDB 1.5 runs a PRAGMA's result again when read.
READ_PRAGMAS = frozenset(
    {
        "collations",
        "database_size",
        "metadata_info",
        "platform",
        "show",
        "storage_info",
        "table_info",
        "user_agent",
        "version",
    }
)
#: PRAGMAs that are SHOW statements under another name.
SHOW_PRAGMAS = {
    "show_tables": "SHOW TABLES",
    "show_tables_expanded": "SHOW ALL TABLES",
    "show_databases": "SHOW DATABASES",
}
#: zarrsql functions that change the catalog every client shares, quoted or not (comments
#: are taken out first). The text is only the first check: a read-only server's cursors
#: refuse these actions when they run (`Connection._lock_catalog`), which `query('...')`
#: strings cannot get around.
_CATALOG_ACTIONS = re.compile(r'(?:\b|")zarr_(?:un)?mount"?\s*\(', re.IGNORECASE)
CATALOG_REFUSAL = (
    "this server is read-only and refuses zarr_mount / zarr_unmount, which change the databases every "
    "client shares; mount stores when starting the server (zarrsql serve --mount NAME=STORE), or start "
    "it with --allow-writes"
)
#: Blanks and comments, as they may come before a statement or between its words.
_GAP = r"(?:\s|--[^\n]*|/\*.*?\*/)*"
_PRAGMA_NAME = re.compile(rf"^{_GAP}pragma\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE | re.DOTALL)
_PRAGMA_CALL = re.compile(
    rf"^{_GAP}pragma\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*;?\s*$", re.IGNORECASE | re.DOTALL
)
#: EXPLAIN with its options, as DuckDB takes them: `EXPLAIN`, `EXPLAIN ANALYZE`, `EXPLAIN
#: (FORMAT json, ANALYZE)`; what follows is the body.
_EXPLAIN = re.compile(rf"^{_GAP}explain\b{_GAP}(?:\([^()]*\){_GAP})?(?:analy[sz]e\b{_GAP})?", re.IGNORECASE | re.DOTALL)


#: PIVOT (or PIVOT_WIDER) as a word of the statement, outside strings and comments.
_PIVOT = re.compile(r"\bpivot(?:_wider)?\b", re.IGNORECASE)
PIVOT_REFUSAL = (
    "this server is read-only and refuses a PIVOT without an IN list ({text!r}): DuckDB first creates an "
    "ENUM type of the ON column's values, which is a write; list the values in the PIVOT (PIVOT t ON lon "
    "IN (0.0, 90.0, 180.0) USING sum(air) ...; SELECT DISTINCT lon FROM t finds them), or start the server "
    "with --allow-writes"
)


class StatementRefused(ZarrSQLError, PermissionError):
    """A statement this server does not run: a write on a read-only server, or several
    statements in one request."""


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement as the server runs it: its text, whether it returns rows to stream
    (`query`) or changes something (then it is run once and its small result kept), and how
    many parameters (`?`, `$1`) it takes."""

    text: str
    query: bool
    parameters: int


def classify(sql: str, *, allow_writes: bool) -> Statement:
    """The one statement in `sql`, checked against the read-only rule (module docstring).

    Raises StatementRefused for a refused statement and for more than one statement; a
    syntax error is DuckDB's own (the service reports its message).
    """
    statements = duckdb.extract_statements(sql)
    if _pivot_making_types(sql, statements):
        if not allow_writes:
            raise StatementRefused(PIVOT_REFUSAL.format(text=sql.strip()[:60]))
        return Statement(sql, query=False, parameters=sum(len(s.named_parameters) for s in statements))
    if len(statements) != 1:
        raise StatementRefused(
            f"the request holds {len(statements)} statements; send one statement per request "
            "(the Flight SQL server runs exactly one)"
        )
    body = _read_body(statements[0], sql)
    if not allow_writes and _CATALOG_ACTIONS.search(bare_text(sql)):
        raise StatementRefused(CATALOG_REFUSAL)
    if body is None and not allow_writes:
        kind = statements[0].type.name
        raise StatementRefused(
            f"this server is read-only and refuses {kind} statements ({sql.strip()[:60]!r}); run queries "
            "(SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, EXPLAIN, read PRAGMAs, read_zarr...), or start "
            "the server with --allow-writes"
        )
    if body is not None and not allow_writes:
        _refuse_state_changes(body)
    text = _as_select(sql) if body is not None and statements[0].type == duckdb.StatementType.PRAGMA else sql
    return Statement(text, query=body is not None, parameters=len(statements[0].named_parameters))


def _pivot_making_types(sql: str, statements: list[Any]) -> bool:
    """Whether `statements`, parsed from `sql`, are one PIVOT without an IN list: DuckDB 2's one
    MULTI statement, or DuckDB 1.5's CREATE statements (its ENUM types) then a SELECT."""
    if not _PIVOT.search(bare_text(sql)):
        return False
    kinds = [statement.type for statement in statements]
    if kinds == [duckdb.StatementType.MULTI]:
        return True
    return (
        len(kinds) > 1
        and kinds[-1] == duckdb.StatementType.SELECT
        and all(kind == duckdb.StatementType.CREATE for kind in kinds[:-1])
    )


def _refuse_state_changes(body: str) -> None:
    """Refuse a query that calls functions changing what every client shares (`effects`)."""
    changes = state_changes(body)
    if changes:
        raise StatementRefused(
            f"this server is read-only and refuses {', '.join(changes)}: a query may not advance sequences, "
            "write the database file, change logging or profiling settings or write their files; run queries "
            "that only read, or start the server with --allow-writes"
        )


def _as_select(sql: str) -> str:
    """A reporting PRAGMA as the SELECT (or SHOW) that gives the same rows."""
    match = _PRAGMA_CALL.match(sql)
    if match is None:
        return sql
    name = match.group(1).lower()
    if name in SHOW_PRAGMAS:
        return SHOW_PRAGMAS[name]
    return f"SELECT * FROM pragma_{name}({match.group(2) or ''})"


def _read_body(statement: Any, sql: str) -> str | None:
    """The query `sql` runs when it only reads (itself, an EXPLAIN's body, a reporting
    PRAGMA's SELECT twin), else None.

    An EXPLAIN's body is found by taking EXPLAIN and its options off the front; each step
    takes at least the word EXPLAIN, so nested EXPLAINs end.
    """
    kind = statement.type
    if kind == duckdb.StatementType.SELECT:
        return None if _CATALOG_ACTIONS.search(bare_text(sql)) else sql
    if kind == duckdb.StatementType.EXPLAIN:
        match = _EXPLAIN.match(sql)
        inner = sql[match.end() :] if match is not None else ""
        try:
            inner_statements = duckdb.extract_statements(inner) if inner.strip() else []
        except duckdb.ParserException:  # options this rule does not know: not judged, so not run
            return None
        return _read_body(inner_statements[0], inner) if len(inner_statements) == 1 else None
    if kind == duckdb.StatementType.PRAGMA:
        match = _PRAGMA_NAME.match(sql)
        name = match.group(1).lower() if match is not None else ""
        return _as_select(sql) if name in READ_PRAGMAS or name in SHOW_PRAGMAS else None
    return None
