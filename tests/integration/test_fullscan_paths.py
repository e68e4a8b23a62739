"""The full-scan fast paths give the rows the arrays hold (issue 20, goal 1).

- a scan's first unit is decoded column by column on the reader's threads (`_Columns` in
  `scan/reader.py`): its rows, its LIMIT and a corrupt chunk in it behave as before;
- a coordinate column of the last, shorter time block is the start of a full block's kept
  column (`DenseScan._coordinate`): every row of it still names its own cell;
- chunk indices kept by a predicate are made unique without `np.unique` (`plan/units.py`).

The oracle is numpy on the arrays xarray wrote, in the order the reader gives rows: chunk by
chunk over the chunk grid, each chunk row-major.
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

SHAPE = (10, 6, 8)
CHUNKS = (4, 6, 4)  # the last time block holds 2 steps; two longitude blocks per time block
TIMES = pd.date_range("2022-01-01", periods=SHAPE[0], freq="h")
LAT = np.linspace(50.0, 40.0, SHAPE[1], dtype=np.float32)
LON = np.arange(SHAPE[2], dtype=np.float32) * 1.5


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    a = rng.normal(size=SHAPE).astype(np.float32)
    a[rng.random(SHAPE) < 0.1] = np.nan
    b = rng.integers(-500, 500, size=SHAPE).astype(np.int32)
    ds = xr.Dataset(
        {"a": (("time", "lat", "lon"), a), "b": (("time", "lat", "lon"), b)},
        coords={"time": TIMES, "lat": LAT, "lon": LON},
    )
    path = Path(tmp_path_factory.mktemp("fullscan")) / "blocks.zarr"
    ds.to_zarr(path, encoding={"a": {"chunks": CHUNKS}, "b": {"chunks": CHUNKS}}, zarr_format=3, consolidated=True)
    back = xr.open_zarr(path)
    arrays = {name: back[name].values for name in ("a", "b", "time", "lat", "lon")}
    return str(path), arrays


@pytest.fixture(autouse=True)
def chunk_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """One work unit per chunk, as on a store of large chunks (these are small ones)."""
    monkeypatch.setattr(plan_units, "GROUP_CELLS", 1)


def chunk_order() -> np.ndarray:
    """Flat cell indices in the reader's order: chunk by chunk, each chunk row-major."""
    flat = np.arange(int(np.prod(SHAPE))).reshape(SHAPE)
    parts = []
    for index in itertools.product(*[range(-(-n // c)) for n, c in zip(SHAPE, CHUNKS, strict=True)]):
        cells = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, CHUNKS, strict=True))
        parts.append(flat[cells].reshape(-1))
    return np.concatenate(parts)


def expected_rows(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    t, y, x = np.unravel_index(chunk_order(), SHAPE)
    return {
        "time": arrays["time"][t],
        "lat": arrays["lat"][y],
        "lon": arrays["lon"][x],
        "a": arrays["a"][t, y, x],
        "b": arrays["b"][t, y, x],
    }


def read(path: str, sql: str) -> dict[str, np.ndarray]:
    with zarrsql.connect() as con:
        table = con.sql(sql.format(src=f"read_zarr('{path}')")).to_arrow_table()
    out = {}
    for name in table.column_names:
        column = table.column(name)
        if name == "a":  # NaN is NULL in SQL: compare NULL as NaN
            out[name] = np.array([np.nan if v is None else v for v in column.to_pylist()], dtype=np.float32)
        elif name == "time":
            out[name] = column.to_numpy().astype("datetime64[ns]")
        else:
            out[name] = column.to_numpy()
    return out


def test_every_row_in_reader_order(store: tuple[str, dict[str, np.ndarray]]) -> None:
    path, arrays = store
    got = read(path, "SELECT time, lat, lon, a, b FROM {src}")
    want = expected_rows(arrays)
    assert len(got["a"]) == int(np.prod(SHAPE))
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)


@pytest.mark.parametrize("limit", [1, 7, 16, 40])
def test_limit_rows_are_the_first_rows(store: tuple[str, dict[str, np.ndarray]], limit: int) -> None:
    """LIMIT inside the first unit (16 cells per unit) and past it."""
    path, arrays = store
    got = read(path, f"SELECT time, lat, lon, a, b FROM {{src}} LIMIT {limit}")
    want = expected_rows(arrays)
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values[:limit], err_msg=name)


def test_group_by_coordinates_over_a_short_last_block(store: tuple[str, dict[str, np.ndarray]]) -> None:
    """The last time block (2 steps of 4) reads its latitude and longitude columns as the
    start of a full block's: every (lat, lon) group still gets its own cells' values."""
    path, arrays = store
    got = read(path, "SELECT lat, lon, sum(b) AS s, count(a) AS n FROM {src} GROUP BY lat, lon ORDER BY lat, lon")
    lat, lon = np.meshgrid(arrays["lat"], arrays["lon"], indexing="ij")
    order = np.lexsort((lon.reshape(-1), lat.reshape(-1)))
    np.testing.assert_array_equal(got["lat"], lat.reshape(-1)[order])
    np.testing.assert_array_equal(got["lon"], lon.reshape(-1)[order])
    np.testing.assert_array_equal(got["s"], arrays["b"].sum(axis=0, dtype=np.int64).reshape(-1)[order])
    np.testing.assert_array_equal(got["n"], (~np.isnan(arrays["a"])).sum(axis=0).reshape(-1)[order])


def test_last_block_after_the_full_ones(store: tuple[str, dict[str, np.ndarray]]) -> None:
    """Only the last time block: its rows alone, coordinates included."""
    path, arrays = store
    got = read(path, "SELECT time, lat, lon, b FROM {src} WHERE time >= '2022-01-01 08:00:00'")
    want = expected_rows(arrays)
    keep = want["time"] >= np.datetime64("2022-01-01T08:00:00")
    for name in ("time", "lat", "lon", "b"):
        np.testing.assert_array_equal(got[name], want[name][keep], err_msg=name)


def test_corrupt_chunk_of_the_first_unit(store: tuple[str, dict[str, np.ndarray]], tmp_path: Path) -> None:
    """A chunk of the first unit that does not decode fails the query with the chunk's name,
    whichever of the columns decoded apart meets it."""
    import shutil

    path, _ = store
    broken = tmp_path / "broken.zarr"
    shutil.copytree(path, broken)
    (broken / "b" / "c" / "0" / "0" / "0").write_bytes(b"\x28\xb5\x2f\xfdnot a zstd frame at all")
    with zarrsql.connect() as con, pytest.raises(zarrsql.DecodeError) as info:
        con.execute(f"SELECT time, lat, lon, a, b FROM read_zarr('{broken}') LIMIT 3").fetchall()
    assert "b/c/0/0/0" in str(info.value)


@pytest.mark.parametrize("seed", range(5))
def test_sorted_unique_is_numpy_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 17, 500):
        values = rng.integers(-20, 20, size=n)
        got = plan_units.sorted_unique(values)
        want = np.unique(values)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
