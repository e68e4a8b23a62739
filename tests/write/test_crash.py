"""The crash test of issue 12: a process appending in a loop — rows to a table-layout store,
or time steps to a grid along `append_dim` — is killed with SIGKILL again and again; after
each kill the store is a consistent old or new state — whole appends only, every value
agreeing with its position, read by zarrsql and by `xr.open_zarr`. The next writer appends
again (it reclaims the dead writer's lock and rolls back its half-written append).

Most kills come at a counted step of the writer (`crash_writer.count_steps`: every change it
makes to the file system is a step, counted from the start of each append, and it SIGKILLs
itself just before the chosen one), so they land at the same points on a fast machine as on
a loaded one, without waiting:

- in a writer's first append, one kill in each tenth of an append's steps: along the repair
  of what the writer killed before left, and along the append after it;
- in its second append (a clean one: the first committed), one in each eighth: taking the
  lock, the backup and journal, the chunks, the arrays' documents, the clean-up;
- just before and just after the commit point (the replacement of the root document): the
  store must then hold exactly one, then exactly two, more appends — and keep them.

A few more kills come from outside at random moments, as a crash would. The writers start
from a forkserver that has imported the writer module, so each starts in milliseconds; the
kill points and delays are drawn from a seeded generator.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.write import crash_writer
from zarrsql.write import commit, lock

#: Kills at counted steps of a writer's first append, and of its second.
FIRST_APPEND_KILLS, SECOND_APPEND_KILLS = 10, 8
#: Kills from outside after a random delay of up to `MAX_DELAY` seconds.
TIMED_KILLS = 4
MAX_DELAY = 0.4
#: Kills at counted steps that must leave an append under way (its lock or backup behind):
#: nearly all of them do; fewer means the steps counted are not the append's.
MID_APPEND = (FIRST_APPEND_KILLS + SECOND_APPEND_KILLS) // 2
_READER: list[zarrsql.Connection] = []


def _reader() -> zarrsql.Connection:
    """One zarrsql connection for every check: like a long-lived reader, it must see each new
    committed state (its cached metadata revalidated against the consolidated root)."""
    if not _READER:
        _READER.append(zarrsql.connect())
    return _READER[0]


def _check(store: Path) -> int:
    """The rows zarrsql reads, checked column by column against their position; returns n."""
    con = _reader()
    got = con.sql(f"SELECT * FROM read_zarr('{store}')").to_arrow_table()
    n = got.num_rows
    assert n % crash_writer.ROWS_PER_APPEND == 0, f"{n} rows: not whole appends"
    i = np.arange(n)
    np.testing.assert_array_equal(got.column("i").to_numpy(), i)
    np.testing.assert_array_equal(got.column("twice").to_numpy(), 2 * i)
    assert got.column("label").to_pylist() == [f"row {k}" for k in i]
    assert got.column("colour").cast("string").to_pylist() == [crash_writer.COLOURS[k % 3] for k in i]
    assert got.column("pt").to_pylist() == [{"x": float(k), "y": float(-k)} for k in i]
    assert got.column("track").to_pylist() == [[{"x": float(k), "y": k + 0.5}] * 2 for k in i]
    with xr.open_zarr(store) as ds:
        assert ds.sizes["row"] == n
        np.testing.assert_array_equal(ds["i"].values, i)
    return n


def _steps_of_one_append(ctx: Any, store: Path, grid: bool) -> tuple[int, int]:
    """The steps one append takes and the one that commits it, counted in a writer process
    (the test's own `os` is left alone)."""
    steps, committed = ctx.Value("i", 0), ctx.Value("i", 0)
    counter = ctx.Process(target=crash_writer.steps_of_one_append, args=(str(store), grid, steps, committed))
    counter.start()
    counter.join(60)
    assert counter.exitcode == 0, "the counting writer failed"
    assert steps.value > 10, f"{steps.value} steps in an append: the writer's changes are not being counted"
    assert 0 < committed.value < steps.value, (
        f"the root document was replaced at step {committed.value} of {steps.value}"
    )
    return int(steps.value), int(committed.value)


def _spread(rng: np.random.Generator, parts: int, steps: int) -> list[int]:
    """One step in each of `parts` equal parts of steps 1..`steps`."""
    return [1 + int((part + rng.uniform()) * steps / parts) for part in range(parts)]


def _kill_loop(store: Path, target: object, check: object, seed: int, grid: bool, per_append: int) -> list[int]:
    """Start writers and kill them — at counted steps (`crash_writer.KillPoint`s), then
    TIMED_KILLS times from outside — checking the store after each kill. Returns the sizes
    seen (rows or time steps; `per_append` more with each committed append)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.write.crash_writer"])
    rng = np.random.default_rng(seed)
    steps, _ = _steps_of_one_append(ctx, store, grid)
    points: list[crash_writer.KillPoint] = [
        *[(0, k) for k in _spread(rng, FIRST_APPEND_KILLS, steps)],
        *[(1, k) for k in _spread(rng, SECOND_APPEND_KILLS, steps)],
        (1, crash_writer.COMMIT),
        (1, crash_writer.AFTER_COMMIT),
    ]
    kills: list[crash_writer.KillPoint | None] = [points[i] for i in rng.permutation(len(points))]
    kills += [None] * TIMED_KILLS
    counts, mid_append = [check(store)], 0  # type: ignore[operator]
    for kill_at in kills:
        started = ctx.Event()
        writer = ctx.Process(target=target, args=(str(store), started, kill_at))
        writer.start()
        assert started.wait(60), "the writer did not start"
        if kill_at is None:
            time.sleep(float(rng.uniform(0.0, MAX_DELAY)))
            os.kill(writer.pid, signal.SIGKILL)  # type: ignore[arg-type]
        writer.join(60)
        if writer.exitcode is None:
            os.kill(writer.pid, signal.SIGKILL)  # type: ignore[arg-type]
            writer.join(10)
            pytest.fail(f"the writer to be killed at {kill_at} was still running after 60 s")
        assert writer.exitcode == -signal.SIGKILL, f"the writer to be killed at {kill_at} ended {writer.exitcode}"
        if kill_at is not None:
            mid_append += (store / lock.LOCK_NAME).exists() or (store / commit.BACKUP_NAME).exists()
        counts.append(check(store))  # type: ignore[operator]
        if kill_at is not None and kill_at[1] in (crash_writer.COMMIT, crash_writer.AFTER_COMMIT):
            # the first append committed; the second did only if its root document was replaced
            appends = 1 if kill_at[1] == crash_writer.COMMIT else 2
            assert counts[-1] == counts[-2] + appends * per_append, f"killed at {kill_at}: {counts[-2:]}"
    assert counts == sorted(counts), "a committed append went missing"
    assert counts[-1] > counts[0], "no append ever committed"
    assert mid_append >= MID_APPEND, f"only {mid_append} kills at counted steps landed inside an append"
    return counts


@pytest.mark.timeout(600)
def test_sigkill_during_table_appends_leaves_old_or_new(tmp_path: Path) -> None:
    store = tmp_path / "crash.zarr"
    crash_writer.create(str(store))
    _kill_loop(
        store, crash_writer.append_forever, _check, 20261201, grid=False, per_append=crash_writer.ROWS_PER_APPEND
    )
    # the store is still writable: the next append reclaims the lock and commits
    n = crash_writer.committed_rows(str(store))
    from zarrsql.write.table import write_table

    write_table(crash_writer.rows(n, n + 7).to_reader(), str(store), mode="a")
    assert _check(store) == n + 7


def _check_grid(store: Path) -> int:
    """The grid's time steps, checked by xarray and zarrsql against v = 10 * time + x."""
    with xr.open_zarr(store) as ds:
        steps = ds.sizes["time"]
        assert steps % crash_writer.GRID_STEPS == 0, f"{steps} steps: not whole appends"
        np.testing.assert_array_equal(ds["time"].values, np.arange(steps))
        want = 10 * np.arange(steps)[:, None] + np.arange(crash_writer.GRID_X)[None, :]
        np.testing.assert_array_equal(ds["v"].transpose("time", "x").values, want)
    con = _reader()
    rows = con.sql(f"SELECT count(*), count(*) FILTER (v = 10 * time + x) FROM read_zarr('{store}')").fetchall()
    assert rows == [(steps * crash_writer.GRID_X, steps * crash_writer.GRID_X)]
    return steps


@pytest.mark.timeout(600)
def test_sigkill_during_grid_appends_leaves_old_or_new(tmp_path: Path) -> None:
    store = tmp_path / "grid.zarr"
    crash_writer.create_grid(str(store))
    _kill_loop(
        store, crash_writer.append_grid_forever, _check_grid, 20261202, grid=True, per_append=crash_writer.GRID_STEPS
    )
