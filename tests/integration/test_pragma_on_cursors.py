"""`PRAGMA table_info` and `pragma_table_info('<table>')` on a mounted table answer on a
cursor as on the connection that mounted it (and so over the Flight SQL server, whose
sessions are cursors).

DuckDB binds the view such a call names only when the result is read, after the statement
ran; a cursor shares the parent's views but not the scans the parent registered, and the
read failed with "read_zarr() was run on the plain DuckDB connection (con.duckdb)".

Oracles: DuckDB's own PRAGMA on a plain table made from xarray's frame of the same store
(the same column names and types), and the same statement on the connection itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql

pytestmark = pytest.mark.timeout(120)

TABLE = "demo.lat_lon"
#: Each statement as written, and the same statement on the oracle's plain table `lat_lon`.
STATEMENTS = [
    (f"PRAGMA table_info('{TABLE}')", "PRAGMA table_info('lat_lon')"),
    (f"PRAGMA table_info({TABLE})", "PRAGMA table_info(lat_lon)"),
    (f"SELECT * FROM pragma_table_info('{TABLE}')", "SELECT * FROM pragma_table_info('lat_lon')"),
    (
        f"SELECT name, type FROM pragma_table_info('{TABLE}') ORDER BY cid",
        "SELECT name, type FROM pragma_table_info('lat_lon') ORDER BY cid",
    ),
    ("SELECT * FROM pragma_table_info('\"DEMO\".main.\"LAT_LON\"')", "SELECT * FROM pragma_table_info('lat_lon')"),
    (f"SELECT * FROM pragma_show('{TABLE}')", "SELECT * FROM pragma_show('lat_lon')"),
]  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pragma") / "s.zarr"
    air = np.arange(12, dtype=np.float32).reshape(3, 4)
    ds = xr.Dataset(
        {"air": (("lat", "lon"), air)},
        coords={"lat": [10.0, 20.0, 30.0], "lon": np.arange(4, dtype=np.int64)},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray's notices about consolidated metadata
        ds.to_zarr(path, mode="w")
    return path


@pytest.fixture(scope="module")
def oracle(store: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """Plain DuckDB with a table `lat_lon` made from xarray's frame of the store."""
    with xr.open_zarr(store) as ds:
        frame = ds.to_dataframe().reset_index()
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE lat_lon AS SELECT lat, lon, air FROM frame")
    yield con
    con.close()


@pytest.fixture
def con(store: Path) -> Iterator[zarrsql.Connection]:
    made = zarrsql.connect()
    zarrsql.mount(made, str(store), "demo")
    yield made
    made.close()


def _rows(relation: Any) -> list[tuple[Any, ...]]:
    return [] if relation is None else relation.fetchall()


@pytest.mark.parametrize(("sql", "plain"), STATEMENTS)
@pytest.mark.parametrize("method", ["sql", "query", "execute"])
def test_table_info_on_a_cursor_equals_plain_duckdb(
    con: zarrsql.Connection, oracle: duckdb.DuckDBPyConnection, sql: str, plain: str, method: str
) -> None:
    expected = oracle.execute(plain).fetchall()
    assert len(expected) == 3  # lat, lon, air
    cursor = con.cursor()
    assert _rows(getattr(cursor, method)(sql)) == expected
    assert _rows(con.sql(sql)) == expected  # the connection itself answers the same


def test_a_cursor_made_before_the_mount_answers_too(store: Path, oracle: duckdb.DuckDBPyConnection) -> None:
    """A cursor without zarrsql's functions installed yet (no views when it was made)."""
    with zarrsql.connect() as parent:
        cursor = parent.cursor()
        zarrsql.mount(parent, str(store), "demo")
        rows = cursor.sql(f"SELECT name, type FROM pragma_table_info('{TABLE}')").fetchall()
    assert rows == oracle.execute("SELECT name, type FROM pragma_table_info('lat_lon')").fetchall()


def test_the_cursor_reads_the_table_after_its_table_info(con: zarrsql.Connection, store: Path) -> None:
    cursor = con.cursor()
    cursor.sql(f"SELECT * FROM pragma_table_info('{TABLE}')").fetchall()
    got = cursor.sql(f"SELECT lat, lon, air FROM {TABLE} ORDER BY lat, lon").fetchall()
    with xr.open_zarr(store) as ds:
        frame = ds.to_dataframe().reset_index().sort_values(["lat", "lon"])
    assert got == list(frame[["lat", "lon", "air"]].itertuples(index=False, name=None))


def test_an_unknown_name_is_duckdbs_own_catalog_error(con: zarrsql.Connection) -> None:
    cursor = con.cursor()
    with pytest.raises(duckdb.CatalogException, match="nowhere"):
        cursor.sql("SELECT * FROM pragma_table_info('demo.nowhere')").fetchall()
    with pytest.raises(duckdb.CatalogException, match="nowhere"):
        con.sql("SELECT * FROM pragma_table_info('demo.nowhere')").fetchall()


def test_table_info_over_the_flight_sql_server(con: zarrsql.Connection, oracle: duckdb.DuckDBPyConnection) -> None:
    pytest.importorskip("adbc_driver_flightsql")
    from tests.server.helpers import adbc_connect
    from zarrsql.server import serve

    handle = serve(con, "127.0.0.1", 0)
    client = adbc_connect(handle)
    try:
        for sql, plain in STATEMENTS:
            with client.cursor() as cur:
                cur.execute(sql)
                assert [tuple(row) for row in cur.fetchall()] == oracle.execute(plain).fetchall(), sql
    finally:
        client.close()
        handle.shutdown()
