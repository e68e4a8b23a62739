"""Running a statement into a stream of Arrow record batches, with its limits and cleanup.

A query's rows are never held whole: DuckDB's streaming reader yields batches of at most
`Limits.batch_rows` rows, each cut further (between rows) to about `Limits.batch_bytes`
(gRPC clients refuse large messages; ADBC's default limit is 16 MiB). A single row larger
than `Limits.message_bytes` cannot be cut: the stream ends with `RowTooLarge`, naming the
limits to raise. The stream holds its cursor lease until it ends: when the last batch is
sent, when the query fails, or when the client cancels or disconnects (the Flight server then
drops the stream, and the generator's `finally` runs); the cursor then runs a trivial
statement, so DuckDB frees what the abandoned result held. `Limits.timeout` bounds a query's
run: a timer interrupts DuckDB, and the client gets Flight's timed-out error.

A later statement of the same session that must run on the stream's cursor (the session
keeps state: `sessions`) asks the stream to `spill`: the rest of its result is read into
memory (Arrow) and the cursor given back; the client then reads the same batches from there.
All spilled results together hold at most `Limits.held_bytes`: past it the later statement
is refused (`spill.ResultStillOpen`), and the stream goes on from where the spill stopped.

An error after the first batch keeps its kind: the batches travel in one Arrow stream inside
a `GeneratorStream`, whose generator raises the Flight error (timed out, cancelled, or the
failure's message) once that stream has ended. An error raised inside the Arrow stream
itself would reach the client as an unknown error carrying the server's traceback.

Every open stream is counted (`Streams.open`), so a test can see that an abandoned stream
was freed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.flight as flight

from zarrsql.errors import ParameterError, ZarrSQLError
from zarrsql.server.policy import Statement
from zarrsql.server.spill import SpillableBatches

log = logging.getLogger(__name__)
#: Bytes a record batch's message carries beside its buffers (IPC metadata, padding): a
#: generous bound, so a batch measured under `message_bytes` less this is sent whole.
_MESSAGE_OVERHEAD = 64 << 10


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may take.

    batch_rows: rows per record batch (65 536: large enough that per-batch costs vanish,
        small enough that a batch of a few wide columns stays a few MiB);
    batch_bytes: bytes per batch, about (8 MiB: half ADBC's default 16 MiB message limit);
    timeout: seconds a query may run before it is interrupted (300);
    message_bytes: bytes one message may hold (16 MiB, ADBC's default limit): a row larger
        is refused, as the client would refuse it without saying why;
    held_bytes: bytes of unread results the server holds in memory, all sessions together,
        so that a session's statement can run on its cursor while an earlier result of the
        session still streams (256 MiB: 32 wide batches; one batch more may be read past it).
    """

    batch_rows: int = 65_536
    batch_bytes: int = 8 << 20
    timeout: float = 300.0
    message_bytes: int = 16 << 20
    held_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for name in ("batch_rows", "batch_bytes", "message_bytes", "held_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ParameterError(f"Limits({name}={value!r}): give a whole number above 0")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)):
            raise ParameterError(f"Limits(timeout={self.timeout!r}): give the seconds as a number")
        if not math.isfinite(self.timeout) or self.timeout <= 0:
            raise ParameterError(
                f"Limits(timeout={self.timeout!r}): give a finite number of seconds above 0 (a timer cannot "
                "wait nan or inf; for a very long limit give e.g. 86400)"
            )


class RowTooLarge(ZarrSQLError, ValueError):
    """A result row larger than one Flight message may be (`Limits.message_bytes`)."""


class Streams:
    """The count of open result streams and the bytes of spilled results (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._held = 0

    @property
    def open(self) -> int:
        with self._lock:
            return self._open

    @property
    def held(self) -> int:
        """Bytes of spilled results not yet sent."""
        with self._lock:
            return self._held

    def _add(self, n: int) -> None:
        with self._lock:
            self._open += n

    def hold(self, nbytes: int) -> None:
        """Count `nbytes` more (or, negative, fewer) bytes of spilled results."""
        with self._lock:
            self._held += nbytes


#: The error a client gets for a query stopped by CancelFlightInfo or a server shutdown.
CANCELLED = "zarrsql server: the query was cancelled (CancelFlightInfo, or the server is shutting down)"
#: The error a client gets for a query that ran past `Limits.timeout`.
TIMED_OUT = "zarrsql server: the query ran past the server's time limit (zarrsql serve --query-timeout) and was stopped"
#: The error for an interrupt that neither the time limit nor a cancel caused: DuckDB 1.5
#: sometimes reports a query that failed on one of its threads this way (about 1 run in 60).
UNEXPLAINED_INTERRUPT = (
    "zarrsql server: DuckDB stopped the query with 'INTERRUPT Error' although neither the time limit nor a "
    "cancel stopped it; DuckDB 1.5 reports some failing queries this way: run the query again to see its "
    "own error (DuckDB 2 reports it every time)"
)


def _is_interrupt(err: BaseException) -> bool:
    wrapped = isinstance(err, (duckdb.Error, pa.ArrowException, OSError)) and not isinstance(err, ZarrSQLError)
    return isinstance(err, duckdb.InterruptException) or (wrapped and str(err).startswith("INTERRUPT Error"))


def user_error(err: BaseException, cursor: Any = None) -> Exception:
    """The Flight error a client gets for a failed statement, carrying zarrsql's message.

    A zarrsql error raised inside DuckDB's scan is reported as itself (its message, not
    DuckDB's wrapping); an interrupt is a timeout or a cancellation. DuckDB's errors arrive
    as themselves, or (read through pyarrow's stream reader) as OSError / ArrowException
    with DuckDB's message.
    """
    wrapped = isinstance(err, (duckdb.Error, pa.ArrowException, OSError)) and not isinstance(err, ZarrSQLError)
    zerr = cursor.take_scan_error() if cursor is not None and wrapped else None
    if _is_interrupt(err):
        return flight.FlightTimedOutError(
            "zarrsql server: the query was interrupted (it ran past the server's time limit, or was cancelled)"
        )
    message = str(zerr if zerr is not None else err).strip() or type(err).__name__
    return flight.FlightServerError(message)


@dataclass(frozen=True, slots=True)
class Run:
    """A started query: its schema, its batches (cut to the limits), `stop` (cancels the
    timer, releases DuckDB's result) and whether the timer fired (`timed_out`)."""

    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]
    stop: Callable[[], None]
    timed_out: threading.Event


def run_query(
    cursor: Any,
    statement: Statement,
    rows: tuple[tuple[Any, ...], ...],
    limits: Limits,
    timed_out: threading.Event | None = None,
) -> Run:
    """Start the query on `cursor`. One run per parameter row (or one without parameters);
    every run must give the same schema. `timed_out` is set when the time limit fires."""
    timed_out = timed_out if timed_out is not None else threading.Event()
    duck = cursor.duckdb  # taken now: the wrapper's property may install functions, refused mid-query

    def expire() -> None:
        timed_out.set()
        duck.interrupt()

    timer = threading.Timer(limits.timeout, expire)
    timer.daemon = True
    timer.start()
    runs = list(rows) or [()]
    try:
        first = _reader(cursor, statement.text, runs[0], limits.batch_rows)
    except BaseException:
        timer.cancel()
        raise

    current = [first]

    def batches() -> Iterator[pa.RecordBatch]:
        for i, params in enumerate(runs):
            if i:
                current[0] = _reader(cursor, statement.text, params, limits.batch_rows)
            for batch in current[0]:
                yield from _pieces(batch, limits)

    def stop() -> None:
        """Cancel the timer and release the reader: while DuckDB's result is open the cursor
        refuses the session's next statement ("connection has an open result"), and an
        abandoned stream's generator may be collected only later."""
        timer.cancel()
        with contextlib.suppress(Exception):
            current[0].close()

    return Run(first.schema, batches(), stop, timed_out)


def _reader(cursor: Any, text: str, params: tuple[Any, ...], batch_rows: int) -> pa.RecordBatchReader:
    rel = cursor.sql(text, params=list(params)) if params else cursor.sql(text)
    if rel is None:
        return pa.RecordBatchReader.from_batches(pa.schema([]), [])
    # DuckDB 2 streams with `to_arrow_reader`, 1.5 with `fetch_record_batch`
    stream = getattr(rel, "to_arrow_reader", None) or rel.fetch_record_batch
    return stream(batch_rows)


def _pieces(batch: pa.RecordBatch, limits: Limits) -> Iterator[pa.RecordBatch]:
    """The batch cut between rows into slices of about `batch_bytes` at most (by average row
    size, then again where rows are uneven); a single row over `message_bytes` is refused."""
    most = min(limits.batch_bytes, limits.message_bytes - _MESSAGE_OVERHEAD)
    size = _message_size(batch)
    if size <= most:
        yield batch
        return
    if batch.num_rows <= 1:
        if size + _MESSAGE_OVERHEAD > limits.message_bytes:
            raise RowTooLarge(_too_large(size, limits.message_bytes))
        yield batch
        return
    step = max(1, min(batch.num_rows // 2, batch.num_rows * most // size))
    for start in range(0, batch.num_rows, step):
        yield from _pieces(batch.slice(start, step), limits)


def _message_size(batch: pa.RecordBatch) -> int:
    """Bytes of the batch's message: its rows' buffers (a slice counts its own rows only), a
    dictionary column's indices only (its dictionary travels in a message of its own)."""
    return sum(
        column.indices.nbytes if isinstance(column, pa.DictionaryArray) else column.nbytes for column in batch.columns
    )


def _too_large(size: int, limit: int) -> str:
    return (
        f"a result row takes {size / (1 << 20):.1f} MiB, more than the {limit / (1 << 20):.0f} MiB one Flight "
        "message may hold (a row cannot be split across messages); select less of it (a substring, a slice "
        "of the list), or raise both limits: the client's (ADBC: adbc.flight.sql.client_option.with_max_msg_size) "
        "and the server's (zarrsql serve --max-message-mib, or Limits(message_bytes=...))"
    )


class CursorLease(Protocol):
    """A cursor lent to one stream. `free`, set before the lease is entered, is how a later
    statement of the same session asks for the cursor back (`sessions.Session.lease`)."""

    free: Callable[[], None] | None

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


def stream(
    streams: Streams,
    lease: CursorLease,
    statement: Statement,
    rows: tuple[tuple[Any, ...], ...],
    limits: Limits,
    cancelled: threading.Event,
    *,
    on_end: Callable[[], None] = lambda: None,
) -> flight.FlightDataStream:
    """The Flight stream of a query's result, holding `lease` (a cursor) until it ends or
    spills (then `on_end` runs when it ends).

    Errors before the first batch (a bad column, a missing store) reach the client as the
    DoGet's error; errors while streaming end the stream with the same kind of error
    (module docstring).
    """
    source = SpillableBatches(streams, limits.held_bytes, cancelled)
    lease.free = source.spill
    timed_out = threading.Event()
    with source.lock:  # a statement asking for the cursor meanwhile waits until the run started
        cursor = lease.__enter__()
        try:
            run = run_query(cursor, statement, rows, limits, timed_out)
        except (duckdb.Error, ZarrSQLError) as err:
            lease.__exit__(None, None, None)
            raise _stream_error(err, cursor, cancelled=cancelled, timed_out=timed_out) from None
        except BaseException:
            lease.__exit__(None, None, None)
            raise
        release = _Once(lambda: _let_go(run.stop, cursor, lease))
        source.start(
            run.batches, release, lambda err: _stream_error(err, cursor, cancelled=cancelled, timed_out=run.timed_out)
        )
    streams._add(1)
    done = _Once(lambda: _finish(release, source, streams, on_end))
    failure: list[Exception] = []

    def guarded() -> Iterator[pa.RecordBatch]:
        try:
            for batch in source:
                if cancelled.is_set():
                    break
                yield batch
                if cancelled.is_set():  # checked again before DuckDB computes the next batch
                    break
        except Exception as err:  # the edge: whatever stopped the stream reaches the client as a Flight error
            failure.append(_stream_error(err, cursor, cancelled=cancelled, timed_out=run.timed_out))
        finally:
            done()
        if cancelled.is_set() and not failure:
            failure.append(flight.FlightCancelledError(CANCELLED))

    batches = guarded()
    # A stream dropped before its first batch never enters the generator's `finally`.
    weakref.finalize(batches, done)

    def messages() -> Iterator[Any]:
        yield flight.RecordBatchStream(pa.RecordBatchReader.from_batches(run.schema, batches))
        if failure:
            raise failure[0]

    return flight.GeneratorStream(run.schema, messages())


def _stream_error(err: Exception, cursor: Any, *, cancelled: threading.Event, timed_out: threading.Event) -> Exception:
    """The Flight error for a failure while streaming: cancelled, timed out, a row too large
    or a query's own error (zarrsql's message); anything else is a bug, logged here."""
    if cancelled.is_set():
        return flight.FlightCancelledError(CANCELLED)
    if timed_out.is_set():
        return flight.FlightTimedOutError(TIMED_OUT)
    if isinstance(err, flight.FlightError):
        return err
    if _is_interrupt(err):
        return flight.FlightServerError(UNEXPLAINED_INTERRUPT)
    if isinstance(err, (duckdb.Error, ZarrSQLError, pa.ArrowException, OSError)):
        return user_error(err, cursor)
    log.error("zarrsql server: a result stream failed", exc_info=err)
    return flight.FlightInternalError(
        f"zarrsql server: internal error ({type(err).__name__}: {err}); this is a bug in zarrsql, please report it "
        "with the server's log"
    )


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


def _let_go(stop: Callable[[], None], cursor: Any, lease: CursorLease) -> None:
    """Give the stream's cursor back: stop the run, free DuckDB's result, end the lease."""
    stop()
    _drop_result(cursor)
    lease.__exit__(None, None, None)


def _finish(
    release: Callable[[], None], source: SpillableBatches, streams: Streams, on_end: Callable[[], None]
) -> None:
    """End the stream: give its cursor back (unless it spilled), let go of unsent batches."""
    release()
    source.discard()
    streams._add(-1)
    on_end()
