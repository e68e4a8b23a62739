"""Ctrl-C stops a running zarrsql query quickly and leaves the connection usable.

A real SIGINT is sent to a subprocess running a query of several seconds; the bound is 2 s
from the signal to the query giving up (a bound, not a benchmark)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from cli_runner import cli_env

CHILD = r"""
import json, sys, threading, time, zarrsql
store, how = sys.argv[1], sys.argv[2]
con = zarrsql.connect()
heavy = f"SELECT count(*) FROM read_zarr('{store}') a, range(3000) r WHERE a.v * 3000 > r.range"
out = {}
try:
    try:
        with zarrsql.trace() as t:
            print("ready", flush=True)
            (con.execute(heavy) if how == "execute" else con.sql(heavy)).fetchall()
        out["finished"] = True
    except BaseException as err:  # KeyboardInterrupt, or DuckDB's error on a relation's fetch
        out["interrupted_at"] = time.time()
        out["error"] = [type(err).__name__, str(err)]
except KeyboardInterrupt:  # the signal's own KeyboardInterrupt may follow the first
    out.setdefault("interrupted_at", time.time())
busy = lambda: [th.name for th in threading.enumerate() if th.name.startswith("zarrsql_")]
try:  # a decoding thread ends once its chunk is done: within 0.5 s, or a few on a loaded machine
    time.sleep(0.5)
    deadline = time.monotonic() + 5
    while busy() and time.monotonic() < deadline:
        time.sleep(0.05)
except KeyboardInterrupt:  # the signal came after the query had finished (reported below)
    pass
out["busy_threads"] = busy()
out["after"] = con.sql(f"SELECT count(*), sum(v) FROM read_zarr('{store}')").fetchall()[0]
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("how", ["execute", "relation"])
def test_sigint_stops_the_query_within_two_seconds(slow_store: Path, how: str) -> None:
    """`execute` (the connection's method) raises KeyboardInterrupt; a relation's `fetchall`
    is DuckDB's own method, which reports the stop as its interrupt error."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(slow_store), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # the query runs for seconds (checked below: it did not finish)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    result = json.loads(out.strip().splitlines()[-1])
    assert "finished" not in result, "the query ended before the signal: make it heavier"
    assert result["interrupted_at"] - sent <= 2.0
    kind, message = result["error"]
    if how == "execute":
        assert kind == "KeyboardInterrupt"
    assert kind == "KeyboardInterrupt" or "nterrupt" in message, result["error"]
    # nothing left decoding, and the connection answers the next query right
    assert result["busy_threads"] == []
    values = xr.open_zarr(slow_store, consolidated=False)["v"].values
    count, total = result["after"]
    assert count == values.size
    np.testing.assert_allclose(total, values.astype("f8").sum(), rtol=1e-6)
