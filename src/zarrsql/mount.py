"""`zarrsql.mount(con, store, "era5")`: a store's tables as views `era5.<table>` in one call."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import duckdb

from zarrsql.api import store_location
from zarrsql.engine import mounts
from zarrsql.engine.connection import register
from zarrsql.errors import ParameterError, StoreArgumentError
from zarrsql.scan.request import store_choice_of
from zarrsql.store.choice import STORE_ARGUMENT_NAMES


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
    choice = store_choice_of(version)
    zcon = register(con)
    table = mounts.mount(
        zcon,
        path,
        database,
        view_names=view_names,
        existing=existing,
        replace=replace,
        storage_options=storage_options,
        choice=choice,
    )
    return zcon.duckdb.from_arrow(table)


def unmount(con: Any, database: str) -> duckdb.DuckDBPyRelation:
    """Undo a mount (see `zarr_unmount`); returns the views removed."""
    zcon = register(con)
    return zcon.duckdb.from_arrow(mounts.unmount(zcon, database))
