"""The first batch of a local dense scan is the first unit's leading rows (`reader.head_and_rest`).

The oracle is xarray on the store it wrote: a `LIMIT` met by the head reads nothing past
it, a scan that goes on returns every row in the same order as without the split, and the
counts of units read stay counts of grid cells.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.decode import chunks
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.plan.units import WorkUnit
from zarrsql.scan import reader

NT, NY, NX = 30, 40, 70  # 2,800 rows per time step: a head of one step (chunks of 12 steps)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, xr.Dataset]:
    rng = np.random.default_rng(21)
    t = (rng.normal(size=(NT, NY, NX)) * 4 + 280).astype("float32")
    t[rng.random(t.shape) < 0.05] = np.nan
    ds = xr.Dataset(
        {"t": (("time", "y", "x"), t), "u": (("time", "y", "x"), rng.normal(size=(NT, NY, NX)))},
        coords={
            "time": np.datetime64("2022-03-01T00", "ns") + np.arange(NT) * np.timedelta64(1, "h"),
            "y": np.linspace(10.0, -10.0, NY),  # descending
            "x": np.arange(NX) * 0.5,
        },
    )
    path = tmp_path_factory.mktemp("head") / "h.zarr"
    enc = {v: {"chunks": (12, NY, NX)} for v in ("t", "u")}
    ds.to_zarr(path, encoding=enc, zarr_format=3, consolidated=True)
    return path, ds


def _oracle_rows(ds: xr.Dataset, n: int) -> list[tuple]:
    """The first `n` rows of the table in C order of (time, y, x), from xarray."""
    out = []
    for i in range(n):
        k, rest = divmod(i, NY * NX)
        j, m = divmod(rest, NX)
        t = float(ds.t.values[k, j, m])
        out.append(
            (
                ds.time.values[k].astype("datetime64[us]").item(),
                float(ds.y.values[j]),
                float(ds.x.values[m]),
                None if np.isnan(t) else pytest.approx(t),
                pytest.approx(float(ds.u.values[k, j, m])),
            )
        )
    return out


def test_a_limit_is_met_by_the_head(store) -> None:
    path, ds = store
    con = zarrsql.connect()
    with zarrsql.trace() as tr:
        got = con.sql(f"SELECT time, y, x, t, u FROM read_zarr('{path}') LIMIT 10").fetchall()
    assert got == _oracle_rows(ds, 10)
    if HAS_SOURCES:  # DuckDB 1.5's dataset path reads ahead of a LIMIT (the whole small table here)
        assert tr.rows == NY * NX  # one time step of the first chunk's twelve
        assert tr.work_units_read == 1
    with zarrsql.trace() as tr:
        got = con.sql(f"SELECT time, y, x, t, u FROM read_zarr('{path}') LIMIT 3000").fetchall()
    assert got == _oracle_rows(ds, 3000)  # past the head: the rest of the first unit follows it
    assert tr.rows > NY * NX
    assert not chunks._rests  # the streams a head kept are dropped when its scan ends


def _data_chunk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for v in ("t", "u") for f in (path / v / "c").rglob("*") if f.is_file())


@pytest.mark.parametrize("kept", [chunks.RESTS_KEPT, 0], ids=["streamed", "rest-decoded-whole"])
def test_a_whole_scan_keeps_its_rows_order_and_counts(store, kept: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row in order, each chunk read and decoded once (the rest goes on with the head's
    stream); with no stream kept, the rest decodes its chunk whole and the rows are the same."""
    path, ds = store
    monkeypatch.setattr(chunks, "RESTS_KEPT", kept)
    con = zarrsql.connect()
    con.sql(f"SELECT count(*) FROM read_zarr('{path}')").fetchall()  # coordinates read and cached
    with zarrsql.trace() as tr:
        table = con.sql(f"SELECT time, y, x, t, u FROM read_zarr('{path}')").arrow()
        table = table.read_all() if hasattr(table, "read_all") else table  # DuckDB 2 streams
    assert table.num_rows == NT * NY * NX
    assert tr.work_units_read == tr.work_units_planned == 3  # the rest of the first unit counts no cell
    if kept:
        assert tr.chunks_decoded == 6  # two variables of three chunks
        assert tr.bytes_read == _data_chunk_bytes(path)
    t = table.column("t").to_numpy(zero_copy_only=False)
    want = ds.t.values.reshape(-1).astype("float64")
    np.testing.assert_array_equal(np.isnan(t), np.isnan(want))  # NULLs where xarray has NaN
    np.testing.assert_allclose(t[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6)
    np.testing.assert_allclose(table.column("u").to_numpy(), ds.u.values.reshape(-1))
    np.testing.assert_array_equal(table.column("y").to_numpy(), np.repeat(np.tile(ds.y.values, NT), NX))
    np.testing.assert_array_equal(table.column("x").to_numpy(), np.tile(ds.x.values, NT * NY))
    times = table.column("time").to_numpy().astype("datetime64[ns]")
    np.testing.assert_array_equal(times, np.repeat(ds.time.values, NY * NX))


def test_which_units_are_split() -> None:
    whole = WorkUnit((0, 0), ((48, 96), (0, 100)), None)
    head, rest = reader.head_and_rest(whole)
    assert head.region == ((48, 69), (0, 100))  # 2,048 rows at least, in whole rows of the first axis
    assert rest.region == ((69, 96), (0, 100))
    assert (head.merged, rest.merged) == (1, 0)
    assert reader.head_and_rest(WorkUnit((0, 0), ((0, 24), (0, 1000)), None))[0].region == ((0, 3), (0, 1000))
    kept = [
        WorkUnit((0, 0), ((0, 24), (0, 10)), None),  # 240 rows: the head would be over half
        WorkUnit((0, 0), ((0, 24), (0, 1000)), (np.array([1, 2]), None)),  # a selection
        WorkUnit((0, 0), ((0, 48), (0, 1000)), None, 2),  # a grouped unit
        WorkUnit((), (), None),  # a 0-d array
    ]
    for unit in kept:
        assert reader.head_and_rest(unit) == [unit]
