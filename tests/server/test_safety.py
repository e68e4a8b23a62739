"""The server's safety rules: tokens, read-only statements, per-session cursors, TLS,
time limits and cancellation, and errors that carry zarrsql's message."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import zarrsql
from tests.server.helpers import Stores, adbc_connect, flight_client, mounted, wait_for
from zarrsql.server import Limits, protocol, serve
from zarrsql.server.policy import classify

REFUSED = [
    "CREATE TABLE t (a INTEGER)",
    "INSERT INTO era5.time_lat_lon VALUES (1, 2, 3, 4)",
    "COPY (SELECT 1) TO 'out.csv'",
    "ATTACH ':memory:' AS other",
    "DETACH era5",
    "SET threads = 1",
    "PRAGMA threads = 1",
    "PRAGMA enable_profiling",
    "USE era5",
    "LOAD httpfs",
    "EXPLAIN ANALYZE CREATE TABLE t (a INTEGER)",
    "SELECT 1; DROP VIEW era5.time_lat_lon",
    "SELECT * FROM zarr_unmount('era5')",
]
ALLOWED = [
    "SHOW TABLES",
    "DESCRIBE era5.time_lat_lon",
    "EXPLAIN SELECT * FROM era5.time_lat_lon",
    # (a view over read_zarr: on DuckDB 1.5 its PRAGMA table_info binds outside zarrsql; DESCRIBE does not)
    "PRAGMA table_info('information_schema.tables')",
    "PRAGMA show_tables",
    "PRAGMA version",
    "WITH t AS (SELECT 1 AS a) SELECT * FROM t",
    "FROM era5.time_lat_lon LIMIT 1",
    "VALUES (1, 'a')",
    "SUMMARIZE cells.obs",
    "SELECT * FROM zarr_mounts()",
]


def _statement(sql: str) -> bytes:
    return protocol.pack("CommandStatementQuery", protocol.encode([(1, sql)]))


# -- tokens ------------------------------------------------------------------------------
def test_a_missing_token_is_refused(server: Any) -> None:
    con = adbc_connect(server, token=None)
    try:
        with con.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED.*no token"):
            cur.execute("SELECT 1")
    finally:
        con.close()
    client, options = flight_client(server, token=None)
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.get_flight_info(flight.FlightDescriptor.for_command(_statement("SELECT 1")), options)
    client.close()


def test_a_wrong_token_is_refused(server: Any) -> None:
    con = adbc_connect(server, token=server.token + "x")
    try:
        with con.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED.*not this server"):
            cur.execute("SELECT 1")
    finally:
        con.close()
    client, options = flight_client(server, token="wrong")
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(client.do_action(flight.Action("CreatePreparedStatement", b""), options))
    client.close()


def test_no_auth_serves_without_a_token(stores: Stores) -> None:
    con = mounted(stores)
    with serve(con, port=0, auth=False) as handle:
        assert handle.token is None
        client = adbc_connect(handle, token=None)
        with client.cursor() as cur:
            cur.execute("SELECT count(*) FROM cells.obs")
            assert cur.fetchone() == (len(stores.cell_types),)
        client.close()
    con.close()


# -- read-only ---------------------------------------------------------------------------
@pytest.mark.parametrize("sql", REFUSED)
def test_a_write_is_refused_when_read_only(server: Any, client: Any, sql: str) -> None:
    with client.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match="UNAUTHORIZED") as err:
            cur.execute(sql)
        assert "--allow-writes" in str(err.value) or "one statement" in str(err.value)
        cur.execute("SELECT count(*) FROM duckdb_tables()")  # nothing was created
        assert cur.fetchone() == (0,)
        cur.execute("SELECT count(*) FROM zarr_mounts('era5')")
        assert cur.fetchone()[0] > 0  # era5 is still mounted


def test_a_write_is_refused_over_raw_do_put(server: Any) -> None:
    client, options = flight_client(server)
    command = protocol.pack("CommandStatementUpdate", protocol.encode([(1, "CREATE TABLE t (a INTEGER)")]))
    writer, _ = client.do_put(flight.FlightDescriptor.for_command(command), pa.schema([]), options)
    with pytest.raises(flight.FlightUnauthorizedError, match="read-only"):
        writer.close()
    client.close()


@pytest.mark.parametrize("sql", ALLOWED)
def test_queries_run_when_read_only(client: Any, local: Any, sql: str) -> None:
    with client.cursor() as cur:
        cur.execute(sql)
        remote = cur.fetch_arrow_table()
    # a reporting PRAGMA runs as its SELECT twin; in process, the same statement
    same = classify(sql, allow_writes=False).text
    rel = local.sql(same)
    expected = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
    assert remote.schema == expected.schema
    assert _visible(remote) == _visible(expected)


def _visible(table: pa.Table) -> int:
    """Rows but zarrsql's internal names (the in-process connection has registered scans of
    its own, which DuckDB 1.5's SHOW TABLES lists)."""
    first = table.column(0).to_pylist() if table.num_columns else []
    return sum(1 for v in first if not (isinstance(v, str) and v.startswith("__zarrsql_")))


@pytest.fixture(scope="module")
def writable(stores: Stores) -> Iterator[Any]:
    con = mounted(stores)
    handle = serve(con, port=0, allow_writes=True)
    yield handle
    handle.shutdown()
    con.close()


def test_writes_run_with_allow_writes_and_sessions_are_private(writable: Any) -> None:
    first, second = adbc_connect(writable), adbc_connect(writable)
    try:
        with first.cursor() as a, second.cursor() as b:
            a.execute("CREATE TEMP TABLE mine AS SELECT * FROM range(5) t(i)")
            a.execute("SELECT sum(i) FROM mine")
            assert a.fetchone() == (10,)
            # another client's session is another cursor: its temporary table is not visible
            with pytest.raises(adbc_driver_manager.Error, match="mine"):
                b.execute("SELECT * FROM mine")
    finally:
        first.close()
        second.close()


def test_raw_update_returns_the_row_count(writable: Any) -> None:
    client, options = flight_client(writable)

    def update(sql: str) -> int:
        command = protocol.pack("CommandStatementUpdate", protocol.encode([(1, sql)]))
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), pa.schema([]), options)
        writer.done_writing()
        count = protocol.decode(reader.read().to_pybytes())
        writer.close()
        return int(count.get(1, [0])[0])

    assert update("CREATE TABLE memory.main.kept (a INTEGER)") == 0
    assert update("INSERT INTO memory.main.kept SELECT * FROM range(7)") == 7
    command = protocol.pack(
        "CommandStatementQuery", protocol.encode([(1, "SELECT count(*) AS n FROM memory.main.kept")])
    )
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    assert client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist() == [{"n": 7}]  # inserted once
    client.close()


# -- TLS ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by the openssl command."""
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_serves_a_client_that_trusts_the_certificate(stores: Stores, certificate: tuple[Path, Path]) -> None:
    from adbc_driver_flightsql import DatabaseOptions

    cert, key = certificate
    con = mounted(stores)
    with serve(con, port=0, tls=(cert, key)) as handle:
        assert handle.location.startswith("grpc+tls://")
        client = adbc_connect(handle, **{DatabaseOptions.TLS_ROOT_CERTS.value: cert.read_text()})
        with client.cursor() as cur:
            cur.execute("SELECT count(*) FROM cells.obs")
            assert cur.fetchone() == (len(stores.cell_types),)
        client.close()
        plain = flight.connect(f"grpc://127.0.0.1:{handle.port}")
        with pytest.raises(flight.FlightUnavailableError):
            plain.get_flight_info(flight.FlightDescriptor.for_command(_statement("SELECT 1")), timeout_options())
        plain.close()
    con.close()


def timeout_options() -> flight.FlightCallOptions:
    return flight.FlightCallOptions(timeout=5)


def test_a_missing_tls_file_is_a_clear_error(stores: Stores, tmp_path: Path) -> None:
    con = zarrsql.connect()
    with pytest.raises(zarrsql.ParameterError, match="TLS file .*missing.pem"):
        serve(con, port=0, tls=(tmp_path / "missing.pem", tmp_path / "missing.pem"))
    con.close()


# -- time limits and cancellation ---------------------------------------------------------
SLOW = "SELECT sum(a.i * b.i) FROM range(100000) a(i), range(100000) b(i)"


@pytest.fixture(scope="module")
def hasty(stores: Stores) -> Iterator[Any]:
    con = mounted(stores)
    handle = serve(con, port=0, limits=Limits(timeout=0.5))
    yield handle
    handle.shutdown()
    con.close()


def _fetch_all(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return cur.fetchall()


def test_a_query_past_the_time_limit_is_interrupted(hasty: Any) -> None:
    client = adbc_connect(hasty)
    started = time.monotonic()
    with client.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match="ran past the server.s time limit"):
        _fetch_all(cur, SLOW)
    assert time.monotonic() - started < 30
    with client.cursor() as cur:  # the session's cursor is free again
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
    assert wait_for(lambda: hasty.open_streams == 0)
    client.close()


def test_cancel_flight_info_stops_a_running_query(server: Any) -> None:
    client, options = flight_client(server)
    info = client.get_flight_info(flight.FlightDescriptor.for_command(_statement(SLOW)), options)
    errors: list[BaseException] = []

    def fetch() -> None:
        try:
            client.do_get(info.endpoints[0].ticket, options).read_all()
        except BaseException as err:  # the point: it must fail, not finish
            errors.append(err)

    worker = threading.Thread(target=fetch)
    worker.start()
    assert wait_for(lambda: server.state()["tickets"] == 0)  # DoGet took the ticket: the query runs
    time.sleep(0.2)
    (result,) = client.do_action(flight.Action("CancelFlightInfo", protocol.encode([(1, info.serialize())])), options)
    assert protocol.decode(result.body.to_pybytes()) == {1: [protocol.CANCEL_CANCELLED]}
    worker.join(30)
    assert not worker.is_alive()
    assert len(errors) == 1
    assert "was cancelled" in str(errors[0])  # the cancel is named, not called a time limit
    assert wait_for(lambda: server.open_streams == 0)
    client.close()
