"""A result stream's batches, and spilling the rest of them into memory on request.

A stream holds its session's cursor while the client reads it. A later statement of the same
session that must run on that cursor (the session keeps state: `sessions`) asks the stream
to `spill`: the rest of the result is read from DuckDB into memory (Arrow record batches) and
the cursor given back; the client then reads the same batches, in the same order, from there.
Waiting for the client instead would deadlock a client that reads one result at a time.

Spilled batches are counted in `Streams.held` (all sessions together) and bounded by
`Limits.held_bytes`: a spill that finds that much held refuses the later statement
(`ResultStillOpen`) and leaves the stream as it was (batches read so far stay in memory,
the rest still comes from DuckDB). One batch more than the limit may be read, since a
batch's size is known only once it is read.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from zarrsql.errors import ZarrSQLError

if TYPE_CHECKING:
    import pyarrow as pa

    from zarrsql.server.streams import Streams


class ResultStillOpen(ZarrSQLError, RuntimeError):
    """A statement refused because an earlier result of its session still streams on the
    session's cursor and the server holds as many unread results as it may (`held_bytes`)."""


class SpillableBatches:
    """A run's batches: read from DuckDB as the client asks for them, until `spill` reads the
    rest into memory and gives the cursor back. `lock` lets one reader at a time take a batch
    from DuckDB; it is never held while a batch waits for the client."""

    def __init__(self, streams: Streams, limit: int, cancelled: threading.Event) -> None:
        self.lock = threading.RLock()  # re-entered when a collected stream ends mid-spill
        self._streams, self._limit, self._cancelled = streams, limit, cancelled
        self._live: Iterator[pa.RecordBatch] | None = None
        self._held: collections.deque[pa.RecordBatch] = collections.deque()
        self._failure: Exception | None = None
        self._ended = False
        self._release: Callable[[], None] = lambda: None
        self._describe: Callable[[Exception], Exception] = lambda err: err

    def start(
        self, live: Iterator[pa.RecordBatch], release: Callable[[], None], describe: Callable[[Exception], Exception]
    ) -> None:
        """Read `live` from now on; `release` gives the cursor back, `describe` turns a
        failure into the client's error (while the cursor is still held)."""
        self._live, self._release, self._describe = live, release, describe

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            with self.lock:
                batch = self._next()
            if batch is None:
                return
            yield batch

    def _next(self) -> pa.RecordBatch | None:
        if self._held:
            batch = self._held.popleft()
            self._streams.hold(-batch.nbytes)
            return batch
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        batch = next(self._live, None) if self._live is not None else None
        if batch is None:
            self._live = None
        return batch

    def spill(self) -> None:
        """Read the rest of the result into memory, then give the cursor back; refuse (the
        stream goes on unchanged) while spilled results hold `held_bytes` or more."""
        with self.lock:
            while self._live is not None and not self._ended and not self._cancelled.is_set():
                if self._streams.held >= self._limit:
                    raise ResultStillOpen(_still_open(self._streams.held, self._limit))
                try:
                    batch = next(self._live, None)
                except Exception as err:  # the client gets it after the batches read before it
                    self._failure, batch = self._describe(err), None
                if batch is None or self._ended:
                    break
                self._held.append(batch)
                self._streams.hold(batch.nbytes)
            self._live = None
        self._release()

    def discard(self) -> None:
        """Let go of spilled batches the client will not read (the stream ended early)."""
        with self.lock:
            self._ended = True
            held, self._held = self._held, collections.deque()
        self._streams.hold(-sum(batch.nbytes for batch in held))


def _still_open(held: int, limit: int) -> str:
    return (
        "an earlier result of this connection is still open (not read to its end) on the connection's "
        "cursor, which this statement needs (its temporary tables and settings), and the server cannot hold "
        f"the rest of that result in memory: unread results take {held / (1 << 20):.0f} MiB of the "
        f"{limit / (1 << 20):.0f} MiB it may hold (Limits(held_bytes=...)); read the earlier result to the "
        "end or close it first, then run this statement again"
    )
