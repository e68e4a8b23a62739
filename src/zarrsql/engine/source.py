"""A table scan as something DuckDB can register: the 2.x scan-source protocol, or a dataset.

DuckDB 2.x offers Python Arrow sources a private protocol (`duckdb._sources`): `rows()` for
the optimizer, `accepts(predicate)` per pushed filter, `stream(columns, filters)`. When it is
there, `ZarrSource` speaks it and prunes with every filter it accepts. Otherwise (DuckDB 1.5)
`ZarrDataset`, a thin `pyarrow.dataset.Dataset` shell, receives the projection and an opaque
Arrow filter expression, which it applies exactly with Arrow to the streamed batches; results
are the same, only WHERE pruning is lost (bounds := still prunes).

DuckDB calls `rows`, `accepts` and `stream` from the main thread, where Ctrl-C raises: each
runs under `interrupts.stopped`, so it reaches the connection as `QueryInterrupted`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from zarrsql.engine.filters import Untranslatable, translate
from zarrsql.engine.interrupts import stopped
from zarrsql.errors import ZarrSQLError
from zarrsql.expand.arrow import schema_of
from zarrsql.plan.predicate import Predicate, conjoin
from zarrsql.scan import Column, TableScan, open_scan
from zarrsql.scan.reader import engine_batches, reported
from zarrsql.scan.validity import baseline, refreshed

#: What a registered scan asks before it is read (it raises where the store may not be).
Gate = Callable[[TableScan], None]

log = logging.getLogger(__name__)

HAS_SOURCES: bool
if TYPE_CHECKING:  # checked against DuckDB 2.x's protocol; 1.5 takes the fallback below
    from duckdb._sources import ArrowScanSource as _Base
else:
    try:
        from duckdb._sources import ArrowScanSource as _Base

        HAS_SOURCES = True
    except ImportError:  # DuckDB 1.5: no scan-source protocol
        _Base = object
        HAS_SOURCES = False


def _stream(
    scan: TableScan,
    columns: Sequence[Column],
    predicate: Predicate | None,
    on_error: Callable[[ZarrSQLError], None] | None,
) -> pa.RecordBatchReader:
    planned = open_scan(scan, columns=[c.name for c in columns], predicate=predicate)
    batches = engine_batches(planned.table, planned.plan, planned.columns, on_error)
    return pa.RecordBatchReader.from_batches(schema_of(planned.columns), batches)


class ZarrSource(_Base):  # type: ignore[misc,valid-type]
    """The scan-source protocol of DuckDB 2.x over one `TableScan`."""

    schema_is_stable = True

    def __init__(
        self, scan: TableScan, on_error: Callable[[ZarrSQLError], None] | None = None, gate: Gate | None = None
    ) -> None:
        self.obj = scan
        self.scan = scan
        self.on_error = on_error
        self.gate = gate
        self.schema = schema_of(scan.columns)
        self._dims = scan.filterable()
        baseline(scan)  # the tokens the table was opened with, taken in the statement that opened it

    def __arrow_c_schema__(self) -> object:
        return self.schema.__arrow_c_schema__()

    def rows(self) -> int | None:
        # an estimate for the optimizer, not checked against the store (`stream` is): a
        # relation fetched after the store changed may be planned with the old count
        with stopped(self.on_error):  # planning may read coordinates
            with reported(self.on_error):
                if self.gate is not None:
                    self.gate(self.scan)
            if self.scan.base_predicate is None:
                return self.scan.num_rows
            return self.scan.plan().rows()

    def _current(self) -> TableScan:
        """The table as the store holds it now (`validity.refreshed`): DuckDB runs a relation
        again at each fetch with this same source, and the store may have been rewritten
        since it was registered; its kept coordinates must not meet another version's chunks."""
        with reported(self.on_error):
            if self.gate is not None:
                self.gate(self.scan)
            scan = self.scan = refreshed(self.scan)
        return scan

    def accepts(self, predicate: Any) -> bool:
        with stopped(self.on_error):
            try:
                translate(predicate, self._dims)
            except (Untranslatable, RecursionError):  # too deep to walk: DuckDB applies it
                return False
            return True

    def stream(self, columns: Sequence[int] | None, filters: Sequence[Any]) -> tuple[object, bool]:
        with stopped(self.on_error):
            scan = self._current()
            cols = scan.columns if columns is None else [scan.columns[i] for i in columns]
            parts = [translate(f, self._dims) for f in filters]
            predicate = conjoin(parts)
            log.debug("stream %d columns, %d filters", len(cols), len(parts))
            with reported(self.on_error):  # planning may read coordinates, and fail
                reader = _stream(scan, cols, predicate, self.on_error)
            return reader.__arrow_c_stream__(), True


def make_source(
    scan: TableScan, on_error: Callable[[ZarrSQLError], None] | None = None, gate: Gate | None = None
) -> object:
    """The object to register for `scan` with the running DuckDB; `on_error` sees read errors,
    `gate` is asked before each read (the connection's file-access rules, engine/udfs.py)."""
    if HAS_SOURCES:
        return ZarrSource(scan, on_error, gate)
    from zarrsql.engine.dataset import ZarrDataset  # pyarrow.dataset imports pandas: only when needed

    return ZarrDataset(scan, on_error, gate)
