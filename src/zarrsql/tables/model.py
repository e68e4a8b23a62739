"""The table records every later stage reads: `TableInfo` (a listing row) and `ReadTable`."""

from __future__ import annotations

from dataclasses import dataclass

from zarrsql.metadata.arrays import ArrayMeta


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table of a group as `read_zarr_tables` lists it.

    `name` is None when the table cannot be read by name; `problem` then says why.
    `coords` holds, per dimension, the coordinate array (from the group or an ancestor) or
    None for a positional dimension. `chunk_grid` is the largest chunk length per dimension
    over the data arrays: the work-unit grid.
    """

    group_path: str
    name: str | None
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunk_grid: tuple[int, ...]
    data_vars: tuple[ArrayMeta, ...]
    coords: tuple[ArrayMeta | None, ...]
    problem: str | None = None

    @property
    def default_name(self) -> str:
        return "_".join(self.dims)


@dataclass(frozen=True, slots=True)
class DataColumn:
    """A data variable of a read: the array and the column name it gets."""

    array: ArrayMeta
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

    @property
    def num_rows(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n
