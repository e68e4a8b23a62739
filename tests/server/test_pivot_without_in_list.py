"""A PIVOT without an IN list over the Flight SQL server.

DuckDB creates an ENUM type of the ON column's values before such a PIVOT runs (DuckDB 2 parses
it as one MULTI statement, 1.5 as CREATE statements and a SELECT). A read-only server refuses
it by name with the fix (list the values: `ON lon IN (...)`), never as "MULTI statements" or
"2 statements"; with the IN list it runs read-only, and with --allow-writes it runs as written.
Oracle: plain DuckDB over the same numbers in a native table.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_manager
import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.server.helpers import adbc_connect
from zarrsql.server import serve
from zarrsql.server.policy import StatementRefused, classify

AIR = np.arange(6.0).reshape(2, 3)
LAT = [10.0, 20.0]
LON = [0.0, 90.0, 180.0]
WITHOUT_IN = "PIVOT w.lat_lon ON lon USING sum(air) GROUP BY lat ORDER BY lat"
WITH_IN = "PIVOT w.lat_lon ON lon IN (0.0, 90.0, 180.0) USING sum(air) GROUP BY lat ORDER BY lat"


def _oracle(sql: str) -> list[tuple]:
    """`sql` (naming the table `w.lat_lon`) run by plain DuckDB over a native table."""
    plain = duckdb.connect()
    rows = [(lat, lon, float(AIR[i, j])) for i, lat in enumerate(LAT) for j, lon in enumerate(LON)]
    plain.execute("CREATE TABLE t (lat DOUBLE, lon DOUBLE, air DOUBLE)")
    plain.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    return plain.execute(sql.replace("w.lat_lon", "t")).fetchall()


@pytest.fixture(scope="module")
def connection(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zarrsql.Connection]:
    store = tmp_path_factory.mktemp("pivot") / "w.zarr"
    xr.Dataset({"air": (("lat", "lon"), AIR)}, coords={"lat": LAT, "lon": LON}).to_zarr(store, consolidated=False)
    con = zarrsql.connect()
    zarrsql.mount(con, str(store), "w")
    yield con
    con.close()


def _rows(handle: Any, sql: str) -> list[tuple]:
    client = adbc_connect(handle)
    try:
        with client.cursor() as cur:
            cur.execute(sql)
            return [tuple(row) for row in cur.fetchall()]
    finally:
        client.close()


@pytest.mark.parametrize(
    "sql",
    [
        WITHOUT_IN,
        "-- a comment\npivot_wider w.lat_lon ON lon USING sum(air)",
        "WITH x AS (SELECT * FROM w.lat_lon) PIVOT x ON lon USING sum(air)",
    ],
)
def test_a_read_only_server_names_the_pivot_and_the_in_list(sql: str) -> None:
    with pytest.raises(StatementRefused) as refused:
        classify(sql, allow_writes=False)
    message = str(refused.value)
    assert "PIVOT without an IN list" in message
    assert "ON lon IN (" in message
    assert "MULTI" not in message
    assert "statements" not in message


def test_other_refusals_keep_their_words() -> None:
    with pytest.raises(StatementRefused, match="[23] statements; send one"):
        classify(f"{WITHOUT_IN}; DROP VIEW w.lat_lon", allow_writes=False)
    with pytest.raises(StatementRefused, match="CREATE statements"):
        classify('CREATE TABLE "pivot" (a INTEGER)', allow_writes=False)


def test_over_the_wire_read_only(connection: zarrsql.Connection) -> None:
    handle = serve(connection, port=0)
    try:
        with pytest.raises(adbc_driver_manager.Error, match=r"PIVOT without an IN list.*ON lon IN \("):
            _rows(handle, WITHOUT_IN)
        assert _rows(handle, WITH_IN) == _oracle(WITH_IN)
    finally:
        handle.shutdown()


def test_with_allow_writes_the_pivot_runs(connection: zarrsql.Connection) -> None:
    handle = serve(connection, port=0, allow_writes=True)
    try:
        assert _rows(handle, WITHOUT_IN) == _oracle(WITHOUT_IN)
    finally:
        handle.shutdown()
