"""The table records every later stage reads: `TableInfo` (a listing row, made by a
convention) and `ReadTable` (what one read selects)."""

from __future__ import annotations

from dataclasses import dataclass

from zarrsql.conventions.model import AuxCoord, Derived, RowIndex, TableInfo
from zarrsql.conventions.records import Variable
from zarrsql.metadata.arrays import ArrayMeta

__all__ = ["AuxCoord", "DataColumn", "Derived", "ReadTable", "RowIndex", "TableInfo"]


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
    aux: tuple[AuxCoord, ...] = ()
    indexes: tuple[RowIndex, ...] = ()
    #: The Zarr fill_value is a real value, never a NULL sentinel (`DecodeOptions`).
    fill_is_value: bool = False

    @property
    def num_rows(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n
