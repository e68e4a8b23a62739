"""Pushdown seen from outside: EXPLAIN shows the filters and the row count; trace() shows pruning."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
import zarr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

needs_sources = pytest.mark.skipif(not HAS_SOURCES, reason="DuckDB 1.5 has no scan-source protocol; covered by the 2.x run")


def _explain(con: zarrsql.Connection, sql: str) -> str:
    return "\n".join(r[1] for r in con.sql("EXPLAIN " + sql).fetchall())


@needs_sources
def test_explain_lists_pushed_filters_and_exact_row_count(fixture_path: Callable[[str], str]) -> None:
    path = fixture_path("air_temperature.zarr")
    n = int(np.prod(zarr.open_array(f"{path}/air", mode="r").shape))
    with zarrsql.connect() as con:
        plan = _explain(con, f"SELECT avg(air) FROM read_zarr('{path}') WHERE lat > 50 AND time < '2013-01-05'")
    assert re.search(r'Filters:.*"lat" > 50', plan, re.S)
    assert '"time" < TIMESTAMP' in plan
    assert f"~{n:,} rows" in plan


@needs_sources
def test_bounds_row_count_is_the_planned_rows(fixture_path: Callable[[str], str]) -> None:
    path = fixture_path("big_edge.zarr")
    a = zarr.open_array(f"{path}/a", mode="r")[...]
    shape = zarr.open_array(f"{path}/v", mode="r").shape
    kept = int(((a >= 20) & (a <= 40)).sum())
    with zarrsql.connect() as con:
        plan = _explain(con, f"SELECT * FROM read_zarr('{path}', bounds := [['a', '20', '40']])")
    assert f"~{kept * shape[1] * shape[2]:,} rows" in plan


def test_filters_on_data_columns_stay_duckdb(fixture_path: Callable[[str], str]) -> None:
    path = fixture_path("air_temperature.zarr")
    with zarrsql.connect() as con, zarrsql.trace() as t:
        got = con.sql(f"SELECT count(*) FROM read_zarr('{path}') WHERE air > 280").fetchall()[0][0]
        want = con.sql(f"SELECT count(*) FROM (SELECT * FROM read_zarr('{path}') LIMIT 1000000000) WHERE air > 280").fetchall()[0][0]
    assert got == want > 0
    assert t.work_units_read == t.work_units_planned  # nothing pruned: the filter is on data


def test_contradictory_where_reads_nothing(fixture_path: Callable[[str], str]) -> None:
    path = fixture_path("air_temperature.zarr")
    with zarrsql.connect() as con, zarrsql.trace() as t:
        assert con.sql(f"SELECT count(*) FROM read_zarr('{path}') WHERE lat > 60 AND lat < 20").fetchall() == [(0,)]
    assert t.work_units_read == 0 and t.chunks_decoded == 0


@needs_sources
def test_narrow_slice_inside_a_chunk_produces_only_its_rows(fixture_path: Callable[[str], str]) -> None:
    path = fixture_path("air_temperature.zarr")
    lat = zarr.open_array(f"{path}/lat", mode="r")[...]
    with zarrsql.connect() as con, zarrsql.trace() as t:
        rows = con.sql(f"SELECT * FROM read_zarr('{path}') WHERE lat = {float(lat[3])} AND lon = 250").fetchall()
    n_time = zarr.open_array(f"{path}/time", mode="r").shape[0]
    assert len(rows) == n_time
    assert t.rows == n_time  # the chunk is decoded, but only the matching rows are produced
