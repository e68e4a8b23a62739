"""`write_table`: a stream of Arrow record batches → a Zarr table-convention group (the root).

The store's root group registers the table convention (`zarr_conventions`), lists its
columns in `table:columns` (a column whose name is not a safe node name gets another node
name), and names `table:index` and `table:primary_geometry` when there are such columns.
Each column is written by a writer of its kind (`write.table_columns` for scalars and fixed
lists, `write.categorical_column`, `write.geometry_column`); every row-aligned array is
chunked by the same `chunks` rows along axis 0, as the convention requires.

Memory: the batches are regrouped into blocks of one row chunk (the first block of an
append is shorter, so that the blocks after it start on a chunk boundary and write whole
chunks), so at most one block plus one batch is held.

Publication goes through `write.commit`: `publish_new` for mode "w-"/"w" (the store appears
whole), `append_commit` for mode "a" (the consolidated root commits the new rows). Column
types are checked before anything is written; an append's columns must be the store's
(same names; types that cast safely), else `AppendSchemaError` names the column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from zarrsql.conventions.table import UUID
from zarrsql.errors import AppendSchemaError, ParameterError, UnwritableColumnError
from zarrsql.write import commit
from zarrsql.write import table_columns as tc
from zarrsql.write.categorical_column import CategoricalColumn
from zarrsql.write.column_arrays import Layout
from zarrsql.write.geometry_column import GeometryColumn
from zarrsql.write.geometry_input import block_of, geometry_source, names_a_point
from zarrsql.write.table_append import open_table, stored_kind

#: Rows per chunk along the row axis when `chunks` is not given: about a megabyte of float64
#: per column chunk, few enough chunks that a million-row table is 8 files per column.
DEFAULT_CHUNK = 131072
REGISTRATION = {
    "schema_url": "https://raw.githubusercontent.com/R-CF/zarr_convention_table/main/schema.json",
    "spec_url": "https://github.com/R-CF/zarr_convention_table/blob/main/README.md",
    "uuid": UUID,  # the reader's: what zarrsql recognises is what it writes
    "name": "table",
    "description": "Tabular data as a group of row-aligned column arrays",
}
_SAFE_NODE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_RESERVED_NODES = {"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata", "c"}
#: The longest node name kept: a node is one file or directory, whose name has at most 255
#: bytes on common file systems (a safe node name is ASCII: one byte a character), less the
#: 48 a column that becomes nullable adds to its temporary name (`column_arrays.move_node`).
_NODE_CHARACTERS = 200

#: One column's writer, whatever its kind.
Writer = tc.ScalarColumn | CategoricalColumn | tc.FixedListColumn | GeometryColumn


@dataclass(frozen=True)
class ColumnPlan:
    """What one column of the stream will be stored as (checked before anything is written)."""

    name: str
    node: str
    kind: str  # "scalar", "categorical", "fixed", "geometry"
    dtype: np.dtype | None = None
    trailing: tuple[int, ...] = ()
    source: str = ""  # geometry: "wkb" or "native"


# ----------------------------------------------------------------------------- planning
def _unwritable(name: str, arrow: pa.DataType, fix: str) -> UnwritableColumnError:
    return UnwritableColumnError(f"column '{name}' has type {arrow}, which the table layout cannot store; {fix}")


def _fix_for(arrow: pa.DataType) -> str:
    if names_a_point(arrow):  # the names of a point, but a field is not a number
        return "for a point, cast its fields to DOUBLE, e.g. {'x': x::DOUBLE, 'y': y::DOUBLE}"
    if pa.types.is_struct(arrow):
        return "split it into columns (SELECT col.* ...), or name its fields x, y[, z, m] for a point"
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow) or pa.types.is_list_view(arrow):
        return "the layout holds fixed-size lists (cast to T[K]) and geometries, not lists of varying length"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow) or pa.types.is_fixed_size_binary(arrow):
        return "store text (e.g. hex(col)) or, for geometries, a GEOMETRY column"
    return "cast it to a number, text, boolean or TIMESTAMP type"


def plan_column(name: str, node: str, field: pa.Field) -> ColumnPlan:
    arrow = field.type
    source = geometry_source(field)
    if source is not None:
        return ColumnPlan(name, node, "geometry", source=source)
    if pa.types.is_dictionary(arrow):
        value = arrow.value_type
        if not (pa.types.is_string(value) or pa.types.is_large_string(value)):
            raise _unwritable(name, arrow, "categorical columns are stored with text categories: cast the values")
        return ColumnPlan(name, node, "categorical")
    if pa.types.is_fixed_size_list(arrow):
        trailing, inner = tc.fixed_shape(arrow)
        dtype = tc.scalar_dtype(name, inner)
        if dtype is None or dtype.kind in "OM":
            raise _unwritable(name, arrow, "fixed-size lists are stored for numbers and booleans only")
        return ColumnPlan(name, node, "fixed", dtype, trailing)
    dtype = tc.scalar_dtype(name, arrow)
    if dtype is None:
        raise _unwritable(name, arrow, _fix_for(arrow))
    return ColumnPlan(name, node, "scalar", dtype)


def node_names(names: list[str]) -> list[str]:
    """A child name per column: the column's own name when it is a safe node name (and not
    one already taken, ignoring case, for case-insensitive file systems), else a cleaned one.
    A safe node name is also short enough to be a file name: a longer one is cut (its
    `table:columns` entry keeps the whole name)."""
    taken: set[str] = set()
    out = []
    for name in names:
        safe = _SAFE_NODE.match(name) and name not in _RESERVED_NODES and len(name) <= _NODE_CHARACTERS
        node = name if safe else _clean(name)
        base, k = node, 1
        while node.lower() in taken:
            k += 1
            suffix = f"_{k}"
            node = f"{base[: _NODE_CHARACTERS - len(suffix)]}{suffix}"
        taken.add(node.lower())
        out.append(node)
    return out


def _clean(name: str) -> str:
    node = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).lstrip(".")[:_NODE_CHARACTERS] or "column"
    return f"_{node[: _NODE_CHARACTERS - 1]}" if node in _RESERVED_NODES or not _SAFE_NODE.match(node) else node


def plan_columns(schema: pa.Schema, index: str | None) -> list[ColumnPlan]:
    names = list(schema.names)
    if len({n.lower() for n in names}) != len(names):
        raise ParameterError(f"the result has two columns of the same name (ignoring case) among {names}; alias them")
    nodes = node_names(names)
    plans = [plan_column(name, nodes[i], schema.field(i)) for i, name in enumerate(names)]
    if index is not None:
        match = [p for p in plans if p.name == index]
        if not match:
            raise ParameterError(f"index {index!r} is not a column of the result {names}; pass one of them")
        if match[0].kind != "scalar":
            raise ParameterError(f"index {index!r} must be a column of one plain value per row, not a {match[0].kind}")
    return plans


# ----------------------------------------------------------------------------- blocks
def blocks(batches: Iterator[pa.RecordBatch], chunk: int, start: int) -> Iterator[tuple[pa.Table, int]]:
    """(block of rows, its first row) for rows `start..`: each block ends on a chunk boundary
    (or at the end of the stream), so every block after the first writes whole chunks."""
    pending: list[pa.RecordBatch] = []
    held = 0
    row = start
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        held += batch.num_rows
        while held >= chunk - row % chunk:
            table = pa.Table.from_batches(pending)
            size = chunk - row % chunk
            yield table.slice(0, size), row
            rest = table.slice(size)
            row, held = row + size, held - size
            pending = rest.to_batches()
    if held:
        yield pa.Table.from_batches(pending), row


# ----------------------------------------------------------------------------- writing
def _check(mode: str, chunks: int | None, zarr_format: int) -> int:
    if mode not in ("w-", "w", "a"):
        raise ParameterError(f'mode must be "w-" (create), "w" (replace) or "a" (append), got {mode!r}')
    if zarr_format not in (2, 3):
        raise ParameterError(f"zarr_format must be 2 or 3, got {zarr_format!r}")
    if chunks is None:
        return DEFAULT_CHUNK
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ParameterError(f"chunks must be a positive number of rows for the table layout, got {chunks!r}")
    return chunks


def write_table(
    batches: pa.RecordBatchReader,
    store: str,
    *,
    mode: str = "w-",
    chunks: int | None = None,
    zarr_format: int = 3,
    consolidated: bool = True,
    storage_options: Mapping[str, str] | None = None,
    index: str | None = None,
) -> None:
    """Write the stream as a table-convention store at `store` (see the module doc).

    `chunks`: rows per chunk of every row-aligned array (new stores; an append keeps the
    store's). `index`: a column to name in `table:index` (it becomes the row coordinate
    zarrsql prunes on). mode "a" appends to an existing table-layout store.
    """
    chunk = _check(mode, chunks, zarr_format)
    plans = plan_columns(batches.schema, index)
    if mode == "a":
        commit.append_commit(store, storage_options, lambda target: _append(target, plans, batches))
        return

    def write(target: commit.StoreTarget) -> None:
        _create(target, plans, batches, chunk, index)

    commit.publish_new(store, mode, storage_options, write, zarr_format=zarr_format, consolidated=consolidated)


def _root_attrs(plans: list[ColumnPlan], index: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "zarr_conventions": [REGISTRATION],
        "table:columns": [{"name": p.name, "node": p.node} for p in plans],
    }
    if index is not None:
        attrs["table:index"] = index
    geometry = next((p.name for p in plans if p.kind == "geometry"), None)
    if geometry is not None:
        attrs["table:primary_geometry"] = geometry
    return attrs


def _writer(plan: ColumnPlan, layout: Layout) -> Writer:
    if plan.kind == "scalar":
        assert plan.dtype is not None
        return tc.ScalarColumn(plan.name, plan.node, plan.dtype, layout)
    if plan.kind == "categorical":
        return CategoricalColumn(plan.name, plan.node, layout)
    if plan.kind == "fixed":
        assert plan.dtype is not None
        return tc.FixedListColumn(plan.name, plan.node, plan.dtype, plan.trailing, layout)
    return GeometryColumn(plan.name, plan.node, layout, plan.source)


def _first_chunk(block: pa.Table | None, name: str) -> pa.Array | None:
    if block is None or not block.num_rows:
        return None
    column = block.column(name)
    return column.chunk(0) if column.num_chunks else None


def _start(writer: Writer, plan: ColumnPlan, first: pa.Table | None, first_row: int) -> None:
    """Create the writer's arrays; some encodings are chosen from the first block."""
    if isinstance(writer, CategoricalColumn):
        writer.create(_first_chunk(first, plan.name))  # type: ignore[arg-type]
    elif isinstance(writer, GeometryColumn):
        rows = first is not None and first.num_rows > 0
        writer.create(block_of(plan.name, plan.source, first.column(plan.name), first_row) if rows else None)  # type: ignore[union-attr]
    else:
        writer.create()


def _create(
    target: commit.StoreTarget, plans: list[ColumnPlan], batches: pa.RecordBatchReader, chunk: int, index: str | None
) -> None:
    import zarr

    group = zarr.open_group(target.zarr_store, mode="w", zarr_format=target.zarr_format)  # type: ignore[arg-type]
    group.update_attributes(_root_attrs(plans, index))
    layout = Layout(group, chunk, target.zarr_format, index or "row", appending=False)
    stream = blocks(iter(batches), chunk, 0)
    first = next(stream, None)
    writers = [_writer(p, layout) for p in plans]
    for writer, plan in zip(writers, plans, strict=True):
        _start(writer, plan, first[0] if first else None, 0)
    _write_all(writers, plans, first, stream)


def _write_all(
    writers: list[Writer],
    plans: list[ColumnPlan],
    first: tuple[pa.Table, int] | None,
    stream: Iterator[tuple[pa.Table, int]],
) -> None:
    if first is not None:
        for block, row in _chain(first, stream):
            for writer, plan in zip(writers, plans, strict=True):
                writer.write(block.column(plan.name), row)
    for writer in writers:
        writer.finish()


def _chain(first: tuple[pa.Table, int], rest: Iterator[tuple[pa.Table, int]]) -> Iterator[tuple[pa.Table, int]]:
    yield first
    yield from rest


# ----------------------------------------------------------------------------- appends
def _append(target: commit.StoreTarget, plans: list[ColumnPlan], batches: pa.RecordBatchReader) -> None:

    group, stored, rows, chunk, row_dim = open_table(target)
    by_name = {p.name: p for p in plans}
    if sorted(by_name) != sorted(stored):
        missing = [n for n in stored if n not in by_name]
        extra = [n for n in by_name if n not in stored]
        raise AppendSchemaError(
            f"the rows to append to '{target.url}' have columns {list(by_name)} but the table has "
            f"{list(stored)} (missing: {missing}, not in the table: {extra}); select exactly the "
            "table's columns (alias them to its names)"
        )
    layout = Layout(group, chunk, target.zarr_format, row_dim, appending=True)
    ordered = [by_name[name] for name in stored]
    ordered = [ColumnPlan(p.name, stored[p.name][0], p.kind, p.dtype, p.trailing, p.source) for p in ordered]
    writers = [_opened(p, layout, stored[p.name][1]) for p in ordered]
    stream = blocks(iter(batches), chunk, rows)
    _write_all(writers, ordered, next(stream, None), stream)


def _opened(plan: ColumnPlan, layout: Layout, node: Any) -> Writer:
    """The writer of a stored column, opened on its arrays (its kind checked against the rows')."""

    kind = stored_kind(node)
    text_into_categories = kind == "categorical" and plan.kind == "scalar" and plan.dtype == np.dtype(object)
    if kind != plan.kind and not text_into_categories:
        raise AppendSchemaError(
            f"column '{plan.name}' is stored as a {kind} column but the rows to append give a "
            f"{plan.kind} column; append it in the stored form (e.g. CAST to the type read_zarr gives)"
        )
    writer = CategoricalColumn(plan.name, plan.node, layout) if text_into_categories else _writer(plan, layout)
    writer.open(node)
    return writer
