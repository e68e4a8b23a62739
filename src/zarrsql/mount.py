"""`zarrsql.mount(con, store, "era5")`: a store's tables as views `era5.<table>` in one call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import duckdb

from zarrsql.api import store_location
from zarrsql.engine import mounts
from zarrsql.engine.connection import register
from zarrsql.errors import StoreArgumentError


def mount(
    con: Any,
    store: Any,
    database: str,
    *,
    view_names: Mapping[str, str] | None = None,
    existing: bool = False,
    replace: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> duckdb.DuckDBPyRelation:
    """Make every named table of `store` queryable as `database.table` (nested groups:
    `database."group/path".table`).

    `view_names` renames views (keys: `table` for the root group, `group/path/table` for
    others). By default a new in-memory database is attached; `existing=True` adds the views
    to an attached database instead (a DuckDB file keeps them across sessions);
    `replace=True` remounts over an earlier zarr mount of the same name. Returns the mounted
    tables: `read_zarr_tables`' columns plus `view_name`. `store` is a path or URL (str or
    `os.PathLike`), or the root `zarr.Group` of a local or fsspec store.
    """
    path, group = store_location(store)
    if group is not None:
        raise StoreArgumentError(
            f"mount() mounts a whole store, and the zarr.Group given is its group '{group}'; "
            "pass the store's root group or its path"
        )
    zcon = register(con)
    table = mounts.mount(
        zcon,
        path,
        database,
        view_names=view_names,
        existing=existing,
        replace=replace,
        storage_options=storage_options,
    )
    return zcon.duckdb.from_arrow(table)


def unmount(con: Any, database: str) -> duckdb.DuckDBPyRelation:
    """Undo a mount (see `zarr_unmount`); returns the views removed."""
    zcon = register(con)
    return zcon.duckdb.from_arrow(mounts.unmount(zcon, database))
