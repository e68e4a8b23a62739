"""A client connection's statements see its own state while an earlier result still streams.

A statement sent on a connection whose earlier result is still streaming runs on the
connection's own cursor when the session may hold state (`--allow-writes`, or a read-only
session that seeded its random numbers): it sees the session's temporary tables and settings,
and the earlier result arrives whole. Past the server's memory limit the new statement is
refused with a message saying why and what to do. A read-only session without state still
runs its second query beside the stream, at once (nothing is read into memory for it).

Oracles: DuckDB on one plain connection doing the same steps; the streamed rows against
DuckDB over a pandas copy of the store (written by xarray).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_manager
import duckdb
import numpy as np
import pyarrow as pa
import pytest

from tests.server.helpers import Stores, adbc_connect, mounted, wait_for
from zarrsql.server import Limits, serve

#: Streams 2M rows (48 MB) in many batches: never finished before the next statement.
BIG = "SELECT y, x, value FROM big.y_x"
ZONED = "SELECT (TIMESTAMPTZ '2020-01-01 00:00:00+00')::VARCHAR AS t"


@pytest.fixture(scope="module")
def big_rows(stores: Stores) -> pa.Table:
    """BIG's rows ordered by (y, x): DuckDB over a pandas copy xarray made of the store."""
    import xarray as xr

    frame = xr.open_zarr(stores.big).to_dataframe().reset_index()
    with duckdb.connect() as oracle:
        oracle.register("frame", frame)
        rel = oracle.sql("SELECT y, x, value FROM frame ORDER BY y, x")
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow  # DuckDB 2 / 1.5
        return fetch()


def _server(stores: Stores, **options: Any) -> Iterator[Any]:
    con = mounted(stores)
    handle = serve(con, port=0, **options)
    yield handle
    handle.shutdown()
    con.close()


@pytest.fixture(scope="module")
def writable(stores: Stores) -> Iterator[Any]:
    yield from _server(stores, allow_writes=True)


@pytest.fixture(scope="module")
def writable_small(stores: Stores) -> Iterator[Any]:
    """Writes allowed; unread results held in memory at most 1 MiB (BIG's first batch is 1.5 MB)."""
    yield from _server(stores, allow_writes=True, limits=Limits(held_bytes=1 << 20))


@pytest.fixture(scope="module")
def read_only(stores: Stores) -> Iterator[Any]:
    yield from _server(stores)


@pytest.fixture(scope="module")
def read_only_tiny(stores: Stores) -> Iterator[Any]:
    """Read-only; unread results held at most 1 byte: a query that had to spill would be refused."""
    yield from _server(stores, limits=Limits(held_bytes=1))


def _start(cursor: Any) -> tuple[pa.RecordBatch, Any]:
    """Run BIG on `cursor` and read its first batch only: the rest stays on the server."""
    cursor.execute(BIG)
    reader = cursor.fetch_record_batch()
    return reader.read_next_batch(), reader


def _assert_big_rows(first: pa.RecordBatch, reader: Any, expected: pa.Table) -> None:
    got = pa.Table.from_batches([first]).combine_chunks()
    got = pa.concat_tables([got, reader.read_all()]).sort_by([("y", "ascending"), ("x", "ascending")])
    assert got.num_rows == expected.num_rows
    for name in ("y", "x", "value"):
        assert np.array_equal(got[name].to_numpy(), expected[name].to_numpy()), name


def test_temp_table_and_settings_are_seen_while_an_earlier_result_streams(writable: Any, big_rows: pa.Table) -> None:
    with duckdb.connect() as oracle:
        oracle.execute("CREATE TEMP TABLE mine AS SELECT * FROM range(5) t(i)")
        oracle.execute("SET TimeZone = 'Asia/Tokyo'")
        tokyo = oracle.sql(ZONED).fetchall()
        total = oracle.sql("SELECT sum(i) FROM mine").fetchall()
        oracle.execute("CREATE TEMP TABLE later AS SELECT 7 AS v")
        oracle.execute("SET TimeZone = 'America/New_York'")
        new_york = oracle.sql(ZONED).fetchall()
        later = oracle.sql("SELECT v FROM later").fetchall()
    client = adbc_connect(writable)
    try:
        setup, streaming, second = client.cursor(), client.cursor(), client.cursor()
        setup.execute("CREATE TEMP TABLE mine AS SELECT * FROM range(5) t(i)")
        setup.execute("SET TimeZone = 'Asia/Tokyo'")
        first, reader = _start(streaming)
        second.execute(ZONED)
        assert second.fetchall() == tokyo
        second.execute("SELECT sum(i) FROM mine")
        assert second.fetchall() == total
        # state made while the result streams is the session's too
        second.execute("CREATE TEMP TABLE later AS SELECT 7 AS v")
        second.execute("SET TimeZone = 'America/New_York'")
        _assert_big_rows(first, reader, big_rows)
        setup.execute(ZONED)
        assert setup.fetchall() == new_york
        setup.execute("SELECT v FROM later")
        assert setup.fetchall() == later
    finally:
        client.close()
    assert wait_for(lambda: writable.open_streams == 0)
    assert writable._service.streams.held == 0  # the spilled rows were all sent and let go


def test_a_result_closed_unread_after_it_spilled_frees_its_memory(writable: Any) -> None:
    client = adbc_connect(writable)
    try:
        streaming, second = client.cursor(), client.cursor()
        _start(streaming)
        second.execute("SELECT 42 AS v")
        assert second.fetchall() == [(42,)]
        assert writable._service.streams.held > 0  # the rest of BIG waits in memory
        streaming.close()
    finally:
        client.close()
    assert wait_for(lambda: writable.open_streams == 0 and writable._service.streams.held == 0)


def test_past_the_memory_limit_the_new_statement_is_refused_and_the_stream_kept(
    writable_small: Any, big_rows: pa.Table
) -> None:
    client = adbc_connect(writable_small)
    try:
        setup, streaming, second = client.cursor(), client.cursor(), client.cursor()
        setup.execute("CREATE TEMP TABLE mine AS SELECT 42 AS v")
        first, reader = _start(streaming)
        with pytest.raises(adbc_driver_manager.Error) as refused:
            second.execute("SELECT v FROM mine")
        message = str(refused.value)
        assert "an earlier result of this connection is still open" in message
        assert "read the earlier result to the end or close it first" in message
        assert "held_bytes" in message
        _assert_big_rows(first, reader, big_rows)  # held prefix, then the rest from DuckDB
        second.execute("SELECT v FROM mine")  # the earlier result ended: the cursor is free
        assert second.fetchall() == [(42,)]
    finally:
        client.close()
    assert wait_for(lambda: writable_small.open_streams == 0)
    assert writable_small._service.streams.held == 0


def test_a_read_only_sessions_second_query_runs_beside_its_stream(
    read_only_tiny: Any, stores: Stores, big_rows: pa.Table
) -> None:
    client = adbc_connect(read_only_tiny)
    try:
        streaming, second = client.cursor(), client.cursor()
        first, reader = _start(streaming)
        for kind in ("B", "T", "NK"):
            second.execute("SELECT count(*) FROM cells.obs WHERE cell_type = ?", (kind,))
            assert second.fetchall() == [(stores.cell_types.count(kind),)]
        # on a spare cursor: nothing of the stream was read into memory (1 byte allowed)
        assert read_only_tiny._service.streams.held == 0
        _assert_big_rows(first, reader, big_rows)
    finally:
        client.close()
    assert wait_for(lambda: read_only_tiny.open_streams == 0)


def test_a_read_only_session_keeps_its_random_seed_while_a_result_streams(read_only: Any) -> None:
    """setseed is the one session state a read-only server allows: it is kept like a setting."""
    with duckdb.connect() as oracle:
        oracle.execute("SELECT setseed(0.25)").fetchall()
        draws = [oracle.sql("SELECT random()").fetchall() for _ in range(2)]
    client = adbc_connect(read_only)
    try:
        setup, streaming, second = client.cursor(), client.cursor(), client.cursor()
        setup.execute("SELECT setseed(0.25)")
        setup.fetchall()
        _, reader = _start(streaming)
        second.execute("SELECT random()")
        assert second.fetchall() == draws[0]
        reader.read_all()
        second.execute("SELECT random()")
        assert second.fetchall() == draws[1]
    finally:
        client.close()
    assert wait_for(lambda: read_only.open_streams == 0)
