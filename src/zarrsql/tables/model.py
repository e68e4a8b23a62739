"""The table records every later stage reads: `TableInfo` (a listing row) and `ReadTable`."""

from __future__ import annotations

from dataclasses import dataclass

from zarrsql.decode.variables import Variable
from zarrsql.metadata.arrays import ArrayMeta


@dataclass(frozen=True, slots=True)
class Derived:
    """A column computed from a dimension's positions: `position * scale + offset`, or, when
    `labels` is given, the label at that position (a VARCHAR column; None is NULL).

    OME-Zarr's coordinate transformations give each image axis a physical coordinate this way,
    and its `omero.channels` give the channel axis its channel names.
    """

    name: str
    axis: int
    scale: float = 1.0
    offset: float = 0.0
    labels: tuple[str | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table of a group as `read_zarr_tables` lists it.

    `name` is None when the table cannot be read by name; `problem` then says why.
    `hidden` lists dimensions that give no column (a table-convention table without an
    index has only positional rows); `derived` adds computed coordinate columns;
    `name_hint` replaces the dimension-joined name (a table-convention group's own name).
    `column_names`, when given, names the data columns (an image level's is `value`);
    `column_order`, when given, orders all the table's columns by name (a table-convention
    table keeps its `table:columns` order even when its index, a dimension, is not first).
    `layout` is "dense" (one row per cell) or "csr"/"csc" (one row per stored entry of
    sparse matrices, compressed along the first or the second dimension).
    `name_clash` is set when the table's only problem is that its name equals another
    table's (ignoring case, or two dimension lists that join to one name): `dims :=` still
    reads it. `coords` holds, per dimension, the coordinate array (from the group or an ancestor) or
    None for a positional dimension. `chunk_grid` is the largest chunk length per dimension
    over the data arrays: the work-unit grid.
    """

    group_path: str
    name: str | None
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunk_grid: tuple[int, ...]
    data_vars: tuple[Variable, ...]
    coords: tuple[ArrayMeta | None, ...]
    problem: str | None = None
    derived: tuple[Derived, ...] = ()
    hidden: tuple[int, ...] = ()
    name_hint: str | None = None
    layout: str = "dense"
    column_names: tuple[str, ...] = ()
    column_order: tuple[str, ...] = ()
    name_clash: bool = False

    @property
    def default_name(self) -> str:
        return self.name_hint or "_".join(self.dims)


@dataclass(frozen=True, slots=True)
class DataColumn:
    """A data variable of a read: the variable and the column name it gets."""

    array: Variable
    column: str


@dataclass(frozen=True, slots=True)
class ReadTable:
    """Exactly what one `read_zarr` call reads: dimensions, their coordinates, data columns."""

    group_path: str
    label: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunk_grid: tuple[int, ...]
    coords: tuple[ArrayMeta | None, ...]
    data: tuple[DataColumn, ...]
    derived: tuple[Derived, ...] = ()
    hidden: tuple[int, ...] = ()
    layout: str = "dense"
    column_order: tuple[str, ...] = ()

    @property
    def num_rows(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n
