"""`zarrsql.to_zarr`: the front function of every Zarr writer.

It checks the arguments (each refusal names the parameter and the fix), resolves the
relation or SQL text, and hands over to the layout's writer: `grid.write_grid` for dense,
xarray-compatible stores, `table.write_table` (the Zarr table convention) for tables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from zarrsql.errors import ParameterError, UnsupportedError
from zarrsql.store.icechunk import is_icechunk_object, session_location, writable_session
from zarrsql.write.allocator import returning_memory
from zarrsql.write.source import Source, source_of

__all__ = ["to_zarr"]

MODES = ("w-", "w", "a")
LAYOUTS = ("grid", "table")


def to_zarr(
    relation_or_sql: Any,
    store: Any,
    *,
    dims: Sequence[str] | None = None,
    layout: str = "grid",
    chunks: Any = None,
    mode: str = "w-",
    append_dim: str | None = None,
    zarr_format: int = 3,
    consolidated: bool = True,
    storage_options: Mapping[str, str] | None = None,
    connection: Any = None,
) -> None:
    """Write a relation (or the result of SQL text) as a Zarr store.

    mode "w-" refuses an existing store, "w" replaces it once the new one is complete, "a"
    appends: rows to a table, or steps along `append_dim` of a grid. A failed write leaves
    no new store and an old one unchanged.
    """
    write_zarr(relation_or_sql, store, dims=dims, layout=layout, chunks=chunks, mode=mode, append_dim=append_dim,
               zarr_format=zarr_format, consolidated=consolidated, storage_options=storage_options,
               connection=connection)  # fmt: skip


def write_zarr(
    relation_or_sql: Any,
    store: Any,
    *,
    dims: Sequence[str] | None = None,
    layout: str = "grid",
    chunks: Any = None,
    mode: str = "w-",
    append_dim: str | None = None,
    zarr_format: int = 3,
    consolidated: bool = True,
    storage_options: Mapping[str, str] | None = None,
    connection: Any = None,
) -> int | None:
    """`to_zarr`, returning the rows written (None when the layout's writer does not say)."""
    target = _store_text(store)
    _check(layout, mode, append_dim, zarr_format, consolidated)
    source = source_of(relation_or_sql, connection)
    with returning_memory(source.connection.duckdb):
        if layout == "table":
            _write_table(source, target, dims, chunks, mode, zarr_format, consolidated, storage_options)
            return None
        return _write_grid(source, target, dims, chunks, mode, append_dim, zarr_format, consolidated, storage_options)


def _write_grid(
    source: Source, target: str, dims: Sequence[str] | None, chunks: Any, mode: str, append_dim: str | None,
    zarr_format: int, consolidated: bool, storage_options: Mapping[str, str] | None,
) -> int | None:  # fmt: skip
    from zarrsql.write.grid import GridOptions, write_grid

    if mode == "a":
        from zarrsql.write.grid_append import append_grid

        appended = append_grid(source, target, dims, append_dim, storage_options)
        if appended is not None:
            return appended
        mode = "w-"  # nothing there yet: the first append creates the store
    options = GridOptions(chunks=chunks, zarr_format=zarr_format, consolidated=consolidated)
    return write_grid(source, target, dims=dims, mode=mode, options=options, storage_options=storage_options)


def _store_text(store: Any) -> str:
    if isinstance(store, str):
        return store
    if is_icechunk_object(store):  # a writable session: written through a fork, committed by the user
        location = session_location(store)
        writable_session(location)
        return location
    if isinstance(store, os.PathLike):
        return os.fspath(store)  # type: ignore[return-value]
    raise ParameterError(
        f"to_zarr writes to a path or URL (str or os.PathLike) or a writable Icechunk session, got a "
        f"{type(store).__name__}; pass the store's path"
    )


def _check(layout: str, mode: str, append_dim: str | None, zarr_format: int, consolidated: bool) -> None:
    if layout not in LAYOUTS:
        raise ParameterError(f"layout must be 'grid' or 'table', got {layout!r}")
    if mode not in MODES:
        raise ParameterError(
            f"mode must be 'w-' (create, refuse an existing store), 'w' (replace) or 'a' (append), got {mode!r}"
        )
    if zarr_format not in (2, 3):
        raise ParameterError(f"zarr_format must be 2 or 3, got {zarr_format!r}")
    if not isinstance(consolidated, bool):
        raise ParameterError(f"consolidated must be True or False, got {consolidated!r}")
    if append_dim is not None and mode != "a":
        raise ParameterError(f"append_dim={append_dim!r} appends, so it needs mode='a' (got mode={mode!r})")
    if layout == "grid" and mode == "a" and append_dim is None:
        raise ParameterError(
            "a grid append steps along one dimension: pass append_dim='<dimension>' with mode='a' "
            "(e.g. append_dim='time')"
        )
    if layout == "table" and append_dim is not None:
        raise ParameterError("append_dim is for layout='grid'; a table append adds rows: drop append_dim")


def _write_table(
    source: Any, store: str, dims: Any, chunks: Any, mode: str, zarr_format: int, consolidated: bool,
    storage_options: Mapping[str, str] | None,
) -> None:  # fmt: skip
    try:
        from zarrsql.write.table import write_table  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        raise UnsupportedError("layout='table' is not available in this build; write with layout='grid'") from err
    if dims is not None:
        raise ParameterError("dims is for layout='grid' (a table has one row axis); drop dims")
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1):
        raise ParameterError(f"chunks for layout='table' is the rows per chunk, a positive int; got {chunks!r}")
    from zarrsql.write.source import arrow_reader

    reader = arrow_reader(source.relation)
    write_table(reader, store, mode=mode, chunks=chunks, zarr_format=zarr_format, consolidated=consolidated,
                storage_options=storage_options)  # fmt: skip
