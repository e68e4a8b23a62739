"""Recognizing a mount's views in DuckDB's catalog, and listing them (`zarr_mounts`).

The mounts are found from the catalog itself, not from state kept in Python: a view a mount
made has one shape, `SELECT * FROM read_zarr('store'[, group_path := 'g'], table_name := 't'
[, <store arguments>])`, so `zarr_mounts()` is right on every connection and cursor, and in a
later session reading views kept in a database file. A user's own views over read_zarr are
not mounts.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from zarrsql.engine.sqltext import folded, folded_sql, quote_ident, quote_text, string_constants
from zarrsql.errors import ParameterError
from zarrsql.store.choice import STORE_ARGUMENT_NAMES

MOUNTS_COLUMNS = ["database_name", "schema_name", "view_name", "store", "group_path", "table_name"]


def _mount_view(sql: str) -> list[str] | None:
    """The string arguments of a view a mount made (store, [group], table), else None.

    A mount's views have one shape: `SELECT * FROM read_zarr('store'[, group_path := 'g'],
    table_name := 't')`; a user's own views over read_zarr are not mounts.
    """
    if "read_zarr(" not in sql:
        return None
    consts = string_constants(_before_store_arguments(sql))
    if len(consts) not in (2, 3) or "table_name :=" not in sql or (len(consts) == 3) != ("group_path :=" in sql):
        return None
    return consts


def _before_store_arguments(sql: str) -> str:
    """A view's SQL up to the arguments a mount adds after table_name: the name of its storage
    options and a versioned store's choice."""
    at = sql.find("table_name :=")
    names = ("storage_options", *STORE_ARGUMENT_NAMES)
    cuts = [sql.find(f", {name} :=", at) for name in names] if at >= 0 else []
    found = [c for c in cuts if c >= 0]
    return sql[: min(found)] + ")" if found else sql


def mounts(con: Any, database: str | None = None) -> pa.Table:
    """Every mounted view, in every attached database (or just `database`)."""
    rows = con.execute(
        "SELECT database_name, schema_name, view_name, sql FROM duckdb_views() "
        "WHERE NOT internal AND NOT temporary AND sql LIKE '%read_zarr(%' ORDER BY ALL ASC"
    ).fetchall()
    out: dict[str, list[Any]] = {k: [] for k in MOUNTS_COLUMNS}
    for db_name, schema, view, sql in rows:
        parts = mount_parts(sql)
        if not parts or (database is not None and folded(database) != folded(db_name)):
            continue
        for k, v in zip(MOUNTS_COLUMNS, [db_name, schema, view, *parts], strict=True):
            out[k].append(v)
    return pa.table({k: pa.array(v, type=pa.string()) for k, v in out.items()})


def mount_parts(sql: str) -> list[str]:
    """The store, group path and table name a view's SQL mounts, or [] for a view no mount made."""
    consts = _mount_view(sql)
    if not consts:
        return []
    return [consts[0], "/" + consts[1] if len(consts) == 3 else "/", consts[-1]]


def mounts_view(con: Any, database: Any, name: str, parts_function: str) -> str:
    """Create the temporary view `name` answering `zarr_mounts(database)`: a query of DuckDB's
    catalog, so a relation over it lists the mounts as they are each time it is fetched.
    `parts_function` is the connection's scalar function `mount_parts`. Returns `name`."""
    if database is not None and not isinstance(database, str):
        raise ParameterError(f"zarr_mounts() takes a database name, got {database!r}: e.g. zarr_mounts('era5')")
    only = "" if database is None else f" AND {folded_sql('database_name')} = {quote_text(folded(database))}"
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {quote_ident(name)} AS SELECT database_name, schema_name, view_name, "
        "parts[1] AS store, parts[2] AS group_path, parts[3] AS table_name FROM (SELECT database_name, "
        f"schema_name, view_name, {parts_function}(sql) AS parts FROM duckdb_views() WHERE NOT internal "
        f"AND NOT temporary AND sql LIKE '%read_zarr(%'{only}) WHERE len(parts) = 3 ORDER BY ALL ASC"
    )
    return name
