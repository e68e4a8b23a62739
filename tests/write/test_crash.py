"""The crash test of issue 12: a process appending to a table-layout store in a loop is
killed with SIGKILL at random moments (50 times); after each kill the store is a consistent
old or new state — zarrsql reads whole appends only, every column of every row agreeing with
the row's position — and `xr.open_zarr` opens it. Then the next writer appends again (it
reclaims the dead writer's lock and rolls back its half-written append).

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


def _check(store: Path) -> int:
    """The rows zarrsql reads, checked column by column against their position; returns n."""
    con = zarrsql.connect()
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


@pytest.mark.timeout(600)
def test_sigkill_during_table_appends_leaves_old_or_new(tmp_path: Path) -> None:
    store = tmp_path / "crash.zarr"
    crash_writer.create(str(store))
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.write.crash_writer"])
    rng = np.random.default_rng(20261201)
    counts, mid_append = [_check(store)], 0
    for _ in range(TRIALS):
        started = ctx.Event()
        writer = ctx.Process(target=crash_writer.append_forever, args=(str(store), started))
        writer.start()
        assert started.wait(60), "the writer did not start"
        time.sleep(float(rng.uniform(0.0, 0.4)))
        os.kill(writer.pid, signal.SIGKILL)  # type: ignore[arg-type]
        writer.join(10)
        assert writer.exitcode == -signal.SIGKILL
        mid_append += (store / lock.LOCK_NAME).exists() or (store / commit.BACKUP_NAME).exists()
        counts.append(_check(store))
    assert counts == sorted(counts), "a committed append went missing"
    assert counts[-1] > counts[0], "no append ever committed"
    assert mid_append >= TRIALS // 4, f"only {mid_append} kills landed inside an append"
    # the store is still writable: the next append reclaims the lock and commits
    n = crash_writer.committed_rows(str(store))
    from zarrsql.write.table import write_table

    write_table(crash_writer.rows(n, n + 7).to_reader(), str(store), mode="a")
    assert _check(store) == n + 7
