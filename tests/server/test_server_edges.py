"""The server at its edges: queries that change state refused when read-only (sequences,
checkpoints, logging and profiling), a read-only `--database`, duplicate column names, a
prepared statement re-run after its store changed, a bounded shutdown under a stalled client,
errors after the first batch that keep their kind, EXPLAIN and PRAGMA forms with comments,
rows larger than a message, path descriptors and unsupported RPCs, and option checks.

Expected values come from the same statement run in process (zarrsql.connect / DuckDB),
never from the server's own answers.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import adbc_driver_manager
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import zarrsql
from tests.cli_runner import cli_env, command, run_cli
from tests.server.helpers import Stores, adbc_connect, mounted, wait_for
from zarrsql.server import Limits, protocol, serve
from zarrsql.server.streams import UNEXPLAINED_INTERRUPT

#: DuckDB 2 reports a failure on one of its threads as itself every time (1.5: see below)
_DUCKDB_2 = int(__import__("duckdb").__version__.split(".")[0]) >= 2

#: Seconds any one client call may take here (a hung server fails the test, not the run).
CALL_SECONDS = 60.0
ADBC_TIMEOUTS = {
    "adbc.flight.sql.rpc.timeout_seconds.query": str(CALL_SECONDS),
    "adbc.flight.sql.rpc.timeout_seconds.fetch": str(CALL_SECONDS),
    "adbc.flight.sql.rpc.timeout_seconds.update": str(CALL_SECONDS),
}


def _adbc(handle: Any, **options: str) -> Any:
    return adbc_connect(handle, **ADBC_TIMEOUTS, **options)


def _raw(handle: Any) -> tuple[flight.FlightClient, flight.FlightCallOptions]:
    client = flight.connect(f"grpc://127.0.0.1:{handle.port}")
    headers = [(b"authorization", f"Bearer {handle.token}".encode())] if handle.token else []
    return client, flight.FlightCallOptions(headers=headers, timeout=CALL_SECONDS)


def _command(sql: str) -> flight.FlightDescriptor:
    return flight.FlightDescriptor.for_command(protocol.pack("CommandStatementQuery", protocol.encode([(1, sql)])))


def _local_table(con: Any, sql: str) -> pa.Table:
    rel = con.sql(sql)
    return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()


def _fetched(cur: Any, sql: str) -> pa.Table:
    """Run `sql` on an ADBC cursor and read its whole result."""
    cur.execute(sql)
    return cur.fetch_arrow_table()


def _exchange(client: flight.FlightClient, options: flight.FlightCallOptions) -> None:
    """A DoExchange call, read to its end."""
    writer, reader = client.do_exchange(_command("SELECT 1"), options)
    try:
        reader.read_all()
    finally:
        writer.close()


def _read_until_error(reader: Any) -> tuple[int, BaseException | None]:
    """Rows read from a DoGet stream before it ended, and the error it ended with (None: clean)."""
    rows = 0
    try:
        while True:
            rows += reader.read_chunk().data.num_rows
    except StopIteration:
        return rows, None
    except Exception as err:  # the point: which error the stream ends with
        return rows, err


def _write_grid(path: Path, shape: tuple[int, int], chunk_rows: int) -> np.ndarray:
    import xarray as xr

    value = np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape)
    ds = xr.Dataset(
        {"value": (("y", "x"), value)},
        coords={"y": np.arange(shape[0], dtype=np.int64), "x": np.arange(shape[1], dtype=np.int64)},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, mode="w", encoding={"value": {"chunks": (chunk_rows, shape[1])}})
    return value


# -- 1. a read-only server refuses queries that change state -----------------------------------
@pytest.fixture(scope="module")
def sequenced(stores: Stores) -> Iterator[tuple[Any, Any]]:
    """A read-only server whose connection holds a sequence `ids` (START 1), and that connection."""
    con = mounted(stores)
    con.execute("CREATE SEQUENCE ids START 1")
    handle = serve(con, port=0)
    yield handle, con
    handle.shutdown()
    con.close()


STATE_CHANGING = [
    ("SELECT nextval('ids')", "nextval()"),
    ("SELECT 'ids'.nextval()", "nextval()"),  # method syntax (DuckDB 2; 1.5 refuses it as a syntax error)
    ("SELECT setval('ids', 40)", "setval()"),
    ("SELECT * FROM query('SELECT nextval(''ids'')')", "nextval()"),
    ("WITH t AS (SELECT nextval('ids') AS n) SELECT * FROM t", "nextval()"),
    ("SELECT * FROM disable_logging()", "disable_logging()"),
    ("SELECT * FROM truncate_duckdb_logs()", "truncate_duckdb_logs()"),
    ("SELECT * FROM checkpoint()", "checkpoint()"),
    ('SELECT * FROM main."FORCE_CHECKPOINT"()', "force_checkpoint()"),
    ("SELECT * FROM disable_profiling()", "disable_profiling()"),
    ("SELECT * FROM register_external_resource('x')", "register_external_resource()"),
    ("SELECT * FROM destroy_external_resource('x')", "destroy_external_resource()"),
    ("EXPLAIN ANALYZE SELECT nextval('ids')", "nextval()"),
    ("DESCRIBE SELECT nextval('ids')", "nextval()"),
]


@pytest.mark.parametrize(("sql", "named"), STATE_CHANGING)
def test_a_query_that_changes_state_is_refused(sequenced: tuple[Any, Any], sql: str, named: str) -> None:
    handle, con = sequenced
    if "'ids'.nextval" in sql and _duckdb_major() < 2:
        pytest.skip("DuckDB 1.5 has no method syntax")
    client = _adbc(handle)
    try:
        with client.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match="UNAUTHORIZED") as err:
            _fetched(cur, sql)
        assert named in str(err.value)
        assert "--allow-writes" in str(err.value)
    finally:
        client.close()
    # the sequence was never advanced (DuckDB's catalog, read in process: NULL until a first nextval)
    last = con.sql("SELECT last_value FROM duckdb_sequences() WHERE sequence_name = 'ids'").fetchall()
    assert last == [(None,)]


def _duckdb_major() -> int:
    import duckdb

    return int(duckdb.__version__.split(".")[0])


def test_logging_and_profiling_write_no_file_and_change_no_setting(server: Any, local: Any, tmp_path: Path) -> None:
    logs, profile = tmp_path / "logs", tmp_path / "profile.json"
    statements = [
        f"SELECT * FROM enable_logging(storage := 'file', storage_path := '{logs}')",
        f"SELECT * FROM enable_profiling(format := 'json', save_location := '{profile}')",
    ]
    settings = "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_logging', 'profiling_output')"
    before = local.sql(settings).fetchall()
    client = _adbc(server)
    try:
        for sql in statements:
            with client.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match="UNAUTHORIZED.*enable_"):
                _fetched(cur, sql)
        with client.cursor() as cur:
            cur.execute("SELECT count(*) FROM era5.time_lat_lon")
            assert cur.fetchall() == local.sql("SELECT count(*) FROM era5.time_lat_lon").fetchall()
    finally:
        client.close()
    assert not logs.exists()
    assert not profile.exists()
    assert local.sql(settings).fetchall() == before  # settings are the database's: one client's are every client's


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM query('SELECT 42 AS answer, ''a'' AS letter')",
        "SELECT random() < 2 AS sure, currval IS NULL AS named FROM (SELECT NULL AS currval)",
        "SELECT set_bit('0110'::BITSTRING, 0, 1)::VARCHAR AS bits",
    ],
)
def test_queries_that_only_read_still_run(server: Any, local: Any, sql: str) -> None:
    client = _adbc(server)
    try:
        with client.cursor() as cur:
            cur.execute(sql)
            assert cur.fetch_arrow_table() == _local_table(local, sql)
    finally:
        client.close()


def test_a_read_only_database_file_is_served_read_only(stores: Stores, tmp_path: Path) -> None:
    """`zarrsql serve --database FILE`: its views answer, a mounted store beside it too, and
    neither nextval nor a checkpoint changes the file; the sequence is where it was."""
    import adbc_driver_flightsql.dbapi as flightsql

    db = tmp_path / "analysis.duckdb"
    first = zarrsql.connect(str(db))
    first.execute("CREATE SEQUENCE ids START 1")
    first.execute("SELECT nextval('ids')").fetchall()  # the file's sequence stands at 1
    first.execute(f"CREATE VIEW obs AS SELECT * FROM read_zarr('{stores.cells}', table_name := 'obs')")
    expected_obs = first.sql("SELECT count(*) FROM obs").fetchall()
    first.close()
    argv = [*command(), "serve", "--port", "0", "--no-auth", "--database", str(db), "--mount", f"era5={stores.air}"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        assert process.stdout is not None
        listening = process.stdout.readline()
        port = int(re.search(r":(\d+) \(", listening).group(1))  # type: ignore[union-attr]
        kwargs = dict(ADBC_TIMEOUTS)
        with flightsql.connect(f"grpc://127.0.0.1:{port}", db_kwargs=kwargs, autocommit=True) as client:
            with client.cursor() as cur:
                cur.execute("SELECT count(*) FROM obs")
                assert cur.fetchall() == expected_obs
                cur.execute("SELECT count(*) FROM era5.time_lat_lon")
                assert cur.fetchall() == [(stores.air_values.size,)]
                cur.execute("SELECT readonly FROM duckdb_databases() WHERE database_name = 'analysis'")
                assert cur.fetchall() == [(True,)]
            for sql in ["SELECT nextval('ids')", "SELECT * FROM force_checkpoint()"]:
                with client.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match="UNAUTHORIZED"):
                    _fetched(cur, sql)
    finally:
        process.terminate()
        process.communicate(timeout=30)
    after = zarrsql.connect(str(db))
    try:
        assert after.sql("SELECT nextval('ids')").fetchall() == [(2,)]  # 1 was taken before serving
    finally:
        after.close()


# -- 2. duplicate column names ----------------------------------------------------------------
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1 AS a, 2 AS a",
        "SELECT * FROM era5.time_lat_lon a JOIN era5.time_lat_lon b USING (time) ORDER BY ALL LIMIT 3",
        "SELECT a.lat, b.lat FROM era5.time_lat_lon a, era5.time_lat_lon b ORDER BY ALL LIMIT 2",
    ],
)
def test_duplicate_column_names_reach_the_client_as_in_process(server: Any, local: Any, sql: str) -> None:
    expected = _local_table(local, sql)
    assert len(set(expected.column_names)) < expected.num_columns  # the point: names repeat
    client = _adbc(server)
    try:
        with client.cursor() as cur:
            cur.execute(sql)
            got = cur.fetch_arrow_table()
            assert got.schema == expected.schema
            assert got.to_pylist() == expected.to_pylist()
            cur.adbc_prepare(sql)  # the prepared statement's announced schema too
            assert cur.adbc_execute_schema(sql).names == expected.column_names
    finally:
        client.close()


# -- 3. a prepared statement re-run after its store changed ------------------------------------
def _write_air(path: Path, *, days: int, with_rh: bool) -> None:
    import xarray as xr

    coords = {
        "time": np.datetime64("2021-01-01") + np.arange(days).astype("timedelta64[D]"),
        "lat": [10.0, 20.0],
        "lon": [0.0, 1.0, 2.0],
    }
    variables: dict[str, Any] = {"air": (("time", "lat", "lon"), np.ones((days, 2, 3), np.float64))}
    if with_rh:
        variables = {
            "air": (("time", "lat", "lon"), np.full((days, 2, 3), 2.0, np.float32)),
            "rh": (("time", "lat", "lon"), np.zeros((days, 2, 3))),
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.Dataset(variables, coords=coords).to_zarr(path, mode="w")


def test_re_executing_on_the_same_cursor_after_the_store_changed(tmp_path: Path) -> None:
    store = tmp_path / "air.zarr"
    _write_air(store, days=3, with_rh=False)
    sql = "SELECT * FROM era5.time_lat_lon ORDER BY time, lat, lon"
    con = zarrsql.connect()
    zarrsql.mount(con, str(store), "era5")
    with serve(con, port=0) as handle:
        client = _adbc(handle)
        try:
            with client.cursor() as cur:
                cur.execute(sql)
                assert cur.fetch_arrow_table() == _local_table(con, sql)
                _write_air(store, days=5, with_rh=True)
                expected = _local_table(con, sql)
                assert "rh" in expected.column_names  # the point: the schema changed
                cur.execute(sql)  # the same text: ADBC reuses its prepared statement
                assert cur.fetch_arrow_table() == expected
        finally:
            client.close()
    con.close()


# -- 4. shutdown with a client that stopped reading --------------------------------------------
def test_shutdown_returns_while_a_client_holds_an_unread_stream(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrsql.server import serving

    monkeypatch.setattr(serving, "SHUTDOWN_SECONDS", 1.0)
    con = mounted(stores)
    handle = serve(con, port=0)
    client, options = _raw(handle)
    info = client.get_flight_info(_command("SELECT y, x, value FROM big.y_x"), options)
    reader = client.do_get(info.endpoints[0].ticket, options)
    assert reader.read_chunk().data.num_rows > 0  # one batch read; the rest waits in gRPC's send
    time.sleep(0.5)
    finished = threading.Event()
    stopping = threading.Thread(target=lambda: (handle.shutdown(), finished.set()), daemon=True)
    started = time.monotonic()
    stopping.start()
    try:
        assert finished.wait(20), "shutdown() waited for the stalled client"
        assert time.monotonic() - started < 15
    finally:
        reader.cancel()
        client.close()
    assert finished.wait(30)
    assert wait_for(lambda: handle.open_streams == 0, 20)  # the stream is freed once its client leaves
    con.close()


# -- 5. errors after the first batch keep their kind, without tracebacks -------------------------
@pytest.fixture(scope="module")
def corrupt_late(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """A server over a 400 x 1000 grid whose last chunk (rows 360-399) is garbage; and its connection."""
    path = tmp_path_factory.mktemp("late") / "grid.zarr"
    _write_grid(path, (400, 1000), 40)
    (path / "value" / "c" / "9" / "0").write_bytes(b"garbage" * 100)
    con = zarrsql.connect()
    zarrsql.mount(con, str(path), "grid")
    handle = serve(con, port=0, limits=Limits(batch_rows=2000))
    yield handle, con
    handle.shutdown()
    con.close()


def _stream_error(handle: Any, sql: str) -> tuple[int, BaseException | None]:
    client, options = _raw(handle)
    try:
        info = client.get_flight_info(_command(sql), options)
        return _read_until_error(client.do_get(info.endpoints[0].ticket, options))
    finally:
        client.close()


def test_a_corrupt_late_chunk_ends_the_stream_with_zarrsqls_message(corrupt_late: tuple[Any, Any]) -> None:
    handle, con = corrupt_late
    sql = "SELECT * FROM grid.y_x"
    with pytest.raises(Exception, match="could not be decoded") as local_error:
        con.sql(sql).fetchall()
    # (the scan's threads read chunks out of order: the error comes after some batches or none,
    # through the stream either way)
    _, err = _stream_error(handle, sql)
    assert isinstance(err, flight.FlightServerError)
    message = str(err).split(". Detail:")[0]
    assert message.startswith("chunk 'value/c/9/0'")  # zarrsql's own message, not DuckDB's wrapping
    assert message in str(local_error.value)
    assert "Traceback" not in str(err)


def test_an_error_on_a_late_row_ends_the_stream_with_duckdbs_message(corrupt_late: tuple[Any, Any]) -> None:
    handle, con = corrupt_late
    sql = "SELECT y, CASE WHEN y = 390 THEN error('boom at 390') ELSE 1 END AS v FROM range(400) t(y), range(1000)"
    with pytest.raises(Exception, match="boom at 390") as local_error:
        con.sql(sql).fetchall()
    # DuckDB 1.5 reports about one such failure in 60 as 'INTERRUPT Error' (plain DuckDB does too,
    # threads streaming Arrow): the server then says so instead of blaming a time limit
    outcomes = [_stream_error(handle, sql)[1] for _ in range(1 if _DUCKDB_2 else 5)]
    for err in outcomes:
        assert isinstance(err, flight.FlightServerError)
        assert "Traceback" not in str(err)
    messages = [str(err).split(". Detail:")[0] for err in outcomes]
    assert str(local_error.value).strip() in messages
    assert set(messages) <= {str(local_error.value).strip(), UNEXPLAINED_INTERRUPT}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM range(100000) t(a), range(100000) u(b)",  # interrupted before its first batch
        "SELECT a + b AS s FROM range(100000) t(a), range(100000) u(b)",  # interrupted while streaming
    ],
    ids=["before-first-batch", "mid-stream"],
)
def test_an_interrupt_no_limit_or_cancel_caused_is_not_called_a_timeout(sql: str) -> None:
    """DuckDB 1.5's own stray interrupt (the test above), made here by interrupting DuckDB past
    the server's timer and cancel bookkeeping: the client is told what happened."""
    con = zarrsql.connect()
    outcome: list[BaseException | None] = []
    with serve(con, port=0, limits=Limits(batch_rows=100)) as handle:
        client, options = _raw(handle)

        def fetch() -> None:
            try:
                info = client.get_flight_info(_command(sql), options)
                outcome.append(_read_until_error(client.do_get(info.endpoints[0].ticket, options))[1])
            except Exception as err:  # the point: which error the call ends with
                outcome.append(err)

        def running() -> list[Any]:
            with handle._service._running_lock:
                return [lease for _, lease in handle._service._running.values() if lease.cursor is not None]

        fetching = threading.Thread(target=fetch)
        fetching.start()
        try:
            assert wait_for(lambda: len(running()) == 1)
            time.sleep(0.5)  # DuckDB is inside the query now
            running()[0].interrupt()
            fetching.join(CALL_SECONDS)
        finally:
            client.close()
    con.close()
    assert not fetching.is_alive()
    (err,) = outcome
    assert isinstance(err, flight.FlightServerError) and not isinstance(err, flight.FlightTimedOutError)
    assert str(err).split(". Detail:")[0] == UNEXPLAINED_INTERRUPT


def test_a_time_limit_met_mid_stream_is_flights_timed_out_error(stores: Stores) -> None:
    con = zarrsql.connect()
    with serve(con, port=0, limits=Limits(batch_rows=2048, timeout=2.0)) as handle:
        rows, err = _stream_error(handle, "SELECT i, md5(i::VARCHAR) AS m FROM range(2000000000) t(i)")
    con.close()
    assert rows > 0
    assert isinstance(err, flight.FlightTimedOutError)
    assert "time limit" in str(err)
    assert "Traceback" not in str(err)


def test_cancel_flight_info_mid_stream_is_flights_cancelled_error(corrupt_late: tuple[Any, Any]) -> None:
    handle, _ = corrupt_late
    client, options = _raw(handle)
    try:
        info = client.get_flight_info(_command("SELECT * FROM range(400000) t(i)"), options)
        reader = client.do_get(info.endpoints[0].ticket, options)
        first = reader.read_chunk().data.num_rows
        body = protocol.encode([(1, info.serialize())])
        (result,) = client.do_action(flight.Action("CancelFlightInfo", body), options)
        assert protocol.decode(result.body.to_pybytes()) == {1: [protocol.CANCEL_CANCELLED]}
        rows, err = _read_until_error(reader)
    finally:
        client.close()
    assert first + rows < 400000  # not the whole result, shown as if whole
    assert isinstance(err, flight.FlightCancelledError)
    assert "Traceback" not in str(err)
    assert wait_for(lambda: handle.open_streams == 0)


def test_list_flights_and_do_exchange_say_not_supported(server: Any) -> None:
    client, options = _raw(server)
    try:
        with pytest.raises(flight.FlightServerError, match="ListFlights is not supported") as listed:
            list(client.list_flights(options=options))
        assert "Traceback" not in str(listed.value)
        with pytest.raises(flight.FlightServerError, match="DoExchange is not supported") as exchanged:
            _exchange(client, options)
        assert "Traceback" not in str(exchanged.value)
    finally:
        client.close()


# -- 6. EXPLAIN and PRAGMA forms, with comments before them -------------------------------------
@pytest.mark.parametrize(
    "sql",
    [
        "/* why */ EXPLAIN SELECT * FROM era5.time_lat_lon",
        "-- why\nEXPLAIN SELECT * FROM era5.time_lat_lon",
        "EXPLAIN (FORMAT json) SELECT * FROM era5.time_lat_lon",
        # (ANALYZE runs the query: over range(), as on DuckDB 1.5 an analyzed store scan run by
        # the server now and then never returns, before this change too)
        "EXPLAIN (ANALYZE) SELECT count(*) FROM range(1000)",
        "EXPLAIN /* a plan */ ANALYZE SELECT count(*) FROM range(1000)",
        "/* c */ PRAGMA show_tables",
        "-- c\nPRAGMA version",
    ],
)
def test_explain_and_pragma_forms_run_as_in_process(server: Any, local: Any, sql: str) -> None:
    expected = local.sql(sql).fetchall()
    client = _adbc(server)
    try:
        with client.cursor() as cur:
            cur.execute(sql)
            got = cur.fetchall()
    finally:
        client.close()
    # (the in-process connection also lists the scans it registered itself: __zarrsql_...)
    expected = [row for row in expected if not str(row[0]).startswith("__zarrsql_")]
    assert len(got) == len(expected)
    if "EXPLAIN" not in sql:  # a plan's text holds timings and ids
        assert got == expected


# -- 7. rows larger than a message ---------------------------------------------------------------
def test_a_row_over_the_message_limit_names_the_limits_to_raise(server: Any) -> None:
    client = _adbc(server)
    try:
        with client.cursor() as cur, pytest.raises(adbc_driver_manager.Error) as err:
            _fetched(cur, "SELECT repeat('x', 20000000) AS s")
        assert "16 MiB" in str(err.value)
        assert "with_max_msg_size" in str(err.value)
        assert "--max-message-mib" in str(err.value)
        with client.cursor() as cur:  # the session goes on
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
    finally:
        client.close()


def test_large_rows_arrive_when_both_limits_are_raised() -> None:
    sql = "SELECT repeat('x', 20000000) AS s"
    con = zarrsql.connect()
    with serve(con, port=0, limits=Limits(message_bytes=64 << 20)) as handle:
        client = _adbc(handle, **{"adbc.flight.sql.client_option.with_max_msg_size": str(64 << 20)})
        try:
            with client.cursor() as cur:
                cur.execute(sql)
                assert cur.fetch_arrow_table() == _local_table(con, sql)
        finally:
            client.close()
    con.close()


def test_uneven_rows_are_cut_under_the_message_limit(server: Any, local: Any) -> None:
    """Two 9 MB rows among small ones: cut by the average row size alone, they would share a
    message over ADBC's 16 MiB."""
    sql = "SELECT i, CASE WHEN i IN (1, 2) THEN repeat('x', 9000000) ELSE 'a' END AS s FROM range(100) t(i) ORDER BY i"
    client = _adbc(server)
    try:
        with client.cursor() as cur:
            cur.execute(sql)
            assert cur.fetch_arrow_table() == _local_table(local, sql)
    finally:
        client.close()


# -- 8. path descriptors -----------------------------------------------------------------------
def test_path_descriptors_are_refused_with_what_to_send(server: Any) -> None:
    client, options = _raw(server)
    path = flight.FlightDescriptor.for_path("era5")
    try:
        with pytest.raises(flight.FlightServerError, match="path descriptors .* not supported") as info_error:
            client.get_flight_info(path, options)
        with pytest.raises(pa.ArrowException, match="path descriptors .* not supported") as schema_error:
            client.get_schema(path, options)
    finally:
        client.close()
    for err in (info_error.value, schema_error.value):
        assert "CommandStatementQuery" in str(err)
        assert "this is a bug" not in str(err)


# -- 9. options ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--query-timeout", "nan"], "finite number above 0"),
        (["--query-timeout", "inf"], "finite number above 0"),
        (["--query-timeout", "-3"], "finite number above 0"),
        (["--port", "99999"], "from 0 to 65535"),
        (["--port", "-1"], "from 0 to 65535"),
    ],
)
def test_serve_refuses_timeouts_and_ports_out_of_range(args: list[str], message: str) -> None:
    result = run_cli("serve", "--no-auth", *args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0.0, -1.0])
def test_limits_refuse_a_timeout_that_is_not_a_finite_positive_number(timeout: float) -> None:
    with pytest.raises(zarrsql.ParameterError, match="finite number of seconds"):
        Limits(timeout=timeout)


@pytest.mark.parametrize("port", [99999, -1])
def test_serve_refuses_a_port_out_of_range(port: int) -> None:
    con = zarrsql.connect()
    try:
        with pytest.raises(zarrsql.ParameterError, match="from 0 to 65535"):
            serve(con, port=port)
    finally:
        con.close()
