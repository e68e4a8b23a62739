"""The Flight SQL catalog commands, answered from DuckDB's catalog: what tools browse.

Flight SQL's catalogs are DuckDB's attached databases (a mounted store is one: `zarrsql serve
--mount era5=...` makes the catalog `era5`), its schemas are DuckDB schemas (a store's nested
groups) and its tables are DuckDB tables and views (a mounted table is a view). The system and
temp databases, DuckDB's internal schemas and zarrsql's internal `__zarrsql_*` names are left
out. Filter patterns are SQL LIKE patterns, as the protocol specifies; the result schemas are
the ones FlightSql.proto fixes for each command.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from zarrsql.engine.sqltext import quote_ident
from zarrsql.errors import ZarrSQLError

CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", pa.string(), nullable=False)])
DB_SCHEMAS_SCHEMA = pa.schema(
    [pa.field("catalog_name", pa.string()), pa.field("db_schema_name", pa.string(), nullable=False)]
)
_TABLE_FIELDS = [
    pa.field("catalog_name", pa.string()),
    pa.field("db_schema_name", pa.string()),
    pa.field("table_name", pa.string(), nullable=False),
    pa.field("table_type", pa.string(), nullable=False),
]
TABLES_SCHEMA = pa.schema(_TABLE_FIELDS)
TABLES_WITH_SCHEMA = pa.schema([*_TABLE_FIELDS, pa.field("table_schema", pa.binary(), nullable=False)])
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", pa.string(), nullable=False)])
TABLE_TYPES = ("BASE TABLE", "VIEW")

_HIDDEN_DATABASES = "('system', 'temp')"
_OBJECTS = f"""
SELECT database_name, schema_name, table_name, 'BASE TABLE' AS table_type FROM duckdb_tables()
 WHERE NOT internal AND NOT temporary AND database_name NOT IN {_HIDDEN_DATABASES}
UNION ALL
SELECT database_name, schema_name, view_name, 'VIEW' FROM duckdb_views()
 WHERE NOT internal AND NOT temporary AND database_name NOT IN {_HIDDEN_DATABASES}
"""


def catalogs(con: Any) -> pa.Table:
    rows = con.execute(
        f"SELECT database_name FROM duckdb_databases() WHERE database_name NOT IN {_HIDDEN_DATABASES} "
        "AND NOT internal ORDER BY 1 ASC"
    ).fetchall()
    return pa.table([pa.array([r[0] for r in rows], pa.string())], schema=CATALOGS_SCHEMA)


def db_schemas(con: Any, catalog: str | None, pattern: str | None) -> pa.Table:
    where, args = _filters(catalog, pattern, None)
    rows = con.execute(
        "SELECT DISTINCT database_name, schema_name FROM duckdb_schemas() "
        f"WHERE database_name NOT IN {_HIDDEN_DATABASES} "
        "AND schema_name NOT IN ('information_schema', 'pg_catalog')" + where + " ORDER BY 1 ASC, 2 ASC",
        args,
    ).fetchall()
    return pa.table(
        [pa.array([r[0] for r in rows], pa.string()), pa.array([r[1] for r in rows], pa.string())],
        schema=DB_SCHEMAS_SCHEMA,
    )


def tables(
    con: Any,
    catalog: str | None,
    schema_pattern: str | None,
    table_pattern: str | None,
    table_types: list[str],
    *,
    include_schema: bool,
) -> pa.Table:
    """The tables and views that match; with `include_schema`, each one's Arrow schema
    (IPC-serialized), read by binding `SELECT * ... LIMIT 0` on it (a mounted view opens
    its store's metadata, no chunk)."""
    where, args = _filters(catalog, schema_pattern, table_pattern)
    if table_types:
        where += " AND table_type IN (" + ", ".join("?" for _ in table_types) + ")"
        args += list(table_types)
    rows = con.execute(
        f"SELECT * FROM ({_OBJECTS}) WHERE NOT starts_with(table_name, '__zarrsql_')"
        + where
        + " ORDER BY 1 ASC, 2 ASC, 3 ASC, 4 ASC",
        args,
    ).fetchall()
    columns = [pa.array([r[i] for r in rows], pa.string()) for i in range(4)]
    if not include_schema:
        return pa.table(columns, schema=TABLES_SCHEMA)
    schemas = [_schema_bytes(con, r[0], r[1], r[2]) for r in rows]
    return pa.table([*columns, pa.array(schemas, pa.binary())], schema=TABLES_WITH_SCHEMA)


def table_types() -> pa.Table:
    return pa.table([pa.array(list(TABLE_TYPES), pa.string())], schema=TABLE_TYPES_SCHEMA)


def _filters(catalog: str | None, schema_pattern: str | None, table_pattern: str | None) -> tuple[str, list[str]]:
    where, args = "", []
    if catalog is not None:  # "" means "without a catalog": DuckDB has none such
        where += " AND database_name = ?"
        args.append(catalog)
    if schema_pattern is not None:
        where += " AND schema_name LIKE ? ESCAPE '\\'"
        args.append(schema_pattern)
    if table_pattern is not None:
        where += " AND table_name LIKE ? ESCAPE '\\'"
        args.append(table_pattern)
    return where, args


def _schema_bytes(con: Any, database: str, schema: str, table: str) -> bytes:
    """A table's Arrow schema; an empty one for a view that no longer binds (its store was
    moved, say), so one broken view does not hide every other table from a browsing tool."""
    name = ".".join(quote_ident(p) for p in (database, schema, table))
    try:
        rel = con.sql(f"SELECT * FROM {name} LIMIT 0")
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
        return bytes(fetch().schema.serialize())
    except (duckdb.Error, ZarrSQLError):
        return bytes(pa.schema([]).serialize())
