"""Virtual arrays of 10^12 cells (metadata only, no chunk written) answer in seconds.

Counting is arithmetic over the chunk grid and the coordinates, planning is lazy, and an
unwritten chunk costs nothing but its fill value. The time bounds are hang guards (the old
code took minutes or died), not benchmarks. Expected values come from zarr-python and numpy
on the raw coordinate arrays.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
import zarr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.scan import ReadRequest, open_table

N = 10**6
#: Seconds any of these queries may take before it counts as hung (they take well under 1).
GUARD = 10.0


def _write(path: Path, chunks: tuple[int, int], *, coords: bool) -> str:
    """A (y, x) float32 variable of N x N cells and no chunk: fill value NaN (so NULL)."""
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("v", shape=(N, N), chunks=chunks, dtype="float32", dimension_names=["y", "x"], fill_value=np.nan)
    if coords:
        y = np.arange(N) * 0.5
        y[7] = np.nan  # one NULL coordinate (nan_as_null): three-valued logic must hold
        root.create_array("y", data=y, chunks=(N // 4,), dimension_names=["y"])
        root.create_array("x", data=np.arange(N, dtype="int64"), chunks=(N // 4,), dimension_names=["x"])
    return str(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("huge")
    return {
        "coords": _write(base / "coords.zarr", (1000, 1000), coords=True),  # 10^6 work units
        "positional": _write(base / "positional.zarr", (1000, 1000), coords=False),
        "tiny_chunks": _write(base / "tiny.zarr", (10, 10), coords=True),  # 10^10 work units
    }


def _coords(path: str) -> tuple[np.ndarray, np.ndarray]:
    """The raw coordinates (positions for a positional dimension), read by zarr-python."""
    group = zarr.open_group(path, mode="r")
    if "y" not in group:
        return np.arange(N, dtype=np.float64), np.arange(N, dtype=np.float64)
    return np.asarray(group["y"][:]), np.asarray(group["x"][:])


def _timed(con: zarrsql.Connection, sql: str) -> tuple[list[tuple], float]:
    start = time.perf_counter()
    rows = con.sql(sql).fetchall()
    return rows, time.perf_counter() - start


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


@pytest.mark.parametrize("name", ["coords", "positional", "tiny_chunks"])
def test_count_star_is_arithmetic(stores, con, name):
    shape = zarr.open_array(stores[name] + "/v", mode="r").shape
    with zarrsql.trace() as t:
        rows, seconds = _timed(con, f"SELECT count(*) FROM read_zarr('{stores[name]}')")
    assert rows == [(int(np.prod(shape, dtype=object)),)]
    assert t.work_units_read == 0  # nothing was streamed
    assert t.rows == 0
    assert seconds < GUARD


@pytest.mark.parametrize("name", ["coords", "positional", "tiny_chunks"])
def test_filtered_counts_are_arithmetic(stores, con, name):
    y, x = _coords(stores[name])
    src = f"read_zarr('{stores[name]}')"
    # NULL (NaN) coordinates are never < 10 nor >= 10: numpy's NaN comparisons agree
    ny, nx = int((y < 10).sum()), int((x < 10).sum())
    cases = {
        f"SELECT count(*) FROM {src} WHERE x < 10 OR y < 10": ny * N + nx * N - ny * nx,
        f"SELECT count(*) FROM {src} WHERE x < 1500 AND y < 300": int((x < 1500).sum()) * int((y < 300).sum()),
        f"SELECT count(*) FROM {src} WHERE NOT (x >= 10 AND y >= 10)": ny * N + nx * N - ny * nx,
        f"SELECT count(y) FROM {src} WHERE x = 3": int((~np.isnan(y)).sum()),
    }
    for sql, expected in cases.items():
        with zarrsql.trace() as t:
            rows, seconds = _timed(con, sql)
        assert rows == [(expected,)], sql
        assert t.work_units_read == 0, sql
        assert seconds < GUARD, sql


def _point(path: str, **ranges: tuple[str, str]) -> str:
    """The table restricted to coordinate ranges: pushed WHERE on DuckDB 2.x, and `bounds :=`
    on 1.5, which has no WHERE pushdown (there a WHERE would scan all 10^12 rows)."""
    if HAS_SOURCES:
        where = " AND ".join(f"{d} BETWEEN {lo} AND {hi}" for d, (lo, hi) in ranges.items())
        return f"read_zarr('{path}') WHERE {where}"
    bounds = ", ".join(f"['{d}', '{lo}', '{hi}']" for d, (lo, hi) in ranges.items())
    return f"read_zarr('{path}', bounds := [{bounds}])"


def test_bind_limit_point_and_slab_answer_quickly(stores, con):
    path = stores["tiny_chunks"]
    y, x = _coords(path)
    src = f"read_zarr('{path}')"
    start = time.perf_counter()
    described = con.sql(f"DESCRIBE SELECT * FROM {src}").fetchall()
    assert [r[0] for r in described] == ["y", "x", "v"]
    rows = con.sql(f"SELECT y, x, v FROM {src} LIMIT 10").fetchall()
    assert rows == [(y[0], int(x[j]), None) for j in range(10)]  # fill NaN -> NULL
    rows = con.sql(f"SELECT y, x, v FROM {_point(path, x=('999999', '999999'), y=('1.5', '1.5'))}").fetchall()
    assert rows == [(1.5, 999999, None)]
    rows = con.sql(f"SELECT x, y FROM {src} WHERE x < 2 OR y < 1 LIMIT 3").fetchall()
    assert rows == [(0, 0.0), (1, 0.0), (2, 0.0)]
    assert time.perf_counter() - start < GUARD


def test_a_slab_of_unwritten_chunks_reads_as_fill(stores, con):
    """A whole row of the grid (1000 units, none written): every value the fill value."""
    path = stores["coords"]
    start = time.perf_counter()
    rows = con.sql(f"SELECT count(*), count(v), min(x), max(x) FROM {_point(path, y=('2.0', '2.0'))}").fetchall()
    assert rows == [(N, 0, 0, N - 1)]
    assert time.perf_counter() - start < GUARD


def test_plan_counts_without_listing_units(stores):
    """TableScan.plan on 10^10 units: rows, units kept and the first units, at once."""
    from zarrsql.plan.predicate import Cmp, Or

    scan = open_table(ReadRequest(store=stores["tiny_chunks"]))
    y, x = _coords(stores["tiny_chunks"])
    start = time.perf_counter()
    plan = scan.plan()
    assert plan.units_total == 10**10
    assert plan.units_kept() == 10**10
    assert plan.rows() == N * N
    first = next(iter(plan.units()))
    assert first.region == ((0, 10), (0, 10))
    masked = scan.plan(Or((Cmp("x", "<", 10), Cmp("y", "<", 10.0))))
    ny = int((y < 10).sum())
    assert masked.rows() == ny * N + 10 * N - ny * 10
    ry, rx = len(np.unique(np.flatnonzero(y < 10) // 10)), len(np.unique(np.flatnonzero(x < 10) // 10))
    assert masked.units_kept() == (ry + rx) * (N // 10) - ry * rx  # whole rows and columns of the grid
    assert time.perf_counter() - start < GUARD


def test_dataset_shell_does_not_list_units_past_its_cap(stores):
    """The DuckDB 1.5 path: count_rows and a filtered scanner on 10^10 units stay quick."""
    from zarrsql.engine.dataset import ZarrDataset

    scan = open_table(ReadRequest(store=stores["tiny_chunks"]))
    dataset = ZarrDataset(scan)
    start = time.perf_counter()
    assert dataset.count_rows() == N * N
    reader = dataset.scanner(columns=["x", "y"], filter=pc.field("x") < 3).to_reader()
    xs: list[int] = []
    for batch in reader:  # the first three rows, as `head(3)` takes them
        xs += batch.column("x").to_pylist()
        if len(xs) >= 3:
            break
    assert xs[:3] == [0, 1, 2]
    assert time.perf_counter() - start < GUARD
