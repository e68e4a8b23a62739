"""The crash test of issue 12: a process appending in a loop — rows to a table-layout store,
or time steps to a grid along `append_dim` — is killed with SIGKILL at random moments (at least 50
times each); after each kill the store is a consistent old or new state — whole appends
only, every value agreeing with its position, read by zarrsql and by `xr.open_zarr`. The
next writer appends again (it reclaims the dead writer's lock and rolls back its
half-written append).

The writers start from a forkserver that has imported the writer module, so each starts in
milliseconds; the kill delays are drawn from a seeded generator.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.write import crash_writer
from zarrsql.write import commit, lock

TRIALS = 50
#: Kills that must land inside an append (lock or backup left behind) for a run to count;
#: on a loaded machine appends run slower or the writer starts later, so kills go on, up to
#: `MAX_TRIALS`, until that many did: a test whose kills all missed the appends proves nothing.
MID_APPEND = TRIALS // 4
MAX_TRIALS = 3 * TRIALS
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


def _kill_loop(store: Path, target: object, check: object, seed: int) -> list[int]:
    """Start a writer, kill it after a random delay, check the store; TRIALS times, and more
    (up to MAX_TRIALS) until MID_APPEND kills landed inside appends. Returns the sizes seen."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.write.crash_writer"])
    rng = np.random.default_rng(seed)
    counts, mid_append = [check(store)], 0  # type: ignore[operator]
    trials = 0
    while trials < TRIALS or (mid_append < MID_APPEND and trials < MAX_TRIALS):
        trials += 1
        started = ctx.Event()
        writer = ctx.Process(target=target, args=(str(store), started))
        writer.start()
        assert started.wait(60), "the writer did not start"
        time.sleep(float(rng.uniform(0.0, 0.4)))
        os.kill(writer.pid, signal.SIGKILL)  # type: ignore[arg-type]
        writer.join(10)
        assert writer.exitcode == -signal.SIGKILL
        mid_append += (store / lock.LOCK_NAME).exists() or (store / commit.BACKUP_NAME).exists()
        counts.append(check(store))  # type: ignore[operator]
    assert counts == sorted(counts), "a committed append went missing"
    assert counts[-1] > counts[0], "no append ever committed"
    assert mid_append >= MID_APPEND, f"only {mid_append} of {trials} kills landed inside an append"
    return counts


@pytest.mark.timeout(600)
def test_sigkill_during_table_appends_leaves_old_or_new(tmp_path: Path) -> None:
    store = tmp_path / "crash.zarr"
    crash_writer.create(str(store))
    _kill_loop(store, crash_writer.append_forever, _check, 20261201)
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
    _kill_loop(store, crash_writer.append_grid_forever, _check_grid, 20261202)
