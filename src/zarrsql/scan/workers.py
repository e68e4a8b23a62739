"""The reader's decoding threads: one set for the process, shared by every scan.

A scan used to start its own threads and let them end with it. Starting a thread costs
about a millisecond on a busy machine (the new thread has to be scheduled before `start`
returns), and a loop of small statements, each reading a unit or two, paid two or three of
them per statement: more than its reading. The threads now outlive the scans: each scan
hands its tasks to them through a `Workers`, its share, which keeps what a scan relies on:

- at most `max_workers` of the scan's tasks run at once, started in the order submitted
  (a remote scan whose threads wait on requests asks for tens, a local one for a core each);
- `shutdown` (the scan closed, or stopped by Ctrl-C) cancels the scan's tasks not started
  and never waits for one running.

The threads are daemon threads, unlike `ThreadPoolExecutor`'s, which the interpreter joins
at exit: a read stuck in the kernel (a hung NFS or FUSE mount) cannot be cancelled, and after
Ctrl-C its thread is abandoned instead of keeping the process from exiting. A stuck thread
is simply never idle again: a task that finds no idle thread starts a new one, so no scan
waits behind another's stuck read. A thread idle for `IDLE_SECONDS` ends, so a burst of a
remote scan's tens of threads does not outlive it for long.

A thread running a task is named `zarrsql_<n>`, an idle one `zarrsql idle <n>`: what
`threading.enumerate()` lists under the first name is work still under way (the interrupt
tests check that a stopped scan leaves none).
"""

from __future__ import annotations

import functools
import itertools
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
#: Seconds a thread waits for a task before it ends: a loop of statements keeps its threads
#: (its statements come milliseconds apart), a remote scan's tens of threads end soon after.
IDLE_SECONDS = 10.0
#: The name of a thread running a scan's task, before its number.
BUSY_PREFIX = "zarrsql_"
_IDLE_PREFIX = "zarrsql idle "


class _Threads:
    """The process' decoding threads: a task queue, and threads started while none is idle.

    `_idle` counts the threads waiting for a task that no task has been promised to: a task
    put in the queue takes one of them, or starts a thread of its own, so every queued task
    has a thread that will take it."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._numbers = itertools.count(1)

    def run(self, task: Callable[[], None]) -> None:
        """Run `task()` on one of the threads (it must not raise: `_run` catches all)."""
        with self._lock:
            self._tasks.put(task)
            if self._idle:
                self._idle -= 1
                return
            number = next(self._numbers)
        threading.Thread(target=self._work, args=(number,), name=f"{BUSY_PREFIX}{number}", daemon=True).start()

    def _work(self, number: int) -> None:
        me = threading.current_thread()
        while True:
            try:
                task = self._tasks.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if not self._idle:  # a task was promised to this thread: it is in the queue
                        continue
                    self._idle -= 1
                    return
            me.name = f"{BUSY_PREFIX}{number}"
            task()
            del task  # a finished task's batches must not wait here for the next task
            me.name = f"{_IDLE_PREFIX}{number}"
            with self._lock:
                self._idle += 1


_threads = _Threads()


def _forget_threads() -> None:
    """A forked child has none of its parent's threads: it starts its own when it scans."""
    global _threads
    _threads = _Threads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)


class Workers:
    """One scan's share of the threads, with the two calls the reader makes of an executor
    (`submit`, `shutdown`): at most `max_workers` of its tasks run at once, in the order
    submitted; `shutdown` cancels those not started and never waits."""

    def __init__(self, max_workers: int) -> None:
        self._most = max_workers
        self._lock = threading.Lock()
        self._waiting: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._sent: set[Future[Any]] = set()  # handed to the threads, not finished
        self._shut = False

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        """`fn(*args)` on a thread; RuntimeError once shut down (the scan was stopped)."""
        future: Future[T] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("the scan's threads were shut down")
            if len(self._sent) >= self._most:
                self._waiting.append((future, fn, args))
                return future
            self._sent.add(future)
        _threads.run(functools.partial(self._execute, [future, fn, args]))
        return future

    def shutdown(self) -> None:
        """Start nothing more: tasks not started are cancelled; a task running finishes
        (or, stuck in a read, is left behind). Never waits."""
        with self._lock:
            self._shut = True
            waiting, self._waiting = self._waiting, deque()
            sent = list(self._sent)
        for future, _, _ in waiting:
            future.cancel()
        for future in sent:
            future.cancel()  # False for a task running: it finishes

    def _execute(self, box: list[Any]) -> None:
        """The task in `box`, then the scan's next waiting ones on the same thread. The box
        is emptied first: the thread's reference to this call must not keep a finished
        task's batches alive while the next one runs."""
        task: tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None = (box[0], box[1], box[2])
        box.clear()
        while task is not None:
            _run(*task)
            with self._lock:
                self._sent.discard(task[0])
                task = None
                if self._waiting and not self._shut:
                    task = self._waiting.popleft()
                    self._sent.add(task[0])


def _run(future: Future[T], fn: Callable[..., T], args: tuple[Any, ...]) -> None:
    """One task, its outcome set on `future` (nothing if it was cancelled)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args)
    except BaseException as err:  # handed to whoever takes the unit, as an executor does
        future.set_exception(err)
    else:
        future.set_result(result)
