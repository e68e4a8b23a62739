"""The core's entry point: read one table with a projection, a predicate, a row limit and
a batch-size hint given together, the same for every engine.

`open_scan` checks the request (with the core's errors, whichever engine asked), opens the
table once and plans it; the `Scan` it returns yields numpy columns (`arrays()`, no pyarrow
needed) or Arrow record batches (`batches()`, on the threaded reader). A predicate given
here is applied exactly: rows where it is not true never come out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarrsql.errors import ParameterError
from zarrsql.expand.columns import Column
from zarrsql.plan.predicate import Predicate, columns_of
from zarrsql.scan.contract import Plan, TableScan
from zarrsql.scan.opening import open_table
from zarrsql.scan.request import ReadRequest, read_request

if TYPE_CHECKING:
    import pyarrow as pa

#: One unit's columns as numpy: name -> (values, nulls or None).
Arrays = dict[str, tuple[Any, Any]]


@dataclass(frozen=True)
class Scan:
    """A planned read of one table (see `open_scan`)."""

    table: TableScan
    columns: tuple[Column, ...]
    plan: Plan
    limit: int | None = None
    batch_rows: int | None = None

    def arrays(self) -> Iterator[Arrays]:
        """The rows as numpy columns, a unit at a time (cut to `batch_rows`), in this thread.

        Needs numpy only: for an engine without Arrow, or a script."""
        left = self.limit
        for unit in self.plan.units():
            if left == 0:
                return
            n, parts = self.table.unit_columns(unit, self.columns)
            for start in range(0, n, self.batch_rows or max(n, 1)):
                stop = min(n, start + (self.batch_rows or n))
                if left is not None:
                    stop = min(stop, start + left)
                yield {c.name: _cut(p, start, stop) for c, p in zip(self.columns, parts, strict=True)}
                if left is not None:
                    left -= stop - start
                    if left == 0:
                        return

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as Arrow record batches from the parallel reader (`scan/reader.py`);
        stopping early (or reaching `limit`) cancels what is still queued."""
        from zarrsql.scan.reader import read_batches

        left = self.limit
        source = read_batches(self.table, self.plan, self.columns)
        try:
            for batch in source:
                if left == 0:
                    return
                if left is not None and batch.num_rows > left:
                    batch = batch.slice(0, left)
                step = self.batch_rows or max(batch.num_rows, 1)
                for start in range(0, batch.num_rows, step):
                    yield batch.slice(start, step) if step < batch.num_rows else batch
                if left is not None:
                    left -= batch.num_rows
        finally:
            source.close()

    def reader(self) -> pa.RecordBatchReader:
        """`batches()` as a `pyarrow.RecordBatchReader` with the scan's schema."""
        import pyarrow as pa

        from zarrsql.expand.arrow import schema_of

        return pa.RecordBatchReader.from_batches(schema_of(self.columns), self.batches())


def _cut(part: tuple[Any, Any], start: int, stop: int) -> tuple[Any, Any]:
    values, nulls = part
    if start == 0 and stop == len(values):
        return values, nulls
    return values[start:stop], None if nulls is None else nulls[start:stop]


def select_columns(table: TableScan, names: Sequence[str] | None) -> tuple[Column, ...]:
    """The table's columns, or those named (in the order named); an unknown name is refused
    with the table's columns (a projection any engine passes on)."""
    if names is None:
        return tuple(table.columns)
    by_name = {c.name: c for c in table.columns}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ParameterError(
            f"column {unknown[0]!r} is not in table '{table.table.label}'; its columns are "
            f"{', '.join(repr(c.name) for c in table.columns)}"
        )
    return tuple(by_name[n] for n in names)


def _count(name: str, value: int | None) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ParameterError(f"{name} must be a non-negative integer or None, got {value!r}")
    return value


def open_scan(
    source: ReadRequest | Mapping[str, Any] | TableScan,
    *,
    columns: Sequence[str] | None = None,
    predicate: Predicate | None = None,
    limit: int | None = None,
    batch_rows: int | None = None,
) -> Scan:
    """Plan a read of one table.

    `source` is a `ReadRequest`, the `read_zarr` parameters as a mapping (`store` plus the
    named parameters, checked as SQL checks them), or a table already opened. `columns`
    names the columns to decode, in output order (all by default); `predicate` (a
    `zarrsql.plan.predicate` tree over dimension and derived coordinate columns) prunes the
    work units and filters their rows; `limit` stops after that many rows; `batch_rows`
    caps a batch's rows (a unit's rows otherwise).
    """
    _count("limit", limit)
    if _count("batch_rows", batch_rows) == 0:
        raise ParameterError("batch_rows must be at least 1")
    if isinstance(source, Mapping):
        source = read_request(source)
    table = open_table(source) if isinstance(source, ReadRequest) else source
    if predicate is not None:
        allowed = table.filterable()
        outside = sorted(columns_of(predicate) - set(allowed))
        if outside:
            raise ParameterError(
                f"a scan predicate may name dimension and coordinate columns only ({', '.join(sorted(allowed))}); "
                f"{outside[0]!r} is not one: filter it after reading"
            )
    chosen = select_columns(table, columns)
    plan = table.plan(predicate)
    begin_coordinates(table, chosen)
    return Scan(table, chosen, plan, limit, batch_rows)


def begin_coordinates(table: TableScan, columns: Sequence[Column]) -> None:
    """Start reading the coordinates a scan of `columns` outputs, when the table left them to
    their first use (a remote table, `scan/coords.py`): beside its first unit's fetch, not
    after it. Every reader of a planned scan calls this before its first unit."""
    start = getattr(table, "start_coordinates", None)
    if start is not None:
        start(columns)
