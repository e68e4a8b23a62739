"""The DuckDB 1.5 fallback: a scan as a thin `pyarrow.dataset.Dataset` shell.

DuckDB 1.5 has no scan-source protocol. It reads a registered pyarrow dataset by calling
`scanner(columns=..., filter=...)` once per scan, then the scanner's `to_reader()`, and trusts
the scan to apply the filter exactly (it filters no row again); the decoding threads do so on
each batch, before DuckDB's thread gets it (`_finished`).

The filter is an opaque Arrow expression, so pruning asks Arrow itself: a part of the table
becomes a (never opened) fragment whose partition expression states the range of every
coordinate inside it, and `get_fragments(filter=...)` returns the parts the filter may
match. A coordinate range holding NULL or NaN states nothing, so such parts are kept. Where
the coordinates lie along one axis (or past `MAX_GUARANTEED_UNITS` units), the parts are
spans of chunks along each axis, weighed coarse to fine, so a narrow filter on 10^9 chunks
costs a few hundred fragments; otherwise each work unit is one, so that a filter weighing
several axes together prunes unit by unit. A positional dimension's range over a span is
its first and last position, by arithmetic: its positions are never built to be weighed.

Arrow's comparisons are IEEE's (NaN equals nothing and is greater than nothing), DuckDB's are
not (NaN equals NaN and is greater than every other value), so the rows are filtered with the
expression rewritten to DuckDB's rules (`arrow_filters.py`: `x > c` and `x >= c` on a
floating-point column keep NaN, an `is_in` whose values hold NaN matches every NaN). Pruning
keeps Arrow's form, which its guarantees can weigh (they cannot rule out `is_nan(x)`): on a
unit whose coordinate range holds no NaN both rules agree, and a range holding NaN states
nothing.

`count_rows` and `scanner` run in DuckDB's callback on the main thread, where Ctrl-C raises:
they run under `interrupts.stopped`, so it reaches the connection as `QueryInterrupted`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from zarrsql.engine.arrow_filters import duckdb_nan_rules, zeros_alike
from zarrsql.engine.interrupts import stopped
from zarrsql.errors import ZarrSQLError
from zarrsql.expand.arrow import schema_of
from zarrsql.plan.positions import Positions
from zarrsql.plan.units import Kept, ScanPlan
from zarrsql.scan import TableScan, begin_coordinates
from zarrsql.scan.reader import engine_batches, reported
from zarrsql.scan.validity import baseline, refreshed


class ZarrDataset(pads.Dataset):
    """A `pyarrow.dataset.Dataset` shell for DuckDB 1.5 (see the module docstring).

    Only `schema`, `scanner` and `count_rows` are used by DuckDB; the base constructor is
    deliberately not called (the shell holds no Arrow dataset).
    """

    def __init__(  # noqa: D107
        self,
        scan: TableScan,
        on_error: Callable[[ZarrSQLError], None] | None = None,
        gate: Callable[[TableScan], None] | None = None,
    ) -> None:
        self._scan = scan
        self._on_error = on_error
        self._gate = gate
        self._schema = _plain(schema_of(scan.columns))
        baseline(scan)  # the tokens the table was opened with, taken in the statement that opened it

    def _current(self) -> TableScan:
        """The table as the store holds it now (`validity.refreshed`, as `ZarrSource` does):
        DuckDB scans this same dataset again at each fetch of a relation."""
        with reported(self._on_error):
            if self._gate is not None:  # the connection's file-access rules (engine/udfs.py)
                self._gate(self._scan)
            scan = self._scan = refreshed(self._scan)
        return scan

    @property
    def schema(self) -> pa.Schema:  # type: ignore[override]
        return self._schema

    def count_rows(self, **kwargs: Any) -> int:  # type: ignore[override]
        with stopped(self._on_error):
            return self._count_rows()

    def _count_rows(self) -> int:
        scan = self._current()
        plan = scan.plan()
        rows = plan.rows()
        if rows is None:  # only reading tells (a sparse table of several matrices): count the rows
            rows = sum(b.num_rows for b in engine_batches(scan, plan, [], self._on_error))
        return rows

    def scanner(self, columns: list[str] | None = None, filter: Any = None, **kwargs: Any) -> ZarrScanner:  # type: ignore[override]  # noqa: A002
        with stopped(self._on_error):
            return self._scanner(columns, filter)

    def _scanner(self, columns: list[str] | None, filter: Any) -> ZarrScanner:  # noqa: A002
        if filter is not None:
            filter = zeros_alike(filter)
        scan = self._current()
        by_name = {c.name: c for c in scan.columns}
        wanted = list(scan.columns) if columns is None else [by_name[n] for n in columns]
        with reported(self._on_error):  # planning may read coordinates, and fail
            plan = scan.plan()
            if filter is not None and isinstance(plan, ScanPlan):
                plan = self._pruned(plan, filter)
        begin_coordinates(scan, wanted)
        schema = schema_of(wanted)
        plain = _plain(schema)
        finish = None
        if plain != schema or filter is not None:
            rows_filter = None if filter is None else duckdb_nan_rules(filter, self._schema)
            finish = functools.partial(_finished, plain if plain != schema else None, rows_filter)
        return ZarrScanner(plain, engine_batches(scan, plan, wanted, self._on_error, finish))

    def _pruned(self, plan: ScanPlan, filter: Any) -> ScanPlan:  # noqa: A002
        """`plan` keeping only the chunks Arrow cannot rule out for `filter`. Where the filter
        may weigh columns of several axes together (or the plan's units are no product of
        chunks per axis), unit by unit, up to `MAX_GUARANTEED_UNITS` units (`only`); else along
        each axis alone (`_kept_along_axes`), however many chunks it has."""
        ranges = self._ranges(plan)
        product = plan.predicate is None or plan.kept is not None  # units: a product of chunks per axis
        if len({axis for _, axis, _, _ in ranges}) > 1 or not product:
            if plan.units_total <= MAX_GUARANTEED_UNITS:
                return replace(plan, only=self._units_matching(plan, ranges, filter))
            if not product:
                return plan
        return _kept_along_axes(plan, ranges, self._schema, filter)

    def _ranges(self, plan: ScanPlan) -> list[tuple[str, int, Any, pa.DataType]]:
        """(name, axis, values, Arrow type) of each column a unit's guarantee states a range of."""
        return [
            (name, axis, dv, self._schema.field(name).type)
            for name, (axis, dv) in plan.columns.items()
            if name in self._schema.names
        ]

    def _units_matching(self, plan: ScanPlan, ranges: list, filter: Any) -> frozenset[tuple[int, ...]]:  # noqa: A002
        """The units whose coordinate ranges Arrow cannot rule out for `filter`."""
        units = list(plan.units())
        kept = _matching([_guarantee(unit, ranges) for unit in units], self._schema, filter)
        if kept is None:
            return frozenset(unit.index for unit in units)
        return frozenset(units[i].index for i in kept)


def _matching(guarantees: list[pc.Expression], schema: pa.Schema, filter: Any) -> set[int] | None:  # noqa: A002
    """Which of `guarantees` (each what the rows of one part of the table satisfy) Arrow cannot
    rule out for `filter`, as their indices; None when Arrow cannot weigh the filter."""
    dataset = pads.FileSystemDataset.from_paths(
        [f"part/{i}" for i in range(len(guarantees))],
        schema=schema,
        format=pads.IpcFileFormat(),
        filesystem=pafs.LocalFileSystem(),
        partitions=guarantees,
    )
    try:
        return {int(f.path.rsplit("/", 1)[1]) for f in dataset.get_fragments(filter=filter)}
    except pa.ArrowException:
        # Arrow could not weigh the filter against a range (an `IN` list of BIGINTs against
        # a UBIGINT range past 2**63): prune nothing, the filter still applies to the rows
        return None


#: Spans of chunks along one axis that `_kept_along_axes` cuts each span it keeps into.
SPLIT = 64


def _kept_along_axes(plan: ScanPlan, ranges: list, schema: pa.Schema, filter: Any) -> ScanPlan:  # noqa: A002
    """`plan` keeping, along each axis, only the chunks whose coordinate ranges Arrow cannot
    rule out for `filter` with the other axes unknown: a superset of the units it matches,
    found without a guarantee per unit. Each axis is weighed in spans of chunks, coarse to
    fine: a span Arrow keeps is cut into `SPLIT` for the next pass, until spans are single
    chunks or a pass would weigh more than `MAX_GUARANTEED_UNITS` (the spans kept then stay
    whole). A narrow filter on an axis of 10^9 chunks so costs a few hundred guarantees, and a
    positional axis's are arithmetic. Axes the plan keeps already (`bounds :=`) stay as kept."""
    kept: list[Kept] = list(plan.kept) if plan.kept is not None else [None] * len(plan.shape)
    changed = False
    for k, (n, g) in enumerate(zip(plan.shape, plan.grid, strict=True)):
        along = [(name, dv, typ) for name, axis, dv, typ in ranges if axis == k]
        count = -(-n // g) if n else 0
        if not along or kept[k] is not None or count <= 1:
            continue
        chunks = _chunks_kept(along, n, g, count, schema, filter)
        if chunks is None:
            continue
        starts, stops = chunks
        kept[k] = Positions.from_runs(starts * g, np.minimum(stops * g, n), along[0][0])
        changed = True
    return replace(plan, kept=tuple(kept)) if changed else plan


def _chunks_kept(
    along: list,
    n: int,
    g: int,
    count: int,
    schema: pa.Schema,
    filter: Any,  # noqa: A002
) -> tuple[np.ndarray, np.ndarray] | None:
    """The spans [start, stop) of chunks of one axis that Arrow keeps (`_kept_along_axes`);
    None when it keeps all of them or cannot weigh the filter."""
    spans, final = [(0, count)], []
    while spans:
        cut = [piece for span in spans for piece in _cut(span)]
        if len(cut) > MAX_GUARANTEED_UNITS:  # finer passes cost more than they save
            final += spans
            break
        guarantees = [_span_guarantee(along, a * g, min(b * g, n)) for a, b in cut]
        matched = _matching(guarantees, schema, filter)
        if matched is None:
            return None
        spans = []
        for i in sorted(matched):
            a, b = cut[i]
            (final if b - a == 1 else spans).append((a, b))
    final.sort()
    if sum(b - a for a, b in final) == count:
        return None
    return np.array([a for a, _ in final], dtype=np.int64), np.array([b for _, b in final], dtype=np.int64)


def _cut(span: tuple[int, int]) -> list[tuple[int, int]]:
    """A span of chunks cut into at most `SPLIT` near-equal spans."""
    a, b = span
    parts = min(SPLIT, b - a)
    edges = [a + (b - a) * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


class ZarrScanner:
    """What `ZarrDataset.scanner` returns: DuckDB 1.5 only calls its `to_reader()`.

    Not `pyarrow.dataset.Scanner.from_batches`: that scanner pulls the batches and applies
    the filter on Arrow's own thread pools, which go on working for a moment after DuckDB
    stops reading (a LIMIT met, an error). Work still under way when the interpreter shuts
    down needs the GIL to release the batches, and such a thread then aborts the process
    ("terminate called without an active exception") or hangs its exit. This reader is
    pulled by DuckDB's threads alone, and its batches come filtered from the scan's own
    decoding threads, so nothing of the scan runs once DuckDB stops asking.
    """

    def __init__(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> None:  # noqa: D107
        self.projected_schema = schema
        self._batches = batches

    def to_reader(self) -> pa.RecordBatchReader:
        """The batches as a stream; it can be taken once."""
        return pa.RecordBatchReader.from_batches(self.projected_schema, self._batches)


def _finished(plain: pa.Schema | None, filter: pc.Expression | None, batch: pa.RecordBatch) -> list[pa.RecordBatch]:  # noqa: A002
    """`batch` as DuckDB 1.5 takes it, on the thread that decoded it (`reader.Finish`): cast
    to the declared `plain` schema, and only the rows `filter` keeps (DuckDB 1.5 trusts the
    scan to apply it exactly; the scanner gave it DuckDB's NaN rules). The filter plan runs on
    this thread alone (`use_threads=False`), so nothing of it outlives the unit: the decoding
    threads filter their units in parallel."""
    if plain is not None:
        batch = batch.cast(plain)
    if filter is None:
        return [batch]
    source = acero.Declaration("table_source", acero.TableSourceNodeOptions(pa.Table.from_batches([batch])))
    kept = acero.Declaration.from_sequence([source, acero.Declaration("filter", acero.FilterNodeOptions(filter))])
    return kept.to_table(use_threads=False).to_batches()


def _plain(schema: pa.Schema) -> pa.Schema:
    """`schema` with label (dictionary) columns as plain strings: DuckDB 1.5 reads this shell's
    declared schema, and Arrow's filter kernels want plain strings."""
    return pa.schema(
        [
            f.with_type(f.type.value_type)
            if pa.types.is_dictionary(f.type) and pa.types.is_string(f.type.value_type)
            else f
            for f in schema
        ]
    )


#: Above this many work units the guarantees cost more than they save; every unit is read.
MAX_GUARANTEED_UNITS = 20_000


def _guarantee(unit: Any, ranges: list) -> pc.Expression:
    """What every row of `unit` satisfies: each column of `ranges` between its least and
    greatest value over the unit's span of its axis (nothing about a column with a NULL or NaN
    there)."""
    expr = pc.scalar(True)
    for name, axis, dv, typ in ranges:
        a, b = unit.region[axis]
        expr = expr & _within(name, dv, typ, a, b)
    return expr


def _span_guarantee(along: list, a: int, b: int) -> pc.Expression:
    """What every row of the positions [a, b) of one axis satisfies (`_guarantee`)."""
    expr = pc.scalar(True)
    for name, dv, typ in along:
        expr = expr & _within(name, dv, typ, a, b)
    return expr


def _within(name: str, dv: Any, typ: pa.DataType, a: int, b: int) -> pc.Expression:
    """Column `name` between its least and greatest value over the positions [a, b) of its
    axis; true (states nothing) for an empty span or one holding a NULL or NaN."""
    if b <= a:
        return pc.scalar(True)
    bounds = _span_of_positions(dv.values, a, b) if dv.positional else _span_of_values(dv, a, b, typ)
    if bounds is None:
        return pc.scalar(True)
    low, high = bounds
    return (pc.field(name) >= pa.scalar(low, typ)) & (pc.field(name) <= pa.scalar(high, typ))


def _span_of_positions(positions: Any, a: int, b: int) -> tuple[int, int]:
    """The least and greatest of a positional dimension's values over [a, b): they ascend, so
    its first and last, by arithmetic (`Positions`), never the unit's piece as an array."""
    return int(positions[a]), int(positions[b - 1])


def _span_of_values(dv: Any, a: int, b: int, typ: pa.DataType) -> tuple[Any, Any] | None:
    """The least and greatest of a coordinate's values over [a, b), as Python values Arrow
    takes for `typ`; None when one of them is NULL or NaN (the range states nothing)."""
    values = dv.values[a:b]
    if dv.nulls is not None and dv.nulls[a:b].any():
        return None
    if values.dtype.kind == "f" and np.isnan(values).any():
        return None
    low, high = values.min(), values.max()
    if values.dtype.kind in "iu" and pa.types.is_timestamp(typ):
        return int(low), int(high)
    if values.dtype == object:
        return str(low), str(high)
    return low.item(), high.item()
