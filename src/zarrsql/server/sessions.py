"""Client sessions, prepared statements and tickets: the server's state between calls.

A session is one client connection (its gRPC peer): it gets its own zarrsql cursor on the
served database, so its temporary objects and settings are its own and two clients never
share a cursor. A statement runs on its session's cursor, also when that cursor is busy (the
same client sends a statement while an earlier result still streams) in a session that may
hold state (`keeps_state`: the server allows writes, or the client seeded its random
numbers): the busy stream is asked to `free` the cursor (it reads the rest of its result
into memory, or refuses past the server's limit), since waiting for the client to read it
would deadlock a client that reads one result at a time. A session without state of its own
runs such a statement on a spare cursor instead (closed after), so it does not wait at all.

Prepared statements and tickets are kept under random handles (16 bytes from `secrets`), so
a handle is unguessable and works from whichever connection the client sends it on. A ticket
is used once (DoGet takes it); tickets not fetched and sessions left idle are dropped after
`IDLE_SECONDS`, so an abandoned client leaves nothing behind for long.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from zarrsql.server.policy import Statement

#: Seconds an idle session, an unfetched ticket or an unused prepared statement is kept.
IDLE_SECONDS = 300.0
#: Sessions kept at most: a client that reconnects for every query (or many clients) would
#: otherwise keep a cursor each (a few MB with its registered scans) until it idles out. The
#: least recently used idle session goes first; a session that is streaming is never dropped.
MAX_SESSIONS = 32
#: Bytes of a handle: unguessable, and short on the wire.
HANDLE_BYTES = 16


class UnknownHandle(LookupError):
    """A prepared statement or ticket handle this server does not hold (closed or expired)."""


@dataclass(slots=True)
class Prepared:
    """A prepared statement: its statement, the parameter rows bound last (DoPut) and its
    result schema as found when it was prepared (then its first GetFlightInfo need not bind
    it again)."""

    statement: Statement
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    schema: Any = None
    used: float = field(default_factory=time.monotonic)

    def take_schema(self) -> Any:
        """The schema found at prepare time, once: a later execution binds the statement again,
        since the stores it reads may have changed on disk meanwhile (a column added, a type
        changed), and the schema GetFlightInfo announces must be the one the stream has."""
        schema, self.schema = self.schema, None
        return schema


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a DoGet will run: a statement with its parameter rows on a session, or the rows
    a write already produced (`result`, an Arrow table)."""

    session: str
    statement: Statement
    rows: tuple[tuple[Any, ...], ...]
    result: Any = None
    made: float = field(default_factory=time.monotonic)


class Session:
    """One client's cursor, lent to one statement at a time (module docstring).

    `keeps_state`: statements of this session may leave state on its cursor (temporary
    tables, settings, a random seed), so each must run on that cursor, never on a spare."""

    def __init__(self, cursor: Any, *, keeps_state: bool) -> None:
        self.cursor = cursor
        self.used = time.monotonic()
        self.keeps_state = keeps_state
        self._state = threading.Condition()
        self._taken = False
        self._free: Callable[[], None] | None = None

    def keep_state(self) -> None:
        """From now on run every statement on this session's cursor (it holds state now)."""
        self.keeps_state = True

    @contextlib.contextmanager
    def lease(self, spare: Callable[[], Any], *, free: Callable[[], None] | None = None) -> Iterator[Any]:
        """The session's cursor; when it is busy, a spare cursor from `spare()` (closed after)
        unless the session keeps state. `free` is how a later statement of this session asks
        the lease's holder (a stream) to give the cursor back early; it returns once the
        holder lets go (or will at once), or raises to refuse the later statement."""
        self.used = time.monotonic()
        if not self._take(free):
            cursor = spare()
            try:
                yield cursor
            finally:
                cursor.close()
            return
        try:
            yield self.cursor
        finally:
            with self._state:
                self._taken, self._free = False, None
                self._state.notify_all()

    def _take(self, free: Callable[[], None] | None) -> bool:
        """Take the session's cursor (True), or False when it is busy and a spare will do.

        A holder that cannot be asked (a statement, not a stream) ends without the client,
        so waiting for it cannot deadlock; a holder asked once is waited for."""
        asked: Callable[[], None] | None = None
        while True:
            with self._state:
                if not self._taken:
                    self._taken, self._free = True, free
                    return True
                if not self.keeps_state:
                    return False
                if self._free is None or self._free is asked:
                    self._state.wait()
                    continue
                asked = self._free
            asked()  # outside the lock: the holder gives the cursor back through it

    @property
    def busy(self) -> bool:
        with self._state:
            return self._taken

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closed already, or mid-stream on shutdown
            self.cursor.close()


class Registry:
    """Sessions by peer, prepared statements and tickets by handle; thread-safe."""

    def __init__(self, make_cursor: Any, *, keep_state: bool) -> None:
        self._make_cursor = make_cursor
        self._keep_state = keep_state
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._prepared: dict[bytes, Prepared] = {}
        self._tickets: dict[bytes, Ticket] = {}

    def session(self, peer: str) -> Session:
        with self._lock:
            found = self._sessions.get(peer)
        if found is not None:
            return found
        self._expire()
        made = Session(self._make_cursor(), keeps_state=self._keep_state)
        with self._lock:
            found = self._sessions.setdefault(peer, made)
        if found is not made:  # another call of the same client got there first
            made.close()
        return found

    def spare_cursor(self) -> Any:
        return self._make_cursor()

    def prepare(self, statement: Statement, schema: Any = None) -> bytes:
        handle = secrets.token_bytes(HANDLE_BYTES)
        with self._lock:
            self._prepared[handle] = Prepared(statement, schema=schema)
        return handle

    def prepared(self, handle: bytes) -> Prepared:
        with self._lock:
            found = self._prepared.get(handle)
        if found is None:
            raise UnknownHandle("no prepared statement with this handle (closed, or idle too long): prepare it again")
        found.used = time.monotonic()
        return found

    def close_prepared(self, handle: bytes) -> None:
        with self._lock:
            self._prepared.pop(handle, None)

    def issue(self, ticket: Ticket) -> bytes:
        handle = secrets.token_bytes(HANDLE_BYTES)
        with self._lock:
            self._tickets[handle] = ticket
        return handle

    def redeem(self, handle: bytes) -> Ticket:
        with self._lock:
            ticket = self._tickets.pop(handle, None)
        if ticket is None:
            raise UnknownHandle(
                "no result for this ticket (fetched already, or not fetched in time): run the query again"
            )
        return ticket

    def counts(self) -> dict[str, int]:
        """Sessions, prepared statements and unfetched tickets held (for tests and logs)."""
        with self._lock:
            return {"sessions": len(self._sessions), "prepared": len(self._prepared), "tickets": len(self._tickets)}

    def _expire(self) -> None:
        cutoff = time.monotonic() - IDLE_SECONDS
        with self._lock:
            idle = [k for k, s in self._sessions.items() if s.used < cutoff and not s.busy]
            free = sorted((s.used, k) for k, s in self._sessions.items() if not s.busy and k not in idle)
            over = len(self._sessions) - len(idle) - (MAX_SESSIONS - 1)
            idle += [k for _, k in free[: max(0, over)]]
            sessions = [self._sessions.pop(k) for k in idle]
            for k in [k for k, p in self._prepared.items() if p.used < cutoff]:
                del self._prepared[k]
            for k in [k for k, t in self._tickets.items() if t.made < cutoff]:
                del self._tickets[k]
        for s in sessions:
            s.close()

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
            self._prepared.clear()
            self._tickets.clear()
        for s in sessions:
            s.close()
