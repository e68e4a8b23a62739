"""The parallel reader: work units decoded on a thread pool, streamed in order as batches.

At most `prefetch` units are in flight, so memory stays bounded by a few units whatever the
table's size. Chunk decompression (numcodecs) and numpy work release the GIL, so two cores
decode two units at once. Closing the iterator (a LIMIT satisfied) cancels what is queued.

On a remote store the latency of each request has to be hidden. When the scan can name a
unit's chunk keys up front, the reader asks the store to start fetching them ahead (tens of
requests in flight on the store's event loop, the rest queued in plan order), keeps a core's
worth of decoding threads, and hands a unit to them only once its chunks have arrived:
requests sharing the bandwidth finish in no set order, and a thread waiting on a late chunk
would leave the chunks already there undecoded. Otherwise each unit's thread waits on its own
requests, so there are as many threads as the store's `concurrency`. The window of units in
flight grows faster on a remote store, since every widening step costs a round trip: the
fetches of units 2-9 start as soon as the first unit's chunks have arrived, while it decodes
and the engine takes it, and when the engine asks for a second batch the window opens whole
(`concurrency` units) and fetches run two windows ahead of the unit the engine takes, so the
transfer never waits for a batch to be taken: a LIMIT met by the first unit fetches at most
9 units.

Ctrl-C stops a scan within `STOP_CHECK_SECONDS` even when a read never returns (a chunk on a
hung network mount): the thread taking units wakes that often to look for the stop, and the
decoding threads are daemon threads (`scan/workers.py`), so a read stuck in the kernel is
abandoned and the interpreter still exits. The threads are the process' own, shared by
every scan (a scan no longer pays for starting them); each scan submits to its share of
them (`Workers`), which cancels only that scan's tasks when it is closed or stopped.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import itertools
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import CancelledError, Future
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from zarrsql import counters
from zarrsql.decode.buffers import POOL
from zarrsql.decode.chunks import forget_rests
from zarrsql.errors import QueryInterrupted, ZarrSQLError
from zarrsql.expand.arrow import schema_of, to_arrow
from zarrsql.expand.columns import Column
from zarrsql.plan.units import InUngroupedOrder, Reorder, ScanPlan, WorkUnit, ungrouped_order
from zarrsql.scan.contract import Plan, TableScan
from zarrsql.scan.validity import ChangeGuard
from zarrsql.scan.workers import Workers
from zarrsql.store import Prefetching

T = TypeVar("T")
#: What an engine adapter does to each batch before the engine takes it (a cast, the filter
#: the engine trusts the scan to apply): run on the decoding threads, so that it runs in
#: parallel and nothing of it runs once the engine stops taking batches.
Finish = Callable[[pa.RecordBatch], list[pa.RecordBatch]]
#: Worker threads: one per core (decoding is CPU bound), capped to keep memory predictable.
THREADS = max(1, min(os.cpu_count() or 1, 8))
#: Units in flight: one per thread and one more, so every thread has a unit to decode while
#: the engine consumes a batch; each more would only hold a decoded unit longer (memory).
PREFETCH = THREADS + 1


#: How often a scan waiting for a unit wakes to see whether it was stopped (Ctrl-C), in
#: seconds: it bounds how long an interrupted scan waits for a read that never returns. A
#: unit that is ready wakes the wait at once, so the normal scan never waits this long.
STOP_CHECK_SECONDS = 0.1


def _pool_size(scan: TableScan, fetch_ahead: bool) -> tuple[int, int]:
    """(threads, units in flight) for the scan's store: a remote store's `concurrency` (tens)
    hides its request latency, with its fetches started ahead (`fetch_ahead`) or else with a
    thread per request; a local store keeps the defaults."""
    wanted = getattr(scan.store, "concurrency", THREADS)
    threads = THREADS if fetch_ahead else max(THREADS, wanted)
    return threads, max(PREFETCH, wanted)


def _prefetcher(scan: TableScan) -> Any:
    """The store's `prefetch` when it is remote and has one, else None."""
    return scan.store.prefetch if scan.store.remote and isinstance(scan.store, Prefetching) else None


def _unit_batch(
    scan: TableScan, unit: Any, columns: Sequence[Column], schema: pa.Schema, grid: tuple[int, ...] | None = None
) -> pa.RecordBatch:
    """One unit's batch. A grouped unit (dense plans, `grid` given) has its rows put back in
    the order of the ungrouped units, so grouping never changes a scan's row order."""
    n_rows, parts = scan.unit_columns(unit, columns)
    reorder = None if grid is None else ungrouped_order(unit, grid)
    arrays = [
        _column(part[0], part[1], col, n_rows, None if isinstance(part, InUngroupedOrder) else reorder)
        for col, part in zip(columns, parts, strict=True)
    ]
    counters.count(work_units_read=getattr(unit, "merged", 1), rows=n_rows)
    if not arrays:  # no column asked for (count(*)): rows without columns
        return pa.RecordBatch.from_struct_array(pa.nulls(n_rows, pa.struct([])))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _unit_pieces(
    scan: TableScan, unit: Any, columns: Sequence[Column], schema: pa.Schema, grid: tuple[int, ...] | None = None
) -> list[pa.RecordBatch]:
    """A unit's batches: one, or the pieces the scan cuts it into along its first axis
    (`DenseScan.row_pieces`): the data columns decoded once for the whole unit and sliced,
    the coordinate columns built for each piece (so that the ones kept are a piece long)."""
    cut = _cut(scan, unit, columns, grid)
    if cut is None:
        return [_unit_batch(scan, unit, columns, schema, grid)]
    done = [_column_pieces(scan, unit, col, grid, cut) for col in columns]
    counters.count(work_units_read=getattr(unit, "merged", 1), rows=done[0][0])
    return _piece_batches(done, schema)


def _cut(scan: TableScan, unit: Any, columns: Sequence[Column], grid: tuple[int, ...] | None) -> list[Any] | None:
    """The pieces a dense scan's unit is handed over in, or None for one batch."""
    pieces = getattr(scan, "row_pieces", None)
    return pieces(unit, columns) if pieces is not None and grid is not None and columns else None


def _column_pieces(
    scan: TableScan, unit: Any, col: Column, grid: tuple[int, ...] | None, cut: list[Any] | None
) -> tuple[int, list[pa.Array]]:
    """One column of a unit as Arrow, one array per piece of `cut` (one for the whole unit
    without), with the unit's row count."""
    if cut is not None and (col.dim is not None or col.derived is not None):
        arrays = []
        for piece in cut:
            rows, parts = scan.unit_columns(piece, [col])
            arrays.append(_column(parts[0][0], parts[0][1], col, rows, None))
        return sum(len(a) for a in arrays), arrays
    n_rows, whole = _one_column(scan, unit, col, grid)
    if cut is None:
        return n_rows, [whole]
    starts = np.cumsum([0] + [piece.num_rows() for piece in cut])
    return n_rows, [whole.slice(a, b - a) for a, b in itertools.pairwise(starts.tolist())]


def _piece_batches(done: list[tuple[int, list[pa.Array]]], schema: pa.Schema) -> list[pa.RecordBatch]:
    """The batches of a unit's columns given piece by piece (`_column_pieces`)."""
    return [
        pa.RecordBatch.from_arrays(list(arrays), schema=schema) for arrays in zip(*(a for _, a in done), strict=True)
    ]


def _one_column(scan: TableScan, unit: Any, col: Column, grid: tuple[int, ...] | None) -> tuple[int, pa.Array]:
    """One column of a unit as Arrow, with the unit's row count (see `_Columns`)."""
    n_rows, parts = scan.unit_columns(unit, [col])
    reorder = None if grid is None or isinstance(parts[0], InUngroupedOrder) else ungrouped_order(unit, grid)
    values, nulls = parts[0]
    return n_rows, _column(values, nulls, col, n_rows, reorder)


def _column(values: Any, nulls: Any, col: Column, n_rows: int, reorder: Reorder | None) -> pa.Array:
    """A column as Arrow, reordered: numpy values (one row per first-axis entry) before they
    are wrapped, anything else (lists, geometries) by index once in Arrow."""
    if reorder is None:
        return to_arrow(values, nulls, col.logical)
    if isinstance(values, np.ndarray) and len(values) == n_rows and (nulls is None or len(nulls) == n_rows):
        return to_arrow(reorder.apply(values), None if nulls is None else reorder.apply(nulls), col.logical)
    return to_arrow(values, nulls, col.logical).take(pa.array(reorder.order))


class _Queued:
    """A work unit in the window: decoded on the pool once every one of `arrivals` (its
    chunks' fetches) is done, its batches delivered through `result`."""

    def __init__(
        self,
        pool: Workers,
        work: Callable[[], list[Any]],
        keys: list[str],
        arrivals: list[Future[Any]],
    ) -> None:
        self.result: Future[list[Any]] = Future()
        self.keys = keys
        self._pool = pool
        self._work = work
        self._lock = threading.Lock()
        self._left = len(arrivals)
        self._task: Future[list[Any]] | None = None
        self._dropped = False
        if not arrivals:
            self._start()
        for arrival in arrivals:
            arrival.add_done_callback(self._arrived)

    def _arrived(self, _: Future[Any]) -> None:  # on the store's event loop: keep it short
        with self._lock:
            self._left -= 1
            if self._left:
                return
        self._start()

    def _start(self) -> None:
        with self._lock:
            if self._dropped:
                return
            try:
                task = self._task = self._pool.submit(self._work)
            except RuntimeError:  # the pool was shut down: the scan was cancelled (Ctrl-C)
                self.result.cancel()
                return
        # a plain function, not a method: the task must not refer back to this object, or the
        # cycle would keep each decoded batch alive until the garbage collector runs
        task.add_done_callback(functools.partial(_deliver, self.result))

    def drop(self) -> bool:
        """Stop the unit unless it is decoding; True when its chunks will never be taken."""
        with self._lock:
            self._dropped = True
            task = self._task
        return task is None or task.cancel()


class _Ahead:
    """The fetches of a remote scan's units, started in plan order ahead of the reader.

    The store keeps `concurrency` requests in flight and queues the rest in order, so how far
    ahead fetches may start (`open_to`) only bounds the memory held by answers not yet decoded:
    the transfer never waits for the engine to take a batch. Fetching only the units the
    reader has queued would tie each new request to a batch the engine takes, and a scan
    bound by the transfer would leave the connection idle while units decode. `open_to` runs
    on the main thread and on the store's event loop (the first unit's arrival), so the
    units' iterator is only advanced under the lock. `take()` hands the reader the next unit
    with its keys and arrival futures, starting its fetches if not started yet."""

    def __init__(
        self, units: Iterator[Any], keys_of: Callable[[Any], list[str]], prefetch: Callable[[list[str]], list[Any]]
    ) -> None:
        self._units = units
        self._keys_of = keys_of
        self._prefetch = prefetch
        self._lock = threading.Lock()
        self._started: deque[tuple[Any, list[str], list[Future[Any]]]] = deque()
        self._count = 0  # units whose fetches started, taken or not
        self._closed = False
        self._failed: BaseException | None = None  # met while listing on the event loop

    def open_to(self, n: int) -> None:
        """Start the fetches of every unit before the `n`-th (counted from the first)."""
        with self._lock:
            self._start_until(n)

    def _start_until(self, n: int) -> None:  # the lock held
        try:
            while not self._closed and self._count < n:
                unit = next(self._units, None)
                if unit is None:
                    self._closed = True
                    return
                keys = self._keys_of(unit)
                self._started.append((unit, keys, self._prefetch(keys)))
                self._count += 1
        except BaseException as err:  # kept for `take`: a failed listing must not end the scan quietly
            self._failed, self._closed = err, True

    def take(self) -> tuple[Any, list[str], list[Future[Any]]] | None:
        """The next unit, its keys and arrival futures; None after the last."""
        with self._lock:
            if not self._started:
                self._start_until(self._count + 1)
            if self._started:
                return self._started.popleft()
            if self._failed is not None:
                raise self._failed
            return None

    def close(self) -> list[str]:
        """Start nothing more; the keys of units whose fetches started and that the reader
        never took (nobody will take them)."""
        with self._lock:
            self._closed = True
            left, self._started = self._started, deque()
        return [k for _, keys, _ in left for k in keys]


class _Columns:
    """A work unit decoded column by column, every column a task of the pool, the batch
    delivered through `result` once the last is done (in the unit's pieces, `_unit_pieces`).

    For the first unit of a local scan: it is read alone (the window starts at one unit, so
    that a LIMIT met by it reads nothing else), and as one task it would keep one thread
    busy and the others idle while the engine waits for it (a `SELECT *` of six columns:
    27 ms on one of two cores)."""

    def __init__(
        self, pool: Workers, scan: TableScan, unit: Any, columns: Sequence[Column], schema: pa.Schema,
        grid: tuple[int, ...] | None, finish: Finish | None = None,
    ) -> None:  # fmt: skip
        self.result: Future[list[pa.RecordBatch]] = Future()
        self._finish = finish
        self.keys: list[str] = []
        self._lock = threading.Lock()
        self._left = len(columns)
        self._merged = getattr(unit, "merged", 1)
        self._schema = schema
        self._tasks: list[Future[tuple[int, list[pa.Array]]]] = []
        cut = _cut(scan, unit, columns, grid)
        try:
            for col in columns:
                self._tasks.append(pool.submit(_column_pieces, scan, unit, col, grid, cut))
        except RuntimeError:  # the pool was shut down: the scan was cancelled (Ctrl-C)
            self.drop()
            self.result.cancel()
            return
        for task in self._tasks:
            task.add_done_callback(self._done)

    def _done(self, _: Future[Any]) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
        tasks, self._tasks = self._tasks, []  # no cycle through the callbacks holds the batch
        if any(t.cancelled() for t in tasks):
            self.result.cancel()
            return
        failed = next((t.exception() for t in tasks if t.exception() is not None), None)
        if failed is not None:
            self.result.set_exception(failed)
            return
        done = [t.result() for t in tasks]
        counters.count(work_units_read=self._merged, rows=done[0][0])
        try:
            self.result.set_result(_finished(self._finish, _piece_batches(done, self._schema)))
        except Exception as err:  # the engine's filter failed: the unit's reader raises it
            self.result.set_exception(err)

    def drop(self) -> bool:
        """Cancel the columns not started; True when none is decoding (nothing to forget:
        this unit never fetches ahead)."""
        return all([t.cancel() or t.done() for t in self._tasks])


def _deliver(result: Future[list[Any]], task: Future[list[Any]]) -> None:
    """Pass a finished decoding task's outcome on to the unit's `result`."""
    if task.cancelled():
        result.cancel()
    elif task.exception() is not None:
        result.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        result.set_result(task.result())


@contextlib.contextmanager
def reported(on_error: Callable[[ZarrSQLError], None] | None) -> Iterator[None]:
    """A `ZarrSQLError` raised in the block is passed to `on_error` (the engine adapter keeps
    it, to re-raise it as itself once the engine has failed the statement) and raised on
    without its traceback: reading batches, and planning a scan, which may read coordinates."""
    try:
        yield
    except ZarrSQLError as err:
        if on_error is not None:
            on_error(err)
        raise err.with_traceback(None) from None


def read_batches(
    scan: TableScan,
    plan: Plan,
    columns: Sequence[Column],
    on_error: Callable[[ZarrSQLError], None] | None = None,
    finish: Finish | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """Batches of the planned units, in plan order, for `columns` in the given order.

    A `ZarrSQLError` met while reading is passed to `on_error` (the engine adapter keeps it
    to re-raise as itself) and raised without its traceback, so that the engine's message
    is the error's own text. Ctrl-C met here (the main thread was waiting for a unit) becomes
    `QueryInterrupted` the same way: a KeyboardInterrupt would reach DuckDB as an anonymous
    Python failure of the stream.
    """
    yield from _guarded(_scanning(scan, plan, _unit_batches(scan, plan, columns, finish)), on_error)


def map_units(
    scan: TableScan,
    plan: Plan,
    columns: Sequence[Column],
    work: Callable[[Any], T],
    on_error: Callable[[ZarrSQLError], None] | None = None,
) -> Generator[T, None, None]:
    """`work(unit)` of every planned unit, in plan order, run on the reader's threads.

    For a consumer that needs every unit (an aggregate computed inside the scan): the window
    of units in flight opens whole at once, and on a remote store every unit's fetches start
    ahead as far as the window allows, with no first unit read alone for a LIMIT. `columns`
    are those `work` reads (their chunk keys are fetched ahead); `work` counts what it reads.
    Errors and Ctrl-C are reported as `read_batches` reports them."""
    units = _unit_results(scan, plan, columns, lambda unit: functools.partial(_one, work, unit))
    yield from _guarded(_scanning(scan, plan, units), on_error)


def _one(work: Callable[[Any], T], unit: Any) -> list[T]:
    return [work(unit)]


def _guarded(results: Iterator[T], on_error: Callable[[ZarrSQLError], None] | None) -> Generator[T, None, None]:
    """`results`, with a `ZarrSQLError` or Ctrl-C reported as `read_batches` says."""
    try:
        with reported(on_error):
            yield from results
    except KeyboardInterrupt:
        stop = QueryInterrupted(INTERRUPTED)
        if on_error is not None:
            on_error(stop)
        raise stop from None


#: The message of a scan stopped by Ctrl-C.
INTERRUPTED = "the query was interrupted (Ctrl-C); its scans stopped and the connection is still usable"


def engine_batches(
    scan: TableScan,
    plan: Plan,
    columns: Sequence[Column],
    on_error: Callable[[ZarrSQLError], None] | None = None,
    finish: Finish | None = None,
) -> Iterator[pa.RecordBatch]:
    """`read_batches` for an engine that formats the Python error it meets (Arrow does).

    Arrow appends the traceback of an exception raised by a batch iterator to its message,
    and an exception raised in a Python frame always carries that frame. So the error is
    caught here and raised again by `codecs.strict_errors`, a C function that raises the
    exception it is given, driven by `map` after the batches run out: no Python frame is on
    the way, and the engine's message is the error's text without a traceback.

    `finish` (see `Finish`) runs on each batch on the decoding threads.
    """
    failed: list[ZarrSQLError] = []

    def recorded() -> Iterator[pa.RecordBatch]:
        try:
            yield from read_batches(scan, plan, columns, on_error, finish)
        except ZarrSQLError as err:
            failed.append(err.with_traceback(None))

    # typeshed types strict_errors for UnicodeError only; it raises whatever exception it gets
    return itertools.chain(recorded(), map(codecs.strict_errors, failed))  # type: ignore[arg-type]


def _scanning(scan: TableScan, plan: Plan, results: Iterator[T]) -> Iterator[T]:
    """`results` of the scan between `counters.scan_started` and `scan_ended`, for the
    progress display; a remote store's missing chunks are confirmed at the end (`_unit_results`
    checks a local store after each unit)."""
    counters.scan_started(_units_to_read(plan) if counters.watched() else 0)
    POOL.scan_started()
    try:
        yield from results
        confirm = getattr(scan.store, "confirm_missing", None)  # a remote store's missing chunks
        if confirm is not None:
            confirm()
    finally:
        POOL.scan_ended()
        forget_rests(scan.store)
        counters.scan_ended()


def _units_to_read(plan: Plan) -> int:
    """The units the scan will read when arithmetic says so cheaply, else the whole grid's
    (a progress estimate: listing a masked plan's units twice would cost a scan's time)."""
    if isinstance(plan, ScanPlan):
        if plan.only is None and (plan.predicate is None or plan.kept is not None):
            return plan.units_kept()
        return plan.units_total
    blocks = getattr(plan, "blocks", None)  # a sparse plan: its blocks are listed already
    if blocks is not None:
        return sum(1 for block in blocks if len(block))
    return plan.units_total


#: Units whose fetches a remote scan starts when the first unit's chunks are in.
EARLY_UNITS = 8
#: How far ahead of the unit the engine takes a remote scan fetches, in windows of units:
#: one window is decoding or decoded, the next one's answers are arriving.
FETCH_WINDOWS = 2
#: Rows the first batch of a local dense scan holds at least: DuckDB's vector, so that a
#: `LIMIT` up to it is met by the first batch.
HEAD_ROWS = 2048


def head_and_rest(unit: Any) -> list[Any]:
    """A dense scan's first unit as two: its leading rows along the first axis (at least
    `HEAD_ROWS`, at most half the unit) and the rest, in the unit's row order.

    `SELECT * ... LIMIT 10`, the first thing asked of a new table, needs ten rows, but the
    first unit is a whole chunk of each column: every data chunk decoded and every
    coordinate column built for hundreds of thousands of rows, most of its time. The head's
    rows are the leading rows of each chunk, which a zstd chunk decodes alone, keeping the
    stream for the rest (`decode.chunks.read_head`): the first batch costs a fraction of the
    unit, and a scan that goes on decodes the rest of each chunk from where the head
    stopped, so every chunk is still read and decoded once. The rest counts no grid cell
    (`merged` 0): units read stay counts of grid cells. A unit with a selection, a grouped
    unit, or one too short to halve is kept whole. The reader splits only where every data
    column streams so (`DenseScan.streams_head`), and never on a remote store, where the
    head would not save the chunk's round trip.
    """
    if not isinstance(unit, WorkUnit) or unit.select is not None or unit.merged != 1 or not unit.region:
        return [unit]
    (start, stop), *others = unit.region
    per_row = math.prod(b - a for a, b in others)
    rows = -(-HEAD_ROWS // per_row) if per_row else 0
    if not rows or 2 * rows > stop - start:
        return [unit]
    head = WorkUnit(unit.index, ((start, start + rows), *others), None, 1, head=True)
    return [head, WorkUnit(unit.index, ((start + rows, stop), *others), None, 0)]


def _with_fetches(
    units: Iterator[Any], ahead: _Ahead | None
) -> Iterator[tuple[int, Any, list[str], list[Future[Any]]]]:
    """(index, unit, keys, arrival futures) of each unit: from `ahead` on a remote scan that
    fetches ahead, else the units with no fetch of their own."""
    if ahead is None:
        for i, unit in enumerate(units):
            yield i, unit, [], []
        return
    for i in itertools.count():
        got = ahead.take()
        if got is None:
            return
        yield i, *got


def _when_all_done(futures: list[Future[Any]], then: Callable[[], None]) -> None:
    """Call `then()` once every one of `futures` is done (at once when there are none)."""
    if not futures:
        then()
        return
    left = [len(futures)]
    lock = threading.Lock()

    def one(_: Future[Any]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        then()

    for f in futures:
        f.add_done_callback(one)


class _Stop:
    """Cancels one running scan from another thread: its queued units never start."""

    def __init__(self, pool: Workers) -> None:
        self.pool = pool
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()
        self.pool.shutdown()

    def take(self, queued: _Queued | _Columns) -> list[Any]:
        """The unit's results; QueryInterrupted if the scan was stopped before they came.

        The wait wakes every `STOP_CHECK_SECONDS` to look at the stop: a stopped unit that
        is decoding cannot be cancelled, and one whose read never returns would hold the
        engine's thread, and the query, forever."""
        while True:
            try:
                return queued.result.result(timeout=STOP_CHECK_SECONDS)
            except TimeoutError:
                pass
            except CancelledError:
                if not self.event.is_set():
                    raise
            if self.event.is_set():
                raise QueryInterrupted(INTERRUPTED) from None


_running_lock = threading.Lock()
_running: set[_Stop] = set()


def cancel_all() -> None:
    """Stop the queued units of every scan reading now (Ctrl-C, from the engine's watcher).

    A unit decoding finishes; nothing queued starts, so the scan's threads are idle within a unit's
    time even while the engine, interrupted, no longer pulls batches or closes the stream. A
    scan waiting for a unit raises `QueryInterrupted` within `STOP_CHECK_SECONDS`, even when
    the unit's read never returns (its thread is abandoned, `scan/workers.py`).
    """
    with _running_lock:
        stops = list(_running)
    for stop in stops:
        stop()


def _unit_batches(
    scan: TableScan, plan: Plan, columns: Sequence[Column], finish: Finish | None = None
) -> Iterator[pa.RecordBatch]:
    """The units' batches: a local first unit split in a head and the rest, and decoded
    column by column; the window growing from one unit (see the module docstring)."""
    schema = schema_of(columns)
    grid = plan.grid if isinstance(plan, ScanPlan) else None

    def apart(pool: Workers, threads: int, unit: Any) -> _Columns | None:
        if len(columns) > 1 and threads > 1 and getattr(scan, "columns_apart", False):
            return _Columns(pool, scan, unit, columns, schema, grid, finish)
        return None

    def work(unit: Any) -> Callable[[], list[pa.RecordBatch]]:
        pieces = functools.partial(_unit_pieces, scan, unit, columns, schema, grid)
        return pieces if finish is None else lambda: _finished(finish, pieces())

    return _unit_results(scan, plan, columns, work, apart)


def _finished(finish: Finish | None, batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """`batches` through `finish`, on the thread that decoded them."""
    if finish is None:
        return batches
    return [out for batch in batches for out in finish(batch)]


def _unit_results(
    scan: TableScan,
    plan: Plan,
    columns: Sequence[Column],
    make_work: Callable[[Any], Callable[[], list[T]]],
    apart: Callable[[Workers, int, Any], _Columns | None] | None = None,
) -> Iterator[T]:
    """What `make_work(unit)()` returns for every unit, in plan order, decoded on a pool.

    With `apart` (a reader that streams to an engine, which may stop at a LIMIT): a local
    dense scan's first unit is split into a head and the rest (`head_and_rest`), a first
    unit read locally is handed to `apart` to decode column by column (when it returns a
    unit), and the window of units in flight grows from one. Without it (a consumer that
    takes every unit), the window opens whole and every fetch starts as far ahead as it
    allows.

    A unit's results are handed over only once the store is known not to have been
    rewritten since its table was opened (`validity.ChangeGuard`: a local folder, checked
    after the unit's reads, on the thread that read it; a remote store checks as it reads)."""
    counters.count(work_units_planned=plan.units_total, scans=1)
    # small chunks are read in grouped units: the costs below are per unit, not per chunk
    grid = plan.grid if isinstance(plan, ScanPlan) else None
    # a remote unit holds at most one round of requests, so a LIMIT still waits one round trip
    most = getattr(scan.store, "concurrency", None) if getattr(scan.store, "remote", False) else None
    units = iter(plan.grouped_units(max_chunks=most) if isinstance(plan, ScanPlan) else plan.units())
    first = next(units, None)
    if first is None:
        return
    prefetch = _prefetcher(scan)
    if prefetch is not None and scan.unit_keys(first, columns) is None:
        prefetch = None
    split = (
        apart is not None
        and prefetch is None
        and grid is not None
        and getattr(scan, "streams_head", lambda _: False)(columns)
    )
    units = itertools.chain(head_and_rest(first) if split else [first], units)
    threads, in_flight = _pool_size(scan, prefetch is not None)
    # remote: the first unit alone, the fetches of units 2-9 started when its chunks are in
    # (their round trip overlaps its decoding), and the whole window once the engine asks for
    # a second batch, with fetches `FETCH_WINDOWS` windows ahead of the unit it takes. A LIMIT
    # met by the first unit fetches those 9 units, not the whole window.
    ahead: _Ahead | None = None
    if prefetch is not None:
        ahead = _Ahead(units, lambda u: scan.unit_keys(u, columns) or [], prefetch)
    growth = in_flight if getattr(scan.store, "remote", False) else 2
    pool = Workers(max_workers=threads)
    pending: deque[tuple[Any, _Queued | _Columns]] = deque()  # (unit, its reading)
    # grows to `in_flight`: a LIMIT met by the first unit reads little else
    window = 1 if apart is not None else in_flight
    if ahead is not None and apart is None:
        ahead.open_to(FETCH_WINDOWS * window)
    stop = _Stop(pool)
    guard = ChangeGuard(scan)

    def checked_work(unit: Any) -> Callable[[], list[T]]:
        """The unit's work, then the store's check, on the decoding thread: its `stat`s
        overlap the other units' decoding instead of delaying each hand-over."""
        work = make_work(unit)

        def run() -> list[T]:
            done = work()
            guard.check(unit)
            return done

        return run if guard.watching else work

    def checked(unit: Any, queued: _Queued | _Columns) -> list[T]:
        done = stop.take(queued)
        if isinstance(queued, _Columns):  # decoded column by column: checked once all are in
            guard.check(unit)
        return done

    with _running_lock:
        _running.add(stop)
    try:
        for i, unit, keys, arrivals in _with_fetches(units, ahead):
            if stop.event.is_set():
                raise QueryInterrupted(INTERRUPTED)
            if i == 0 and ahead is not None and apart is not None:
                _when_all_done(arrivals, functools.partial(ahead.open_to, 1 + EARLY_UNITS))
            whole = apart(pool, threads, unit) if apart is not None and window == 1 and not arrivals else None
            pending.append((unit, whole if whole is not None else _Queued(pool, checked_work(unit), keys, arrivals)))
            if len(pending) >= window:
                yield from checked(*pending.popleft())
                window = min(in_flight, window * growth)
                if ahead is not None and window > 1:
                    ahead.open_to(i + 1 + FETCH_WINDOWS * window)
        while pending:
            yield from checked(*pending.popleft())
    finally:
        with _running_lock:
            _running.discard(stop)
        left = [k for _, queued in pending if queued.drop() for k in queued.keys]  # nobody will take them
        if isinstance(scan.store, Prefetching):  # forgotten in one call: see the store's `forget`
            scan.store.forget(left + (ahead.close() if ahead is not None else []))
        # Do not wait for a unit still decoding: the engine has what it asked for.
        pool.shutdown()
