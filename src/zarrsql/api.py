"""The Python functions of the public API: each builds the SQL call and returns a relation."""

from __future__ import annotations

import threading
from typing import Any

import duckdb

from zarrsql.engine.connection import Connection, connect, register
from zarrsql.engine.params import bounds_text
from zarrsql.engine.sqltext import literal

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


def _param_name(name: str) -> str:
    """`table`, `group` and `array` are SQL keywords: quote them."""
    return f'"{name}"' if name in ("table", "group", "array") else name


def _call(function: str, positional: list[Any], params: dict[str, Any], connection: Any) -> duckdb.DuckDBPyRelation:
    con = default_connection() if connection is None else register(connection)
    args = [literal(v) for v in positional]
    params = {k: bounds_text(v) if k == "bounds" else v for k, v in params.items()}
    args += [f"{_param_name(k)} := {literal(v)}" for k, v in params.items() if v is not None]
    return con.sql(f"SELECT * FROM {function}({', '.join(args)})")


def read_zarr(store: str, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """One table of a store as a DuckDB relation; keywords are `read_zarr`'s SQL parameters."""
    return _call("read_zarr", [store], params, connection)


def read_zarr_metadata(store: str, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """One row per array of the store (see `read_zarr_metadata` in SQL)."""
    return _call("read_zarr_metadata", [store], params, connection)


def read_zarr_tables(store: str, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """One row per table of the store (see `read_zarr_tables` in SQL)."""
    return _call("read_zarr_tables", [store], params, connection)


read_zarr_groups = read_zarr_tables


def read_zarr_views(store: str, database: str, *, connection: Any = None, **params: Any) -> duckdb.DuckDBPyRelation:
    """The statements that mount the store as `database` (see `read_zarr_views` in SQL)."""
    return _call("read_zarr_views", [store, database], params, connection)
