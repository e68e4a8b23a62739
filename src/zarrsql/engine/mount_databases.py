"""The databases zarr_mount attaches, as DuckDB's catalog sees them: names, the mark, contents.

Names are compared as DuckDB's catalog compares them, ignoring the case of ASCII letters only
(`folded`): 'MM' is the database 'mm', while 'Ü' and 'ü' are two databases. A name given is
resolved to the attached database's own spelling (`attached_as`) before anything is asked of
the catalog.

Only a database zarr_mount attached is ever detached: it carries zarrsql's mark (`MARK`, a
sequence started at the database's own oid), which lives and dies with the database, so every
connection and cursor of the DuckDB instance tells it from a database the user attached,
whatever views that one holds (`marked`). A database holding the user's own objects
(`objects`) is not detached either (`detachable`). The `check_*` functions refuse, before
anything changes, what DuckDB would refuse half-way or with an error naming only its own
statement.
"""

from __future__ import annotations

from typing import Any

from zarrsql.engine.mount_views import mount_parts
from zarrsql.engine.sqltext import folded, quote_ident
from zarrsql.errors import ParameterError

#: Catalog names DuckDB keeps for itself: ATTACH ... AS one of them is refused.
_RESERVED = frozenset({"main", "memory", "system", "temp", "information_schema", "pg_catalog"})


#: The sequence zarr_mount creates in the `main` schema of each database it attaches, started
#: at that database's oid: a copy in another database (COPY FROM DATABASE) does not match it.
MARK = "__zarrsql_mount"


def check_name(database: Any, attaching: bool = False) -> str:
    """`database` as a mount's name; one DuckDB keeps for itself cannot be attached."""
    if attaching and isinstance(database, str) and folded(database) in _RESERVED:
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


def attached_as(con: Any, database: str) -> str | None:
    """The name the database `database` names is attached under, as DuckDB spells it, or None."""
    names = [name for (name,) in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()]
    return next((name for name in names if folded(name) == folded(database)), None)


def not_attached(con: Any, database: str) -> str:
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


def database_path(con: Any, database: str) -> str:
    """The file of the attached database `database` (its own spelling), '' in memory."""
    rows = con.execute(
        "SELECT coalesce(path, '') FROM duckdb_databases() WHERE database_name = ?", [database]
    ).fetchall()
    return str(rows[0][0]) if rows else ""


def objects(con: Any, database: str) -> list[tuple[str, str, str]]:
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
            [database, MARK],
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


def marked(con: Any, database: str) -> bool:
    """Whether zarr_mount attached `database` (its own spelling): an in-memory database holding
    zarrsql's mark (`MARK`)."""
    rows = con.execute(
        "SELECT count(*) FROM duckdb_sequences() s JOIN duckdb_databases() d USING (database_oid) "
        "WHERE d.database_name = ? AND d.path IS NULL AND s.schema_name = 'main' AND s.sequence_name = ? "
        "AND s.start_value = s.database_oid",
        [database, MARK],
    ).fetchall()
    return bool(rows[0][0])


def mark(con: Any, database: str) -> None:
    """Mark `database`, just attached by zarr_mount, as attached by it (`MARK`)."""
    oid = con.execute("SELECT database_oid FROM duckdb_databases() WHERE database_name = ?", [database]).fetchall()
    con.execute(f"CREATE SEQUENCE {quote_ident(database)}.main.{quote_ident(MARK)} START WITH {int(oid[0][0])}")


def detachable(con: Any, database: str) -> bool:
    """Whether unmounting or replacing `database` (its own spelling) detaches it: zarr_mount
    attached it and it holds none of the user's own objects, which a DETACH would lose."""
    return marked(con, database) and all(kind == "zarr view" for _, _, kind in objects(con, database))


def check_writable(con: Any, database: str) -> None:
    """Refuse a mount that would attach a database on a read-only connection: DuckDB starts
    no in-memory database there, and says only that, not which call or what to do."""
    if con.execute("SELECT current_setting('access_mode')").fetchall()[0][0] != "read_only":
        return
    raise ParameterError(
        f"cannot mount the store as '{database}': the connection was opened with read_only=True, and DuckDB "
        "attaches no new database to a read-only connection; connect without read_only=True, or mount on "
        "another connection (zarrsql.connect()) and ATTACH the DuckDB file there with (READ_ONLY)"
    )


def check_read_only(con: Any, database: str, doing: str, otherwise: str = "") -> None:
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


def check_not_current(con: Any, database: str, doing: str) -> None:
    """Refuse to detach the connection's current database (`USE`), which DuckDB refuses
    naming only its own statement, before anything of the mount is changed."""
    if con.execute("SELECT current_database()").fetchall()[0][0] != database:
        return
    raise ParameterError(
        f"cannot {doing} '{database}': it is this connection's current database (USE {quote_ident(database)}), "
        "and DuckDB cannot detach that one; switch to another database with USE first"
    )


def what_database(con: Any, database: str) -> str:
    """What an attached database that replace := true may not detach (`detachable`) is, for
    the error refusing to replace it."""
    path = database_path(con, database)
    if path:
        return f"the database file '{path}'"
    kinds = [kind for _, _, kind in objects(con, database)]
    relations = sum(kind in ("table", "view") for kind in kinds)
    others = sum(kind in ("sequence", "macro", "type") for kind in kinds)
    not_attached = "" if marked(con, database) else " that zarr_mount did not attach"
    if not relations and not others:
        if "zarr view" in kinds:  # mounted into with existing := true
            return f"an in-memory database{not_attached} (its zarr views were added with existing := true)"
        return f"an empty in-memory database{not_attached}"
    held = [f"{relations} table(s) or view(s)"] if relations else []
    held += [f"{others} sequence(s), macro(s) or type(s)"] if others else []
    holding = f"holding {' and '.join(held)} that zarrsql did not create"
    return f"an in-memory database{not_attached}, {holding}" if not_attached else f"an in-memory database {holding}"
