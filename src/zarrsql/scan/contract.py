"""The scan contract: what an engine adapter may rely on, whatever the table's layout.

A `TableScan` is an opened table (its columns, decoded dimensions, data decoders); its
`plan(predicate)` is a `Plan`, whose `units()` are the work units the predicate can touch;
`unit_columns(unit, columns)` decodes one unit into (values, nulls) per column. The dense
scan (one row per cell, units of whole chunks: `scan/table.py`) and the sparse scan (one row
per stored entry, units of compressed-axis blocks: `scan/sparse.py`) both fulfil it, so the
reader, the DuckDB adapter and the Spark source never ask which one they hold.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from zarrsql.expand.columns import Column
    from zarrsql.metadata.tree import NodeTree
    from zarrsql.plan.predicate import Predicate
    from zarrsql.plan.units import DimValues
    from zarrsql.scan.request import ReadRequest
    from zarrsql.store import Store
    from zarrsql.tables.model import ReadTable


class Plan(Protocol):
    """The work units of one scan, listed lazily."""

    @property
    def units_total(self) -> int:
        """How many units the table has in all (before pruning)."""
        ...

    def units(self) -> Iterator[Any]:
        """The units to read, in order."""
        ...

    def rows(self) -> int | None:
        """The exact number of rows the plan yields, or None when only reading tells."""
        ...


class TableScan(Protocol):
    """One opened table, ready to plan and read (see the module docstring)."""

    request: ReadRequest
    store: Store
    tree: NodeTree
    table: ReadTable
    columns: list[Column]
    dims: list[DimValues]
    dim_logical: list[str]
    positional: list[bool]
    derived: list[tuple[int, DimValues]]
    codecs: list[Any]
    base_predicate: Predicate | None
    #: True when the rows are the cells of the table's grid (so counts are products of the
    #: kept coordinates' lengths); False for stored entries of a sparse matrix.
    rows_are_cells: bool

    @property
    def num_rows(self) -> int | None:
        """Rows of the whole table, when known without reading."""
        ...

    def plan(self, predicate: Predicate | None = None) -> Plan:
        """The units holding rows where `predicate` (and `bounds :=`) can hold."""
        ...

    def unit_columns(self, unit: Any, columns: Sequence[Column]) -> tuple[int, list[tuple[Any, Any]]]:
        """The unit's row count and (values, nulls) of each column, in `columns` order."""
        ...

    def unit_keys(self, unit: Any, columns: Sequence[Column]) -> list[str] | None:
        """Every store key reading the unit will fetch, or None when that is not known ahead."""
        ...

    def filterable(self) -> dict[str, str]:
        """Columns a pushed predicate may name, with their logical types."""
        ...

    def fingerprint(self) -> str:
        """Changes whenever the store's metadata or this table's columns change."""
        ...
