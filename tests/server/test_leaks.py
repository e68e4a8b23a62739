"""A client that disconnects mid-stream does not leak: the memory and open streams of a server
process (`zarrsql serve`, started as users start it) measured before and after many such
clients.

Memory is the server's resident set (Linux /proc). glibc's malloc keeps one arena per thread
and gRPC serves calls from many threads, so the server runs with MALLOC_ARENA_MAX=2: freed
memory is then reused rather than spread over fresh arenas, and what remains to see is what
the server still holds. Warm-up rounds come first, so caches filled once (scans registered,
sessions up to their cap) are in the "before".
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.flight as flight
import pytest

from tests.server.helpers import Stores, wait_for
from zarrsql.server import protocol, sessions, sqlinfo

SRC = Path(__file__).resolve().parents[2] / "src"
BIG = "SELECT y, x, value FROM big.y_x"
#: Bytes of the BIG result as Arrow (2M rows of int64, int64, double): what one abandoned
#: stream would pin if its result were held whole.
BIG_BYTES = 2_000_000 * 24
#: Resident growth allowed per abandoned stream: allocator drift. A client that leaves evicts
#: the oldest session (past the cap), so every round closes one cursor and opens another;
#: on a loaded 2-core machine that drifted 1.7 MB a round (and more in one run of the whole
#: suite). A stream whose result stayed held would pin 48 MB (BIG_BYTES), 16 times more, and
#: would also count as open.
GROWTH_PER_ROUND = 3 << 20
ROUNDS = 40


class ServerProcess:
    """`zarrsql serve` in a process of its own, on a free port, with a token file."""

    def __init__(self, stores: Stores, tmp: Path) -> None:
        self.token = "leak-test-token"
        token_file = tmp / "token"
        token_file.write_text(self.token + "\n")
        env = {**os.environ, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": str(SRC)}
        command = [sys.executable, "-m", "zarrsql", "serve", "--mount", f"big={stores.big}", "--port", "0",
                   "--token-file", str(token_file)]  # fmt: skip
        self.errors = open(tmp / "stderr", "w+")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.errors, text=True, env=env)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "serving Arrow Flight SQL at grpc+tcp://127.0.0.1:" in line, line + (tmp / "stderr").read_text()
        self.port = int(line.split("127.0.0.1:")[1].split()[0])
        self.options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {self.token}".encode())])

    def rss(self) -> int:
        with open(f"/proc/{self.process.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def held(self) -> dict[int, int]:
        """The server's own counts (zarrsql's SqlInfo codes): open streams and sessions."""
        client = flight.connect(f"grpc://127.0.0.1:{self.port}")
        command = protocol.pack(
            "CommandGetSqlInfo", protocol.encode([(1, sqlinfo.OPEN_STREAMS), (1, sqlinfo.SESSIONS)])
        )
        info = client.get_flight_info(flight.FlightDescriptor.for_command(command), self.options)
        rows = client.do_get(info.endpoints[0].ticket, self.options).read_all().to_pylist()
        client.close()
        return {r["info_name"]: r["value"] for r in rows}

    def abandon(self, client: Any = None) -> int:
        """Start BIG, read one batch, then leave: close a fresh connection (a client that
        disconnects), or cancel the call on `client` (one that gives up the stream)."""
        own = client is None
        client = client or flight.connect(f"grpc://127.0.0.1:{self.port}")
        command = protocol.pack("CommandStatementQuery", protocol.encode([(1, BIG)]))
        info = client.get_flight_info(flight.FlightDescriptor.for_command(command), self.options)
        reader = client.do_get(info.endpoints[0].ticket, self.options)
        rows = reader.read_chunk().data.num_rows
        if own:
            client.close()
        else:
            reader.cancel()
        return rows

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.errors.close()


@pytest.fixture(scope="module")
def process(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if not os.path.exists("/proc/self/statm"):
        pytest.fail("the leak test reads a process's memory from /proc (Linux)")
    server = ServerProcess(stores, tmp_path_factory.mktemp("leak"))
    yield server
    server.stop()


def _settled(process: ServerProcess) -> int:
    """The resident memory once every stream is closed (gRPC frees them on its own threads)."""
    assert wait_for(lambda: process.held()[sqlinfo.OPEN_STREAMS] == 0)
    time.sleep(0.2)
    return process.rss()


def test_clients_that_disconnect_mid_stream_do_not_leak(process: ServerProcess) -> None:
    for _ in range(sessions.MAX_SESSIONS + 4):  # warm up: sessions reach their cap
        process.abandon()
    before = _settled(process)
    for _ in range(ROUNDS):
        assert process.abandon() < BIG_BYTES // 24  # each left after one batch of many
    after = _settled(process)
    assert process.held()[sqlinfo.SESSIONS] <= sessions.MAX_SESSIONS
    assert after - before < ROUNDS * GROWTH_PER_ROUND, f"server memory grew {(after - before) / 2**20:.0f} MiB"


def test_a_client_that_cancels_streams_does_not_leak(process: ServerProcess) -> None:
    client = flight.connect(f"grpc://127.0.0.1:{process.port}")
    for _ in range(5):
        process.abandon(client)
    before = _settled(process)
    for _ in range(ROUNDS):
        process.abandon(client)
    after = _settled(process)
    client.close()
    assert after - before < ROUNDS * GROWTH_PER_ROUND, f"server memory grew {(after - before) / 2**20:.0f} MiB"


def test_a_query_right_after_a_cancelled_stream_runs(process: ServerProcess) -> None:
    """The session's cursor is free for the client's next statement as soon as it cancelled:
    the abandoned result is released, not left open until its generator is collected (DuckDB
    refused the next statement with "connection has an open result" about once in 250)."""
    client = flight.connect(f"grpc://127.0.0.1:{process.port}")
    command = protocol.pack("CommandStatementQuery", protocol.encode([(1, "SELECT 42 AS answer")]))
    try:
        for _ in range(150):
            process.abandon(client)
            info = client.get_flight_info(flight.FlightDescriptor.for_command(command), process.options)
            assert client.do_get(info.endpoints[0].ticket, process.options).read_all().to_pylist() == [{"answer": 42}]
    finally:
        client.close()
