"""Auxiliary coordinates as columns (zarrsql issue 14, item 3): variables a data variable
names in its CF `coordinates` (2-D `xc(y, x)`, `yc(y, x)` of a curvilinear grid, 1-D station
names) become columns of its table as in xarray's `to_dataframe()`, and filters on them prune
work units and select exactly the rows numpy's masks select."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

NY, NX, NT = 12, 15, 6
DATA_CHUNKS = {"time": 2, "y": 5, "x": 5}  # 3 x 3 x 3 = 27 units


def _curvilinear() -> xr.Dataset:
    y, x = np.meshgrid(np.arange(NY), np.arange(NX), indexing="ij")
    xc = (200 + 4.0 * x + 0.5 * y) % 360
    yc = 20 + 3.0 * y + 0.2 * x
    yc[3, 4] = np.nan  # a missing auxiliary value: NULL, never matched by a comparison
    rng = np.random.default_rng(0)
    ds = xr.Dataset(
        {"Tair": (("time", "y", "x"), rng.normal(size=(NT, NY, NX)).astype("float32"))},
        coords={
            "time": pd.date_range("2000-01-01", periods=NT, freq="MS"),
            "xc": (("y", "x"), xc, {"units": "degrees_east"}),
            "yc": (("y", "x"), yc, {"units": "degrees_north"}),
        },
    )
    return ds.chunk(DATA_CHUNKS).assign_coords(xc=ds.xc, yc=ds.yc)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("aux")
    ds = _curvilinear()
    encoding = {"xc": {"chunks": (7, 4)}, "yc": {"chunks": (4, 15)}}  # chunked unlike the data
    ds.to_zarr(base / "rasm.zarr", consolidated=True, encoding=encoding)
    stations = xr.Dataset(
        {"obs": (("time", "station"), np.arange(4 * 3, dtype="float64").reshape(4, 3))},
        coords={"time": np.arange(4), "station": [10, 20, 30], "name": ("station", np.array(["a", "b", "c"], "O"))},
    )
    stations.to_zarr(base / "stations.zarr", consolidated=True, zarr_format=2)
    return {"rasm": str(base / "rasm.zarr"), "stations": str(base / "stations.zarr")}


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def test_the_fixture_chunks_the_coordinates_unlike_the_data(stores) -> None:
    meta = {n: json.loads((Path(stores["rasm"]) / n / "zarr.json").read_text()) for n in ("xc", "yc", "Tair")}
    chunks = {n: m["chunk_grid"]["configuration"]["chunk_shape"] for n, m in meta.items()}
    assert chunks == {"xc": [7, 4], "yc": [4, 15], "Tair": [2, 5, 5]}
    assert set(meta["Tair"]["attributes"]["coordinates"].split()) == {"xc", "yc"}


def test_columns_and_values_equal_xarrays_to_dataframe(stores, con) -> None:
    got = con.sql(f"SELECT * FROM read_zarr('{stores['rasm']}')").df()
    expected = xr.open_zarr(stores["rasm"]).to_dataframe().reset_index()
    assert list(got.columns) == ["time", "y", "x", "xc", "yc", "Tair"]
    key = ["time", "y", "x"]
    got = got.sort_values(key).reset_index(drop=True)
    expected = expected.sort_values(key).reset_index(drop=True)[got.columns]
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    assert got.yc.isna().sum() == NT  # the NaN auxiliary value reads as NULL in every time step


@pytest.mark.parametrize(
    ("where", "mask"),
    [
        ("yc > 50 AND xc < 240", lambda d: (d.yc > 50) & (d.xc < 240)),
        ("yc BETWEEN 30 AND 35 OR xc >= 255", lambda d: d.yc.between(30, 35) | (d.xc >= 255)),
        ("yc IS NULL", lambda d: d.yc.isna()),
        ("NOT (yc < 40) AND time >= '2000-04-01'", lambda d: (d.yc >= 40) & (d.time >= "2000-04-01")),
        ("yc > 40 OR time = '2000-01-01'", lambda d: (d.yc > 40) | (d.time == "2000-01-01")),
    ],
)
def test_filters_on_auxiliary_columns_select_exactly_and_prune(stores, con, where, mask) -> None:
    frame = xr.open_zarr(stores["rasm"]).to_dataframe().reset_index()
    keep = frame[mask(frame).fillna(False).astype(bool)]
    with zarrsql.trace() as t:
        got = con.sql(f"SELECT time, y, x, Tair FROM read_zarr('{stores['rasm']}') WHERE {where}").df()
    assert sorted(map(tuple, got[["time", "y", "x"]].astype(str).values)) == sorted(
        map(tuple, keep[["time", "y", "x"]].astype(str).values)
    )
    counted = con.sql(f"SELECT count(*) FROM read_zarr('{stores['rasm']}') WHERE {where}").fetchall()
    assert counted == [(len(keep),)]
    if HAS_SOURCES:
        ti = keep.time.map({t: i for i, t in enumerate(sorted(frame.time.unique()))}).to_numpy()
        units = {(a // 2, b // 5, c // 5) for a, b, c in zip(ti, keep.y, keep.x, strict=True)}
        assert t.work_units_read == len(units)


def test_station_labels_join_their_table(stores, con) -> None:
    rows = con.sql(f"SELECT time, station, name, obs FROM read_zarr('{stores['stations']}') ORDER BY 1, 2").fetchall()
    expected = xr.open_zarr(stores["stations"]).to_dataframe().reset_index().sort_values(["time", "station"])
    assert rows == list(expected[["time", "station", "name", "obs"]].itertuples(index=False, name=None))
    assert con.sql(f"SELECT sum(obs) FROM read_zarr('{stores['stations']}') WHERE name = 'b'").fetchall() == [
        (float(expected[expected.name == "b"].obs.sum()),)
    ]


def test_longitude_presents_a_two_dimensional_longitude(stores, con) -> None:
    got = con.sql(f"SELECT DISTINCT y, x, xc FROM read_zarr('{stores['rasm']}', longitude := 180)").df()
    xc = xr.open_zarr(stores["rasm"]).xc.values
    want = ((xc + 180) % 360) - 180
    assert np.allclose(got.sort_values(["y", "x"]).xc.to_numpy(), want.reshape(-1))
