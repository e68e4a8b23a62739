"""Mounting a store as named views: `zarr_mount`, `zarr_unmount`, `zarr_mounts`.

A mount runs `read_zarr_views`' statements on the connection. By default it attaches a new
in-memory database; with `existing` it adds schemas and views to a database already attached
(a DuckDB file: the views then persist, and reopening the file with `zarrsql.connect` queries
them without mounting again). A failed mount removes what it created. The mounts are found
again from DuckDB's catalog (views whose SQL calls `read_zarr`), so `zarr_mounts()` is right
in a later session too. These functions run SQL, so the connection calls them outside any
running query.

Which databases a mount may attach, replace or detach, and how names are compared (DuckDB's
rule: ASCII letters fold, others do not), is `mount_databases.py`'s; recognizing a mount's
views in the catalog and listing them (`zarr_mounts`) is `mount_views.py`'s. Only a database
zarr_mount attached (it carries zarrsql's mark) and holding none of the user's own objects is
ever detached, by `zarr_unmount` or `replace := true`; otherwise an unmount drops only the zarr
views, and the schemas they leave empty.

A mount's `storage_options` never enter its views' SQL, which anyone can read
(`duckdb_views()`, a database file): the connection keeps them (engine/secrets.py,
`MountOptions`) and the views name them by an opaque name. So views made with storage options
read on the connection that mounted them and its cursors; in a later session (views kept in a
database file) they ask to be mounted again.

Run from SQL these are actions (engine/actions.py): `mounted_schema` (and
`mount_views.MOUNTS_COLUMNS`) give the columns of a call that a statement only binds (EXPLAIN,
DESCRIBE, PREPARE).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from zarrsql import catalog
from zarrsql.engine.functions import TABLES_COLUMNS
from zarrsql.engine.mount_databases import (
    attached_as,
    check_name,
    check_not_current,
    check_read_only,
    check_writable,
    detachable,
    mark,
    not_attached,
    objects,
    what_database,
)
from zarrsql.engine.mount_views import mounts
from zarrsql.engine.sqltext import folded, quote_ident
from zarrsql.errors import ParameterError, SelectionError
from zarrsql.metadata.tree import cached_tree
from zarrsql.store import is_url, open_store
from zarrsql.store.choice import StoreChoice
from zarrsql.store.icechunk import SESSION_PREFIX


def _statements(
    con: Any,
    store: str,
    database: str,
    view_names: Mapping[str, str] | None,
    storage_options: Mapping[str, str] | None,
    choice: StoreChoice | None,
) -> list[dict[str, Any]]:
    if view_names is not None and not isinstance(view_names, Mapping):
        raise ParameterError(
            f"view_names must map table keys to view names (a dict or MAP), got {type(view_names).__name__}: "
            "e.g. view_names={'time_lat_lon': 'surface'}"
        )
    tree = cached_tree(open_store(store, storage_options, choice))
    # the connection keeps the options; the views carry only the name it keeps them under
    options_name = con._state.mount_options.name_for(storage_options) if storage_options else None
    rows = catalog.view_statements(tree, store, database, view_names, choice, options_name=options_name)
    if not any(r["view_name"] for r in rows):
        raise SelectionError(
            f"store '{store}' has no named tables, so there is nothing to mount; list its tables with "
            "read_zarr_tables and read arrays with read_zarr(..., array_path := ...)"
        )
    return rows


def _apply(con: Any, rows: list[dict[str, Any]], database: str, *, fresh: bool) -> None:
    """Run the schema and view statements in `database` (its own spelling), after marking it
    when this call attached it (`fresh`); on failure drop what this call created."""
    created: list[str] = []
    schemas_before = {
        folded(s)
        for (s,) in con.execute(
            "SELECT schema_name FROM duckdb_schemas() WHERE database_name = ?", [database]
        ).fetchall()
    }
    try:
        if fresh:
            mark(con, database)
        for r in rows:
            if r["sql"].startswith("ATTACH"):
                continue
            con.execute(r["sql"])
            name = quote_ident(database) + "." + quote_ident(r["schema_name"])
            if r["view_name"]:
                created.append(f"DROP VIEW IF EXISTS {name}.{quote_ident(r['view_name'])}")
            elif folded(r["schema_name"]) not in schemas_before:
                created.append(f"DROP SCHEMA IF EXISTS {name}")
    except Exception:
        if fresh:
            con.execute(f"DETACH {quote_ident(database)}")
        else:
            for undo in reversed(created):
                con.execute(undo)
        raise


def _check_clashes(con: Any, rows: list[dict[str, Any]], database: str) -> None:
    """Refuse views that would replace a table or view of `database` no mount made."""
    relations = {
        (folded(schema), folded(name)): kind
        for schema, name, kind in objects(con, database)
        if kind in ("table", "view", "zarr view")
    }
    for r in rows:
        if not r["view_name"]:
            continue
        kind = relations.get((folded(r["schema_name"]), folded(r["view_name"])))
        if kind in ("table", "view"):
            raise ParameterError(
                f"{database}.{r['schema_name']}.{r['view_name']} already exists as a {kind} that zarrsql did not "
                "create; rename the mounted table with view_names := MAP {...} or drop the existing one"
            )


def mount_table(
    con: Any,
    store: str,
    database: str,
    *,
    view_names: Mapping[str, str] | None = None,
    existing: bool = False,
    replace: bool = False,
    storage_options: Mapping[str, str] | None = None,
    choice: StoreChoice | None = None,
) -> pa.Table:
    """Mount `store` as `database` (see the module docstring); returns what was mounted.
    The views repeat `choice` (a versioned store's version), so they read what was mounted."""
    check_name(database, attaching=not existing)
    if not is_url(store) and not store.startswith(SESSION_PREFIX):
        # views must find the store from any working directory later
        store = os.path.abspath(os.path.expanduser(store.removeprefix("file://")))
    rows = _statements(con, store, database, view_names, storage_options, choice)
    attached = attached_as(con, database)
    if existing:
        if attached is None:
            current = con.execute("SELECT current_database()").fetchall()[0][0]
            raise ParameterError(
                f"existing := true needs the database '{database}' to be attached already, and it is not"
                f"{not_attached(con, database)}; this connection's own database is named '{current}' (pass that "
                f"name to mount into it), or ATTACH 'file.duckdb' AS {quote_ident(database)} first, or leave "
                "existing out"
            )
        check_read_only(con, attached, "mount the store into", ", or mount without existing := true")
        _check_clashes(con, rows, attached)
        _apply(con, rows, attached, fresh=False)
    else:
        check_writable(con, database)
        if attached is not None:
            spelled = "" if attached == database else f" (by the database attached as '{attached}')"
            if not replace:
                raise ParameterError(
                    f"database name '{database}' is already in use{spelled}; pick another name, "
                    f"DETACH {quote_ident(attached)} first, or pass replace := true to remount a zarr mount"
                )
            if not detachable(con, attached):
                raise ParameterError(
                    f"replace := true only remounts a database that zarr_mount attached, and '{attached}' is "
                    f"{what_database(con, attached)}; pick another name, DETACH {quote_ident(attached)} "
                    "first if you mean to drop it, or add the views to it with existing := true"
                )
            check_not_current(con, attached, "remount")
            con.execute(f"DETACH {quote_ident(attached)}")
        con.execute(f"ATTACH ':memory:' AS {quote_ident(database)}")
        _apply(con, rows, database, fresh=True)
    return _mounted_table(con, store, rows, storage_options, choice)


def _mounted_table(
    con: Any,
    store: str,
    rows: list[dict[str, Any]],
    storage_options: Mapping[str, str] | None,
    choice: StoreChoice | None,
) -> pa.Table:
    tree = cached_tree(open_store(store, storage_options, choice))
    tables = [t for t in catalog.list_tables(tree) if t["table_name"]]
    views = [r for r in rows if r["view_name"]]
    schema = mounted_schema()
    out = {k: [t[k] for t in tables] for k in schema.names if k != "view_name"}
    out["view_name"] = [v["view_name"] for v in views]
    return pa.table(out, schema=schema)


def mounted_schema() -> pa.Schema:
    """The columns `zarr_mount` returns: `read_zarr_tables`' plus `view_name`."""
    return pa.schema([(k, _LIST_TYPES.get(k, pa.string())) for k in [*TABLES_COLUMNS, "view_name"]])


_LIST_TYPES = {
    "dims": pa.list_(pa.string()),
    "shape": pa.list_(pa.uint64()),
    "chunk_shape": pa.list_(pa.uint64()),
    "data_vars": pa.list_(pa.string()),
    "coord_vars": pa.list_(pa.string()),
}


def unmount_table(con: Any, database: str) -> pa.Table:
    """Remove a mount: DETACH an in-memory database zarr_mount attached, or drop the zarr views
    (and the schemas they leave empty) of any other. Whatever it cannot do is refused before
    anything changes, so an unmount either completes or leaves the mount as it was."""
    check_name(database)
    attached = attached_as(con, database)
    if attached is None:
        raise ParameterError(
            f"no database named '{database}' is attached{not_attached(con, database)}; list mounts with zarr_mounts()"
        )
    removed = mounts(con, attached)
    if removed.num_rows == 0:
        raise ParameterError(f"database '{attached}' holds no zarr views; DETACH it with plain SQL if you mean to")
    if detachable(con, attached):
        check_not_current(con, attached, "unmount")
        con.execute(f"DETACH {quote_ident(attached)}")
        return removed
    check_read_only(con, attached, "unmount the zarr views of")
    views = list(zip(removed["schema_name"].to_pylist(), removed["view_name"].to_pylist(), strict=True))
    # a schema the views leave holding the user's own objects is kept: DROP SCHEMA would fail
    kept = {folded(schema) for schema, _, kind in objects(con, attached) if kind != "zarr view"}
    emptied = {schema for schema, _ in views if folded(schema) not in kept | {"main"}}
    for schema, view in views:
        con.execute(f"DROP VIEW {quote_ident(attached)}.{quote_ident(schema)}.{quote_ident(view)}")
    for schema in sorted(emptied):
        con.execute(f"DROP SCHEMA {quote_ident(attached)}.{quote_ident(schema)}")
    return removed


__all__ = ["mount_table", "mounted_schema", "unmount_table"]
