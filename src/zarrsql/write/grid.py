"""The grid layout: a relation written as a dense, xarray-compatible Zarr store.

A grid whose arrays fit in `IN_MEMORY_BYTES` is pivoted whole, as `to_xarray` does (one
read for a small result, two otherwise: see `pivot`), and written at once. A larger
one takes two or three reads, none of which holds the relation: the dimension columns
(coordinates in order of first appearance, see `cells`), for integer, boolean and text
variables one aggregate (whether every cell has a value, so integers stay integers when
they can), and the rows sorted by chunk. For the
last, DuckDB joins each row to its coordinates' positions, computes its chunk number and
sorts by it (spilling to disk when it must); the writer fills one chunk buffer per variable
and writes it as soon as the next chunk begins. Memory: one chunk per variable, one batch,
and DuckDB's sort. Chunks no row falls in are not written: they read as the fill value.

A new store is written through `publish_new` (staged, then renamed into place); an append
(`grid_append`, which uses the streaming here) through `append_commit`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from zarrsql.errors import ParameterError, UnwritableColumnError, WriteError
from zarrsql.write.cells import Grid, check_names, column_values, dim_kinds, discover_grid, for_writing, quote
from zarrsql.write.chunking import chunk_shape
from zarrsql.write.commit import publish_new
from zarrsql.write.encoding import ZSTD_LEVEL, ArraySpec, spec_for, time_unit
from zarrsql.write.pivot import fill, keep_rows
from zarrsql.write.source import Source, batches, dims_of, kind_of, schema_of

__all__ = ["GridOptions", "write_grid"]

#: Output arrays up to this size are pivoted whole in memory from one unsorted read (as
#: `to_xarray` does) and written at once: cheaper in time and memory than DuckDB sorting
#: the rows, whose buffers outgrow such arrays. Larger outputs stream sorted by chunk.
IN_MEMORY_BYTES = 128 * 2**20


@dataclass(frozen=True)
class GridOptions:
    """How a grid store is laid out."""

    chunks: Any = None
    zarr_format: int = 3
    consolidated: bool = True


def write_grid(
    source: Source,
    store: str,
    *,
    dims: Sequence[str] | None,
    mode: str,
    options: GridOptions,
    storage_options: Mapping[str, str] | None,
) -> int:
    """Write the relation as a new grid store at `store` (see the module docstring); the rows written."""
    dims_t, kinds, variables, schema = grid_columns(source, dims)
    source = for_writing(source)
    whole: dict[str, np.ndarray] | None = None
    rows: list[int] = []
    kept = keep_rows(source, dims_t, kinds, variables)  # a small result: read once
    grid = kept.grid if kept is not None else discover_grid(source, dims_t, kinds)
    if _output_bytes(grid, variables, schema) <= IN_MEMORY_BYTES:
        whole, read = (kept.arrays(schema), kept.rows) if kept is not None else fill(source, grid, kinds, variables)
        rows.append(read)
        complete = {name: _has_every_cell(whole[name], kind) for name, kind in variables.items()}
    else:
        del kept
        complete = completeness(source, grid, variables)
    specs = [
        spec_for(name, kind, _numpy_dtype(schema.field(name).type, kind), complete=complete[name],
                 zarr_format=options.zarr_format, time_code=_data_time_code(schema.field(name).type))
        for name, kind in variables.items()
    ]  # fmt: skip
    coords = grid.coords()
    coord_specs = [
        spec_for(d, kinds[d], coords[d].dtype if kinds[d] != "string" else None, complete=True,
                 zarr_format=options.zarr_format, time_code=time_unit(coords[d])[1] if kinds[d] == "time" else None)
        for d in dims_t
    ]  # fmt: skip
    chunks = chunk_shape(options.chunks, dims_t, grid.shape)

    def write(target: Any) -> None:
        group = _open_root(target.zarr_store, options.zarr_format)
        for spec in coord_specs:
            arr = create_array(group, spec, (spec.name,), (len(coords[spec.name]),), (max(1, len(coords[spec.name])),),
                               options.zarr_format)  # fmt: skip
            if len(coords[spec.name]):
                arr[:] = spec.encode(coords[spec.name], None)
        arrays = {s.name: create_array(group, s, dims_t, grid.shape, chunks, options.zarr_format) for s in specs}
        if whole is not None:
            for spec in specs:
                if whole[spec.name].size:
                    arrays[spec.name][...] = spec.encode(whole[spec.name], None)
            return
        rows.append(write_chunks(source, grid, chunks, arrays, {s.name: s for s in specs}, old={}))

    publish_new(store, mode, storage_options, write, zarr_format=options.zarr_format,
                consolidated=options.consolidated)  # fmt: skip
    return rows[0]


def _output_bytes(grid: Grid, variables: Mapping[str, str], schema: pa.Schema) -> int:
    """The size of the output arrays held whole (8 bytes a cell for times, text and promoted
    integers: the widest they become)."""
    cells = int(np.prod(grid.shape, dtype=np.int64))
    width = 0
    for name, kind in variables.items():
        dtype = _numpy_dtype(schema.field(name).type, kind)
        width += dtype.itemsize if kind == "float" and dtype is not None else 8
    return cells * width


def _has_every_cell(values: np.ndarray, kind: str) -> bool:
    """Whether a pivoted variable has no missing cell (an integer promoted to float has one)."""
    if kind in ("int", "bool"):
        return values.dtype.kind != "f"
    if kind == "string":
        return not bool(pd.isna(values).any())
    return True


def grid_columns(
    source: Source, dims: Sequence[str] | None
) -> tuple[tuple[str, ...], dict[str, str], dict[str, str], pa.Schema]:
    """The dimensions, their kinds, the variables' kinds and the relation's schema; column names
    a store cannot hold are refused first (`check_names`)."""
    check_names(source.columns, zarr=True)
    dims_t = dims_of(source, dims)
    kinds = dim_kinds(source, dims_t, "grid")
    schema = schema_of(source)
    variables = {f.name: kind_of(f.name, f.type, "grid") for f in schema if f.name not in dims_t}
    check_integers_as_doubles(source, schema)
    return dims_t, kinds, variables, schema


#: Digits every integer of which a float64 holds exactly (10**15 < 2**53).
_EXACT_DIGITS = 15
#: HUGEINT's minimum, -2**127: a power of two, so float64 holds it exactly.
_HUGEINT_MIN = -(2**127)


def check_integers_as_doubles(
    source: Source, schema: pa.Schema, stored_in: str = "the float64 array a grid stores it in"
) -> None:
    """Refuse a HUGEINT (or DECIMAL without a scale) column with a value float64 cannot hold.

    Such columns become float64 arrays, as DuckDB's `.df()` makes them: `sum()` of integers
    is a HUGEINT, and a sum is exact in float64 up to 2**53. Past that the double is another
    integer, so a value that does not come back from DOUBLE unchanged is refused (one
    aggregate, only when a column has more than 15 digits). Scaled DECIMALs are approximate
    numbers anyway and stay float64 without a check."""
    wide = [f.name for f in schema if pa.types.is_decimal(f.type) and f.type.scale == 0
            and f.type.precision > _EXACT_DIGITS]  # fmt: skip
    if not wide:
        return
    own_types = dict(zip(source.columns, source.relation.types, strict=True))
    tests = []
    for name in wide:
        q = quote(name)  # back in the column's own type: a UHUGEINT past 2**127 is no HUGEINT
        bad = f"{q} IS NOT NULL AND TRY_CAST({q}::DOUBLE AS {own_types[name]}) IS DISTINCT FROM {q}"
        if str(own_types[name]) == "HUGEINT":  # -2**127 is exact, but DuckDB 1.5 casts it back as NULL
            bad += f" AND {q} <> ({_HUGEINT_MIN})::HUGEINT"
        tests += [f"count(*) FILTER (WHERE {bad})", f"min({q}) FILTER (WHERE {bad})::VARCHAR"]
    (row,) = source.relation.aggregate(", ".join(tests)).fetchall()
    for k, name in enumerate(wide):
        if row[2 * k]:
            raise UnwritableColumnError(
                f"column '{name}' ({schema.field(name).type}, e.g. a HUGEINT or a sum()) has the value {row[2 * k + 1]}"
                f", which {stored_in} cannot hold exactly; CAST it AS BIGINT when every "
                "value fits 64 bits, AS DOUBLE to accept the rounding, or AS VARCHAR to keep every digit"
            )


def _numpy_dtype(arrow_type: pa.DataType, kind: str) -> np.dtype[Any] | None:
    if pa.types.is_decimal(arrow_type):
        return np.dtype(np.float64)
    if kind in ("float", "int", "bool"):
        return np.dtype(arrow_type.to_pandas_dtype())
    return None


def _data_time_code(arrow_type: pa.DataType) -> str | None:
    """A time variable keeps its column's precision (DATE as days)."""
    if pa.types.is_date(arrow_type):
        return "D"
    if pa.types.is_timestamp(arrow_type):
        return arrow_type.unit
    return None


def completeness(source: Source, grid: Grid, variables: Mapping[str, str]) -> dict[str, bool]:
    """Which variables have a non-NULL value in every cell. Only integers, booleans and text
    ask (one aggregate over the relation): floats and times mark a missing cell either way."""
    asked = [n for n, kind in variables.items() if kind in ("int", "bool", "string")]
    out = dict.fromkeys(variables, True)
    if not asked:
        return out
    cells = int(np.prod(grid.shape, dtype=np.int64))
    (row,) = source.relation.aggregate(", ".join(["count(*)", *(f"count({quote(n)})" for n in asked)])).fetchall()
    total = int(row[0])
    out.update({n: total >= cells and int(c) == total for n, c in zip(asked, row[1:], strict=True)})
    return out


def _open_root(zarr_store: Any, zarr_format: int) -> Any:
    import zarr

    return zarr.open_group(store=zarr_store, mode="w", zarr_format=2 if zarr_format == 2 else 3)


def create_array(
    group: Any, spec: ArraySpec, dims: Sequence[str], shape: Sequence[int], chunks: Sequence[int], zarr_format: int
) -> Any:
    """An array of the group, with dimension names as xarray writes them for the format."""
    if zarr_format == 2:
        import numcodecs

        compressors: Any = numcodecs.Zstd(level=ZSTD_LEVEL)
        attributes = {**spec.attributes, "_ARRAY_DIMENSIONS": list(dims)}
        names = None
    else:
        from zarr.codecs import ZstdCodec

        compressors = ZstdCodec(level=ZSTD_LEVEL)
        attributes, names = dict(spec.attributes), list(dims)
    return group.create_array(
        spec.name,
        shape=tuple(shape),
        chunks=tuple(chunks),
        dtype=spec.dtype,
        fill_value=spec.fill_value,
        compressors=compressors,
        attributes=attributes,
        dimension_names=names,
    )


class _ChunkBuffers:
    """The chunk being filled: one buffer per variable and a mask of the cells taken.

    `old` maps a variable to its array as stored before an append: a chunk that straddles
    the old end starts from its stored values, so rewriting it keeps them."""

    def __init__(self, grid: Grid, chunks: tuple[int, ...], arrays: dict[str, Any],
                 specs: dict[str, ArraySpec], old: dict[str, Any]) -> None:  # fmt: skip
        self.grid, self.chunks, self.arrays, self.specs, self.old = grid, chunks, arrays, specs, old
        self.counts = tuple(-(-n // c) for n, c in zip(grid.shape, chunks, strict=True))
        self.current: int | None = None

    def start(self, chunk: int) -> None:
        at = np.unravel_index(chunk, self.counts)
        self.origin = tuple(int(a) * c for a, c in zip(at, self.chunks, strict=True))
        self.region = tuple(
            slice(o, min(o + c, n)) for o, c, n in zip(self.origin, self.chunks, self.grid.shape, strict=True)
        )
        size = tuple(s.stop - s.start for s in self.region)
        self.buffers = {name: spec.empty(size) for name, spec in self.specs.items()}
        for name, before in self.old.items():
            kept = tuple(slice(s.start, min(s.stop, n)) for s, n in zip(self.region, before.shape, strict=True))
            if all(k.stop > k.start for k in kept):
                self.buffers[name][tuple(slice(0, k.stop - k.start) for k in kept)] = before[kept]
        self.taken = np.zeros(size, dtype=bool)
        self.filled = 0
        self.current = chunk

    def place(self, batch: pa.RecordBatch, positions: list[np.ndarray]) -> None:
        local = tuple(p - o for p, o in zip(positions, self.origin, strict=True))
        again = self.taken[local]
        self.taken[local] = True
        filled = int(np.count_nonzero(self.taken))  # fewer new cells than rows: a repeat inside
        if again.any() or filled - self.filled != len(local[0]):
            flat = np.ravel_multi_index(positions, self.grid.shape)
            raise self.grid.duplicate_error(_first_repeat(flat, again))
        self.filled = filled
        for name, spec in self.specs.items():
            values = column_values(name, batch.column(name), spec.kind)
            self.buffers[name][local] = spec.encode(values.data, values.nulls)

    def flush(self) -> None:
        if self.current is None:
            return
        for name, array in self.arrays.items():
            array[self.region] = self.buffers[name]
        self.current = None


def _first_repeat(flat: np.ndarray, again: np.ndarray) -> int:
    if again.any():
        return int(flat[np.argmax(again)])
    seen: set[int] = set()
    for f in flat.tolist():
        if f in seen:
            return int(f)
        seen.add(f)
    return int(flat[0])


def write_chunks(
    source: Source, grid: Grid, chunks: tuple[int, ...], arrays: dict[str, Any], specs: dict[str, ArraySpec],
    *, old: dict[str, Any], first: Mapping[str, int] | None = None,
) -> int:  # fmt: skip
    """Stream the relation sorted by chunk into `arrays`: the rows written. `first` gives, per
    dimension, the position of the relation's first coordinate (an append starts past the old end).

    DuckDB sorts every row, so what a row carries into the sort is the write's memory: one
    int64 key, the cell's place in chunk-major order (the chunk's number times the cells of a
    chunk, plus the cell's offset inside it), and the variables. Both the chunk and the cell
    come back out of the key by division."""
    con = source.connection.duckdb
    source = for_writing(source)  # an append's source, as a new store's: wide numbers cast by DuckDB
    token = uuid.uuid4().hex[:12]
    view = f"__zarrsql_write_{token}"
    names = [f"{view}_{k}" for k in range(len(grid.dims))]
    order = _ChunkOrder(grid, chunks)
    schema = schema_of(source)
    source.relation.create_view(view, replace=True)
    try:
        for k, d in enumerate(grid.dims):
            index = grid.indexes[k]
            start = (first or {}).get(d, 0)
            values = _coordinate_array(index.values[start:] if start else index.values, schema.field(d).type)
            con.register(names[k], pa.table({"v": values, "i": np.arange(start, len(index), dtype=np.int64)}))
        columns = [f"{order.key_sql([f'c{k}.i' for k in range(len(names))])} AS __zarrsql_key"]
        columns += [f"r.{quote(n)}" for n in specs]
        joins = " ".join(f"JOIN {names[k]} AS c{k} ON r.{quote(d)} = c{k}.v" for k, d in enumerate(grid.dims))
        try:
            rel = con.sql(f"SELECT {', '.join(columns)} FROM {view} AS r {joins} ORDER BY __zarrsql_key ASC")
        except duckdb.CatalogException as err:
            if view not in str(err):
                raise
            raise ParameterError(  # the view went to the relation's own connection, not this one
                "the relation to write was made on another connection than the one writing it, and this "
                "DuckDB does not tell which: pass that connection, to_zarr(relation, ..., connection=con)"
            ) from None
        return _fill_chunks(source, rel, _ChunkBuffers(grid, chunks, arrays, specs, old), order)
    finally:
        for name in names:
            con.unregister(name)
        con.execute(f"DROP VIEW IF EXISTS {view}")


def _coordinate_array(values: np.ndarray, column_type: pa.DataType) -> pa.Array:
    """A dimension's coordinates as the join with the relation's column must see them.

    Time coordinates are held as naive datetime64 in UTC. Joined as a plain TIMESTAMP to a
    TIMESTAMP WITH TIME ZONE column, DuckDB would read them in the session's TimeZone and
    shift every row by the zone's offset; given the UTC zone, the join is the same in any zone."""
    if pa.types.is_timestamp(column_type) and column_type.tz is not None:
        return pa.array(values, type=pa.timestamp("ns", tz="UTC"))
    return pa.array(values)


class _ChunkOrder:
    """Cells numbered chunk by chunk: key = chunk number x cells per chunk + offset in the chunk
    (row-major both ways, over the grid padded to whole chunks)."""

    def __init__(self, grid: Grid, chunks: tuple[int, ...]) -> None:
        self.chunks = chunks
        self.counts = [-(-n // c) for n, c in zip(grid.shape, chunks, strict=True)]
        self.cell = int(np.prod(chunks, dtype=np.int64))
        self.strides = [int(np.prod(self.counts[k + 1 :], dtype=np.int64)) for k in range(len(chunks))]
        self.inner = [int(np.prod(chunks[k + 1 :], dtype=np.int64)) for k in range(len(chunks))]
        padded = 1
        for n, c in zip(self.counts, chunks, strict=True):
            padded *= n * c
        if padded >= 2**62:
            raise WriteError(
                f"the output grid of {padded:,} cells (padded to whole chunks) is too large to number its cells "
                "in 64 bits; write it in parts (filter the query) or choose another layout"
            )

    def key_sql(self, index: list[str]) -> str:
        if not index:
            return "0::BIGINT"
        chunk = [f"({i} // {c}) * {st * self.cell}" for i, c, st in zip(index, self.chunks, self.strides, strict=True)]
        cell = [f"({i} % {c}) * {inner}" for i, c, inner in zip(index, self.chunks, self.inner, strict=True)]
        return "(" + " + ".join(chunk + cell) + ")::BIGINT"

    def positions(self, chunk: int, keys: np.ndarray, origin: tuple[int, ...]) -> list[np.ndarray]:
        """The grid positions of the cells `keys` of chunk number `chunk` (at `origin`)."""
        offset = keys - chunk * self.cell
        return [(offset // inner) % c + o for inner, c, o in zip(self.inner, self.chunks, origin, strict=True)]


def _fill_chunks(source: Source, rel: Any, buffers: _ChunkBuffers, order: _ChunkOrder) -> int:
    rows = 0
    for batch in batches(source, rel):
        rows += batch.num_rows
        keys = batch.column(0).to_numpy()
        ids = keys // order.cell
        cuts = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            part = batch.slice(a, b - a)
            chunk = int(ids[a])
            if buffers.current != chunk:
                buffers.flush()
                buffers.start(chunk)
            buffers.place(part, order.positions(chunk, keys[a:b], buffers.origin))
    buffers.flush()
    return rows
