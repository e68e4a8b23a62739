"""The Python functions of the public API: each builds the SQL call and returns a relation."""

from __future__ import annotations

import datetime
import os
import sys
import threading
from typing import Any

import duckdb

from zarrsql.engine.connection import Connection, connect, register
from zarrsql.engine.functions import SIGNATURES
from zarrsql.engine.hints import unknown_parameter
from zarrsql.engine.params import bounds_text
from zarrsql.engine.sqltext import literal
from zarrsql.errors import ParameterError, StoreArgumentError
from zarrsql.store.icechunk import is_icechunk_object, session_location

_default: Connection | None = None
_default_lock = threading.Lock()


def default_connection() -> Connection:
    """The module-level connection `zarrsql.sql` uses (in memory, made on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = connect()
        return _default


def sql(query: str, *args: Any, **kwargs: Any) -> duckdb.DuckDBPyRelation:
    """Run `query` on the default connection, like `duckdb.sql`."""
    return default_connection().sql(query, *args, **kwargs)


def _zarr_group_location(group: Any) -> tuple[str, str]:
    """The (path or URL, group path) of a `zarr.Group` whose store zarrsql can open itself."""
    store = group.store
    kind = type(store).__name__
    if kind == "LocalStore":
        return str(store.root), group.path
    if kind == "FsspecStore":
        return store.fs.unstrip_protocol(store.path), group.path
    if is_icechunk_object(store):
        return session_location(store), group.path
    raise StoreArgumentError(
        f"cannot read a zarr.Group backed by a {kind}: zarrsql reads stores by their path or URL; "
        "pass the store's path or URL instead (a LocalStore's or FsspecStore's group is taken as its path)"
    )


def store_location(store: Any) -> tuple[str, str | None]:
    """The store argument as (path or URL, group path or None): a string, an `os.PathLike`
    (such as `pathlib.Path`), a `zarr.Group` on a local or fsspec store, or an Icechunk
    `Session` or store (read as that session sees it)."""
    if isinstance(store, str):
        return store, None
    if is_icechunk_object(store):
        return session_location(store), None
    if isinstance(store, os.PathLike):
        path = os.fspath(store)
        return (path if isinstance(path, str) else os.fsdecode(path)), None
    zarr = sys.modules.get("zarr")  # a zarr.Group can only exist if zarr was imported
    if zarr is not None and isinstance(store, zarr.Group):
        path, group = _zarr_group_location(store)
        return path, group or None
    raise StoreArgumentError(
        f"the store must be a path or URL (a str or os.PathLike such as pathlib.Path), got a {type(store).__name__}"
    )


def _param_name(name: str) -> str:
    """`table`, `group` and `array` are SQL keywords: quote them."""
    return f'"{name}"' if name in ("table", "group", "array") else name


def _literal(name: str, value: Any) -> str:
    """A keyword's value in SQL: `as_of` may be a `datetime`, and `virtual_chunks`' values
    may be None (a SQL NULL, where a plain MAP literal would write the text 'None')."""
    if name == "as_of" and isinstance(value, datetime.datetime):
        return literal(value.isoformat())
    if name == "virtual_chunks" and isinstance(value, dict):
        return "MAP {" + ", ".join(f"{literal(str(k))}: {literal(v)}" for k, v in value.items()) + "}"
    return literal(value)


def _check_keywords(function: str, params: dict[str, Any]) -> None:
    for name in params:
        err = unknown_parameter(function, name, python=True)
        if err is not None:
            raise err


def _call(
    function: str, store: Any, positional: list[Any], params: dict[str, Any], connection: Any
) -> duckdb.DuckDBPyRelation:
    _check_keywords(function, params)
    path, group = store_location(store)
    if group is not None:
        if "group_path" not in SIGNATURES[function][1]:
            raise StoreArgumentError(
                f"{function}() reads a whole store, and the zarr.Group given is its group '{group}'; "
                "pass the store's root group or its path"
            )
        if any(params.get(k) is not None for k in ("group_path", "group", "array_path", "array")):
            raise ParameterError(
                f"the zarr.Group given is the group '{group}' of its store, and a group_path or array_path was "
                "passed too; pass the store's root group (or its path) with group_path=, or the group alone"
            )
        params = {**params, "group_path": group}
    con = default_connection() if connection is None else register(connection)
    args = [literal(v) for v in [path, *positional]]
    params = {k: bounds_text(v) if k == "bounds" else v for k, v in params.items()}
    args += [f"{_param_name(k)} := {_literal(k, v)}" for k, v in params.items() if v is not None]
    return con.sql(f"SELECT * FROM {function}({', '.join(args)})")


def read_zarr(store: Any, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """One table of a store as a DuckDB relation; keywords are `read_zarr`'s SQL parameters.

    `store` is a path or URL (str or `os.PathLike`), or a `zarr.Group` on a local or fsspec store."""
    return _call("read_zarr", store, [], params, connection)


def read_zarr_metadata(store: Any, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """One row per array of the store (see `read_zarr_metadata` in SQL)."""
    return _call("read_zarr_metadata", store, [], params, connection)


def read_zarr_tables(store: Any, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """One row per table of the store (see `read_zarr_tables` in SQL)."""
    return _call("read_zarr_tables", store, [], params, connection)


read_zarr_groups = read_zarr_tables


def read_zarr_views(store: Any, database: str, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """The statements that mount the store as `database` (see `read_zarr_views` in SQL)."""
    return _call("read_zarr_views", store, [database], params, connection)
