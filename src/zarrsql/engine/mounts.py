"""Mounting a store as named views: `zarr_mount`, `zarr_unmount`, `zarr_mounts`.

A mount runs `read_zarr_views`' statements on the connection. By default it attaches a new
in-memory database; with `existing` it adds schemas and views to a database already attached
(a DuckDB file: the views then persist, and reopening the file with `zarrsql.connect` queries
them without mounting again). A failed mount removes what it created. The mounts are found
again from DuckDB's catalog (views whose SQL calls `read_zarr`), so `zarr_mounts()` is right
in a later session too. These functions run SQL, so the connection calls them outside any
running query.

Names are compared as DuckDB's catalog compares them, ignoring the case of ASCII letters only
(`_folded`): 'MM' is the database 'mm', while 'Ü' and 'ü' are two databases. A name given is
resolved to the attached database's own spelling (`_attached_as`) before anything is asked
of the catalog.

Only a database zarr_mount attached is ever detached (by `zarr_unmount`, or `replace := true`):
it carries zarrsql's mark (`_MARK`, a sequence started at the database's own oid), which lives
and dies with the database, so every connection and cursor of the DuckDB instance tells it
from a database the user attached, whatever views that one holds. A database holding the
user's own objects is not detached either, nor a schema holding some dropped: an unmount then
drops only the zarr views.

A mount's `storage_options` never enter its views' SQL, which anyone can read
(`duckdb_views()`, a database file): the connection keeps them (engine/secrets.py,
`MountOptions`) and the views name them by an opaque name. So views made with storage options
read on the connection that mounted them and its cursors; in a later session (views kept in a
database file) they ask to be mounted again.

Run from SQL these are actions (engine/actions.py): `mounted_schema` and `MOUNTS_COLUMNS` give
the columns of a call that a statement only binds (EXPLAIN, DESCRIBE, PREPARE), and
`mounts_view` makes `zarr_mounts()` a view over DuckDB's catalog, current at each fetch.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from zarrsql import catalog
from zarrsql.engine.functions import TABLES_COLUMNS
from zarrsql.engine.sqltext import quote_ident, quote_text, string_constants
from zarrsql.errors import ParameterError, SelectionError
from zarrsql.metadata.tree import cached_tree
from zarrsql.store import is_url, open_store
from zarrsql.store.choice import STORE_ARGUMENT_NAMES, StoreChoice
from zarrsql.store.icechunk import SESSION_PREFIX

MOUNTS_COLUMNS = ["database_name", "schema_name", "view_name", "store", "group_path", "table_name"]


#: Catalog names DuckDB keeps for itself: ATTACH ... AS one of them is refused.
_RESERVED = frozenset({"main", "memory", "system", "temp", "information_schema", "pg_catalog"})

#: DuckDB finds a database, schema or view by its name ignoring the case of ASCII letters only
#: (Python's `lower()` and DuckDB's SQL `lower()` fold 'Ü' too, which the catalog does not).
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_FOLD_SQL = f"translate({{}}, '{string.ascii_uppercase}', '{string.ascii_lowercase}')"

#: The sequence zarr_mount creates in the `main` schema of each database it attaches, started
#: at that database's oid: a copy in another database (COPY FROM DATABASE) does not match it.
_MARK = "__zarrsql_mount"


def _folded(name: str) -> str:
    """`name` as DuckDB's catalog compares it: ASCII letters in lower case, the rest as given."""
    return name.translate(_ASCII_LOWER)


def _check_name(database: Any, attaching: bool = False) -> str:
    """`database` as a mount's name; one DuckDB keeps for itself cannot be attached."""
    if attaching and isinstance(database, str) and _folded(database) in _RESERVED:
        raise ParameterError(
            f"database name '{database}' is reserved by DuckDB; mount the store under another name, e.g. "
            f"'{database}_store' (or into a database already attached, with existing := true)"
        )
    if (
        not isinstance(database, str)
        or not database.strip()
        or database != database.strip()
        or any(ord(c) < 32 for c in database)
    ):
        raise ParameterError(
            f"database name {database!r} is not a valid identifier: give a non-empty name without "
            "leading or trailing spaces or control characters, e.g. 'era5'"
        )
    return database


def _attached_as(con: Any, database: str) -> str | None:
    """The name the database `database` names is attached under, as DuckDB spells it, or None."""
    names = [name for (name,) in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()]
    return next((name for name in names if _folded(name) == _folded(database)), None)


def _not_attached(con: Any, database: str) -> str:
    """Why `database` names no attached database when one differs from it only in the case of
    a letter beyond ASCII (which DuckDB tells apart), for the error saying it is not attached."""
    names = [name for (name,) in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()]
    near = [name for name in names if name.casefold() == database.casefold()]
    if not near:
        return ""
    return (
        f" ('{near[0]}' is: DuckDB ignores the case of ASCII letters only in names, so '{database}' is another "
        "database)"
    )


def _path(con: Any, database: str) -> str:
    """The file of the attached database `database` (its own spelling), '' in memory."""
    rows = con.execute(
        "SELECT coalesce(path, '') FROM duckdb_databases() WHERE database_name = ?", [database]
    ).fetchall()
    return str(rows[0][0]) if rows else ""


def _objects(con: Any, database: str) -> list[tuple[str, str, str]]:
    """(schema, name, kind) of every object in `database` (its own spelling) that a schema holds:
    kind 'table', 'zarr view' (a view a mount made), 'view', 'sequence', 'macro' or 'type'.
    zarr_mount's mark is none of them."""
    out = [
        (schema, name, "table")
        for schema, name in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?", [database]
        ).fetchall()
    ]
    for schema, name, sql in con.execute(
        "SELECT schema_name, view_name, sql FROM duckdb_views() WHERE database_name = ? AND NOT internal", [database]
    ).fetchall():
        out.append((schema, name, "zarr view" if mount_parts(sql or "") else "view"))
    out += [
        (schema, name, "sequence")
        for schema, name in con.execute(
            "SELECT schema_name, sequence_name FROM duckdb_sequences() WHERE database_name = ? AND NOT "
            "(schema_name = 'main' AND sequence_name = ? AND start_value = database_oid)",
            [database, _MARK],
        ).fetchall()
    ]
    out += [
        (schema, name, "macro")
        for schema, name in con.execute(
            "SELECT DISTINCT schema_name, function_name FROM duckdb_functions() WHERE database_name = ? "
            "AND NOT internal",
            [database],
        ).fetchall()
    ]
    out += [
        (schema, name, "type")
        for schema, name in con.execute(
            "SELECT schema_name, type_name FROM duckdb_types() WHERE database_name = ? AND NOT internal", [database]
        ).fetchall()
    ]
    return out


def _marked(con: Any, database: str) -> bool:
    """Whether zarr_mount attached `database` (its own spelling): an in-memory database holding
    zarrsql's mark (`_MARK`)."""
    rows = con.execute(
        "SELECT count(*) FROM duckdb_sequences() s JOIN duckdb_databases() d USING (database_oid) "
        "WHERE d.database_name = ? AND d.path IS NULL AND s.schema_name = 'main' AND s.sequence_name = ? "
        "AND s.start_value = s.database_oid",
        [database, _MARK],
    ).fetchall()
    return bool(rows[0][0])


def _mark(con: Any, database: str) -> None:
    """Mark `database`, just attached by zarr_mount, as attached by it (`_MARK`)."""
    oid = con.execute("SELECT database_oid FROM duckdb_databases() WHERE database_name = ?", [database]).fetchall()
    con.execute(f"CREATE SEQUENCE {quote_ident(database)}.main.{quote_ident(_MARK)} START WITH {int(oid[0][0])}")


def _detachable(con: Any, database: str) -> bool:
    """Whether unmounting or replacing `database` (its own spelling) detaches it: zarr_mount
    attached it and it holds none of the user's own objects, which a DETACH would lose."""
    return _marked(con, database) and all(kind == "zarr view" for _, _, kind in _objects(con, database))


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
        _folded(s)
        for (s,) in con.execute(
            "SELECT schema_name FROM duckdb_schemas() WHERE database_name = ?", [database]
        ).fetchall()
    }
    try:
        if fresh:
            _mark(con, database)
        for r in rows:
            if r["sql"].startswith("ATTACH"):
                continue
            con.execute(r["sql"])
            name = quote_ident(database) + "." + quote_ident(r["schema_name"])
            if r["view_name"]:
                created.append(f"DROP VIEW IF EXISTS {name}.{quote_ident(r['view_name'])}")
            elif _folded(r["schema_name"]) not in schemas_before:
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
        (_folded(schema), _folded(name)): kind
        for schema, name, kind in _objects(con, database)
        if kind in ("table", "view", "zarr view")
    }
    for r in rows:
        if not r["view_name"]:
            continue
        kind = relations.get((_folded(r["schema_name"]), _folded(r["view_name"])))
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
    _check_name(database, attaching=not existing)
    if not is_url(store) and not store.startswith(SESSION_PREFIX):
        # views must find the store from any working directory later
        store = os.path.abspath(os.path.expanduser(store.removeprefix("file://")))
    rows = _statements(con, store, database, view_names, storage_options, choice)
    attached = _attached_as(con, database)
    if existing:
        if attached is None:
            current = con.execute("SELECT current_database()").fetchall()[0][0]
            raise ParameterError(
                f"existing := true needs the database '{database}' to be attached already, and it is not"
                f"{_not_attached(con, database)}; this connection's own database is named '{current}' (pass that "
                f"name to mount into it), or ATTACH 'file.duckdb' AS {quote_ident(database)} first, or leave "
                "existing out"
            )
        _check_read_only(con, attached, "mount the store into", ", or mount without existing := true")
        _check_clashes(con, rows, attached)
        _apply(con, rows, attached, fresh=False)
    else:
        _check_writable(con, database)
        if attached is not None:
            spelled = "" if attached == database else f" (by the database attached as '{attached}')"
            if not replace:
                raise ParameterError(
                    f"database name '{database}' is already in use{spelled}; pick another name, "
                    f"DETACH {quote_ident(attached)} first, or pass replace := true to remount a zarr mount"
                )
            if not _detachable(con, attached):
                raise ParameterError(
                    f"replace := true only remounts a database that zarr_mount attached, and '{attached}' is "
                    f"{_what_database(con, attached)}; pick another name, DETACH {quote_ident(attached)} "
                    "first if you mean to drop it, or add the views to it with existing := true"
                )
            _check_not_current(con, attached, "remount")
            con.execute(f"DETACH {quote_ident(attached)}")
        con.execute(f"ATTACH ':memory:' AS {quote_ident(database)}")
        _apply(con, rows, database, fresh=True)
    return _mounted_table(con, store, rows, storage_options, choice)


def _check_writable(con: Any, database: str) -> None:
    """Refuse a mount that would attach a database on a read-only connection: DuckDB starts
    no in-memory database there, and says only that, not which call or what to do."""
    if con.execute("SELECT current_setting('access_mode')").fetchall()[0][0] != "read_only":
        return
    raise ParameterError(
        f"cannot mount the store as '{database}': the connection was opened with read_only=True, and DuckDB "
        "attaches no new database to a read-only connection; connect without read_only=True, or mount on "
        "another connection (zarrsql.connect()) and ATTACH the DuckDB file there with (READ_ONLY)"
    )


def _check_read_only(con: Any, database: str, doing: str, otherwise: str = "") -> None:
    """Refuse to add or drop views in `database` (its own spelling) when it is attached
    READ_ONLY (or is the database of a read-only connection): DuckDB would only name the
    statement type it refused."""
    rows = con.execute("SELECT readonly FROM duckdb_databases() WHERE database_name = ?", [database]).fetchall()
    if not rows or not rows[0][0]:
        return
    raise ParameterError(
        f"cannot {doing} database '{database}': it is attached read-only (READ_ONLY, or a connection opened with "
        f"read_only=True), so no views can be created or dropped in it; DETACH {quote_ident(database)} and "
        f"ATTACH it again without (READ_ONLY){otherwise}"
    )


def _check_not_current(con: Any, database: str, doing: str) -> None:
    """Refuse to detach the connection's current database (`USE`), which DuckDB refuses
    naming only its own statement, before anything of the mount is changed."""
    if con.execute("SELECT current_database()").fetchall()[0][0] != database:
        return
    raise ParameterError(
        f"cannot {doing} '{database}': it is this connection's current database (USE {quote_ident(database)}), "
        "and DuckDB cannot detach that one; switch to another database with USE first"
    )


def _what_database(con: Any, database: str) -> str:
    """What an attached database that replace := true may not detach (`_detachable`) is, for
    the error refusing to replace it."""
    path = _path(con, database)
    if path:
        return f"the database file '{path}'"
    kinds = [kind for _, _, kind in _objects(con, database)]
    relations = sum(kind in ("table", "view") for kind in kinds)
    others = sum(kind in ("sequence", "macro", "type") for kind in kinds)
    not_attached = "" if _marked(con, database) else " that zarr_mount did not attach"
    if not relations and not others:
        if "zarr view" in kinds:  # mounted into with existing := true
            return f"an in-memory database{not_attached} (its zarr views were added with existing := true)"
        return f"an empty in-memory database{not_attached}"
    held = [f"{relations} table(s) or view(s)"] if relations else []
    held += [f"{others} sequence(s), macro(s) or type(s)"] if others else []
    holding = f"holding {' and '.join(held)} that zarrsql did not create"
    return f"an in-memory database{not_attached}, {holding}" if not_attached else f"an in-memory database {holding}"


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
        "WHERE NOT internal AND NOT temporary AND sql LIKE '%read_zarr(%' ORDER BY ALL"
    ).fetchall()
    out: dict[str, list[Any]] = {k: [] for k in MOUNTS_COLUMNS}
    for db_name, schema, view, sql in rows:
        parts = mount_parts(sql)
        if not parts or (database is not None and _folded(database) != _folded(db_name)):
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
    only = "" if database is None else f" AND {_FOLD_SQL.format('database_name')} = {quote_text(_folded(database))}"
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {quote_ident(name)} AS SELECT database_name, schema_name, view_name, "
        "parts[1] AS store, parts[2] AS group_path, parts[3] AS table_name FROM (SELECT database_name, "
        f"schema_name, view_name, {parts_function}(sql) AS parts FROM duckdb_views() WHERE NOT internal "
        f"AND NOT temporary AND sql LIKE '%read_zarr(%'{only}) WHERE len(parts) = 3 ORDER BY ALL"
    )
    return name


def unmount_table(con: Any, database: str) -> pa.Table:
    """Remove a mount: DETACH an in-memory database zarr_mount attached, or drop the zarr views
    (and the schemas they leave empty) of any other. Whatever it cannot do is refused before
    anything changes, so an unmount either completes or leaves the mount as it was."""
    _check_name(database)
    attached = _attached_as(con, database)
    if attached is None:
        raise ParameterError(
            f"no database named '{database}' is attached{_not_attached(con, database)}; list mounts with zarr_mounts()"
        )
    removed = mounts(con, attached)
    if removed.num_rows == 0:
        raise ParameterError(f"database '{attached}' holds no zarr views; DETACH it with plain SQL if you mean to")
    if _detachable(con, attached):
        _check_not_current(con, attached, "unmount")
        con.execute(f"DETACH {quote_ident(attached)}")
        return removed
    _check_read_only(con, attached, "unmount the zarr views of")
    views = list(zip(removed["schema_name"].to_pylist(), removed["view_name"].to_pylist(), strict=True))
    # a schema the views leave holding the user's own objects is kept: DROP SCHEMA would fail
    kept = {_folded(schema) for schema, _, kind in _objects(con, attached) if kind != "zarr view"}
    emptied = {schema for schema, _ in views if _folded(schema) not in kept | {"main"}}
    for schema, view in views:
        con.execute(f"DROP VIEW {quote_ident(attached)}.{quote_ident(schema)}.{quote_ident(view)}")
    for schema in sorted(emptied):
        con.execute(f"DROP SCHEMA {quote_ident(attached)}.{quote_ident(schema)}")
    return removed


__all__ = ["mount_parts", "mount_table", "mounted_schema", "mounts", "mounts_view", "unmount_table"]
