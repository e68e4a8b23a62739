"""The Python functions of the public API: the read functions build the SQL call and return a
relation; `mount`/`unmount` run the same code as `zarr_mount`/`zarr_unmount`."""

from __future__ import annotations

import datetime
import os
import sys
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import duckdb

from zarrsql.engine import mounts
from zarrsql.engine.connection import Connection, connect, register
from zarrsql.engine.functions import SIGNATURES
from zarrsql.engine.hints import unknown_parameter
from zarrsql.engine.params import bounds_text
from zarrsql.engine.sqltext import literal
from zarrsql.errors import ParameterError, StoreArgumentError
from zarrsql.scan.request import store_choice_of
from zarrsql.store.choice import STORE_ARGUMENT_NAMES
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


def mount(
    con: Any,
    store: Any,
    database: str,
    *,
    view_names: Mapping[str, str] | None = None,
    existing: bool = False,
    replace: bool = False,
    storage_options: Mapping[str, str] | None = None,
    **version: Any,
) -> duckdb.DuckDBPyRelation:
    """Make every named table of `store` queryable as `database.table` (nested groups:
    `database."group/path".table`).

    `view_names` renames views (keys: `table` for the root group, `group/path/table` for
    others). By default a new in-memory database is attached; `existing=True` adds the views
    to an attached database instead (a DuckDB file keeps them across sessions);
    `replace=True` remounts over an earlier zarr mount of the same name. Returns the mounted
    tables: `read_zarr_tables`' columns plus `view_name`. `store` is a path or URL (str or
    `os.PathLike`), the root `zarr.Group` of a local or fsspec store, or an Icechunk session.
    `version` takes `read_zarr`'s store keywords (`format`, `branch`, `tag`, `snapshot`,
    `as_of`, `virtual_chunks`); the views keep them.
    """
    path, group = store_location(store)
    if group is not None:
        raise StoreArgumentError(
            f"mount() mounts a whole store, and the zarr.Group given is its group '{group}'; "
            "pass the store's root group or its path"
        )
    unknown = sorted(set(version) - set(STORE_ARGUMENT_NAMES))
    if unknown:
        raise ParameterError(
            f"zarrsql.mount() got unknown keyword argument(s) {unknown}; beyond its own it takes "
            f"{', '.join(STORE_ARGUMENT_NAMES)}"
        )
    as_of = version.get("as_of")
    if isinstance(as_of, datetime.datetime):
        version = {**version, "as_of": as_of.isoformat()}
    zcon = register(con)
    table = mounts.mount_table(
        zcon,
        path,
        database,
        view_names=view_names,
        existing=existing,
        replace=replace,
        storage_options=storage_options,
        choice=store_choice_of(version),
    )
    return zcon.duckdb.from_arrow(table)


def unmount(con: Any, database: str) -> duckdb.DuckDBPyRelation:
    """Undo a mount (see `zarr_unmount`); returns the views removed."""
    zcon = register(con)
    return zcon.duckdb.from_arrow(mounts.unmount_table(zcon, database))


def _points_name(con: Connection, points: Any) -> str:
    """A query text as is; anything else (a relation, a pandas/polars frame, an Arrow table)
    registered on the connection under a fresh name for `zarr_sample` to read."""
    if isinstance(points, str):
        return points
    import pyarrow as pa

    from zarrsql.engine.sampling import check_point_columns

    if isinstance(points, duckdb.DuckDBPyRelation):
        table = points.arrow()
        table = table.read_all() if isinstance(table, pa.RecordBatchReader) else table
    elif isinstance(points, pa.Table):
        table = points
    elif hasattr(points, "to_arrow"):  # polars
        table = points.to_arrow()
    elif hasattr(points, "to_dict") and hasattr(points, "columns"):  # pandas
        table = _frame_table(points)
    else:
        raise ParameterError(
            f"points must be a query string, a DuckDB relation, a pandas or polars DataFrame or an Arrow table, "
            f"got a {type(points).__name__}"
        )
    check_point_columns([str(c) for c in table.column_names])
    name = f"__zarrsql_points_{uuid.uuid4().hex[:16]}"
    con.duckdb.register(name, table)
    return name


def _frame_table(frame: Any) -> Any:
    """A pandas DataFrame's points as an Arrow table. Its named index levels become columns,
    as `reset_index()` makes them (stations indexed by name keep their name; points indexed by
    lat and lon are matched on them); an unnamed index (the default RangeIndex, or the row
    numbers a filter leaves) is no column."""
    import pyarrow as pa

    from zarrsql.engine.sampling import check_point_columns

    levels = [level for level in frame.index.names if level is not None]
    check_point_columns([str(c) for c in [*levels, *frame.columns]])
    if levels:
        frame = frame.reset_index(level=levels)
    return pa.Table.from_pandas(frame, preserve_index=False)


def sample(
    store: Any,
    points: Any,
    *,
    method: str = "nearest",
    tolerance: Any = None,
    connection: Any = None,
    **params: Any,
) -> duckdb.DuckDBPyRelation:
    """The store's cells at `points` (see `zarr_sample` in SQL): one row per point and per value
    of the dimensions the points do not give. `tolerance` is a number (every numeric
    dimension; a numpy number or a Decimal too), or a dict of dimension → number, or for a
    time dimension an interval (`datetime.timedelta`, `numpy.timedelta64` or text such as
    '1 hour')."""
    con = default_connection() if connection is None else register(connection)
    if isinstance(tolerance, dict):
        tolerance = {k: _tolerance_value(v) for k, v in tolerance.items()}
    elif tolerance is not None:
        tolerance = _tolerance_value(tolerance)
    name = _points_name(con, points)
    return _call("zarr_sample", store, [name], {"method": method, "tolerance": tolerance, **params}, con)


def _tolerance_value(value: Any) -> Any:
    """A tolerance as zarr_sample's SQL argument takes it: a numpy number or a Decimal as the
    Python number it is, a time tolerance as text DuckDB casts to INTERVAL (microseconds,
    exactly)."""
    from decimal import Decimal

    import numpy as np

    if isinstance(value, np.timedelta64):
        value = value.astype("timedelta64[us]").astype(datetime.timedelta)
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return f"{micros} microseconds"
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, Decimal):
        return float(value)
    if value is None or isinstance(value, (int, float, str)):
        return value
    raise ParameterError(
        f"tolerance= must be a number, an interval (datetime.timedelta, numpy.timedelta64 or text such as "
        f"'1 hour') or a dict of dimension -> one of those, got a {type(value).__name__}"
    )
