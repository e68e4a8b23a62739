"""Long key lists on dimension columns: a pruned join, `IN (SELECT ...)` and a written OR chain.

A join's keys (up to `MAX_KEYS`, 1,000) are pushed as one condition, and DuckDB hands an OR
chain to the scan nested one level per term; a few hundred keys used to end in a
RecursionError. Every query here must give plain DuckDB's answer over a pandas copy of the
store, with 600, 1,000 and 5,000 keys on one and two dimensions, and a 600-key join must still
read only the work units holding a key.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

# DuckDB 1.5 hands the 5,000-term OR chain to the scan as an Arrow expression, which Arrow's
# Acero binds and evaluates per work unit (about 1 s each here): 52 s for the chains alone on
# a quiet machine, 125 s beside CI's DuckDB 2 pass. DuckDB 2 takes 9 s.
pytestmark = pytest.mark.timeout(120 if HAS_SOURCES else 400)

SIZES = [600, 1000, 5000]


def _write(ds: xr.Dataset, path: Path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, mode="w", consolidated=False)
    return xr.open_zarr(path, consolidated=False).to_dataframe().reset_index()


@pytest.fixture(scope="module")
def one_dim(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    """8,000 times in chunks of 100 (80 work units)."""
    path = tmp_path_factory.mktemp("keys") / "one.zarr"
    t = np.arange(8000.0)
    ds = xr.Dataset({"v": (("t",), t * 2)}, coords={"t": t}).chunk({"t": 100})
    return str(path), _write(ds, path)


@pytest.fixture(scope="module")
def two_dims(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    """A 100 x 100 grid in chunks of 10 x 10 (100 work units)."""
    path = tmp_path_factory.mktemp("keys") / "two.zarr"
    lat, lon = np.arange(100.0), np.arange(100.0)
    values = np.arange(10_000.0).reshape(100, 100)
    ds = xr.Dataset({"v": (("lat", "lon"), values)}, coords={"lat": lat, "lon": lon}).chunk({"lat": 10, "lon": 10})
    return str(path), _write(ds, path)


def _one_dim_keys(n: int) -> pd.DataFrame:
    return pd.DataFrame({"t": np.arange(n, dtype=np.float64)})


def _two_dim_keys(n: int) -> pd.DataFrame:
    k = np.arange(n)
    return pd.DataFrame({"lat": (k // 100).astype(np.float64), "lon": (k % 100).astype(np.float64)})


def _expected(frame: pd.DataFrame, keys: pd.DataFrame | None, sql: str) -> list[tuple[object, ...]]:
    plain = duckdb.connect()
    plain.register("z", frame)
    if keys is not None:
        plain.register("keys", keys)
    return plain.sql(sql.format(z="z")).fetchall()


QUERIES_1D = [
    "SELECT count(*), sum(v) FROM {z} JOIN keys USING (t)",
    "SELECT count(*), sum(v) FROM {z} WHERE t IN (SELECT t FROM keys)",
]
QUERIES_2D = [
    "SELECT count(*), sum(v) FROM {z} JOIN keys USING (lat, lon)",
    "SELECT count(*), sum(v) FROM {z} AS a JOIN keys AS k ON a.lat = k.lat AND a.lon = k.lon",
    "SELECT count(*), sum(v) FROM {z} WHERE (lat, lon) IN (SELECT (lat, lon) FROM keys)",
]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(("dims", "sql"), [("one_dim", q) for q in QUERIES_1D] + [("two_dims", q) for q in QUERIES_2D])
def test_key_lists_match_duckdb(request, dims, n, sql):
    path, frame = request.getfixturevalue(dims)
    keys = (_one_dim_keys if dims == "one_dim" else _two_dim_keys)(n)
    con = zarrsql.connect()
    con.register("keys", keys)
    got = con.sql(sql.format(z=f"read_zarr('{path}')")).fetchall()
    assert got == _expected(frame, keys, sql)


@pytest.mark.parametrize("n", SIZES)
def test_written_or_chain_and_in_list_match_duckdb(one_dim, n):
    path, frame = one_dim
    wanted = np.arange(0, 2 * n, 2, dtype=np.float64)
    chain = " OR ".join(f"t = {float(k)!r}" for k in wanted)
    listed = ", ".join(repr(float(k)) for k in wanted)
    con = zarrsql.connect()
    for where in (chain, f"t IN ({listed})", f"NOT ({chain})"):
        sql = f"SELECT count(*), sum(v) FROM {{z}} WHERE {where}"
        got = con.sql(sql.format(z=f"read_zarr('{path}')")).fetchall()
        assert got == _expected(frame, None, sql), where[:40]


@pytest.mark.parametrize("n", SIZES)
def test_written_two_dimension_or_chain_matches_duckdb(two_dims, n):
    path, frame = two_dims
    keys = _two_dim_keys(n)
    chain = " OR ".join(f"(lat = {float(a)!r} AND lon = {float(b)!r})" for a, b in zip(keys.lat, keys.lon, strict=True))
    sql = f"SELECT count(*), sum(v) FROM {{z}} WHERE {chain}"
    got = zarrsql.connect().sql(sql.format(z=f"read_zarr('{path}')")).fetchall()
    assert got == _expected(frame, None, sql)


@pytest.mark.skipif(not HAS_SOURCES, reason="DuckDB 1.5 pushes no WHERE into a Python scan")
def test_a_600_key_join_still_prunes(one_dim, two_dims):
    """600 keys: times 0..599 are 6 of 80 units; grid points with lat < 6 are 10 of 100."""
    path, frame = one_dim
    keys = _one_dim_keys(600)
    con = zarrsql.connect()
    con.register("keys", keys)
    sql = "SELECT count(*), sum(v) FROM {z} JOIN keys USING (t)"
    with zarrsql.trace() as t:
        got = con.sql(sql.format(z=f"read_zarr('{path}')")).fetchall()
    assert got == _expected(frame, keys, sql)
    assert t.work_units_read == 6

    path, frame = two_dims
    keys = _two_dim_keys(600)
    con.register("keys", keys)
    sql = "SELECT count(*), sum(v) FROM {z} JOIN keys USING (lat, lon)"
    with zarrsql.trace() as t:
        got = con.sql(sql.format(z=f"read_zarr('{path}')")).fetchall()
    assert got == _expected(frame, keys, sql)
    assert t.work_units_read == 10


def test_deeply_alternating_and_or_matches_duckdb(one_dim):
    """AND inside OR inside AND ... 600 levels: too deep to translate, so DuckDB filters."""
    path, frame = one_dim
    where = "t = 0.0"
    for k in range(1, 300):
        where = f"(t = {float(k)} OR (t < {float(3000 - k)} AND ({where})))"
    sql = f"SELECT count(*), sum(v) FROM {{z}} WHERE {where}"
    got = zarrsql.connect().sql(sql.format(z=f"read_zarr('{path}')")).fetchall()
    assert got == _expected(frame, None, sql)
