"""Joins that prune (zarrsql issue 14, item 2): a store's table joined on its dimensions to a
small relation reads only the work units that can hold a matching key, and returns exactly
what DuckDB returns over xarray's `to_dataframe()` of the same store."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

LAT = np.arange(60, 30, -1.5, dtype="float32")  # 20 values, descending, float32
LON = np.arange(0, 40, 2.0, dtype="float32")  # 20 values
TIME = pd.date_range("2023-01-01", periods=24, freq="h")
CHUNKS = {"time": 12, "lat": 5, "lon": 5}  # 2 x 4 x 4 = 32 units


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(11)
    ds = xr.Dataset(
        {"t": (("time", "lat", "lon"), rng.normal(size=(24, 20, 20)).astype("float32"))},
        coords={"time": TIME, "lat": LAT, "lon": LON},
    )
    path = tmp_path_factory.mktemp("joins") / "j.zarr"
    ds.chunk(CHUNKS).to_zarr(path, consolidated=True)
    return str(path)


@pytest.fixture
def con(store):
    with zarrsql.connect() as c:
        c.execute(
            "CREATE TABLE stations AS SELECT * FROM (VALUES ('a', 58.5, 2.0), ('b', 45.0, 20.0), "
            "('c', 45.0, 22.0), ('d', 45.2, 22.0), ('e', NULL, 4.0)) v(name, lat, lon)"
        )
        c.execute(f"CREATE TABLE days AS SELECT TIMESTAMP '{TIME[13]}' AS time")
        yield c


@pytest.fixture(scope="module")
def cells(store) -> pd.DataFrame:
    return xr.open_zarr(store).to_dataframe().reset_index()


def _oracle(sql: str, cells: pd.DataFrame, con) -> list[tuple]:
    """The same statement on plain DuckDB, the store replaced by xarray's frame of it."""
    import duckdb

    plain = duckdb.connect()
    plain.register("cells_frame", cells)
    plain.execute("CREATE TABLE cells AS SELECT time, lat, lon, t FROM cells_frame")
    for name in ("stations", "days"):
        plain.register(f"{name}_frame", con.sql(f"SELECT * FROM {name}").df())
        plain.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_frame")
    return plain.sql(sql.replace("{src}", "cells")).fetchall()


def _units_holding(mask: np.ndarray) -> int:
    """Work units (chunks of the store) holding at least one cell of the (time, lat, lon) mask."""
    i, j, k = np.nonzero(mask)
    return len(set(zip(i // 12, j // 5, k // 5, strict=True)))


def _run(con, sql: str, store: str):
    with zarrsql.trace() as t:
        rows = con.sql(sql.replace("{src}", f"read_zarr('{store}')")).fetchall()
    return rows, t


def _station_mask(con) -> np.ndarray:
    keys = {(la, lo) for la, lo in con.sql("SELECT lat, lon FROM stations WHERE lat IS NOT NULL").fetchall()}
    grid = np.zeros((24, 20, 20), bool)
    for j, la in enumerate(LAT.astype(float)):
        for k, lo in enumerate(LON.astype(float)):
            grid[:, j, k] = (la, lo) in keys
    return grid


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT s.name, count(*), sum(z.t) FROM {src} z JOIN stations s USING (lat, lon) GROUP BY ALL ORDER BY 1",
        "SELECT s.name, z.time, z.t FROM {src} AS z JOIN stations s ON z.lat = s.lat AND z.lon = s.lon ORDER BY 1, 2",
        "SELECT s.name, z.time, z.t FROM stations s JOIN {src} z ON s.lat = z.lat AND s.lon = z.lon "
        "AND z.t > 0 ORDER BY 1, 2",
        "SELECT s.name, count(z.t) FROM stations s LEFT JOIN {src} z USING (lat, lon) GROUP BY ALL ORDER BY 1",
        "SELECT count(*), sum(t) FROM {src} WHERE (lat, lon) IN (SELECT lat, lon FROM stations)",
    ],
)
def test_joins_on_dimensions_equal_duckdb_on_xarrays_frame_and_prune(store, con, cells, sql) -> None:
    rows, t = _run(con, sql, store)
    assert rows == _oracle(sql, cells, con)
    if HAS_SOURCES:
        assert t.work_units_read == _units_holding(_station_mask(con)) < t.work_units_planned


def test_an_in_subquery_on_time_prunes_along_time(store, con, cells) -> None:
    sql = "SELECT count(*), sum(t) FROM {src} WHERE time IN (SELECT time FROM days) AND lat > 50"
    rows, t = _run(con, sql, store)
    assert rows == _oracle(sql, cells, con)
    if HAS_SOURCES:
        mask = np.zeros((24, 20, 20), bool)
        mask[13, LAT > 50, :] = True
        assert t.work_units_read == _units_holding(mask)


@pytest.mark.parametrize(
    "sql",
    [
        # the zarr table on the preserved side of an outer join: every row stays, nothing pruned
        "SELECT count(*), count(s.name) FROM {src} z LEFT JOIN stations s USING (lat, lon)",
        # keys on a data column: not a dimension, nothing to prune with
        "SELECT count(*) FROM {src} z JOIN (SELECT 0.5::FLOAT AS t) v ON z.t = v.t",
    ],
)
def test_other_shapes_run_unpruned_with_the_same_rows(store, con, cells, sql) -> None:
    rows, t = _run(con, sql, store)
    assert rows == _oracle(sql, cells, con)
    assert t.work_units_read == t.work_units_planned


def test_only_the_equalities_of_a_condition_are_pushed(store, con, cells) -> None:
    sql = "SELECT count(*), sum(z.t) FROM {src} z JOIN stations s ON z.lat > s.lat AND z.lon = s.lon"
    rows, t = _run(con, sql, store)
    assert rows == _oracle(sql, cells, con)
    if HAS_SOURCES:
        lons = {lo for (lo,) in con.sql("SELECT lon FROM stations").fetchall()}
        mask = np.zeros((24, 20, 20), bool)
        mask[:, :, np.isin(LON, list(lons))] = True
        assert t.work_units_read == _units_holding(mask) < t.work_units_planned


def test_a_large_other_side_is_not_pushed(store, con, cells) -> None:
    con.execute("CREATE TABLE many AS SELECT (60 - 1.5 * (i % 20))::FLOAT AS lat, i AS id FROM range(1500) r(i)")
    sql = "SELECT count(*) FROM {src} z JOIN many m ON z.lat = m.lat"
    rows, t = _run(con, sql, store)
    assert rows == [(1500 * 24 * 20,)]
    assert t.work_units_read == t.work_units_planned


def test_many_keys_of_two_dimensions_prune_by_each_dimensions_values(store, con, cells) -> None:
    """Past MAX_TUPLE_KEYS keys the pushed filter lists each dimension's values: the rows are
    still the join's, and the units read are those holding any combination of the values."""
    from zarrsql.engine.joins import MAX_TUPLE_KEYS

    lats, lons = LAT[:10].astype(float), LON[:15].astype(float)  # 150 pairs, 2 x 3 blocks of units
    pairs = [(la, lo) for la in lats for lo in lons if (la, lo) != (lats[0], lons[0])]
    assert len(pairs) > MAX_TUPLE_KEYS
    con.execute("CREATE TABLE many_pairs (lat DOUBLE, lon DOUBLE)")
    con.executemany("INSERT INTO many_pairs VALUES (?, ?)", pairs)
    sql = "SELECT count(*), sum(z.t) FROM {src} z JOIN many_pairs p USING (lat, lon)"
    rows, t = _run(con, sql, store)
    expected = cells.merge(pd.DataFrame(pairs, columns=["lat", "lon"]).astype("float32"), on=["lat", "lon"])
    assert rows[0][0] == len(expected)
    assert rows[0][1] == pytest.approx(float(expected.t.astype("float64").sum()), rel=1e-6)
    if HAS_SOURCES:
        mask = np.zeros((24, 20, 20), bool)
        mask[:, np.isin(LAT, lats), :] = True
        mask[:, :, ~np.isin(LON, lons)] = False
        assert t.work_units_read == _units_holding(mask) < t.work_units_planned


def test_double_keys_on_float32_dimensions_prune_and_match_duckdb(store, con, cells) -> None:
    """A station table of DOUBLE coordinates (what Python floats become) on float32 dimensions:
    DuckDB compares in DOUBLE, 58.5 is a float32 value and matches, 45.1 (as a double) is not
    and matches nothing; the pushed keys are FLOAT literals, so the scan still prunes."""
    con.execute("CREATE TABLE dbl (name VARCHAR, lat DOUBLE, lon DOUBLE)")
    con.executemany("INSERT INTO dbl VALUES (?, ?, ?)", [("a", 58.5, 2.0), ("b", 45.1, 20.0), ("c", 33.0, 38.0)])
    sql = "SELECT d.name, count(*), sum(z.t) FROM {src} z JOIN dbl d USING (lat, lon) GROUP BY ALL ORDER BY 1"
    rows, t = _run(con, sql, store)
    import duckdb

    plain = duckdb.connect()
    plain.register("cells", cells)
    plain.register("dbl", con.sql("SELECT * FROM dbl").df())
    expected = plain.sql(sql.replace("{src}", "cells")).fetchall()
    assert [r[:2] for r in rows] == [r[:2] for r in expected] == [("a", 24), ("c", 24)]
    assert [r[2] for r in rows] == pytest.approx([r[2] for r in expected])
    if HAS_SOURCES:
        mask = np.zeros((24, 20, 20), bool)
        mask[:, LAT == 58.5, LON == 2.0] = True
        mask[:, LAT == 33.0, LON == 38.0] = True
        assert t.work_units_read == _units_holding(mask) < t.work_units_planned


def test_a_mounted_table_joins_and_prunes(store, con, cells) -> None:
    zarrsql.mount(con, store, "m")
    sql = "SELECT s.name, count(*) FROM m.time_lat_lon z JOIN stations s USING (lat, lon) GROUP BY ALL ORDER BY 1"
    with zarrsql.trace() as t:
        rows = con.sql(sql).fetchall()
    assert rows == _oracle(sql.replace("m.time_lat_lon", "{src}"), cells, con)
    if HAS_SOURCES:
        assert t.work_units_read == _units_holding(_station_mask(con))
