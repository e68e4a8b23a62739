"""GROUP BY computed by the scan over HTTP: the same groups as xarray on the files, and every
unit's chunks asked for at once (no first unit fetched alone, as a LIMIT's scan does).

The server is the repository's fault-injecting HTTP server with latency added to every
request; its timeline says when each request arrived and was answered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from tests.remote import httpserver
from tests.remote.conftest import stop_http
from zarrsql.engine import grouped
from zarrsql.metadata.tree import clear_cache


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    root = tmp_path_factory.mktemp("grouped")
    rng = np.random.default_rng(3)
    v = rng.normal(280, 10, (48, 9, 8)).astype("f4")
    v[5, 2, 1] = np.nan
    ds = xr.Dataset(
        {"v": (("time", "lat", "lon"), v)},
        coords={
            "time": pd.date_range("2001-01-01", periods=48, freq="6h"),
            "lat": np.linspace(60.0, -60.0, 9),
            "lon": np.arange(0.0, 360.0, 45.0),
        },
    )
    ds.to_zarr(root / "grid.zarr", mode="w", encoding={"v": {"chunks": (8, 9, 8)}}, consolidated=True)
    s = httpserver.start(root)
    yield s, root
    stop_http(s)


@pytest.fixture
def http(server, monkeypatch) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    monkeypatch.setattr(grouped, "MIN_ROWS", 0)  # a small store: computed by the scan all the same
    s, root = server
    s.reset()
    clear_cache()
    yield s, root
    deadline = time.monotonic() + 10
    while s.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    s.reset()


def test_groups_over_http_equal_xarray_and_every_chunk_is_asked_for_at_once(http) -> None:
    s, root = http
    # long enough that a busy machine's delays in sending (or logging) a request stay far
    # below it: a first unit fetched alone would put a whole round trip between the requests
    s.latency = 0.25
    with zarrsql.connect() as con, zarrsql.trace() as t:
        rel = con.sql(f"SELECT lat, avg(v), count(v) FROM read_zarr('{s.url('grid.zarr')}') GROUP BY lat")
        got = {lat: (mean, n) for lat, mean, n in rel.fetchall()}
    assert "__zarrsql_grouped_" in rel.sql_query()
    assert t.rows_aggregated == 48 * 9 * 8
    v = xr.open_zarr(root / "grid.zarr")["v"]
    means = v.mean(("time", "lon"), skipna=True).to_series()
    counts = v.count(("time", "lon")).to_series()
    assert set(got) == {float(x) for x in means.index}
    for lat, (mean, n) in got.items():
        assert mean == pytest.approx(float(means[lat]), rel=1e-6)
        assert n == int(counts[lat])
    data = [(a, b) for m, p, a, b in s.timeline if m == "GET" and p.startswith("/grid.zarr/v/c/")]
    assert len(data) == 6  # each chunk of v once
    # all six asked for before the first was answered: one round, not a first unit alone
    assert max(a for a, _ in data) < min(b for _, b in data)


def test_a_failing_chunk_fails_the_statement_by_its_url(http) -> None:
    s, _ = http
    s.inject("/grid.zarr/v/c/2/0/0", "503", times=None)
    args = f"'{s.url('grid.zarr')}', storage_options := MAP {{'retries': '0'}}"
    with zarrsql.connect() as con, pytest.raises(zarrsql.StoreReadError) as info:
        con.sql(f"SELECT lon, max(v) FROM read_zarr({args}) GROUP BY lon").fetchall()
    assert s.url("grid.zarr/v/c/2/0/0") in str(info.value)
    assert "Traceback" not in str(info.value)
    gets = [p for m, p in s.log if m == "GET" and p == "/grid.zarr/v/c/2/0/0"]
    assert len(gets) == 1  # one attempt: the statement is not run a second time after the rewrite failed


CHILD = r"""
import json, sys, threading, time, zarrsql
from zarrsql.engine import grouped
grouped.MIN_ROWS = 0
url = sys.argv[1]
con = zarrsql.connect()
statement = f"SELECT lat, avg(v) FROM read_zarr('{url}', storage_options := MAP {{'concurrency': '1'}}) GROUP BY lat"
out = {}
try:
    print("ready", flush=True)
    con.sql(statement).fetchall()
    out["finished"] = True
except KeyboardInterrupt as err:
    out["interrupted_at"] = time.time()
    out["error"] = str(err)
time.sleep(0.3)
out["busy_threads"] = [th.name for th in threading.enumerate() if th.name.startswith("zarrsql_")]
out["after"] = con.sql("SELECT 42").fetchall()[0][0]
print(json.dumps(out), flush=True)
"""


def test_ctrl_c_stops_a_group_by_the_scan_computes(http) -> None:
    """A real SIGINT while the scan sums chunks fetched one at a time (0.4 s each): the
    statement stops within a second and a half, no reader thread is left, the connection
    answers the next statement."""
    import json
    import signal
    import subprocess
    import sys

    from cli_runner import cli_env

    s, _ = http
    s.latency = 0.4
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, s.url("grid.zarr")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=cli_env(),
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 20
    while not [p for m, p in s.log if p.startswith("/grid.zarr/v/c/")] and time.monotonic() < deadline:
        time.sleep(0.05)  # the data requests have begun: the scan is running
    time.sleep(0.3)
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    result = json.loads(out.strip().splitlines()[-1])
    assert "finished" not in result, "the statement ended before the signal"
    assert result["interrupted_at"] - sent <= 1.5, err
    assert "interrupted" in result["error"]
    assert result["busy_threads"] == []
    assert result["after"] == 42
    assert len([p for m, p in s.log if p.startswith("/grid.zarr/v/c/")]) < 6  # the rest never asked for
