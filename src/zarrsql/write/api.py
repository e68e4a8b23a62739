"""`zarrsql.to_zarr`: the front function of every Zarr writer.

It checks the arguments and the target (each refusal names the parameter and the fix),
resolves the relation or SQL text and the connection it runs on (a relation's own, when no
`connection` is given), and hands over to the layout's writer: `grid.write_grid` for dense,
xarray-compatible stores, `table.write_table` (the Zarr table convention) for tables.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from zarrsql.errors import ParameterError, UnsupportedError
from zarrsql.store.icechunk import is_icechunk_object, session_location, writable_session
from zarrsql.write.allocator import returning_memory
from zarrsql.write.chunking import plain_lengths
from zarrsql.write.source import Source, query_error, source_of
from zarrsql.write.targets import check_append_target, check_target

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
    chunks = plain_lengths(chunks)
    _check(layout, mode, append_dim, zarr_format, consolidated)
    connection = connection if connection is not None else _own_connection(relation_or_sql)
    if not is_icechunk_object(store):  # a session object is the caller's own, not a location
        _check_access(connection, target)
    check_target(target, storage_options)
    source = source_of(relation_or_sql, connection)
    source = dataclasses.replace(source, store=target)
    with returning_memory(source.connection.duckdb):
        try:
            if layout == "table":
                return _write_table(source, target, dims, chunks, mode, zarr_format, consolidated, storage_options)
            return _write_grid(
                source, target, dims, chunks, mode, append_dim, zarr_format, consolidated, storage_options
            )
        except duckdb.InterruptException:
            raise  # Ctrl-C: not the query's failure
        except duckdb.Error as err:  # a query over the relation (an aggregate, a check) failed: as its rows would
            raise query_error(source, err) from err
        finally:  # however the write ended, no stream of its rows is left open on the connection
            source.close_readers()


def _write_grid(
    source: Source, target: str, dims: Sequence[str] | None, chunks: Any, mode: str, append_dim: str | None,
    zarr_format: int, consolidated: bool, storage_options: Mapping[str, str] | None,
) -> int | None:  # fmt: skip
    from zarrsql.write.grid import GridOptions, write_grid

    if mode == "a":
        from zarrsql.write.grid_append import append_grid

        appended = append_grid(
            source, target, dims, append_dim, storage_options, chunks=chunks, zarr_format=zarr_format
        )
        if appended is not None:
            return appended
        check_append_target(target)  # something that is not a store: refused in an append's words
        mode = "w-"  # nothing there yet: the first append creates the store
    options = GridOptions(chunks=chunks, zarr_format=zarr_format, consolidated=consolidated)
    return write_grid(source, target, dims=dims, mode=mode, options=options, storage_options=storage_options)


def _check_access(connection: Any, target: str) -> None:
    """Refuse a target the connection's DuckDB file-access settings forbid (engine/access.py),
    before anything at the target is looked at."""
    from zarrsql.engine.access import policy_of

    if connection is None:
        from zarrsql.engine.api import default_connection

        connection = default_connection()
    duck = getattr(connection, "duckdb", connection)
    if isinstance(duck, duckdb.DuckDBPyConnection):  # anything else: source_of names the mistake
        policy_of(duck).check(target, writing=True)


def _own_connection(relation_or_sql: Any) -> Any:
    """The zarrsql connection a relation belongs to, for a write given no `connection`: the
    writers run statements beside the relation (a view of it joined to coordinates), which
    must be on its own connection. DuckDB's Python relation keeps that connection only as the
    private `_con`; without it (another DuckDB build), None: the default connection, as before."""
    if not isinstance(relation_or_sql, duckdb.DuckDBPyRelation):
        return None
    duck = getattr(relation_or_sql, "_con", None)
    if not isinstance(duck, duckdb.DuckDBPyConnection):
        return None
    from zarrsql.engine.connection import register, wrapper_of

    # the wrapper the relation came from (its scans and their errors are registered there);
    # a relation of a plain DuckDB connection gets one, as `connection=` that connection would
    return wrapper_of(duck) or register(duck)


def _store_text(store: Any) -> str:
    if isinstance(store, str):
        if not store.strip():
            raise ParameterError("the target store is empty (''); pass a path or URL, e.g. 'out.zarr'")
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
    source: Source, store: str, dims: Any, chunks: Any, mode: str, zarr_format: int, consolidated: bool,
    storage_options: Mapping[str, str] | None,
) -> int:  # fmt: skip
    """Write the relation as a table-layout store: the rows written."""
    try:
        from zarrsql.write.table import write_table  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        raise UnsupportedError("layout='table' is not available in this build; write with layout='grid'") from err
    if dims is not None:
        raise ParameterError("dims is for layout='grid' (a table has one row axis); drop dims")
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1):
        raise ParameterError(f"chunks for layout='table' is the rows per chunk, a positive int; got {chunks!r}")
    reader = _QueryRows(_integers_as_doubles(source))
    try:
        write_table(reader.stream(), store, mode=mode, chunks=chunks, zarr_format=zarr_format,
                    consolidated=consolidated, storage_options=storage_options)  # fmt: skip
    finally:
        reader.close()  # a failed write would leave it open until the garbage collector ran
    return reader.rows


def _integers_as_doubles(source: Source) -> Source:
    """The source with its HUGEINT and UHUGEINT columns read as DuckDB's `::DOUBLE` of them,
    once every value is known to come back exactly (else refused, naming the value). The
    table layout checks DECIMALs itself, on their Arrow values; these it cannot: DuckDB wraps a
    UHUGEINT past 2**127 in Arrow, and pyarrow's cast of -2**127 to a double flips its sign."""
    from zarrsql.write.cells import WIDE_INTEGER_TYPES, read_columns  # pandas: only when writing
    from zarrsql.write.grid import check_integers_as_doubles
    from zarrsql.write.source import schema_of

    if not any(t.id in WIDE_INTEGER_TYPES for t in source.relation.types):
        return source

    check_integers_as_doubles(source, schema_of(source), "the float64 array the table layout stores it in")
    relation = read_columns(source, source.columns, cast=WIDE_INTEGER_TYPES)
    return dataclasses.replace(source, relation=relation)  # its open streams shared, closed with it


class _QueryRows:
    """The relation's rows as the table writer reads them: counted (the rows written, for
    COPY's `Count`), and a failing query reported as the query's error, not as the I/O error
    pyarrow's OSError would be taken for (it carries DuckDB's error out of the Arrow stream)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.rows = 0
        try:
            self.reader = source.open_reader()
        except duckdb.Error as err:  # a query DuckDB runs to its end before the first batch
            raise query_error(self.source, err) from err

    def stream(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.reader.schema, self._batches())

    def close(self) -> None:
        """End DuckDB's stream of the rows (a no-op once it is read to its end): while it is
        open, DuckDB 2 refuses every other query on the connection."""
        self.reader.close()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        while True:
            try:
                batch = self.reader.read_next_batch()
            except StopIteration:
                return
            except (OSError, duckdb.Error) as err:
                raise query_error(self.source, err) from err
            self.rows += batch.num_rows
            yield batch
