"""Ctrl-C that lands inside a zarrsql callback DuckDB runs still surfaces as KeyboardInterrupt.

A second query on the same HTTP store checks the store's metadata again (a request for
`zarr.json`) from inside DuckDB, in the scan function's Python callback. A local server holds
that request while a real SIGINT is sent to the subprocess running the query, so the signal's
KeyboardInterrupt is raised inside the callback. The connection's own methods (`execute`,
`sql`) must raise KeyboardInterrupt (docs/notebooks.md), not DuckDB's "Python exception
occurred while executing the UDF"; a relation fetched with DuckDB's own method keeps DuckDB's
error, whose message must say the query was interrupted. The connection answers the next
query right (xarray's sum and count).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from cli_runner import cli_env
from tests.remote import httpserver

CHILD = r"""
import json, sys, time, duckdb, zarrsql
url, how = sys.argv[1], sys.argv[2]
query = f"SELECT count(*), sum(v) FROM read_zarr('{url}')"
con = zarrsql.connect()
con.execute(query).fetchall()  # the store's metadata is read and kept
relation = con.sql(query) if how == "relation" else None
if relation is not None:
    con.execute("SELECT 1").fetchall()  # a later statement: the relation checks the store at its fetch
print("armed", flush=True)
sys.stdin.readline()
out = {}
try:
    try:
        if how == "execute":
            con.execute(query).fetchall()
        elif how == "sql":
            con.sql(query).fetchall()
        else:
            relation.fetchall()
        out["finished"] = True
    except BaseException as err:
        out["error"] = [type(err).__name__, isinstance(err, duckdb.Error), str(err)]
except KeyboardInterrupt:  # a second KeyboardInterrupt while reporting the first
    out.setdefault("error", ["late KeyboardInterrupt", False, ""])
try:
    time.sleep(0.5)  # the interrupt watcher is done with this signal before the next query
except KeyboardInterrupt:
    pass
out["after"] = list(con.execute(query).fetchall()[0])
print(json.dumps(out), flush=True)
"""

#: Seconds the server holds the request for `zarr.json` after the signal was sent: far longer
#: than the signal takes to reach the child, so the child is still waiting inside the callback.
HOLD = 1.0
ATTEMPTS = 3


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    root = tmp_path_factory.mktemp("interrupt_in_callbacks")
    store = root / "s.zarr"
    values = np.arange(24.0).reshape(4, 6)
    ds = xr.Dataset({"v": (("t", "x"), values)}, coords={"t": np.arange(4), "x": np.arange(6)})
    ds.to_zarr(store, mode="w", consolidated=True)
    server = httpserver.start(root)
    try:
        yield server, store
    finally:
        server.stop()


def _interrupt_once(server: httpserver.FaultyServer, how: str) -> tuple[dict[str, Any], bool]:
    """Run the child once, Ctrl-C it while the server holds its request for `zarr.json`; its
    report, and whether the signal was sent while that request was held (the child's main
    thread then waits for the answer inside DuckDB's call of the scan function)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, server.url("s.zarr"), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    ready = proc.stdout.readline().strip()
    if ready != "armed":
        _, err = proc.communicate(timeout=60)
        pytest.fail(f"the child did not start: {err}")
    taken = threading.Lock()
    sent: list[str] = []

    def hold_and_interrupt(method: str, path: str) -> None:
        # called before the request is answered: the child waits for it until HOLD has passed
        if not path.endswith("zarr.json") or not taken.acquire(blocking=False):
            return
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        sent.append(f"{method} {path}")
        time.sleep(HOLD)

    server.on_request = hold_and_interrupt
    try:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
    finally:
        server.on_request = None
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    return report, bool(sent)


def _expected(store: Path) -> list[float]:
    values = xr.open_zarr(store)["v"].values
    return [float(values.size), float(values.sum())]


@pytest.mark.parametrize("how", ["execute", "sql", "relation"])
def test_ctrl_c_inside_the_metadata_check_interrupts_the_query(
    served: tuple[httpserver.FaultyServer, Path], how: str
) -> None:
    """`execute` and `sql` (statements the connection runs) raise KeyboardInterrupt; DuckDB's
    own fetch of a relation raises DuckDB's error saying the query was interrupted. Retried
    when the signal missed the held request; checked on every run where it landed."""
    server, store = served
    landed_runs = 0
    for _ in range(ATTEMPTS):
        report, landed = _interrupt_once(server, how)
        if not landed:
            continue
        landed_runs += 1
        assert "finished" not in report, report
        kind, is_duckdb_error, message = report["error"]
        if how == "relation":
            assert is_duckdb_error, report["error"]
            assert "query was interrupted" in message, report["error"]
        else:
            assert kind == "KeyboardInterrupt", report["error"]
        np.testing.assert_allclose(report["after"], _expected(store))
        break
    assert landed_runs, f"the signal never landed while the request was held in {ATTEMPTS} runs"
