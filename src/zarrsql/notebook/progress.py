"""Progress of the running scans, from zarrsql's own counters (work units and bytes).

DuckDB's progress bar stays at 0 for Python Arrow scans, so zarrsql keeps its own: the reader
tells `counters` when a scan starts (with the units it will read) and ends, and counts units
and bytes as they are read. A `Monitor` watches that. The scans of one statement share one
display: scans that overlap, or follow each other within `GRACE` seconds (the two sides of a
join), until a connection begins its next statement (`counters.statement_started`) or the
notebook its next cell; a display appears only once the work has lasted `DELAY` seconds and
is refreshed every `TICK` seconds by one thread, so the scan itself does no more than add to
counters. The option is read as each scan starts: a scan started with it off shows nothing,
and joins no display already open.

Where it shows: a `tqdm.auto` bar in Jupyter (a widget when ipywidgets is installed), a
one-line bar on standard error in a terminal; nothing when standard error is piped, under CI
(`CI` set), or with `zarrsql.set_option("progress", False)` / `ZARRSQL_PROGRESS=0`.

How it ends: the scans only say that they stopped, not why, and a `LIMIT` stops them early
as surely as an interrupt does. So a display closes as complete (all it read of all it read)
unless the notebook cell that ran the scans raised (an error, or the interrupt button): then
the cell's last display, and any still open, keep the units planned as their total and show
as failed, the widget red, as tqdm shows a loop that raised. The cell's outcome comes from
IPython's `post_run_cell` event, which may arrive before or after the display closes (a
statement may fail after its scans ended); either order ends failed.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from zarrsql import counters, settings

#: Seconds of work before a display appears: quick queries show nothing.
DELAY = 1.0
#: Seconds between refreshes (a few a second: the bar costs nothing measurable).
TICK = 0.25
#: Idle seconds after the last scan ends before the display closes.
GRACE = 0.3


def display_kind() -> str | None:
    """ "notebook" in a Jupyter kernel, "terminal" when standard error is a terminal outside
    CI, else None (piped, redirected, CI)."""
    if os.environ.get("CI"):
        return None
    shell = _ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        return "notebook"
    try:
        return "terminal" if sys.stderr is not None and sys.stderr.isatty() else None
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return None


def _ipython() -> Any:
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class Bar:
    """A tqdm bar over work units, with bytes read (and the estimate of bytes planned)."""

    def __init__(self, kind: str, started: float, done: int, planned: int) -> None:
        self.kind = kind
        if kind == "notebook":
            from tqdm.auto import tqdm  # type: ignore[import-untyped]
        else:
            from tqdm.std import tqdm  # type: ignore[import-untyped]
        self.bar = tqdm(
            total=max(planned, done),
            initial=done,
            unit=" units",
            desc="zarrsql",
            file=sys.stderr,
            leave=kind == "notebook",  # a finished widget says what ran; a terminal line is cleared
            ncols=None if kind == "notebook" else shutil.get_terminal_size((80, 24)).columns,
            nrows=None if kind == "notebook" else max(2, shutil.get_terminal_size((80, 24)).lines),
            mininterval=TICK,
        )
        self.bar.start_t = started  # elapsed time and rate include the first, silent second

    def show(self, done: int, planned: int, nbytes: int) -> None:
        self._total(max(planned, done))
        self.bar.n = done
        estimate = f" of ~{_size(nbytes * planned / done)}" if 0 < done < planned else ""
        self.bar.set_postfix_str(f"{_size(nbytes)}{estimate}", refresh=False)
        self.bar.refresh()

    def close(self, done: int, planned: int, *, complete: bool) -> None:
        """End the display: `complete`, all that was read of all that was read (a LIMIT
        stops the scans early, and `planned` may be an estimate); else as `fail` shows it."""
        self._total(done if complete else max(planned, done))
        self.bar.n = done
        self.bar.refresh()
        self.bar.close()
        if not complete:
            self.fail(planned)

    def fail(self, planned: int) -> None:
        """Show the closed display as failed: the units planned as its total, and the
        widget red. A terminal's line is cleared when it closes, so there is nothing to show."""
        if self.kind != "notebook" or not hasattr(self.bar, "container"):  # not a widget
            return
        self._total(max(planned, self.bar.n))
        self.bar.disp(bar_style="danger", check_delay=False)

    def _total(self, total: int) -> None:
        """Set the total of the text and of the widget's bar, which tqdm sets only once."""
        self.bar.total = total
        container = getattr(self.bar, "container", None)
        if container is not None:
            container.children[1].max = total


@dataclass
class _Session:
    """The scans of one display: what they planned, what they read, since when."""

    started: float
    planned: int = 0
    idle_since: float | None = None
    trace: counters.Trace = field(default_factory=counters.Trace)
    bar: Any = None
    #: No scan joins it any more: a new statement or cell began, or a scan started with the
    #: option off. Once its scans have ended it stops counting and its display closes.
    sealed: bool = False
    #: Its trace is attached to the counters (it counts the reads of the scans running).
    counting: bool = True
    #: The notebook cell that ran the scans raised (see the module docstring).
    failed: bool = False
    #: The display has closed (shown as complete unless `failed` was set before).
    closed: bool = False


class Monitor:
    """Groups running scans into sessions, one per statement, with one display each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        #: The session a scan that starts now joins: that of the statement running.
        self._session: _Session | None = None
        #: The sessions whose display thread still runs: the current one, and sealed ones
        #: whose scans have not all ended or whose display has not closed yet.
        self._live: list[_Session] = []
        #: Every display opened, for tests and benchmarks (bounded: the last few).
        self.shown: list[Any] = []
        #: The sessions started during the notebook cell running now.
        self._cell: list[_Session] = []

    def started(self, units: int) -> None:
        with self._lock:
            self._active += 1
            if not settings.get_option("progress"):  # read at every scan: set_option counts at once
                self._seal()
                return
            session = self._session
            if session is not None:
                session.idle_since = None
                session.planned += units
                return
            kind = display_kind()
            if kind is None:
                return
            session = self._session = _Session(time.monotonic(), planned=units)
            self._live.append(session)
            self._cell.append(session)
            counters.attach(session.trace)
        if kind == "notebook":
            _watch_cells()
        threading.Thread(target=self._run, args=(session, kind), name="zarrsql-progress", daemon=True).start()

    def ended(self) -> None:
        with self._lock:
            self._active = max(0, self._active - 1)
            if self._active:
                return
            now = time.monotonic()
            for session in self._live:
                if session.idle_since is None:
                    session.idle_since = now
                if session.sealed:  # its statement is over: the next one's reads are not its
                    self._stop_counting(session)

    def statement_started(self) -> None:
        """A connection begins a top-level statement: its scans get a display of their own."""
        with self._lock:
            self._seal()

    def cell_started(self, info: object = None) -> None:
        """IPython's `pre_run_cell`: the sessions that start now are this cell's."""
        with self._lock:
            self._seal()
            self._cell = []

    def _seal(self) -> None:
        """(Under the lock.) No scan that starts from now on joins the current session; if its
        scans have all ended, it stops counting at once (its display closes at the next tick)."""
        session, self._session = self._session, None
        if session is None:
            return
        session.sealed = True
        if session.idle_since is not None:
            self._stop_counting(session)

    @staticmethod
    def _stop_counting(session: _Session) -> None:
        """(Under the lock.) Detach the session's trace from the counters, once."""
        if session.counting:
            session.counting = False
            counters.detach(session.trace)

    def cell_ended(self, result: object = None) -> None:
        """IPython's `post_run_cell`: when the cell raised, the displays of the statement
        that raised end failed: the cell's last, and any still open."""
        if getattr(result, "success", True):
            return
        with self._lock:
            sessions, self._cell = self._cell, []
            failed = [s for s in sessions[:-1] if not s.closed] + sessions[-1:]
            for session in failed:
                session.failed = True
            closed = [s for s in failed if s.closed]
        for session in closed:  # closed as complete before the cell's outcome was known
            session.bar.fail(session.planned)

    def _close(self, session: _Session, done: int, planned: int) -> None:
        """Close the display, complete unless its cell failed; a failure that arrives while
        it closes is shown here, one that arrives after by `cell_ended`."""
        with self._lock:
            failed = session.failed
        session.bar.close(done, planned, complete=not failed)
        with self._lock:
            session.closed = True
            late = session.failed and not failed
        if late:
            session.bar.fail(planned)

    def _run(self, session: _Session, kind: str) -> None:
        """The display's thread: wait `DELAY`, then refresh until the scans have ended."""
        while True:
            time.sleep(TICK)
            with self._lock:
                now = time.monotonic()
                idle = session.idle_since
                over = idle is not None and (session.sealed or now - idle >= GRACE)
                if over:
                    if self._session is session:
                        self._session = None
                    self._live.remove(session)
                    self._stop_counting(session)
                done, planned, nbytes = session.trace.work_units_read, session.planned, session.trace.bytes_read
            if session.bar is None and not over and time.monotonic() - session.started >= DELAY:
                session.bar = self._open(kind, session.started, done, planned)
            if session.bar is not None:
                if over:
                    self._close(session, done, planned)
                    return
                session.bar.show(done, planned, nbytes)
            elif over:
                return

    def _open(self, kind: str, started: float, done: int, planned: int) -> Any:
        try:
            bar = Bar(kind, started - time.monotonic() + time.time(), done, planned)
        except Exception:  # no tqdm, or a display that cannot open: progress is optional
            return None
        self.shown = [*self.shown[-7:], bar]
        return bar


MONITOR = Monitor()
_installed = False
#: The IPython shell whose cells `MONITOR` follows (`_watch_cells`).
_cells_of: Any = None


def _watch_cells() -> None:
    """Follow the cells of the notebook's shell, once: a cell that raises ends its displays
    failed (see the module docstring)."""
    global _cells_of
    shell = _ipython()
    with MONITOR._lock:
        if shell is None or shell is _cells_of:
            return
        _cells_of = shell
    shell.events.register("pre_run_cell", MONITOR.cell_started)
    shell.events.register("post_run_cell", MONITOR.cell_ended)


def install() -> None:
    """Watch every scan of the process (once; cheap: nothing shows until a scan is slow)."""
    global _installed
    with MONITOR._lock:
        if _installed:
            return
        _installed = True
    counters.watch(MONITOR.started, MONITOR.ended)
    counters.watch_statements(MONITOR.statement_started)
