"""Ctrl-C while DuckDB computes: interrupt the running queries at once, from a thread.

Python runs its SIGINT handler (raising KeyboardInterrupt) only in the main thread, between
bytecodes; while the main thread is inside DuckDB it may not get there for seconds (DuckDB
looks for signals between its tasks). The C-level handler does write the signal's number to
the wakeup fd (`signal.set_wakeup_fd`) at once, so a watcher thread reading that fd interrupts
every zarrsql connection (`interrupt()` on an idle connection does nothing), the query ends
within moments, and the KeyboardInterrupt then surfaces in the caller as usual. Bytes are
passed on to a wakeup fd that was set before (asyncio's), so its signal handling still works.

The KeyboardInterrupt itself is raised wherever the main thread next runs Python code, which
may be a zarrsql callback DuckDB runs (a SQL function, a scan source's `rows`/`stream`, the
1.5 dataset's `count_rows`/`scanner`). DuckDB would report it as an anonymous Python failure
of that callback, so callbacks run under `stopped`, which turns it into `QueryInterrupted`
handed to the connection (re-raised as KeyboardInterrupt by its own methods; DuckDB's error,
for a relation's own methods, then says the query was interrupted). Where it lands before
such a block is entered (a callback's very first bytecode), `arrived_since` still tells the
connection that a Ctrl-C came while its statement ran.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from zarrsql.errors import QueryInterrupted, ZarrSQLError

P = ParamSpec("P")
T = TypeVar("T")

_lock = threading.Lock()
_connections: weakref.WeakSet[Any] = weakref.WeakSet()
_installed = False
#: The SIGINTs the watcher has taken from the wakeup fd; with those still unread there
#: (`_unread`), under `_lock`, every Ctrl-C since `_install`, whichever thread is behind.
_sigints = 0
_reader: socket.socket | None = None
#: Bytes looked at in the wakeup fd at once: far more signals than arrive between two reads.
_PEEK_BYTES = 4096


def track(connection: Any) -> None:
    """Interrupt `connection` (anything with `interrupt()`) on Ctrl-C, while it lives."""
    with _lock:
        _connections.add(connection)
    _install()


def _install() -> None:
    """Take the wakeup fd once, from the main thread (the only one allowed to)."""
    global _installed, _reader
    if threading.current_thread() is not threading.main_thread():
        return
    with _lock:
        if _installed or signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
            return  # Ctrl-C ignored, or it ends the process: nothing to interrupt
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        reader.setblocking(False)  # the watcher waits with select, then reads under `_lock`
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            reader.close()
            writer.close()
            return
        _installed = True
        _reader = reader
    threading.Thread(target=_watch, args=(reader, writer, previous), name="zarrsql-interrupts", daemon=True).start()


def _watch(reader: socket.socket, writer: socket.socket, previous: int) -> None:
    global _sigints
    while True:
        select.select([reader], [], [])
        with _lock:  # taken and counted at once, so `mark` never misses a signal in between
            try:
                data = reader.recv(_PEEK_BYTES)
            except BlockingIOError:
                continue
            _sigints += data.count(signal.SIGINT)
        if not data:
            return
        if previous >= 0:
            with contextlib.suppress(OSError):
                os.write(previous, data)
        if signal.SIGINT in data:
            with _lock:
                running = list(_connections)
            for con in running:
                with contextlib.suppress(Exception):  # closed meanwhile
                    con.interrupt()
            from zarrsql.scan.reader import cancel_all  # loaded by then if any scan ever ran

            cancel_all()  # queued decodes stop even if DuckDB keeps the stream open


def mark() -> int:
    """Every Ctrl-C so far (those the watcher took and those still waiting for it): a mark
    to pass to `arrived_since` once a statement has run."""
    with _lock:
        return _sigints + _unread()


def _unread() -> int:
    """The SIGINTs written to the wakeup fd and not yet taken by the watcher (under `_lock`)."""
    if _reader is None:
        return 0
    try:
        return _reader.recv(_PEEK_BYTES, socket.MSG_PEEK).count(signal.SIGINT)
    except (BlockingIOError, OSError):
        return 0


def arrived_since(earlier: int) -> bool:
    """Whether Ctrl-C came since `mark()` returned `earlier`, with Python's own SIGINT handler
    (the one that raises KeyboardInterrupt) in place: the C-level handler writes to the
    wakeup fd before Python raises anything, so a KeyboardInterrupt a callback met (and DuckDB
    reported as its own error) is always seen here."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    return mark() > earlier


@contextlib.contextmanager
def stopped(on_error: Callable[[ZarrSQLError], None] | None) -> Iterator[None]:
    """Ctrl-C met in the block (a zarrsql callback DuckDB runs) raised as `QueryInterrupted`,
    handed to `on_error` first: the connection re-raises it as KeyboardInterrupt, and DuckDB's
    own error, where it reaches the caller, says the query was interrupted (a bare
    KeyboardInterrupt would reach DuckDB as an anonymous Python failure of the callback).
    A `QueryInterrupted` raised in the block (a read it made met Ctrl-C) is handed over too."""
    try:
        yield
    except QueryInterrupted as err:
        if on_error is not None:
            on_error(err)
        raise
    except KeyboardInterrupt:
        from zarrsql.scan.reader import INTERRUPTED  # loaded with the engine's scans

        stop = QueryInterrupted(INTERRUPTED)
        if on_error is not None:
            on_error(stop)
        raise stop from None


def stopping(on_error: Callable[[ZarrSQLError], None]) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """A callback DuckDB runs (a SQL function's Python body) made to run under `stopped`."""

    def decorate(callback: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(callback)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
            with stopped(on_error):
                return callback(*args, **kwargs)

        return guarded

    return decorate
