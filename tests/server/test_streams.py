"""Streams are freed: a client that disconnects mid-stream (raw Flight or ADBC) leaves no open
stream and no held cursor behind; a slow client does not block others. (Memory is measured
on a server process of its own: test_leaks.py.)"""

from __future__ import annotations

import time
from typing import Any

import pyarrow.flight as flight

from tests.server.helpers import Stores, adbc_connect, flight_client, wait_for
from zarrsql.server import protocol

BIG = "SELECT y, x, value FROM big.y_x"


def _abandon_raw(server: Any) -> int:
    """Start the BIG stream, read one batch, disconnect; the rows read."""
    client, options = flight_client(server)
    command = protocol.pack("CommandStatementQuery", protocol.encode([(1, BIG)]))
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    reader = client.do_get(info.endpoints[0].ticket, options)
    rows = reader.read_chunk().data.num_rows
    client.close()
    return rows


def test_a_raw_client_that_disconnects_mid_stream_frees_its_stream(server: Any) -> None:
    for _ in range(3):
        assert 0 < _abandon_raw(server) <= server._service.limits.batch_rows  # one batch of many
    assert wait_for(lambda: server.open_streams == 0)
    assert server.state()["tickets"] == 0


def test_an_adbc_client_closed_mid_stream_frees_its_stream(server: Any) -> None:
    client = adbc_connect(server)
    cur = client.cursor()
    cur.execute(BIG)
    batch = cur.fetch_record_batch().read_next_batch()
    assert 0 < batch.num_rows < 2_000_000
    assert server.open_streams >= 1
    cur.close()
    client.close()
    assert wait_for(lambda: server.open_streams == 0)


def test_the_session_cursor_is_free_after_an_abandoned_stream(server: Any, stores: Stores) -> None:
    client = adbc_connect(server)
    with client.cursor() as cur:
        cur.execute(BIG)
        cur.fetch_record_batch().read_next_batch()
    with client.cursor() as cur:
        cur.execute("SELECT count(*) FROM big.y_x")
        assert cur.fetchone() == (stores.big_shape[0] * stores.big_shape[1],)
    client.close()
    assert wait_for(lambda: server.open_streams == 0)


def test_a_slow_client_does_not_block_the_others(server: Any, stores: Stores) -> None:
    slow = adbc_connect(server)
    cur = slow.cursor()
    cur.execute(BIG)
    cur.fetch_record_batch().read_next_batch()  # then reads no more: its stream stays open
    fast = adbc_connect(server)
    took = []
    with fast.cursor() as f:
        for kind in ("B", "T", "NK"):
            started = time.monotonic()
            f.execute("SELECT count(*) FROM cells.obs WHERE cell_type = ?", (kind,))
            assert f.fetchone() == (stores.cell_types.count(kind),)
            took.append(time.monotonic() - started)
    assert max(took) < 5.0, took
    assert server.open_streams >= 1  # the slow client's stream was open all along
    cur.close()
    slow.close()
    fast.close()
    assert wait_for(lambda: server.open_streams == 0)


def test_two_streams_of_one_session_run_side_by_side(server: Any, stores: Stores) -> None:
    """A client reading two results at once: the second runs on a spare cursor."""
    client = adbc_connect(server)
    first, second = client.cursor(), client.cursor()
    first.execute("SELECT y FROM big.y_x WHERE x = 0 ORDER BY y")
    second.execute("SELECT obs FROM cells.obs ORDER BY obs")
    ys = [r[0] for r in first.fetchall()]
    names = [r[0] for r in second.fetchall()]
    assert ys == list(range(stores.big_shape[0]))
    assert names == sorted(f"c{i}" for i in range(len(stores.cell_types)))
    first.close()
    second.close()
    client.close()
