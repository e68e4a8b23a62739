"""Mount a store as a DuckDB database of views: `zarrsql.mount(con, store, "era5")`.

The statements are `read_zarr_views`'s; they run in order on the connection, and if one
fails the database is detached again, so a failed mount leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import duckdb

from zarrsql.api import read_zarr_views
from zarrsql.engine.connection import register
from zarrsql.engine.sqltext import literal, quote_ident


def mount(con: Any, store: str, database: str, *, view_names: Mapping[str, str] | None = None) -> duckdb.DuckDBPyRelation:
    """Make every named table of `store` queryable as `database.table` (nested groups:
    `database."group/path".table`); returns the tables mounted with their `view_name`."""
    zcon = register(con)
    params = {"view_names": dict(view_names)} if view_names else {}
    rows = read_zarr_views(store, database, connection=zcon, **params).fetchall()
    attached = False
    try:
        for _, _, statement in rows:
            zcon.execute(statement)
            attached = True
    except Exception:
        if attached:
            zcon.execute(f"DETACH {quote_ident(database)}")
        raise
    views = [(schema, view) for schema, view, _ in rows if view]
    mapping = ", ".join(f"({literal(s)}, {literal(v)}, {i})" for i, (s, v) in enumerate(views))
    # Views are listed in the same order as the named tables of read_zarr_tables.
    return zcon.sql(
        f"WITH t AS (SELECT *, row_number() OVER () - 1 AS i FROM read_zarr_tables({literal(store)}) "
        f"WHERE table_name IS NOT NULL), m AS (SELECT * FROM (VALUES {mapping or '(NULL, NULL, -1)'}) m(s, view_name, i)) "
        f"SELECT t.* EXCLUDE (i), m.view_name FROM t JOIN m USING (i) ORDER BY i"
    )
