"""Ctrl-C while DuckDB computes: interrupt the running queries at once, from a thread.

Python runs its SIGINT handler (raising KeyboardInterrupt) only in the main thread, between
bytecodes; while the main thread is inside DuckDB it may not get there for seconds (DuckDB
looks for signals between its tasks). The C-level handler does write the signal's number to
the wakeup fd (`signal.set_wakeup_fd`) at once, so a watcher thread reading that fd interrupts
every zarrsql connection (`interrupt()` on an idle connection does nothing), the query ends
within moments, and the KeyboardInterrupt then surfaces in the caller as usual. Bytes are
passed on to a wakeup fd that was set before (asyncio's), so its signal handling still works.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import weakref
from typing import Any

_lock = threading.Lock()
_connections: weakref.WeakSet[Any] = weakref.WeakSet()
_installed = False


def track(connection: Any) -> None:
    """Interrupt `connection` (anything with `interrupt()`) on Ctrl-C, while it lives."""
    with _lock:
        _connections.add(connection)
    _install()


def _install() -> None:
    """Take the wakeup fd once, from the main thread (the only one allowed to)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return
    with _lock:
        if _installed or signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
            return  # Ctrl-C ignored, or it ends the process: nothing to interrupt
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            reader.close()
            writer.close()
            return
        _installed = True
    threading.Thread(target=_watch, args=(reader, writer, previous), name="zarrsql-interrupts", daemon=True).start()


def _watch(reader: socket.socket, writer: socket.socket, previous: int) -> None:
    while True:
        data = reader.recv(64)
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
