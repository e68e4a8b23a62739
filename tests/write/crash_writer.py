"""The writer process of the crash test: appends rows to a table-layout store (or time steps
to a grid) in a loop until it is killed. Every row is a function of its position `i`, so a
reader can check any state.

A writer is killed from outside at a random moment, or kills itself with SIGKILL at a
counted step: every change it makes to the file system (a file opened for writing, a write
to it, a rename, link, unlink, mkdir or rmdir) is a step, counted from the start of each
append, and the kill comes just before that change. Steps are counted, not timed, so the
kills land at the same points of an append on a fast machine and on a loaded one.

Imported by the forkserver before the test starts writers, so a writer starts in
milliseconds and the kills land in appends, not in imports."""

from __future__ import annotations

import builtins
import io
import os
import signal
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import zarr

from zarrsql.write.table import write_table

#: Where a writer kills itself: (append, step) — just before the `step`-th change counted from
#: the start of its append number `append` (0: its first, which begins by repairing what the
#: writer killed before left; a step past that append's end lands in the next one), or at the
#: commit point of that append: just before (`COMMIT`) or just after (`AFTER_COMMIT`) the
#: change that replaces the store's root document.
KillPoint = tuple[int, int | str]
COMMIT, AFTER_COMMIT = "commit", "after commit"

ROWS_PER_APPEND = 7
CHUNK = 4  # appends cross chunk boundaries, so partial chunks are rewritten
COLOURS = ["red", "green", "blue"]


def rows(lo: int, hi: int) -> pa.Table:
    """Rows lo..hi-1: i, 2i, a label, a categorical colour, a point and a linestring."""
    i = np.arange(lo, hi, dtype=np.int64)
    point = pa.StructArray.from_arrays([pa.array(i, pa.float64()), pa.array(-i, pa.float64())], ["x", "y"])
    vertices = np.repeat(i, 2)
    flat = pa.StructArray.from_arrays([pa.array(vertices, pa.float64()), pa.array(vertices + 0.5)], ["x", "y"])
    track = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * len(i) + 1, 2), pa.int32()), flat)
    colour = pa.DictionaryArray.from_arrays(pa.array(i % 3, pa.int8()), pa.array(COLOURS))
    labels = pa.array([f"row {k}" for k in i])
    return pa.table({"i": i, "twice": 2 * i, "label": labels, "colour": colour, "pt": point, "track": track})


def committed_rows(store: str) -> int:
    return int(zarr.open_group(store, mode="r", use_consolidated=True)["i"].shape[0])


def create(store: str) -> None:
    write_table(rows(0, ROWS_PER_APPEND).to_reader(), store, chunks=CHUNK)


def append_once(store: str) -> None:
    n = committed_rows(store)
    write_table(rows(n, n + ROWS_PER_APPEND).to_reader(max_chunksize=3), store, mode="a")


def append_forever(store: str, started: Any, kill_at: KillPoint | None = None) -> None:
    """Append ROWS_PER_APPEND rows at a time, for ever (killed by the test, or by itself at
    `kill_at`)."""
    started.set()
    steps = count_steps(store, kill_at) if kill_at is not None else None
    while True:
        if steps is not None:
            steps.next_append()
        append_once(store)


# ----------------------------------------------------------------------------- grid appends
GRID_STEPS = 2  # time steps per grid append
GRID_X = 3
GRID_CHUNKS = {"time": 3, "x": 2}  # steps of 2 in chunks of 3: the chunk across the end is rewritten


def grid_sql(lo: int, hi: int) -> str:
    """Time steps lo..hi-1 of the grid: v = 10 * time + x."""
    return (
        f"SELECT t AS time, x, (10 * t + x)::DOUBLE AS v FROM range({lo}, {hi}) a(t), range({GRID_X}) b(x) "
        "ORDER BY time, x"
    )


def grid_steps(store: str) -> int:
    return int(zarr.open_group(store, mode="r", use_consolidated=True)["time"].shape[0])


def create_grid(store: str) -> None:
    import zarrsql

    con = zarrsql.connect()
    zarrsql.to_zarr(con.sql(grid_sql(0, GRID_STEPS)), store, dims=["time", "x"], chunks=GRID_CHUNKS, connection=con)


def append_grid_once(store: str, con: Any) -> None:
    import zarrsql

    n = grid_steps(store)
    zarrsql.to_zarr(con.sql(grid_sql(n, n + GRID_STEPS)), store, dims=["time", "x"], mode="a",
                    append_dim="time", connection=con)  # fmt: skip


def append_grid_forever(store: str, started: Any, kill_at: KillPoint | None = None) -> None:
    """Append GRID_STEPS time steps at a time along `time`, for ever (killed by the test, or
    by itself at `kill_at`)."""
    import zarrsql

    con = zarrsql.connect()
    started.set()
    steps = count_steps(store, kill_at) if kill_at is not None else None
    while True:
        if steps is not None:
            steps.next_append()
        append_grid_once(store, con)


# ------------------------------------------------------------------ steps, and kills at a step
#: The functions of `os` that change the file system; `io.open` for writing is wrapped too.
_CHANGES = ("replace", "rename", "link", "unlink", "remove", "mkdir", "rmdir")


class Steps:
    """This writer's changes to the file system, counted from the start of each append; at
    its `kill_at` point the process sends itself SIGKILL before making that change."""

    def __init__(self, store: str, kill_at: KillPoint | None) -> None:
        self.kill_at = kill_at
        self.root_document = os.path.join(os.path.realpath(store), "zarr.json")
        self.append = -1
        self.count = 0  # steps of the current append
        self.committed_at = 0  # its step that replaced the root document (0: not yet)
        self.since = 0  # steps since the start of the append `kill_at` names
        self._lock = threading.Lock()  # zarr writes chunks from several threads

    def next_append(self) -> None:
        with self._lock:
            self.append += 1
            self.count = self.committed_at = 0

    def step(self, change: str, path: Any) -> None:
        with self._lock:
            self.count += 1
            commit = change == "replace" and not self.committed_at and os.path.realpath(path) == self.root_document
            if self.kill_at is not None and self.append >= self.kill_at[0]:
                self.since += 1
                point, here = self.kill_at[1], self.append == self.kill_at[0]
                if (
                    point == self.since
                    or (point == COMMIT and here and commit)
                    or (point == AFTER_COMMIT and here and self.committed_at and self.count == self.committed_at + 1)
                ):
                    os.kill(os.getpid(), signal.SIGKILL)
            if commit:
                self.committed_at = self.count


class _WrittenFile:
    """A file opened for writing whose every `write` is a step (so a kill can leave a file
    created but empty, or with only its first lines, as a kill between two writes would)."""

    def __init__(self, file: Any, path: Any, steps: Steps) -> None:
        self._file = file
        self._path = path
        self._steps = steps

    def write(self, data: Any) -> Any:
        self._steps.step("write", self._path)
        return self._file.write(data)

    def __enter__(self) -> _WrittenFile:
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._file.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def count_steps(store: str, kill_at: KillPoint | None) -> Steps:
    """Count this process's steps from now on (in a writer process only: `os` and `open` are
    wrapped for good)."""
    steps = Steps(store, kill_at)

    def counted(change: str, run: Any) -> Any:
        def changed(*args: Any, **kwargs: Any) -> Any:
            # the path changed: the destination of replace, rename and link, else the argument
            paths = [*args, *kwargs.values()]
            steps.step(change, paths[1] if change in ("replace", "rename", "link") else paths[0])
            return run(*args, **kwargs)

        return changed

    for name in _CHANGES:
        setattr(os, name, counted(name, getattr(os, name)))
    plain_open = io.open

    def open_counted(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not set(mode) & set("wax+"):
            return plain_open(file, mode, *args, **kwargs)
        steps.step("open", file)
        return _WrittenFile(plain_open(file, mode, *args, **kwargs), file, steps)

    io.open = builtins.open = open_counted
    return steps


def steps_of_one_append(store: str, grid: bool, out: Any, commit: Any) -> None:
    """Append once, counting the steps, into `out.value`, and the step that commits into
    `commit.value` (a writer process that is not killed: the test spreads its kills over the
    steps of an append)."""
    import zarrsql

    con = zarrsql.connect() if grid else None
    steps = count_steps(store, None)
    steps.next_append()
    if grid:
        append_grid_once(store, con)
    else:
        append_once(store)
    out.value, commit.value = steps.count, steps.committed_at


def _warm_up() -> None:
    """Write and append once in a scratch directory, table and grid, so that every module the
    writers load lazily is loaded in the forkserver already (a fresh writer then appends at
    once, instead of spending its first half second importing zarrsql's engine)."""
    import tempfile

    import zarrsql

    with tempfile.TemporaryDirectory() as scratch:
        store = f"{scratch}/warm.zarr"
        create(store)
        write_table(rows(ROWS_PER_APPEND, 2 * ROWS_PER_APPEND).to_reader(), store, mode="a")
        grid = f"{scratch}/grid.zarr"
        with zarrsql.connect() as con:  # closed before any fork: no DuckDB thread is left
            first = con.sql(grid_sql(0, GRID_STEPS))
            zarrsql.to_zarr(first, grid, dims=["time", "x"], chunks=GRID_CHUNKS, connection=con)
            append_grid_once(grid, con)
        import dask.array  # noqa: F401 - xarray's chunk managers load it on first open
        import xarray as xr

        import zarrsql.write.api
        import zarrsql.write.grid_append  # noqa: F401

        xr.open_zarr(store).close()  # loads xarray's backends and chunk managers once


_warm_up()
