"""Queries over Flight SQL give what the same query gives in process, and what the writers
wrote: statement and prepared queries, parameters, catalog browsing, raw Flight calls."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from tests.server.helpers import Stores, adbc_connect, flight_client

QUERIES = [
    "SELECT * FROM era5.time_lat_lon ORDER BY time, lat, lon",
    "SELECT lat, avg(air) AS mean_air, count(*) AS n FROM era5.time_lat_lon GROUP BY lat ORDER BY lat",
    "SELECT * FROM cells.obs ORDER BY obs",
    "SELECT obs, var, X FROM cells.obs_var ORDER BY obs, var",
    "SELECT cell_type, count(*) AS n FROM cells.obs GROUP BY ALL ORDER BY ALL",
    "SELECT * FROM read_zarr_tables('{air}') ORDER BY ALL",
]


def _in_process(local: Any, sql: str, params: list[Any] | None = None) -> pa.Table:
    rel = local.sql(sql, params=params) if params else local.sql(sql)
    return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()


def assert_same(remote: pa.Table, expected: pa.Table) -> None:
    """Same schema and rows; floating aggregates to rounding (DuckDB sums in parallel, in an
    order that differs from run to run)."""
    assert remote.schema == expected.schema
    assert remote.num_rows == expected.num_rows
    for name in expected.column_names:
        got, want = remote[name], expected[name]
        if pa.types.is_floating(want.type):
            np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-12)
        else:
            assert got.equals(want), name


@pytest.mark.parametrize("sql", QUERIES)
def test_query_over_adbc_equals_in_process(client: Any, local: Any, stores: Stores, sql: str) -> None:
    sql = sql.format(air=stores.air)
    with client.cursor() as cur:
        cur.execute(sql)
        remote = cur.fetch_arrow_table()
    assert_same(remote, _in_process(local, sql))


def test_values_equal_the_arrays_the_writers_wrote(client: Any, stores: Stores) -> None:
    with client.cursor() as cur:
        cur.execute("SELECT air FROM era5.time_lat_lon ORDER BY time, lat DESC, lon")
        air = cur.fetch_arrow_table()["air"].to_numpy()
        # lat descends in the store (60 → 15); ORDER BY lat DESC keeps the written order
        np.testing.assert_array_equal(air, stores.air_values.ravel())
        cur.execute("SELECT obs, var, X FROM cells.obs_var")
        dense = np.zeros_like(stores.x_dense)
        for obs, var, x in cur.fetchall():
            dense[int(obs[1:]), int(var[1:])] = x
        np.testing.assert_array_equal(dense, stores.x_dense)
        cur.execute("SELECT obs, cell_type FROM cells.obs")
        got = {obs: kind for obs, kind in cur.fetchall()}
        assert got == {f"c{i}": kind for i, kind in enumerate(stores.cell_types)}


def test_bound_parameters_filter_as_in_process(client: Any, local: Any, stores: Stores) -> None:
    sql = "SELECT time, lat, lon, air FROM era5.time_lat_lon WHERE lat > ? AND lon < ? ORDER BY ALL"
    with client.cursor() as cur:
        cur.execute(sql, (float(stores.lat[4]), 10.0))
        remote = cur.fetch_arrow_table()
    expected = _in_process(local, sql, [float(stores.lat[4]), 10.0])
    assert remote.equals(expected)
    lat_ok = stores.lat > stores.lat[4]
    assert remote.num_rows == stores.air_values.shape[0] * int(lat_ok.sum()) * 4  # lon 0, 2.5, 5, 7.5


def test_a_prepared_statement_is_reused_with_new_parameters(client: Any, server: Any, stores: Stores) -> None:
    sql = "SELECT count(*) FROM cells.obs WHERE cell_type = ?"
    before = server.state()["prepared"]
    with client.cursor() as cur:
        counts = {}
        for kind in ("B", "T", "NK"):
            cur.execute(sql, (kind,))
            counts[kind] = cur.fetchone()[0]
            # the DB-API prepares once per distinct text: one statement held, whatever the parameters
            assert server.state()["prepared"] == before + 1
    assert counts == {k: stores.cell_types.count(k) for k in ("B", "T", "NK")}
    assert server.state()["prepared"] == before  # closing the cursor closed the statement


def test_executemany_style_parameter_rows(client: Any, stores: Stores) -> None:
    """One prepared statement run for a batch of parameter rows (DoPut of several rows)."""
    import pyarrow as pa

    with client.cursor() as cur:
        cur.adbc_prepare("SELECT ?::VARCHAR AS kind, count(*) AS n FROM cells.obs WHERE cell_type = ?::VARCHAR")
        cur.adbc_statement.bind(pa.record_batch({"a": ["B", "T"], "b": ["B", "T"]}))
        handle, _ = cur.adbc_statement.execute_query()
        from adbc_driver_manager import _lib  # noqa: F401 - the stream is an Arrow C stream

        rows = pa.RecordBatchReader._import_from_c(handle.address).read_all().to_pylist()
    assert rows == [{"kind": k, "n": stores.cell_types.count(k)} for k in ("B", "T")]


def test_get_objects_lists_mounted_schemas_tables_and_columns(client: Any, local: Any) -> None:
    objects = client.adbc_get_objects().read_all().to_pylist()
    catalogs = {c["catalog_name"]: c for c in objects}
    assert {"era5", "cells", "big"} <= set(catalogs)
    for name in ("era5", "cells"):
        (schema,) = catalogs[name]["catalog_db_schemas"]
        assert schema["db_schema_name"] == "main"
        tables = {t["table_name"]: t for t in schema["db_schema_tables"]}
        expected = {r[0] for r in local.sql(f"SELECT view_name FROM zarr_mounts('{name}')").fetchall()}
        assert set(tables) == expected
        for table, entry in tables.items():
            columns = [c["column_name"] for c in entry["table_columns"]]
            assert columns == local.sql(f'SELECT * FROM {name}.main."{table}" LIMIT 0').columns
            assert entry["table_type"] == "VIEW"
    assert not any(n.startswith("__zarrsql_") for c in objects for n in [c["catalog_name"]])


def test_get_objects_filters_by_pattern(client: Any) -> None:
    objects = client.adbc_get_objects(catalog_filter="cells", table_name_filter="obs%").read_all().to_pylist()
    assert [c["catalog_name"] for c in objects] == ["cells"]
    names = {t["table_name"] for s in objects[0]["catalog_db_schemas"] for t in s["db_schema_tables"]}
    assert names == {"obs", "obs_var"}


def test_table_schema_over_adbc_equals_in_process(client: Any, local: Any) -> None:
    schema = client.adbc_get_table_schema("time_lat_lon", catalog_filter="era5", db_schema_filter="main")
    assert schema == _in_process(local, "SELECT * FROM era5.time_lat_lon LIMIT 0").schema


def test_sql_info_names_the_server(client: Any) -> None:
    import zarrsql

    info = client.adbc_get_info()
    assert info["vendor_name"] == "zarrsql"
    assert info["vendor_version"].startswith(zarrsql.__version__)
    assert info["vendor_arrow_version"] == pa.__version__


def test_table_types(client: Any) -> None:
    assert set(client.adbc_get_table_types()) == {"BASE TABLE", "VIEW"}


def test_errors_carry_zarrsql_messages(client: Any, local: Any, stores: Stores) -> None:
    import adbc_driver_manager

    import zarrsql

    sql = f"SELECT * FROM read_zarr('{stores.air}', table_name := 'nope')"
    with pytest.raises(zarrsql.SelectionError) as in_process:
        local.sql(sql)
    with client.cursor() as cur, pytest.raises(adbc_driver_manager.Error) as err:
        cur.execute(sql)
    assert str(in_process.value) in str(err.value)
    assert "Traceback" not in str(err.value)


# -- raw pyarrow.flight ------------------------------------------------------------------
def _any(name: str, body: bytes) -> bytes:
    from zarrsql.server import protocol

    return protocol.pack(name, body)


def test_raw_statement_query_streams_the_result(server: Any, local: Any) -> None:
    from zarrsql.server import protocol

    client, options = flight_client(server)
    sql = "SELECT y, x, value FROM big.y_x WHERE y < 300 ORDER BY y, x"
    command = _any("CommandStatementQuery", protocol.encode([(1, sql)]))
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    expected = _in_process(local, sql)
    assert info.schema == expected.schema
    reader = client.do_get(info.endpoints[0].ticket, options)
    batches = [chunk.data for chunk in reader]
    assert max(b.num_rows for b in batches) <= server._service.limits.batch_rows
    assert len(batches) > 1  # 300 000 rows arrive as several batches
    assert pa.Table.from_batches(batches).equals(expected)
    client.close()


def test_raw_ticket_is_used_once(server: Any) -> None:
    from zarrsql.server import protocol

    client, options = flight_client(server)
    command = _any("CommandStatementQuery", protocol.encode([(1, "SELECT 1 AS one")]))
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    assert client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist() == [{"one": 1}]
    with pytest.raises(flight.FlightServerError, match="ticket"):
        client.do_get(info.endpoints[0].ticket, options).read_all()
    client.close()


def test_raw_get_tables_with_schemas(server: Any, local: Any) -> None:
    from zarrsql.server import protocol

    client, options = flight_client(server)
    command = _any("CommandGetTables", protocol.encode([(1, "era5"), (5, True)]))
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    rows = client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist()
    assert [(r["catalog_name"], r["db_schema_name"], r["table_name"]) for r in rows] == [
        ("era5", "main", "time_lat_lon")
    ]
    schema = pa.ipc.read_schema(pa.py_buffer(rows[0]["table_schema"]))
    assert schema == _in_process(local, "SELECT * FROM era5.time_lat_lon LIMIT 0").schema
    client.close()


def test_raw_get_sql_info_read_only_flag(server: Any) -> None:
    from zarrsql.server import protocol

    client, options = flight_client(server)
    command = _any("CommandGetSqlInfo", protocol.encode([(1, 3)]))  # FLIGHT_SQL_SERVER_READ_ONLY
    info = client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    rows = client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist()
    assert rows == [{"info_name": 3, "value": True}]
    client.close()


def test_a_second_client_gets_its_own_session(server: Any) -> None:
    a, b = adbc_connect(server), adbc_connect(server)
    try:
        with a.cursor() as ca, b.cursor() as cb:
            ca.execute("SELECT 1")
            ca.fetchall()
            before = server.state()["sessions"]
            cb.execute("SELECT 1")
            cb.fetchall()
            assert server.state()["sessions"] == before + 1
    finally:
        a.close()
        b.close()
