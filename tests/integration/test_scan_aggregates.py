"""GROUP BY on coordinates computed by the scan (engine/grouped.py), against independent oracles.

The stores are written by xarray (CF packing, `_FillValue`s, a descending latitude, ragged
edge chunks); the oracle is plain DuckDB running the same statement over xarray's own
decoding of the store (`to_dataframe`), or numpy over the raw arrays. Each test checks the
statement was rewritten (its relation reads the registered groups) and that its result, its
column names and its column types are the oracle's.
"""

from __future__ import annotations

import gc
import math
import os

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.engine import grouped
from zarrsql.errors import ZarrSQLError
from zarrsql.plan.units import ScanPlan

REWRITTEN = "__zarrsql_grouped_"


@pytest.fixture(autouse=True)
def _small_stores_qualify(monkeypatch):
    """The stores here are small; by default a scan this small is left to DuckDB."""
    monkeypatch.setattr(grouped, "MIN_ROWS", 0)


def _dataset(nan: float = np.nan, shape: tuple[int, int, int] = (100, 13, 17)) -> xr.Dataset:
    rng = np.random.default_rng(7)
    time = pd.date_range("2021-03-01", periods=shape[0], freq="h")
    lat = np.linspace(60.0, -60.0, shape[1])  # descending
    lon = np.linspace(0.0, 352.0, shape[2])
    air = (270 + 20 * rng.random(shape)).astype("float32")
    air[rng.random(air.shape) < 0.07] = nan
    wind = (rng.random(shape) * 30 - 5).astype("float32")
    counts = rng.integers(-40, 1000, shape).astype("int32")
    counts[rng.random(counts.shape) < 0.05] = -999
    ds = xr.Dataset(
        {
            "air": (("time", "lat", "lon"), air),
            "wind": (("time", "lat", "lon"), wind),
            "counts": (("time", "lat", "lon"), counts),
        },
        coords={"time": time, "lat": lat, "lon": lon},
    )
    ds["counts"].attrs["_FillValue"] = np.int32(-999)
    # packed as int16 by xarray: scale_factor and add_offset, decoded to float32
    ds["wind"].encoding.update({"dtype": "int16", "scale_factor": np.float32(0.01), "add_offset": np.float32(10.0),
                                "_FillValue": np.int16(-32767)})  # fmt: skip
    return ds


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("agg") / "climate.zarr")
    ds = _dataset()
    ds["counts"].attrs.pop("_FillValue")
    ds["counts"].encoding["_FillValue"] = np.int32(-999)
    ds.chunk({"time": 24, "lat": 5, "lon": 7}).to_zarr(path, mode="w", zarr_format=3)
    return path


@pytest.fixture(scope="module")
def oracle(store) -> duckdb.DuckDBPyConnection:
    """Plain DuckDB over xarray's decoding of the store: a row per cell, NaN as NULL."""
    ds = xr.open_zarr(store, mask_and_scale=True)
    frame = ds.to_dataframe().reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    frame["counts"] = frame["counts"].astype("Int32")  # xarray makes the masked ints float64
    con = duckdb.connect()
    con.register("cells", pa.Table.from_pandas(frame, preserve_index=False))
    return con


def _rows(rel) -> list[tuple]:
    return [tuple(r) for r in rel.fetchall()]


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _check(con, oracle, store, sql: str, *, ordered: bool = False, rewritten: bool = True) -> list[tuple]:
    expected_rel = oracle.sql(sql.format(t="cells"))
    expected = _rows(expected_rel)
    with zarrsql.trace() as t:
        rel = con.sql(sql.format(t=f"read_zarr('{store}')"))
        got = _rows(rel)
    assert (REWRITTEN in rel.sql_query()) is rewritten, sql
    if not ordered:
        got, expected = sorted(got, key=repr), sorted(expected, key=repr)
    assert len(got) == len(expected), (sql, got, expected)
    for g, e in zip(got, expected, strict=True):
        assert all(_close(x, y) for x, y in zip(g, e, strict=True)), (sql, g, e)
    assert rel.columns == expected_rel.columns
    assert [str(x) for x in rel.types] == [str(x) for x in expected_rel.types], sql
    if rewritten:
        assert t.rows == t.rows_aggregated  # DuckDB received no cell
    else:
        assert t.rows_aggregated == 0
    return got


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def test_a_climatology_per_grid_cell(con, oracle, store):
    got = _check(
        con, oracle, store, "SELECT lat, lon, avg(air) AS a, count(air), count(*), max(wind) FROM {t} GROUP BY lat, lon"
    )
    assert len(got) == 13 * 17


def test_an_area_weighted_time_series(con, oracle, store):
    _check(
        con,
        oracle,
        store,
        "SELECT time, sum(air * cos(radians(lat))) / sum(cos(radians(lat))) AS mean FROM {t} "
        "GROUP BY time ORDER BY time",
        ordered=True,
    )


def test_keys_of_expressions_conditions_having_order_and_limit(con, oracle, store):
    _check(
        con,
        oracle,
        store,
        "SELECT date_trunc('day', time) AS d, hour(time) % 6 AS h, min(wind), max(wind), sum(counts) AS s, "
        "avg(counts), count(counts) FROM {t} WHERE lat > 0 AND lon BETWEEN 10 AND 200 AND time < '2021-03-04 07:00' "
        "GROUP BY ALL HAVING count(*) > 3 AND s > 0 ORDER BY d DESC, h LIMIT 7",
        ordered=True,
    )


def test_positions_and_names_of_items_as_keys(con, oracle, store):
    _check(
        con,
        oracle,
        store,
        "SELECT round(lat / 20) AS band, avg(air) - 273.15 AS c FROM {t} GROUP BY 1 ORDER BY band",
        ordered=True,
    )
    _check(con, oracle, store, "SELECT lon > 180 AS west, min(time), max(time), count(*) FROM {t} GROUP BY west")


def test_a_whole_table_aggregate(con, oracle, store):
    _check(
        con,
        oracle,
        store,
        "SELECT avg(air), min(counts), max(air), sum(counts), count(*), sum(cos(radians(lat))) FROM {t}",
    )


def test_nothing_kept(con, oracle, store):
    assert _check(con, oracle, store, "SELECT lat, avg(air) FROM {t} WHERE time > '2100-01-01' GROUP BY lat") == []
    (row,) = _check(con, oracle, store, "SELECT avg(air), count(*), count(air), min(lat) FROM {t} WHERE lon < -1")
    assert row == (None, 0, 0, None)


@pytest.mark.parametrize("bound", ["2021-03-02T05:30:00+01:00", "2021-03-02 05:30:00-05:30", "2021-03-02 05:30:00Z"])
def test_time_strings_with_an_offset_are_read_as_duckdb_reads_them(con, oracle, store, bound):
    """A UTC offset in a time compared with a TIMESTAMP dimension: the rows are DuckDB's, and
    the estimate of the rows read parses it without numpy's timezone warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for op in ("<", ">=", "="):
            sql = f"SELECT lat, count(*), avg(air) FROM {{t}} WHERE time {op} '{bound}' GROUP BY lat"
            _check(con, oracle, store, sql)
    plain = duckdb.connect()
    assert grouped._micros(bound) == plain.execute(f"SELECT epoch_us(CAST('{bound}' AS TIMESTAMP))").fetchone()[0]


def test_the_integer_sum_is_duckdbs_hugeint(con, store):
    rel = con.sql(f"SELECT lat, sum(counts) FROM read_zarr('{store}') GROUP BY lat")
    assert REWRITTEN in rel.sql_query()
    assert str(rel.types[1]) == "HUGEINT"
    raw = zarr.open_group(store, mode="r")["counts"][...].astype(np.int64)
    expected = np.where(raw == -999, 0, raw).sum(axis=(0, 2))
    lats = zarr.open_group(store, mode="r")["lat"][...]
    got = dict(rel.fetchall())
    assert [got[float(v)] for v in lats] == expected.tolist()


def test_shapes_left_to_duckdb_are_right(con, oracle, store):
    for sql in [
        "SELECT lat, stddev(air) FROM {t} GROUP BY lat",
        "SELECT lat, count(DISTINCT counts) FROM {t} GROUP BY lat",
        "SELECT lat, avg(air) FROM {t} WHERE air > 280 GROUP BY lat",
        "SELECT lat + lon AS k, count(*) FROM {t} GROUP BY k",
        "SELECT lat, lon, count(*) FROM {t} GROUP BY GROUPING SETS ((lat), (lon))",
        "SELECT lat, avg(air), rank() OVER (ORDER BY avg(air)) FROM {t} GROUP BY lat",
        "SELECT lat, avg(air) FILTER (WHERE lon > 100) FROM {t} GROUP BY lat",
        "SELECT lat, avg(air) FROM {t} WHERE lat > 0 OR lon > 100 GROUP BY lat",
        "SELECT lat, sum(air * air) FROM {t} GROUP BY lat",
    ]:
        _check(con, oracle, store, sql, rewritten=False)


def test_an_item_named_like_another_column_is_left_to_duckdb(con, oracle, store):
    _check(con, oracle, store, "SELECT lon AS lat, count(*) FROM {t} GROUP BY lon, lat ORDER BY lat", rewritten=False)


def test_a_small_scan_is_left_to_duckdb(con, oracle, store, monkeypatch):
    monkeypatch.setattr(grouped, "MIN_ROWS", 1 << 20)  # the default: this store has 22,100 cells
    _check(con, oracle, store, "SELECT lat, avg(air) FROM {t} GROUP BY lat", rewritten=False)


def test_the_option_leaves_every_aggregate_to_duckdb(con, oracle, store):
    zarrsql.set_option("scan_aggregates", False)
    try:
        _check(con, oracle, store, "SELECT lat, avg(air) FROM {t} GROUP BY lat", rewritten=False)
    finally:
        zarrsql.set_option("scan_aggregates", True)


def test_views_mounts_strings_and_execute(con, oracle, store):
    expected = _rows(oracle.sql("SELECT lat, avg(air) FROM cells GROUP BY lat ORDER BY lat"))
    con.sql(f"CREATE VIEW climate AS SELECT * FROM read_zarr('{store}')")
    zarrsql.mount(con, store, "m")
    (view,) = [r[0] for r in con.sql("SELECT view_name FROM zarr_mounts('m')").fetchall()]
    for source in ("climate", f"'{store}'", f'm."{view}"'):
        rel = con.sql(f"SELECT lat, avg(air) FROM {source} GROUP BY lat ORDER BY lat")
        assert REWRITTEN in rel.sql_query(), source
        assert all(
            _close(a, b) for g, e in zip(rel.fetchall(), expected, strict=True) for a, b in zip(g, e, strict=True)
        )
    got = con.execute(f"SELECT lat, avg(air) FROM read_zarr('{store}') GROUP BY lat ORDER BY lat").fetchall()
    assert all(_close(a, b) for g, e in zip(got, expected, strict=True) for a, b in zip(g, e, strict=True))


def test_a_relation_reads_the_store_once_and_fetches_again(con, store):
    with zarrsql.trace() as t:
        rel = con.sql(f"SELECT lat, avg(air) FROM read_zarr('{store}') GROUP BY lat ORDER BY lat")
        first = rel.fetchall()
        assert rel.fetchall() == first
        assert rel.limit(2).fetchall() == first[:2]
    assert t.scans == 1


def test_old_relations_fetch_again_and_kept_results_are_bounded(con, oracle, store, monkeypatch):
    """A relation is fetched again after many more aggregates have run on the connection, so
    are relations made from it; the results kept for `execute()` stay bounded."""
    monkeypatch.setattr(grouped, "MAX_RESULTS_KEPT", 2)
    expected = _rows(oracle.sql("SELECT lat, max(air) FROM cells GROUP BY lat ORDER BY lat"))
    sql = "SELECT lat, max(air) + {i} AS m FROM read_zarr('" + store + "') GROUP BY lat ORDER BY lat"
    rels = [con.sql(sql.format(i=i)) for i in range(4)]
    derived = con.sql(sql.format(i=100)).filter("lat > 0")
    gc.collect()
    for _ in range(3):
        con.execute(sql.format(i=-1)).fetchall()
    for i, rel in enumerate(rels):
        assert REWRITTEN in rel.sql_query()
        got = rel.fetchall()
        assert [g[0] for g in got] == [e[0] for e in expected]
        assert all(_close(g[1], e[1] + i) for g, e in zip(got, expected, strict=True))
    if int(duckdb.__version__.split(".")[0]) >= 2:  # on 1.5 it reads a name dropped with its parent relation
        kept = [(lat, m + 100) for lat, m in expected if lat > 0]
        got = derived.fetchall()
        assert len(got) == len(kept) == 6
        assert all(_close(g[1], e[1]) for g, e in zip(got, kept, strict=True))
    del rels, derived
    gc.collect()
    con.execute(sql.format(i=-2)).fetchall()
    assert len(con._state.grouped) == 2


def test_nan_is_a_value_with_nan_as_null_false(tmp_path):
    """NaN makes sum and max NaN, min skips it, count counts it (DuckDB over the same values)."""
    path = str(tmp_path / "nan.zarr")
    values = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan], [-np.inf, 2.0, np.inf], [0.5, -0.5, 7.0]])
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("v", data=values.astype("float64"), chunks=(3, 2), dimension_names=["a", "b"])
    oracle = duckdb.connect()
    a, b = np.meshgrid(np.arange(4), np.arange(3), indexing="ij")
    oracle.register("cells", pa.table({"a": a.reshape(-1), "b": b.reshape(-1), "v": values.reshape(-1)}))
    sql = "SELECT a, sum(v), avg(v), min(v), max(v), count(v) FROM {t} GROUP BY a ORDER BY a"
    expected = oracle.sql(sql.format(t="cells")).fetchall()
    with zarrsql.connect() as con:
        rel = con.sql(sql.format(t=f"read_zarr('{path}', nan_as_null := false)"))
        assert REWRITTEN in rel.sql_query()
        got = rel.fetchall()
    assert len(got) == len(expected) == 4
    for g, e in zip(got, expected, strict=True):
        assert all(_close(x, y) for x, y in zip(g, e, strict=True)), (g, e)


def test_small_chunks_read_in_merged_units(tmp_path, monkeypatch):
    """Chunks far under the reader's unit size are merged into units; groups are still exact.

    282 880 cells in 320 chunks of 884: just over one unit's `GROUP_CELLS`, so the chunks
    past the first unit's (read chunk by chunk, for an early LIMIT) are read as one merged
    unit."""
    path = str(tmp_path / "small.zarr")
    ds = _dataset(shape=(64, 65, 68))[["air"]]
    ds.to_zarr(path, mode="w", zarr_format=3, encoding={"air": {"chunks": (4, 13, 17)}})
    raw = xr.open_zarr(path, chunks=None)  # xarray's decoding, read whole (no dask graph)
    expected_lat = raw["air"].mean(("time", "lon"), skipna=True).to_series()
    expected_all = float(raw["air"].mean(skipna=True))
    merged: list[int] = []  # chunks per unit the grouped scans were given
    listed = ScanPlan.grouped_units

    def spied(plan, *args, **kwargs):
        for unit in listed(plan, *args, **kwargs):
            merged.append(unit.merged)
            yield unit

    monkeypatch.setattr(ScanPlan, "grouped_units", spied)
    with zarrsql.connect() as con, zarrsql.trace() as t:
        rel = con.sql(f"SELECT lat, avg(air) FROM read_zarr('{path}') GROUP BY lat")
        got = dict(rel.fetchall())
        ((whole,),) = con.sql(f"SELECT avg(air) FROM read_zarr('{path}')").fetchall()
    assert REWRITTEN in rel.sql_query()
    assert t.work_units_planned == 2 * 16 * 5 * 4
    assert t.work_units_read == 2 * t.work_units_planned // 2  # every chunk once, each scan
    assert sum(merged) == t.work_units_planned, merged  # the units cover every chunk once
    assert max(merged) > 1, merged  # and some were merged
    assert got == pytest.approx({float(k): float(v) for k, v in expected_lat.items()}, rel=1e-6)
    assert whole == pytest.approx(expected_all, rel=1e-6)


def test_a_damaged_chunk_fails_the_statement(tmp_path):
    """A chunk that cannot be decoded is the statement's error, raised once, naming the chunk."""
    path = tmp_path / "broken.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("v", data=np.arange(40, dtype="float32").reshape(8, 5), chunks=(4, 5), dimension_names=["a", "b"])
    chunk = path / "v" / "c" / "1" / "0"
    chunk.write_bytes(os.urandom(chunk.stat().st_size))
    with zarrsql.connect() as con, zarrsql.trace() as t, pytest.raises(ZarrSQLError) as info:
        con.sql(f"SELECT a, sum(v) FROM read_zarr('{path}') GROUP BY a").fetchall()
    assert "c/1/0" in str(info.value)
    assert t.scans == 1
