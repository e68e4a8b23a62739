"""A `zarrsql.Connection` dropped without `close()` is freed, its DuckDB database with it.

DuckDB keeps the functions zarrsql registers (and the scans it registers) in its C++
catalog, out of sight of Python's garbage collector: anything they hold that leads back to
the connection made a cycle that was never collected, so every dropped connection that had
read a store stayed in memory (about 4 MB each, with its database). A connection still in
use must keep working: its functions never find the connection gone while it lives.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import xarray as xr

import zarrsql

pytestmark = pytest.mark.timeout(120)

#: Connections made and dropped per test: enough that a leak of each is unmistakable (the
#: assertion counts any connection still alive, so one kept by a cache fails it as well).
CONNECTIONS = 10


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "s.zarr")
    xr.Dataset({"v": (("t",), np.arange(10.0))}, coords={"t": np.arange(10)}).to_zarr(
        path, mode="w", consolidated=False
    )
    return path


def _sum(path: str) -> float:
    with xr.open_zarr(path, consolidated=False) as ds:
        return float(ds["v"].values.sum())


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT sum(v) FROM read_zarr('{p}')",  # a scan registered on the connection
        "SELECT count(*), max(t) FROM read_zarr('{p}')",  # answered from the coordinates
        "SELECT * FROM zarr_mount('{p}', 'm')",  # an action run by the connection
    ],
)
def test_dropped_connections_that_read_a_store_are_freed(store, statement):
    refs = [_used_and_dropped(statement.format(p=store)) for _ in range(CONNECTIONS)]
    gc.collect()
    alive = sum(ref() is not None for ref in refs)
    assert alive == 0


def _used_and_dropped(statement: str) -> weakref.ref[zarrsql.Connection]:
    """A weak reference to a connection that ran `statement` and was dropped. In a function
    of its own: a statement looks up the caller's variables (`FROM df`), and on Python 3.11
    the frame keeps a snapshot of them, with the connection, until the frame ends."""
    con = zarrsql.connect()
    rows = con.sql(statement).fetchall()
    assert rows
    return weakref.ref(con)


def test_a_connection_in_use_keeps_working_after_a_collection(store):
    con = zarrsql.connect()
    assert con.sql(f"SELECT sum(v) FROM read_zarr('{store}')").fetchall() == [(_sum(store),)]
    gc.collect()
    # an action calls back into the connection, a scan opens a store with its opener
    assert con.sql(f"SELECT * FROM zarr_mount('{store}', 'm')").fetchall()
    gc.collect()
    assert con.sql("SELECT sum(v) FROM m.t").fetchall() == [(_sum(store),)]
    cursor = con.cursor()
    gc.collect()
    assert cursor.sql(f"SELECT sum(v) FROM read_zarr('{store}')").fetchall() == [(_sum(store),)]
    con.close()


def test_a_relation_outliving_its_connection_still_fetches(store):
    con = zarrsql.connect()
    rel = con.sql(f"SELECT sum(v) FROM read_zarr('{store}')")
    answer = con.sql(f"SELECT count(*) FROM read_zarr('{store}')")
    del con
    gc.collect()
    assert rel.fetchall() == [(_sum(store),)]
    with xr.open_zarr(store, consolidated=False) as ds:
        assert answer.fetchall() == [(ds.sizes["t"],)]
