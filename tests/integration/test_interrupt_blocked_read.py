"""Ctrl-C stops a query whose chunk read never returns, and the interpreter still exits.

A FIFO stands in for a chunk file on a hung network mount (NFS, FUSE): reading it blocks in
the kernel until a writer writes, and none ever does. A real SIGINT is sent to a subprocess
once its read has started; the query must stop at once (docs/notebooks.md: KeyboardInterrupt
from the connection's methods; from a relation's, which are DuckDB's, KeyboardInterrupt or
DuckDB's interrupt error), the connection must answer the next query right, and the process
must end by itself (its stuck reading thread abandoned, never joined at exit).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from cli_runner import cli_env

#: Seconds from the signal to the child's exit: stopping takes a fraction of a second, the
#: next query and the exit a few more (a bound, not a benchmark).
EXIT_BOUND = 10.0
#: Seconds from the signal to the KeyboardInterrupt (docs: "within moments").
RAISE_BOUND = 2.0

CHILD = r"""
import json, sys, time, zarrsql
blocked, healthy, how, query = sys.argv[1:5]
con = zarrsql.connect()
Q = query.format(store=blocked)
out = {}
print("ready", flush=True)
try:
    if how == "sql.df":
        con.sql(Q).df()
    elif how == "sql.fetchall":
        con.sql(Q).fetchall()
    else:
        con.execute(Q).fetchall()
    out["finished"] = True
except BaseException as err:
    out["raised"] = [type(err).__name__, str(err)]
    out["raised_at"] = time.time()
out["after"] = con.sql(f"SELECT count(*), sum(air) FROM read_zarr('{healthy}')").fetchall()[0]
print(json.dumps(out), flush=True)
# no os._exit: the interpreter's normal exit must not wait for the read that never returns
"""


def _store(path: Path) -> Path:
    xr.Dataset({"air": (("t",), np.arange(40.0))}).to_zarr(
        path, zarr_format=3, consolidated=False, encoding={"air": {"chunks": (10,)}}
    )
    return path


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path]:
    """A store whose second chunk of `air` is a FIFO nobody writes, and a healthy one."""
    blocked = _store(tmp_path / "blocked.zarr")
    chunk = blocked / "air" / "c" / "1"
    assert chunk.is_file()  # the chunk file the FIFO replaces (Zarr v3's default key)
    chunk.unlink()
    os.mkfifo(chunk)
    return blocked, _store(tmp_path / "healthy.zarr")


def _writer_once_read(fifo: Path, proc: subprocess.Popen[str], within: float) -> int:
    """The FIFO's write end, opened once the child has opened it to read (before that a
    non-blocking open fails with ENXIO). Kept open and silent, the child's read blocks."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
        time.sleep(0.02)
    raise AssertionError(f"the child never opened the FIFO chunk to read (exit status {proc.poll()})")


@pytest.mark.parametrize(
    "query",
    [
        "SELECT sum(air) FROM read_zarr('{store}')",  # an aggregate computed inside the scan
        "SELECT * FROM read_zarr('{store}')",  # batches streamed to DuckDB
    ],
    ids=["aggregate", "rows"],
)
@pytest.mark.parametrize("how", ["sql.df", "sql.fetchall", "execute.fetchall"])
def test_sigint_stops_a_query_whose_read_never_returns(stores: tuple[Path, Path], how: str, query: str) -> None:
    blocked, healthy = stores
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(blocked), str(healthy), how, query],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    writer = -1
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        writer = _writer_once_read(blocked / "air" / "c" / "1", proc, within=60)
        time.sleep(0.3)  # the child is inside its read now, which never returns
        sent = time.time()
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=EXIT_BOUND)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"still running {EXIT_BOUND} s after SIGINT; printed {out!r}, stderr {err[-2000:]!r}")
    finally:
        if writer >= 0:
            os.close(writer)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert "finished" not in result, result
    kind, message = result["raised"]
    if how == "execute.fetchall":
        assert kind == "KeyboardInterrupt", result
    assert kind == "KeyboardInterrupt" or "nterrupt" in message, result
    assert result["raised_at"] - sent <= RAISE_BOUND
    # the connection still reads: the healthy store's count and sum, from xarray
    values = xr.open_zarr(healthy, consolidated=False)["air"].values
    count, total = result["after"]
    assert count == values.size
    np.testing.assert_allclose(total, values.sum())
