"""The chunk writes still under way when a write fails or is interrupted.

On Ctrl-C (or any failure) the main thread leaves zarr's `sync()` at once, while zarr's event
loop goes on writing the chunks it had started. Every write goes through a `fenced` store, so
a cleanup (a staging directory removed, an append rolled back) first calls `InFlight.stop()`:
later writes are refused and those under way are waited for, for a bounded time, so that the
cleanup is not undone behind it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from zarrsql.errors import WriteError

#: Seconds a failed or interrupted write waits for the chunk writes already under way before
#: its cleanup (milliseconds each on local disk, a PUT to an object store seconds): removed
#: while zarr's event loop still writes, a staging directory or a rolled-back chunk comes back.
_STOP_WAIT = 30.0


class InFlight:
    """The writes under way through a `fenced` store. After a failure or Ctrl-C the main
    thread leaves zarr's `sync()` at once while zarr's event loop goes on with the chunk writes
    it had started; `stop()` refuses new ones and waits for those, so that the cleanup that
    follows (a staging directory removed, an append rolled back) is not undone behind it."""

    def __init__(self) -> None:
        self._running = 0
        self._stopped = False
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def running(self, key: str) -> Iterator[None]:
        with self._changed:
            if self._stopped:
                raise WriteError(f"'{key}' was not written: the write had failed or was interrupted")
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def stop(self) -> bool:
        """Refuse every later write; wait (`_STOP_WAIT` at most) until none is under way, and
        say whether that happened."""
        with self._changed:
            self._stopped = True
            return self._changed.wait_for(lambda: self._running == 0, timeout=_STOP_WAIT)


def _fenced_class() -> type:
    """`fenced`'s class, built on first use (zarr is imported lazily)."""
    from zarr.storage import WrapperStore

    class Fenced(WrapperStore):  # type: ignore[type-arg]
        """A store whose every change is counted in an `InFlight` (and refused once stopped)."""

        def __init__(self, store: Any, in_flight: InFlight) -> None:
            super().__init__(store)
            self._in_flight = in_flight

        def _with_store(self, store: Any) -> Any:
            return type(self)(store, self._in_flight)

        async def set(self, key: str, value: Any) -> None:
            with self._in_flight.running(key):
                await self._store.set(key, value)

        async def set_if_not_exists(self, key: str, value: Any) -> None:
            with self._in_flight.running(key):
                await self._store.set_if_not_exists(key, value)

        async def _set_many(self, values: Any) -> None:
            for key, value in values:
                await self.set(key, value)

        async def delete(self, key: str) -> None:
            with self._in_flight.running(key):
                await self._store.delete(key)

        async def delete_dir(self, prefix: str) -> None:
            with self._in_flight.running(prefix):
                await self._store.delete_dir(prefix)

        async def clear(self) -> None:
            with self._in_flight.running(""):
                await self._store.clear()

    return Fenced


def fenced(store: Any, in_flight: InFlight) -> Any:
    return _fenced_class()(store, in_flight)
