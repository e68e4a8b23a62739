"""Small chunks read in grouped work units: the same rows, in the same order, as chunk by chunk.

The reader merges runs of adjacent small chunks into one unit (`ScanPlan.grouped_units`) and
puts the rows back in the order the ungrouped units give (chunk by chunk in row-major order of
the chunk grid, each chunk row-major). The oracle is numpy on the arrays xarray wrote: the
cells in that order, filtered by the same WHERE. The store has ragged edge chunks on every
axis, a descending latitude, NaN in a float variable and an integer variable; the grouping
target is varied so that units merge along none, one, two and all axes.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.plan import units as plan_units

SHAPE = (13, 23, 50)
CHUNKS = (2, 5, 8)
TIMES = pd.date_range("2021-03-01", periods=SHAPE[0], freq="h")
LAT = np.linspace(80.0, -80.0, SHAPE[1])  # descending
LON = np.arange(SHAPE[2], dtype=np.float64) * 2.0
#: Grouping targets in cells: 1 never merges; 600 merges longitude; 5000 longitude and
#: latitude whole and pairs of time chunks; the default merges the whole array.
TARGETS = [1, 600, 5000, None]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.normal(size=SHAPE).astype(np.float32)
    a[rng.random(SHAPE) < 0.05] = np.nan
    b = rng.integers(-1000, 1000, size=SHAPE).astype(np.int16)
    ds = xr.Dataset(
        {"a": (("time", "lat", "lon"), a), "b": (("time", "lat", "lon"), b)},
        coords={"time": TIMES, "lat": LAT, "lon": LON},
    )
    path = Path(tmp_path_factory.mktemp("grouped")) / "small.zarr"
    encoding = {"a": {"chunks": CHUNKS}, "b": {"chunks": CHUNKS}}
    ds.to_zarr(path, encoding=encoding, zarr_format=3, consolidated=True)
    back = xr.open_zarr(path)  # the oracle reads what was written
    return str(path), back["a"].values, back["b"].values


def chunk_order(mask: np.ndarray) -> np.ndarray:
    """Flat indices of the cells where `mask` holds, chunk by chunk (row-major over the
    chunk grid), each chunk's cells row-major."""
    flat = np.arange(mask.size).reshape(mask.shape)
    parts = []
    for index in itertools.product(*[range(-(-n // c)) for n, c in zip(SHAPE, CHUNKS, strict=True)]):
        cells = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, CHUNKS, strict=True))
        parts.append(flat[cells][mask[cells]])
    return np.concatenate(parts)


def kept_chunks(mask: np.ndarray) -> int:
    """Chunks holding at least one cell where `mask` holds."""
    n = 0
    for index in itertools.product(*[range(-(-s // c)) for s, c in zip(SHAPE, CHUNKS, strict=True)]):
        n += bool(mask[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, CHUNKS, strict=True))].any())
    return n


def expected_columns(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    order = chunk_order(mask)
    t, y, x = np.unravel_index(order, SHAPE)
    return {
        "time": TIMES.values.astype("datetime64[us]")[t],
        "lat": LAT[y],
        "lon": LON[x],
        "a": a.reshape(-1)[order].astype(np.float64),
        "b": b.reshape(-1)[order].astype(np.int64),
    }


def read(con: zarrsql.Connection, sql: str) -> dict[str, np.ndarray]:
    table = con.sql(sql).to_arrow_table()
    out = {}
    for name in table.column_names:
        col = table.column(name)
        values = col.to_numpy()
        out[name] = values.astype(np.float64) if name == "a" else values
    return out


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name in want:
        assert len(got[name]) == len(want[name]), name
        if name == "a":  # NULL (from NaN) comes back as NaN
            np.testing.assert_array_equal(got[name], want[name])
        else:
            assert np.array_equal(got[name].astype(want[name].dtype), want[name]), name


@pytest.fixture(params=TARGETS, ids=lambda t: f"cells={t}")
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int | None:
    if request.param is not None:
        monkeypatch.setattr(plan_units, "GROUP_CELLS", request.param)
    return request.param


def test_full_scan_is_every_cell_in_chunk_order(store, target) -> None:
    path, a, b = store
    con = zarrsql.connect()
    with zarrsql.trace() as t:
        got = read(con, f"SELECT time, lat, lon, a, b FROM read_zarr('{path}')")
    assert_same(got, expected_columns(a, b, np.ones(SHAPE, dtype=bool)))
    n_chunks = kept_chunks(np.ones(SHAPE, dtype=bool))
    assert t.work_units_read == n_chunks  # grid cells, grouped or not
    # a and b once each, and the 3 coordinates unless an earlier test cached them
    assert t.chunks_decoded in (2 * n_chunks, 2 * n_chunks + 3)


@pytest.mark.parametrize(
    ("where", "cells"),
    [
        (
            "lat < 10 AND lon BETWEEN 5 AND 61",
            lambda: (LAT < 10)[None, :, None] & ((LON >= 5) & (LON <= 61))[None, None, :],
        ),
        (
            "time >= '2021-03-01 03:00' AND lat > -30",
            lambda: (np.arange(13) >= 3)[:, None, None] & (LAT > -30)[None, :, None],
        ),
        (
            "lon IN (0, 2, 30, 98) AND time < '2021-03-01 05:00'",
            lambda: np.isin(LON, [0, 2, 30, 98])[None, None, :] & (np.arange(13) < 5)[:, None, None],
        ),
    ],
    ids=["box", "tail", "scattered"],
)
def test_separable_where_reads_kept_chunks_in_chunk_order(store, target, where, cells) -> None:
    path, a, b = store
    mask = np.broadcast_to(cells(), SHAPE)
    con = zarrsql.connect()
    with zarrsql.trace() as t:
        got = read(con, f"SELECT time, lat, lon, a, b FROM read_zarr('{path}') WHERE {where}")
    assert_same(got, expected_columns(a, b, mask))
    if zarrsql.engine.source.HAS_SOURCES:  # DuckDB 2.x pushes the WHERE into the plan
        assert t.work_units_read == kept_chunks(mask)


def test_limit_takes_the_first_rows_in_chunk_order(store, target) -> None:
    path, a, b = store
    con = zarrsql.connect()
    got = read(con, f"SELECT a, b FROM read_zarr('{path}') LIMIT 37")
    want = expected_columns(a, b, np.ones(SHAPE, dtype=bool))
    assert_same(got, {"a": want["a"][:37], "b": want["b"][:37]})


def test_count_and_aggregates_match_numpy(store, target) -> None:
    path, a, b = store
    con = zarrsql.connect()
    got = con.sql(f"SELECT count(*), count(a), sum(a), sum(b) FROM read_zarr('{path}') WHERE lat < 0").fetchall()[0]
    sel = LAT < 0
    a64, b64 = a[:, sel, :].astype(np.float64), b[:, sel, :].astype(np.int64)
    assert got[0] == a64.size
    assert got[1] == int(np.count_nonzero(~np.isnan(a64)))
    assert got[2] == pytest.approx(float(np.nansum(a64)), rel=1e-9)
    assert got[3] == int(b64.sum())


def test_a_corrupt_chunk_inside_a_grouped_unit_is_named(store, tmp_path: Path) -> None:
    import shutil

    path, _, _ = store
    copy = tmp_path / "corrupt.zarr"
    shutil.copytree(path, copy)
    (copy / "a" / "c" / "3" / "2" / "4").write_bytes(b"not zstd at all")
    with pytest.raises(zarrsql.DecodeError, match=r"chunk 'a/c/3/2/4' of array 'a'.*codec 'zstd'"):
        zarrsql.connect().execute(f"SELECT avg(a) FROM read_zarr('{copy}')").fetchall()
