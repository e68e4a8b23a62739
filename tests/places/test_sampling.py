"""`zarr_sample` / `zarrsql.sample` (zarrsql issue 14, item 1) against xarray's vectorized
`.sel(method="nearest", tolerance=...)` on the same store, and the units it reads against
the chunks that hold the matched cells."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

LAT = np.linspace(70, 30, 41)  # descending, 1 degree
LON = np.concatenate([np.arange(0, 10, 0.5), np.arange(10, 40, 2.5)])  # uneven
TIME = pd.date_range("2022-06-01", periods=30, freq="h")
CHUNKS = {"time": 30, "lat": 8, "lon": 8}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {"t": (("time", "lat", "lon"), rng.normal(size=(len(TIME), len(LAT), len(LON))).astype("float32"))},
        coords={"time": TIME, "lat": LAT, "lon": LON},
    )
    path = tmp_path_factory.mktemp("sample") / "s.zarr"
    ds.chunk(CHUNKS).to_zarr(path, consolidated=True)
    labels = xr.Dataset({"v": (("name",), np.arange(3.0))}, coords={"name": ["x", "y", "z"]})
    labels.to_zarr(path.parent / "labels.zarr", consolidated=True, zarr_format=2)
    return str(path)


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _points(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    lat = rng.uniform(29, 71, n)
    lon = rng.uniform(-1, 41, n)
    lat[:3] = [50.5, 30.0, 69.5]  # ties between two latitudes, and an exact value
    lon[:3] = [0.25, 12.5, 38.75]  # ties between two longitudes (uneven spacing), an exact value
    return pd.DataFrame({"id": np.arange(n), "lat": lat, "lon": lon})


def _xarray_cells(store: str, points: pd.DataFrame, **sel) -> xr.DataArray:
    ds = xr.open_zarr(store)
    return ds.t.sel(lat=xr.DataArray(points.lat.values, dims="p"), lon=xr.DataArray(points.lon.values, dims="p"), **sel)


def _units_holding(store: str, points: pd.DataFrame) -> int:
    ds = xr.open_zarr(store)
    iy = ds.indexes["lat"].get_indexer(points.lat.values, method="nearest")
    ix = ds.indexes["lon"].get_indexer(points.lon.values, method="nearest")
    return len({(y // CHUNKS["lat"], x // CHUNKS["lon"]) for y, x in zip(iy, ix, strict=True)})


def test_nearest_time_series_equal_xarrays_vectorized_sel(store, con) -> None:
    points = _points(25, seed=1)
    with zarrsql.trace() as t:
        got = zarrsql.sample(store, points, connection=con).df()
    expected = _xarray_cells(store, points, method="nearest")
    assert len(got) == len(points) * len(TIME)
    assert list(got.columns[:3]) == ["id", "point_lat", "point_lon"]
    for p in range(len(points)):
        rows = got[got.id == p].sort_values("time")
        cell = expected.isel(p=p)
        assert rows.lat.unique().tolist() == [float(cell.lat)]
        assert rows.lon.unique().tolist() == [float(cell.lon)]
        np.testing.assert_array_equal(rows.t.to_numpy(dtype="float32"), cell.values)
        assert (rows.point_lat == points.lat[p]).all()
    if HAS_SOURCES:  # DuckDB 2.x pushes the matched cells into the scan
        assert t.work_units_read == _units_holding(store, points) < t.work_units_planned


def test_a_point_beyond_the_tolerance_gets_nulls_never_a_far_cell(store, con) -> None:
    points = pd.DataFrame({"id": [0, 1, 2], "lat": [50.2, 50.5, 90.0], "lon": [5.1, 5.0, 5.0]})
    got = zarrsql.sample(store, points, tolerance=0.3, connection=con).df()
    ds = xr.open_zarr(store)
    for p, row in points.iterrows():
        rows = got[got.id == p]
        try:
            cell = ds.t.sel(lat=row.lat, lon=row.lon, method="nearest", tolerance=0.3)
        except KeyError:
            assert len(rows) == 1
            assert rows[["time", "lat", "lon", "t"]].isna().all().all()
            continue
        np.testing.assert_array_equal(rows.sort_values("time").t.to_numpy(dtype="float32"), cell.values)
    assert got[got.id == 1].empty or got[got.id == 1].t.isna().all()  # 50.5 is 0.5 from both cells


def test_points_with_a_time_match_one_cell_each(store, con) -> None:
    points = _points(12, seed=5)
    points["time"] = TIME[0] + pd.to_timedelta(np.linspace(-2, 33, 12), unit="h")
    got = zarrsql.sample(store, points, connection=con).df().sort_values("id")
    expected = _xarray_cells(store, points, time=xr.DataArray(points.time.values, dims="p"), method="nearest")
    assert len(got) == len(points)
    for p in range(len(points)):
        cell = expected.isel(p=p)
        row = got[got.id == p].iloc[0]
        assert row.time == pd.Timestamp(cell.time.values)
        assert np.float32(row.t) == cell.values


def test_time_tolerance_takes_an_interval(store, con) -> None:
    points = pd.DataFrame({"lat": [50.0, 50.0], "lon": [5.0, 5.0], "time": [TIME[3], TIME[-1] + pd.Timedelta("5h")]})
    got = zarrsql.sample(store, points, tolerance={"time": pd.Timedelta("2h")}, connection=con).df()
    assert got.time.iloc[0] == TIME[3]
    assert pd.isna(got.time.iloc[1])
    sql = con.sql(
        f"SELECT count(t) FROM zarr_sample('{store}', 'SELECT * FROM points', tolerance := MAP {{'time': '2 hours'}})"
    ).fetchall()
    assert sql == [(1,)]


def test_exact_matches_only_equal_coordinates(store, con) -> None:
    points = pd.DataFrame({"lat": [50.0, 50.4], "lon": [12.5, 12.5]})  # noqa: F841 - read by DuckDB by name
    got = con.sql(
        f"SELECT point_lat, count(t) AS n FROM zarr_sample('{store}', 'SELECT * FROM points', method := 'exact') "
        "GROUP BY ALL ORDER BY point_lat"
    ).fetchall()
    assert got == [(50.0, len(TIME)), (50.4, 0)]


def test_a_table_name_or_query_as_points_in_sql(store, con) -> None:
    con.execute("CREATE TABLE stations AS SELECT 'a' AS name, 45.2 AS lat, 3.3 AS lon")
    by_name = con.sql(
        f"SELECT name, lat, lon, count(*) FROM zarr_sample('{store}', 'stations') GROUP BY ALL"
    ).fetchall()
    by_query = con.sql(
        f"SELECT name, lat, lon, count(*) FROM zarr_sample('{store}', 'SELECT * FROM stations') GROUP BY ALL"
    ).fetchall()
    cell = xr.open_zarr(store).t.sel(lat=45.2, lon=3.3, method="nearest")
    assert by_name == by_query == [("a", float(cell.lat), float(cell.lon), len(TIME))]


def test_bad_points_are_named(store, con) -> None:
    with pytest.raises(zarrsql.ParameterError, match=r"no column naming a dimension .*'time', 'lat', 'lon'"):
        zarrsql.sample(store, pd.DataFrame({"latitude": [1.0]}), connection=con).fetchall()
    with pytest.raises(zarrsql.ParameterError, match=r"point 1 has a NULL 'lat'"):
        zarrsql.sample(store, pd.DataFrame({"lat": [50.0, None], "lon": [1.0, 2.0]}), connection=con).fetchall()
    with pytest.raises(zarrsql.ParameterError, match=r"method := must be 'nearest' or 'exact'"):
        zarrsql.sample(store, pd.DataFrame({"lat": [50.0]}), method="linear", connection=con).fetchall()
    labels = store.replace("s.zarr", "labels.zarr")
    with pytest.raises(zarrsql.ParameterError, match=r"'name' holds labels"):
        zarrsql.sample(labels, pd.DataFrame({"name": ["x"]}), tolerance=1.0, connection=con).fetchall()
    assert zarrsql.sample(labels, pd.DataFrame({"name": ["y", "q"]}), connection=con).fetchall() == [
        ("y", "y", 1.0),
        ("q", None, None),
    ]
