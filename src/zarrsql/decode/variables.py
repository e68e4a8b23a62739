"""What decoding gives for a column: a `Codec`, and the codec of a plain array.

A table's data variable is an `ArrayMeta` or a convention's `EncodedVariable` (a record:
`zarrsql.conventions.records`); `decode.registry.codec_for` turns either into a codec with
`logical` and `read(store, unit) -> (values, nulls)`. A codec that can also say which store
keys a unit will read (`keys(unit)`) lets the reader fetch them ahead of decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from zarrsql.conventions.records import EncodedVariable, Variable, unreadable
from zarrsql.decode import chunks
from zarrsql.decode.cells import Cells, needed_region, select_cells
from zarrsql.decode.columns import ColumnCodec
from zarrsql.decode.logical import Logical
from zarrsql.decode.shards import read_selected, selected_keys
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import Store

__all__ = ["Codec", "EncodedVariable", "PlainCodec", "Variable", "unreadable"]


class Codec(Protocol):
    """How one column's values are produced for a work unit; `logical` is the column type."""

    @property
    def logical(self) -> Logical: ...

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]: ...


@dataclass(frozen=True)
class PlainCodec:
    """A plain array: read the unit's region, select its cells, decode them."""

    inner: ColumnCodec

    @property
    def logical(self) -> Logical:
        return self.inner.logical

    @property
    def array(self) -> ArrayMeta:
        return self.inner.array

    def keys(self, unit: Cells) -> list[str] | None:
        """The chunk keys `read` will get for `unit` (None: read through zarr-python)."""
        return selected_keys(self.inner.array, needed_region(unit), unit.select)

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        array = self.inner.array
        head, rest = getattr(unit, "head", False), getattr(unit, "merged", 1) == 0  # see chunks.read_head
        if (head or rest) and unit.select is None and chunks.streams_leading_rows(array):
            part = (chunks.read_head if head else chunks.read_rest)(store, array, unit.region)
            return self.inner.decode(select_cells(part, unit))
        raw = read_selected(store, array, needed_region(unit), unit.select)
        return self.inner.decode(select_cells(raw, unit))

    def read_in_chunk_order(
        self, store: Store, unit: Cells, grid: tuple[int, ...]
    ) -> tuple[Any, np.ndarray | None] | None:
        """`read` of a whole region on the table's chunk `grid` with its rows in chunk order
        (a grouped unit's, see `chunks.read_region_in_chunk_order`); None when the array
        cannot be read so, and `read` is then the way."""
        array = self.inner.array
        if unit.select is not None or not chunks.chunk_order_ok(array, unit.region, grid):
            return None
        return self.inner.decode(chunks.read_region_in_chunk_order(store, array, unit.region))
