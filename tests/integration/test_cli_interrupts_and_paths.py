"""The command line on a slow remote store and with a --path it cannot use.

Ctrl-C: a real SIGINT is sent to `zarrsql query` (a subprocess) at the moment the HTTP server
(tests/remote/httpserver.py, with a latency per request standing in for a distant server)
receives a request of the phase under test: the mount's metadata reads, the scan's chunk
fetches, or the metadata reads of a store the SQL names. Whatever the phase, the command must
end with status 130 and one "interrupted" line within `EXIT_BOUND` seconds of the signal, and
print no result (docs/user-guide.md, Command line: "Ctrl-C stops the query and exits with
status 130").

A plain HTTP store without consolidated metadata cannot be listed, so `query` mounts nothing,
and the SQL reads it with `read_zarr(..., array_path := ...)` (values checked against xarray).
`demo --path` below a file, or where no folder can be made, is refused in --path's words.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from cli_runner import assert_one_error, cli_env, command, run_cli
from tests.remote import httpserver

#: Seconds from the signal to the command's exit: stopping takes a fraction of a second (a
#: bound, not a benchmark). A metadata read the SQL makes waits out its request: `QUICK`.
EXIT_BOUND = 2.0
#: Seconds the server takes to answer each request: a distant server, whose round trips a
#: scan that goes on after Ctrl-C would wait out (beyond `EXIT_BOUND`) ...
DISTANT = 1.5
#: ... and a nearer one, whose metadata requests (two in a row) fit within `EXIT_BOUND`.
QUICK = 0.4
#: Chunks of the scanned array: 400, at 32 requests in flight, take 13 round trips.
TIMES, CHUNK = 4000, 10


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of two stores: `slow.zarr` (consolidated, 400 chunks) and `plain.zarr` (no
    consolidated metadata, which plain HTTP cannot list)."""
    root = tmp_path_factory.mktemp("served")
    values = np.random.default_rng(7).normal(size=(TIMES, 16)).astype("float32")
    slow = xr.Dataset({"v": (("t", "x"), values)}, coords={"t": np.arange(TIMES), "x": np.arange(16.0)})
    slow.to_zarr(root / "slow.zarr", consolidated=True, encoding={"v": {"chunks": (CHUNK, 16)}})
    plain = xr.Dataset({"air": (("lat", "lon"), np.arange(12.0).reshape(3, 4))}, coords={"lat": [3.0, 2.0, 1.0]})
    plain.to_zarr(root / "plain.zarr", consolidated=False)
    return root


@pytest.fixture
def server(served: Path) -> Iterator[httpserver.FaultyServer]:
    srv = httpserver.start(served)
    try:
        yield srv
    finally:
        srv.stop()


def _interrupt_on_request(
    srv: httpserver.FaultyServer, args: list[str], path_part: str, latency: float
) -> tuple[float, str, str, int]:
    """Run `zarrsql query *args` on a server answering after `latency` seconds, and send
    SIGINT when it receives the first request whose path contains `path_part`; (seconds from
    the signal to the exit, stdout, stderr, status)."""
    proc = subprocess.Popen(
        [*command(), "query", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env()
    )
    sent: list[float] = []

    def on_request(method: str, path: str) -> None:
        if path_part in path and not sent:
            sent.append(time.monotonic())
            proc.send_signal(signal.SIGINT)

    srv.latency = latency
    srv.on_request = on_request
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"still running 60 s after it started; printed {stdout!r}, stderr {stderr[-2000:]!r}")
    finally:
        srv.on_request = None
    ended = time.monotonic()
    assert sent, f"no request for {path_part!r} came: {stderr}"
    return ended - sent[0], stdout, stderr, proc.returncode


def _assert_interrupted(took: float, stdout: str, stderr: str, status: int) -> None:
    assert status == 130, stderr
    assert stderr == "zarrsql: interrupted\n"  # one line, no traceback
    assert stdout == ""  # no result, whole or in part
    assert took < EXIT_BOUND, f"exited {took:.2f} s after SIGINT"


def test_ctrl_c_during_a_remote_scan_stops_it_at_once(server: httpserver.FaultyServer) -> None:
    # the first chunk of `v` requested: the mount is done and the scan is fetching
    args = [server.url("slow.zarr"), "SELECT avg(v) FROM t_x"]
    _assert_interrupted(*_interrupt_on_request(server, args, "/v/c/", DISTANT))


def test_ctrl_c_while_query_mounts_a_remote_store(server: httpserver.FaultyServer) -> None:
    # the mount's first read: the store's zarr.json
    args = [server.url("slow.zarr"), "SELECT avg(v) FROM t_x"]
    _assert_interrupted(*_interrupt_on_request(server, args, "slow.zarr/zarr.json", DISTANT))


def test_ctrl_c_while_the_sql_reads_a_remote_store_prints_no_result(
    server: httpserver.FaultyServer, served: Path
) -> None:
    # the local store mounts at once; the SQL's read_zarr then reads the remote store's metadata
    sql = f"SELECT avg(v) FROM read_zarr('{server.url('slow.zarr')}')"
    args = [str(served / "plain.zarr"), sql]
    _assert_interrupted(*_interrupt_on_request(server, args, "slow.zarr/zarr.json", QUICK))


def test_query_reads_a_store_plain_http_cannot_list(server: httpserver.FaultyServer, served: Path) -> None:
    url = server.url("plain.zarr")
    air = xr.open_zarr(served / "plain.zarr", consolidated=False)["air"]
    sql = f"SELECT count(*) AS n, sum(air) AS total FROM read_zarr('{url}', array_path := 'air')"
    out = run_cli("query", url, sql, "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    n, total = out.stdout.splitlines()[1].split(",")
    assert (int(n), float(total)) == (air.size, float(air.sum()))


def test_a_missing_table_on_a_store_that_cannot_be_listed_says_why(server: httpserver.FaultyServer) -> None:
    url = server.url("plain.zarr")
    out = run_cli("query", url, "SELECT * FROM lat_lon")
    assert_one_error(out, "lat_lon", "nothing was mounted", "cannot be listed", "array_path :=")


def test_demo_path_below_a_file_is_refused_naming_it(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    out = run_cli("demo", "--path", str(notes / "demo.zarr"))
    assert_one_error(out, f"--path '{notes / 'demo.zarr'}'", f"'{notes}' is a file, not a folder", "give a --path")
    assert "Errno" not in out.stderr
    assert notes.read_text() == "my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc, where no folder can be made")
def test_demo_path_where_no_folder_can_be_made_gives_the_reason() -> None:
    out = run_cli("demo", "--path", "/proc/nope/demo.zarr")
    assert_one_error(out, "--path '/proc/nope/demo.zarr'", "'/proc/nope' cannot be created", "give a --path")
    assert "Errno" not in out.stderr
