"""What a read-only server runs: queries, read PRAGMAs and zarrsql's reading functions.

DuckDB's own parser classifies the text (`duckdb.extract_statements`), so a statement is
judged by what it is, not by its first word: `SELECT 1; DROP TABLE t` is two statements and
is refused whole. Allowed when read-only:
- SELECT-type statements: SELECT, WITH, VALUES, FROM-first, TABLE, DESCRIBE, SHOW, SUMMARIZE,
  and the zarrsql table functions (`read_zarr`, `read_zarr_tables`, ..., `zarr_mounts`);
- EXPLAIN of such a statement (EXPLAIN ANALYZE runs it, so its body is judged too);
- the PRAGMAs in `READ_PRAGMAS` and `SHOW_PRAGMAS`, which only report (run as the SELECT or
  SHOW that gives the same rows).
Refused: everything else (CREATE, INSERT, COPY, ATTACH, SET, USE, LOAD, CALL, ...) and
`zarr_mount` / `zarr_unmount`, which attach and detach databases every client shares.
`--allow-writes` lifts the refusal; the classification still tells queries from writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from zarrsql.errors import ZarrSQLError

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
_STRINGS = re.compile(r"'(?:[^']|'')*'")
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
CATALOG_REFUSAL = (
    "this server is read-only and refuses zarr_mount / zarr_unmount, which change the databases every "
    "client shares; mount stores when starting the server (zarrsql serve --mount NAME=STORE), or start "
    "it with --allow-writes"
)
_PRAGMA_NAME = re.compile(r"^\s*pragma\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)
_PRAGMA_CALL = re.compile(r"^\s*pragma\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_EXPLAIN = re.compile(r"^\s*explain\s+(?:analy[sz]e\s+)?", re.IGNORECASE)


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
    if len(statements) != 1:
        raise StatementRefused(
            f"the request holds {len(statements)} statements; send one statement per request "
            "(the Flight SQL server runs exactly one)"
        )
    reads = _reads(statements[0], sql)
    if not allow_writes and _CATALOG_ACTIONS.search(_bare(sql)):
        raise StatementRefused(CATALOG_REFUSAL)
    if not reads and not allow_writes:
        kind = statements[0].type.name
        raise StatementRefused(
            f"this server is read-only and refuses {kind} statements ({sql.strip()[:60]!r}); run queries "
            "(SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, EXPLAIN, read PRAGMAs, read_zarr...), or start "
            "the server with --allow-writes"
        )
    text = _as_select(sql) if reads and statements[0].type == duckdb.StatementType.PRAGMA else sql
    return Statement(text, query=reads, parameters=len(statements[0].named_parameters))


def _as_select(sql: str) -> str:
    """A reporting PRAGMA as the SELECT (or SHOW) that gives the same rows."""
    match = _PRAGMA_CALL.match(sql)
    if match is None:
        return sql
    name = match.group(1).lower()
    if name in SHOW_PRAGMAS:
        return SHOW_PRAGMAS[name]
    return f"SELECT * FROM pragma_{name}({match.group(2) or ''})"


def _bare(sql: str) -> str:
    """`sql` without its strings and comments (each string left as `''`)."""
    return _COMMENTS.sub(" ", _STRINGS.sub("''", sql))


def _reads(statement: object, sql: str) -> bool:
    kind = statement.type  # type: ignore[attr-defined]
    bare = _bare(sql)
    if kind == duckdb.StatementType.SELECT:
        return not _CATALOG_ACTIONS.search(bare)
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _EXPLAIN.sub("", sql, count=1)
        inner_statements = duckdb.extract_statements(inner) if inner.strip() else []
        return len(inner_statements) == 1 and _reads(inner_statements[0], inner)
    if kind == duckdb.StatementType.PRAGMA:
        match = _PRAGMA_NAME.match(sql)
        return match is not None and (match.group(1).lower() in READ_PRAGMAS or match.group(1).lower() in SHOW_PRAGMAS)
    return False
