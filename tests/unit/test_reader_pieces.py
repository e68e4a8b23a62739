"""A unit that carries coordinates of later axes is handed over in pieces along its first axis
(`DenseScan.row_pieces`, `reader._unit_pieces`).

The oracle is xarray on the store it wrote: every row in the same order and with the same
values as a scan handed over whole, the counts of units and chunks unchanged, and the
coordinate columns the scan keeps no longer than a piece.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.plan.units import WorkUnit
from zarrsql.scan import ReadRequest, open_table, table
from zarrsql.scan.reader import read_batches

NT, NY, NX = 29, 30, 40  # 1,200 rows per time step; chunks of 12 steps, the last one of 5
STEPS = 3  # time steps a piece spans in these tests (PIECE_ROWS set to 3,600)


@pytest.fixture(scope="module", params=["zstd", "blosc"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, xr.Dataset]:
    """zstd chunks (the first unit handed out as a head and its rest) and blosc ones (the
    first unit read column by column, `reader._Columns`): both paths cut units."""
    rng = np.random.default_rng(5)
    t = (rng.normal(size=(NT, NY, NX)) * 4 + 280).astype("float32")
    t[rng.random(t.shape) < 0.05] = np.nan
    ds = xr.Dataset(
        {"t": (("time", "lat", "lon"), t), "n": (("time", "lat", "lon"), rng.integers(0, 9, size=(NT, NY, NX)))},
        coords={
            "time": np.datetime64("2021-07-01T00", "ns") + np.arange(NT) * np.timedelta64(1, "h"),
            "lat": np.linspace(60.0, -60.0, NY),  # descending
            "lon": np.arange(NX) * 2.5,
        },
    )
    path = tmp_path_factory.mktemp("pieces") / f"{request.param}.zarr"
    enc: dict = {v: {"chunks": (12, NY, NX)} for v in ("t", "n")}
    if request.param == "blosc":
        import zarr

        for v in enc:
            enc[v]["compressors"] = [zarr.codecs.BloscCodec(cname="lz4")]
    ds.to_zarr(path, encoding=enc, zarr_format=3, consolidated=True)
    return path, ds


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table, "PIECE_ROWS", STEPS * NY * NX)


def _check_rows(got: dict[str, np.ndarray], ds: xr.Dataset) -> None:
    """The table's columns against xarray's arrays in C order of (time, lat, lon)."""
    want = ds.t.values.reshape(-1).astype("float64")
    np.testing.assert_array_equal(np.isnan(got["t"]), np.isnan(want))  # NULL where xarray has NaN
    np.testing.assert_allclose(got["t"][~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6)
    np.testing.assert_array_equal(got["n"], ds.n.values.reshape(-1))
    np.testing.assert_array_equal(got["lat"], np.repeat(np.tile(ds.lat.values, NT), NX))
    np.testing.assert_array_equal(got["lon"], np.tile(ds.lon.values, NT * NY))
    np.testing.assert_array_equal(got["time"].astype("datetime64[ns]"), np.repeat(ds.time.values, NY * NX))


def _numpy(column) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False)


def test_pieces_hold_every_row_in_order(store, small_pieces) -> None:
    path, ds = store
    scan = open_table(ReadRequest(store=str(path)))
    plan = scan.plan()
    by_name = {c.name: c for c in scan.columns}
    columns = [by_name[name] for name in ("time", "lat", "lon", "t", "n")]
    batches = list(read_batches(scan, plan, columns))
    # three units of 12, 12 and 5 steps, in pieces of at most 3 steps
    assert max(b.num_rows for b in batches) <= STEPS * NY * NX
    assert len(batches) >= -(-NT // STEPS)
    got = {c.name: np.concatenate([_numpy(b.column(c.name)) for b in batches]) for c in columns}
    _check_rows(got, ds)
    # the kept latitude and longitude columns are a piece long, not a unit long
    kept = [len(values) for values, _ in scan._patterns.values()]
    assert kept
    assert max(kept) <= STEPS * NY * NX


def test_sql_results_are_those_of_whole_units(store, small_pieces, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same queries with pieces and without (a PIECE_ROWS larger than any unit): same
    rows, and the same units, chunks and bytes read."""
    path, ds = store
    queries = [
        f"SELECT time, lat, lon, t, n FROM read_zarr('{path}')",
        f"SELECT lat, lon, avg(t) AS a, sum(n) AS s FROM read_zarr('{path}') GROUP BY lat, lon ORDER BY lat, lon",
        f"SELECT lon, count(*) AS c FROM read_zarr('{path}') WHERE time >= '2021-07-01T05:00' "
        "GROUP BY lon ORDER BY lon",
    ]
    runs = []
    for piece_rows in (STEPS * NY * NX, 10**9):
        monkeypatch.setattr(table, "PIECE_ROWS", piece_rows)
        con = zarrsql.connect()
        con.sql(f"SELECT count(*) FROM read_zarr('{path}')").fetchall()  # coordinates read and cached
        results = []
        for sql in queries:
            with zarrsql.trace() as tr:
                rows = con.sql(sql).fetchall()
            results.append((rows, tr.work_units_read, tr.chunks_decoded, tr.bytes_read))
        runs.append(results)
    assert runs[0] == runs[1]
    first = runs[0][0][0]
    got = {
        "time": np.array([r[0] for r in first], dtype="datetime64[us]"),
        "lat": np.array([r[1] for r in first]),
        "lon": np.array([r[2] for r in first]),
        "t": np.array([np.nan if r[3] is None else r[3] for r in first]),
        "n": np.array([r[4] for r in first]),
    }
    _check_rows(got, ds)
    by_cell = runs[0][1][0]
    assert len(by_cell) == NY * NX
    means = np.nanmean(ds.t.values.astype("float64"), axis=0)  # xarray's values, averaged by numpy
    lat_order = np.argsort(ds.lat.values)
    np.testing.assert_allclose([r[2] for r in by_cell], means[lat_order].reshape(-1), rtol=1e-6)
    np.testing.assert_array_equal([r[3] for r in by_cell], ds.n.values.sum(axis=0)[lat_order].reshape(-1))
    assert runs[0][2][0] == [(float(x), (NT - 5) * NY) for x in ds.lon.values]


def test_which_units_are_cut(store, small_pieces) -> None:
    path, _ = store
    scan = open_table(ReadRequest(store=str(path)))
    by_name = {c.name: c for c in scan.columns}
    lat, time, t = by_name["lat"], by_name["time"], by_name["t"]
    unit = WorkUnit((1, 0, 0), ((12, 24), (0, NY), (0, NX)), None)
    pieces = scan.row_pieces(unit, [t, lat])
    assert pieces is not None
    assert [p.region[0] for p in pieces] == [(12, 15), (15, 18), (18, 21), (21, 24)]
    assert all(p.region[1:] == unit.region[1:] and p.select is None for p in pieces)
    assert scan.row_pieces(unit, [t]) is None  # no coordinate of a later axis: nothing kept to shrink
    assert scan.row_pieces(unit, [t, time]) is None  # time is the first axis: built per unit anyway
    kept_whole = [
        WorkUnit((1, 0, 0), ((12, 15), (0, NY), (0, NX)), None),  # a piece long already
        WorkUnit((1, 0, 0), ((12, 24), (0, NY), (0, NX)), (np.array([0, 3]), None, None)),  # a selection
        WorkUnit((1, 0, 0), ((12, 36), (0, NY), (0, NX)), None, 2),  # a grouped unit
    ]
    for whole in kept_whole:
        assert scan.row_pieces(whole, [t, lat]) is None


def _ome_image(path: Path) -> str:
    """A small OME-Zarr image (ome-zarr-py) whose chunks span two channels: its physical
    coordinates are derived columns of later axes."""
    import warnings

    import zarr
    from ome_zarr import writer as ome_writer
    from ome_zarr.format import FormatV05

    data = np.random.default_rng(8).integers(0, 4000, (2, 3, 20, 12), dtype="uint16")
    axes = [{"name": "c", "type": "channel"}] + [{"name": n, "type": "space", "unit": "micrometer"} for n in "zyx"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(path), mode="w", zarr_format=3)
        ome_writer.write_image(data, root, axes=axes, fmt=FormatV05(), scaler=None,
                               coordinate_transformations=[[{"type": "scale", "scale": [1.0, 0.5, 0.25, 0.25]}]],
                               storage_options={"chunks": (2, 3, 20, 12)})  # fmt: skip
    return str(path)


PARITY = [
    ("era5_like.zarr", ", table_name := 'time_latitude_longitude'"),
    ("era5_like.zarr", ", table_name := 'time_level_latitude_longitude', longitude := 180"),
    ("air_temperature.zarr", ", longitude := 180"),
    ("labels.zarr", ", table_name := 'station_hour'"),
    ("big_edge.zarr", ""),
    ("mixed_chunks.zarr", ""),
]


@pytest.mark.parametrize(("name", "options"), PARITY)
def test_every_kind_of_coordinate_reads_the_same_in_pieces(
    fixtures_dir: Path, name: str, options: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a piece per first-axis entry, every fixture reads exactly as with whole units:
    presented longitudes, labels, a 4-D table, edge chunks, mixed chunkings."""
    _same_in_pieces(f"read_zarr('{fixtures_dir / name}'{options})", monkeypatch)


def test_label_coordinates_of_a_later_axis_read_the_same_in_pieces(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(2)
    ds = xr.Dataset(
        {"v": (("day", "site", "depth"), rng.normal(size=(10, 4, 6)))},
        coords={
            "day": np.arange(10),
            "site": np.array(["north", "east", "south", "west"], dtype=object),
            "depth": [0.5, 1, 2, 5, 10, 20],
        },
    )
    path = tmp_path / "sites.zarr"
    ds.to_zarr(path, encoding={"v": {"chunks": (5, 4, 6)}}, zarr_format=3, consolidated=True)
    got = _same_in_pieces(f"read_zarr('{path}')", monkeypatch)
    assert [r[1] for r in got[:6]] == ["north"] * 6  # the labels as xarray wrote them
    assert [r[1] for r in got[6:24:6]] == ["east", "south", "west"]


def test_cell_bounds_read_the_same_in_pieces(tmp_path: Path, monkeypatch) -> None:
    lat = np.linspace(-45.0, 45.0, 7)
    ds = xr.Dataset(
        {"v": (("time", "lat", "lon"), np.arange(8 * 7 * 5, dtype="float32").reshape(8, 7, 5))},
        coords={
            "time": np.arange(8),
            "lat": ("lat", lat, {"bounds": "lat_bnds"}),
            "lon": np.arange(5) * 10.0,
            "lat_bnds": (("lat", "nv"), np.stack([lat - 7.5, lat + 7.5], axis=1)),
        },
    )
    path = tmp_path / "bounds.zarr"
    ds.to_zarr(path, encoding={"v": {"chunks": (4, 7, 5)}}, zarr_format=3, consolidated=True)
    rows = _same_in_pieces(f"read_zarr('{path}', cell_bounds := true)", monkeypatch)
    names = [
        r[0]
        for r in zarrsql.connect().sql(f"DESCRIBE SELECT * FROM read_zarr('{path}', cell_bounds := true)").fetchall()
    ]
    lower = [r[names.index(n)] for r in rows[: 5 * 7 : 5] for n in names if n.startswith("lat_") and "lo" in n]
    assert lower == list(lat - 7.5), names  # each latitude's lower bound, as xarray wrote it


def test_derived_coordinates_read_the_same_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _ome_image(tmp_path / "img.ome.zarr")
    described = zarrsql.connect().sql(f"DESCRIBE SELECT * FROM read_zarr('{path}', level := 0)").fetchall()
    assert {"z_physical", "y_physical", "x_physical"} <= {r[0] for r in described}
    _same_in_pieces(f"read_zarr('{path}', level := 0)", monkeypatch)


def _same_in_pieces(source: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """`SELECT *` of `source` with a piece per first-axis entry and with whole units: the same
    rows in the same order, and the same units and chunks read (the metadata cached first)."""
    results = []
    zarrsql.connect().sql(f"SELECT count(*) FROM {source}").fetchall()
    for piece_rows in (1, 10**9):
        monkeypatch.setattr(table, "PIECE_ROWS", piece_rows)
        con = zarrsql.connect()
        with zarrsql.trace() as tr:
            rows = con.sql(f"SELECT * FROM {source}").fetchall()
        results.append((rows, tr.work_units_read, tr.chunks_decoded))
    assert results[0][0], "the fixture has rows"
    assert results[0] == results[1]
    return results[0][0]
