"""Running a statement into a stream of Arrow record batches, with its limits and cleanup.

A query's rows are never held whole: DuckDB's streaming reader yields batches of at most
`Limits.batch_rows` rows, each cut further so no message exceeds `Limits.batch_bytes` (gRPC
clients refuse large messages; ADBC's default limit is 16 MiB). The stream holds its cursor
lease until it ends: when the last batch is sent, when the query fails, or when the client
cancels or disconnects (the Flight server then drops the stream, and the generator's
`finally` runs); the cursor then runs a trivial statement, so DuckDB frees what the
abandoned result held. `Limits.timeout` bounds a query's run: a timer interrupts DuckDB, and the
client gets Flight's timed-out error.

Every open stream is counted (`Streams.open`), so a test can see that an abandoned stream
was freed.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.flight as flight

from zarrsql.errors import ZarrSQLError
from zarrsql.server.policy import Statement


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may take.

    batch_rows: rows per record batch (65 536: large enough that per-batch costs vanish,
        small enough that a batch of a few wide columns stays a few MiB);
    batch_bytes: bytes per batch at most (8 MiB: half ADBC's default 16 MiB message limit);
    timeout: seconds a query may run before it is interrupted (300).
    """

    batch_rows: int = 65_536
    batch_bytes: int = 8 << 20
    timeout: float = 300.0


class Streams:
    """The count of open result streams (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0

    @property
    def open(self) -> int:
        with self._lock:
            return self._open

    def _add(self, n: int) -> None:
        with self._lock:
            self._open += n


def user_error(err: BaseException, cursor: Any = None) -> Exception:
    """The Flight error a client gets for a failed statement, carrying zarrsql's message.

    A zarrsql error raised inside DuckDB's scan is reported as itself (its message, not
    DuckDB's wrapping); an interrupt is a timeout or a cancellation.
    """
    zerr = cursor.take_scan_error() if cursor is not None and isinstance(err, duckdb.Error) else None
    if isinstance(err, duckdb.InterruptException):
        return flight.FlightTimedOutError(
            "zarrsql server: the query was interrupted (it ran past the server's time limit, or was cancelled)"
        )
    message = str(zerr if zerr is not None else err).strip() or type(err).__name__
    return flight.FlightServerError(message)


def run_query(
    cursor: Any, statement: Statement, rows: tuple[tuple[Any, ...], ...], limits: Limits
) -> tuple[pa.Schema, Iterator[pa.RecordBatch], Callable[[], None]]:
    """Start the query on `cursor`: (schema, batches, stop). One run per parameter row (or
    one without parameters); every run must give the same schema."""
    timer = threading.Timer(limits.timeout, cursor.duckdb.interrupt)
    timer.daemon = True
    timer.start()
    runs = list(rows) or [()]
    try:
        first = _reader(cursor, statement.text, runs[0], limits.batch_rows)
    except BaseException:
        timer.cancel()
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        reader = first
        for i, params in enumerate(runs):
            if i:
                reader = _reader(cursor, statement.text, params, limits.batch_rows)
            for batch in reader:
                yield from _pieces(batch, limits.batch_bytes)

    return first.schema, batches(), timer.cancel


def _reader(cursor: Any, text: str, params: tuple[Any, ...], batch_rows: int) -> pa.RecordBatchReader:
    rel = cursor.sql(text, params=list(params)) if params else cursor.sql(text)
    if rel is None:
        return pa.RecordBatchReader.from_batches(pa.schema([]), [])
    # DuckDB 2 streams with `to_arrow_reader`, 1.5 with `fetch_record_batch`
    stream = getattr(rel, "to_arrow_reader", None) or rel.fetch_record_batch
    return stream(batch_rows)


def _pieces(batch: pa.RecordBatch, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """The batch cut into slices of at most `max_bytes` (by average row size)."""
    size = batch.nbytes
    if size <= max_bytes or batch.num_rows <= 1:
        yield batch
        return
    step = max(1, batch.num_rows * max_bytes // size)
    for start in range(0, batch.num_rows, step):
        yield batch.slice(start, step)


def stream(
    streams: Streams,
    lease: AbstractContextManager[Any],
    statement: Statement,
    rows: tuple[tuple[Any, ...], ...],
    limits: Limits,
    cancelled: threading.Event,
    *,
    on_end: Callable[[], None] = lambda: None,
) -> flight.RecordBatchStream:
    """The Flight stream of a query's result, holding `lease` (a cursor) until it ends
    (then `on_end` runs).

    Errors before the first batch (a bad column, a missing store) reach the client as the
    DoGet's error; errors while streaming end the stream with the same kind of error.
    """
    cursor = lease.__enter__()
    try:
        schema, batches, stop = run_query(cursor, statement, rows, limits)
    except (duckdb.Error, ZarrSQLError) as err:
        lease.__exit__(None, None, None)
        raise user_error(err, cursor) from None
    except BaseException:
        lease.__exit__(None, None, None)
        raise
    streams._add(1)
    done = _Once(lambda: _finish(stop, cursor, lease, streams, on_end))

    def guarded() -> Iterator[pa.RecordBatch]:
        try:
            for batch in batches:
                if cancelled.is_set():
                    raise flight.FlightCancelledError("zarrsql server: the query was cancelled")
                yield batch
        except (duckdb.Error, ZarrSQLError) as err:
            raise user_error(err, cursor) from None
        finally:
            done()

    generator = guarded()
    # A stream dropped before its first batch never enters the generator's `finally`.
    weakref.finalize(generator, done)
    return flight.RecordBatchStream(pa.RecordBatchReader.from_batches(schema, generator))


def _drop_result(cursor: Any) -> None:
    """Make DuckDB let go of an abandoned result: a cursor keeps its last query's pending
    result (and the scan's buffered chunks: a whole large result's worth on DuckDB 1.5) until
    it runs another statement, and a session's cursor may wait long for its next one."""
    with contextlib.suppress(Exception):  # the cursor may be closed already (shutdown)
        cursor.duckdb.execute("SELECT 1").fetchall()


class _Once:
    """A cleanup that runs at most once, from whichever path gets there first."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action: Callable[[], None] | None = action
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            action, self._action = self._action, None
        if action is not None:
            action()


def _finish(
    stop: Callable[[], None],
    cursor: Any,
    lease: AbstractContextManager[Any],
    streams: Streams,
    on_end: Callable[[], None],
) -> None:
    stop()
    _drop_result(cursor)
    lease.__exit__(None, None, None)
    streams._add(-1)
    on_end()
