"""Pruning by a data column that a valid search index covers (H5Col's SORTED_ROWS).

A convention names such columns (`RowIndex`, only when the index's validity token matches
the table's generation; a stale index is never named). For them a WHERE is accepted like a
predicate on a coordinate: when a query's predicate names the column, its values are read
once (the whole column, at planning) and handed to the planner as an alias of the row axis,
so only the work units holding matching rows are read, and each keeps exactly its matching
rows. The values come from the column itself, never from the index, so a pruned scan cannot
return other rows than a full one. Only one-dimensional tables and numeric or timestamp
columns take part: those compare exactly in the planner.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from zarrsql.decode.variables import Codec
from zarrsql.plan.units import DimValues, WorkUnit
from zarrsql.store import Store
from zarrsql.tables.model import ReadTable

_ORDERED = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")
_TIMES = ("timestamp_us",)


@dataclass
class IndexedColumns:
    """The indexed columns of one table scan: name → (data column position, logical type),
    and their values, read on first use (the reader's threads may plan at once)."""

    table: ReadTable
    codecs: Sequence[Codec]
    columns: dict[str, tuple[int, str]] = field(default_factory=dict)
    _values: dict[str, DimValues] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if len(self.table.shape) != 1:
            return
        names = [dc.column for dc in self.table.data]
        for idx in self.table.indexes:
            if idx.column not in names:
                continue
            j = names.index(idx.column)
            logical = self.codecs[j].logical
            if isinstance(logical, str) and logical in _ORDERED + _TIMES:
                self.columns[idx.column] = (j, logical)

    def filterable(self) -> dict[str, str]:
        return {name: logical for name, (_, logical) in self.columns.items()}

    def aliases(self, store: Store, names: set[str]) -> list[tuple[int, DimValues]]:
        """(axis 0, values) of the indexed columns among `names`, for the planner."""
        return [(0, self._read(store, n)) for n in sorted(names) if n in self.columns]

    def _read(self, store: Store, name: str) -> DimValues:
        with self._lock:
            hit = self._values.get(name)
        if hit is not None:
            return hit
        j, _ = self.columns[name]
        n = self.table.shape[0]
        values, nulls = self.codecs[j].read(store, WorkUnit((0,), ((0, n),), None))
        made = DimValues(name, np.asarray(values), None if nulls is None else np.asarray(nulls))
        with self._lock:
            self._values[name] = made
        return made
