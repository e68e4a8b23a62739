"""The core's entry point: read one table with a projection, a predicate, a row limit and
a batch-size hint given together, the same for every engine.

`open_scan` checks the request (with the core's errors, whichever engine asked), opens the
table once and plans it; the `Scan` it returns yields numpy columns (`arrays()`, no pyarrow
needed) or Arrow record batches (`batches()`, on the threaded reader). A predicate given
here is applied exactly: rows where it is not true never come out.

A scan reads the store as it is when its reading starts, never a mix of two versions: the
table is checked against its store then (`validity.refreshed`, as the engine adapters
check theirs) and planned again if the store was rewritten since `open_scan`, and a store
rewritten while it reads is an error (`validity.ChangeGuard`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zarrsql import counters
from zarrsql.errors import ParameterError
from zarrsql.expand.columns import Column
from zarrsql.plan.predicate import Predicate, check
from zarrsql.scan.contract import Plan, TableScan
from zarrsql.scan.opening import open_table
from zarrsql.scan.request import ReadRequest, only_parameters, read_request
from zarrsql.scan.validity import SCAN, ChangeGuard, baseline, refreshed

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
    predicate: Predicate | None = None

    def arrays(self) -> Iterator[Arrays]:
        """The rows as numpy columns, a unit at a time (cut to `batch_rows`), in this thread.

        Needs numpy only: for an engine without Arrow, or a script. A part is a dict of
        columns, so a scan of no columns could not tell its rows: it is refused here; to
        count rows, read one column (a dimension's is the cheapest) or use `batches()`,
        whose batches carry `num_rows` without columns."""
        if not self.columns:
            raise ParameterError(
                "Scan.arrays() needs at least one column (its parts are dicts of columns, so they "
                "could not tell how many rows there are): name a column in open_scan(columns=...), "
                "a dimension's is the cheapest, or count rows with Scan.batches() (batch.num_rows)"
            )
        return self._arrays()

    def _arrays(self) -> Iterator[Arrays]:
        table, columns, plan = self._current()
        guard = ChangeGuard(table)
        left = self.limit
        for unit in plan.units():
            if left == 0:
                return
            n, parts = table.unit_columns(unit, columns)
            guard.check(unit)  # its rows only if the store was not rewritten under them
            counters.count(work_units_read=getattr(unit, "merged", 1), rows=n)
            for start in range(0, n, self.batch_rows or max(n, 1)):
                stop = min(n, start + (self.batch_rows or n))
                if left is not None:
                    stop = min(stop, start + left)
                yield {c.name: _cut(p, start, stop) for c, p in zip(columns, parts, strict=True)}
                if left is not None:
                    left -= stop - start
                    if left == 0:
                        return

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as Arrow record batches from the parallel reader (`scan/reader.py`);
        stopping early (or reaching `limit`) cancels what is still queued."""
        from zarrsql.scan.reader import read_batches

        if self.limit == 0:
            return
        table, columns, plan = self._current()
        left = self.limit
        source = read_batches(table, plan, columns)
        try:
            for batch in source:
                if left is not None and batch.num_rows > left:
                    batch = batch.slice(0, left)
                step = self.batch_rows or max(batch.num_rows, 1)
                for start in range(0, batch.num_rows, step):
                    yield batch.slice(start, step) if step < batch.num_rows else batch
                if left is not None:
                    left -= batch.num_rows
                    if left == 0:  # met: no further unit is waited for
                        return
        finally:
            source.close()

    def _current(self) -> tuple[TableScan, tuple[Column, ...], Plan]:
        """The table, columns and plan to read now: this scan's own while its store is as it
        was opened (or only grew), else the table as the store holds it now with the same
        columns, planned again with the same predicate (`validity.refreshed`, the check the
        engine adapters make when their scans start); a table whose columns changed raises."""
        table = refreshed(self.table, SCAN)
        if table is self.table:
            return table, self.columns, self.plan
        columns = select_columns(table, [c.name for c in self.columns])
        plan = table.plan(self.predicate)
        begin_coordinates(table, columns)
        return table, columns, plan

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
    """The table's columns, or those named (in the order named); an unknown name, a name
    given twice and a string for the list (its letters are no names) are refused with the
    table's columns (a projection any engine passes on)."""
    if names is None:
        return tuple(table.columns)
    if isinstance(names, str) or not isinstance(names, Sequence):
        example = repr([names]) if isinstance(names, str) else "['time', 'lat']"
        raise ParameterError(f"columns must be a list of column names, e.g. {example}, got {names!r}")
    twice = sorted(n for n, times in Counter(names).items() if times > 1)
    if twice:
        raise ParameterError(f"column {twice[0]!r} is named more than once in columns; name each column once")
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
    named parameters, checked as SQL checks them; a name that is none of them is refused),
    or a table already opened. `columns` names the columns to decode, in output order (all
    by default); `predicate` (a `zarrsql.plan.predicate` tree over dimension and derived
    coordinate columns, checked by `predicate.check`) prunes the work units and filters
    their rows; `limit` stops after that many rows; `batch_rows` caps a batch's rows (a
    unit's rows otherwise).
    """
    _count("limit", limit)
    if _count("batch_rows", batch_rows) == 0:
        raise ParameterError("batch_rows must be at least 1")
    if isinstance(source, Mapping):
        only_parameters(source)
        source = read_request(source)
    elif not isinstance(source, ReadRequest) and not hasattr(source, "unit_columns"):
        raise ParameterError(
            "open_scan() reads a mapping of read_zarr parameters, e.g. open_scan({'store': 'data.zarr'}), "
            f"a ReadRequest or an opened table; got {type(source).__name__} {source!r}"
        )
    table = open_table(source) if isinstance(source, ReadRequest) else source
    if predicate is not None:
        check(predicate, table.filterable())
    chosen = select_columns(table, columns)
    plan = table.plan(predicate)
    baseline(table)  # the tokens the table was opened with: reading checks the store against them
    begin_coordinates(table, chosen)
    return Scan(table, chosen, plan, limit, batch_rows, predicate)


def begin_coordinates(table: TableScan, columns: Sequence[Column]) -> None:
    """Start reading the coordinates a scan of `columns` outputs, when the table left them to
    their first use (a remote table, `scan/coords.py`): beside its first unit's fetch, not
    after it. Every reader of a planned scan calls this before its first unit."""
    start = getattr(table, "start_coordinates", None)
    if start is not None:
        start(columns)
