"""Counters of real scan work, and `trace()` to read them over a block of code.

Every scan in the process adds to every active `Trace`, whichever connection or thread runs
it, so a test or a user can check that a filter pruned or a projection skipped a column.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_lock = threading.Lock()
_active: list[Trace] = []
#: (on_start, on_end) pairs told when a scan starts and ends reading: the progress display
#: (`zarrsql.notebook.progress`) groups the scans running together this way.
_watchers: list[tuple[Callable[[int], None], Callable[[], None]]] = []
#: Callbacks told when a connection begins a top-level statement: the progress display gives
#: each statement a display of its own.
_statement_watchers: list[Callable[[], None]] = []


@dataclass
class Trace:
    """What the scans inside a `trace()` block did.

    `work_units_planned` counts work units of the tables scanned before pruning,
    `work_units_read` those actually read; `chunks_decoded` counts chunks decoded (a fill
    chunk that was never written counts too, it is produced from the fill value);
    `bytes_read` and `requests` count storage reads, metadata included; `rows` counts rows
    the scans produced: handed to the engine, or folded into aggregates computed inside the
    scan (`GROUP BY` on coordinates, `docs/design.md`), which `rows_aggregated` counts apart.
    """

    work_units_planned: int = 0
    work_units_read: int = 0
    chunks_decoded: int = 0
    bytes_read: int = 0
    requests: int = 0
    rows: int = 0
    scans: int = 0
    rows_aggregated: int = 0


def count(**amounts: int) -> None:
    """Add `amounts` (field name → number) to every active trace."""
    if not _active:
        return
    with _lock:
        for t in _active:
            for name, value in amounts.items():
                setattr(t, name, getattr(t, name) + value)


def attach(t: Trace) -> None:
    """Start adding every count to `t` (until `detach`)."""
    with _lock:
        _active.append(t)


def detach(t: Trace) -> None:
    with _lock:
        _active.remove(t)


def watch(on_start: Callable[[int], None], on_end: Callable[[], None]) -> None:
    """Call `on_start(units)` when a scan begins reading `units` work units and `on_end` when
    it stops (done, failed or closed early). Both run on the scan's thread: keep them quick."""
    with _lock:
        _watchers.append((on_start, on_end))


def unwatch(on_start: Callable[[int], None], on_end: Callable[[], None]) -> None:
    with _lock:
        _watchers.remove((on_start, on_end))


def watched() -> bool:
    return bool(_watchers)


def watch_statements(on_statement: Callable[[], None]) -> None:
    """Call `on_statement()` when a connection begins a top-level statement (on its thread)."""
    with _lock:
        _statement_watchers.append(on_statement)


def statement_started() -> None:
    for on_statement in tuple(_statement_watchers):
        on_statement()


def scan_started(units: int) -> None:
    for on_start, _ in tuple(_watchers):
        on_start(units)


def scan_ended() -> None:
    for _, on_end in tuple(_watchers):
        on_end()


@contextmanager
def trace() -> Iterator[Trace]:
    """Collect the work of every scan that runs inside the block."""
    t = Trace()
    attach(t)
    try:
        yield t
    finally:
        detach(t)
