"""An output column of a scan, as the expansion to rows and to Arrow needs to know it."""

from __future__ import annotations

from dataclasses import dataclass

from zarrsql.decode.logical import Logical


@dataclass(frozen=True, slots=True)
class Column:
    """An output column: a dimension (`dim` is its axis), a data variable (`data` indexes
    `TableScan.codecs`), a derived coordinate (`derived` indexes `TableScan.derived`) or an
    auxiliary coordinate over several axes (`aux` indexes `OpenedTable.aux`)."""

    name: str
    logical: Logical
    dim: int | None = None
    data: int | None = None
    derived: int | None = None
    aux: int | None = None
