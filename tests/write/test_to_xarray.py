"""`zarrsql.to_xarray` against xarray itself: the store xarray wrote, and xarray's own pivot
(`DataFrame.set_index(dims).to_xarray()`) of the same rows built with pandas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from tests.write.frames import pivot, use_path, weather


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("to_xarray") / "weather.zarr"
    weather().to_zarr(path, zarr_format=3, consolidated=True)
    return str(path)


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return weather().to_dataframe().reset_index()


def test_a_store_read_back_equals_what_xarray_opens(con: zarrsql.Connection, store: str) -> None:
    """The relation kept the table's dimensions, so dims come from the store; the descending
    latitude, CF time, the NaN and the NaT survive."""
    ds = zarrsql.to_xarray(zarrsql.read_zarr(store, connection=con))
    expected = xr.open_zarr(store).load()
    assert list(ds.sizes) == ["time", "lat", "lon"]
    xr.testing.assert_equal(ds, expected.drop_attrs())
    assert ds.lat.values[0] > ds.lat.values[-1]
    assert ds.counts.dtype == np.int32  # complete: stays an integer


def test_order_by_desc_carries_through(con: zarrsql.Connection, frame: pd.DataFrame) -> None:
    rel = con.sql("SELECT * FROM frame ORDER BY lon DESC, time DESC, lat")
    ds = zarrsql.to_xarray(rel, ["time", "lat", "lon"])
    ordered = frame.sort_values(["lon", "time", "lat"], ascending=[False, False, True])
    xr.testing.assert_equal(ds, pivot(ordered, ["time", "lat", "lon"]))
    assert list(ds.lon.values) == sorted(frame.lon.unique(), reverse=True)


@pytest.mark.parametrize("path", ["one read", "two reads"])
def test_sparse_results_leave_nan_and_nat_and_promote_integers(
    con: zarrsql.Connection, frame: pd.DataFrame, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_path(monkeypatch, path)
    rel = con.sql("SELECT * FROM frame WHERE counts % 3 <> 0")
    ds = zarrsql.to_xarray(rel, ["time", "lat", "lon"])
    kept = frame[frame.counts % 3 != 0]
    expected = pivot(kept, ["time", "lat", "lon"])
    xr.testing.assert_equal(ds, expected)
    assert ds.counts.dtype == np.float64
    assert np.isnan(ds.counts.values).any()
    assert np.isnat(ds.seen.values).sum() > 1


def test_integer_with_a_null_becomes_float(con: zarrsql.Connection) -> None:
    rel = con.sql("SELECT i, CASE WHEN i = 2 THEN NULL ELSE i * 10 END AS v, i % 2 = 0 AS even FROM range(4) t(i)")
    ds = zarrsql.to_xarray(rel, ["i"])
    np.testing.assert_array_equal(ds.v.values, [0.0, 10.0, np.nan, 30.0])
    assert ds.even.dtype == bool


@pytest.mark.parametrize("path", ["one read", "two reads"])
def test_duplicate_tuples_are_an_error_naming_the_first(
    con: zarrsql.Connection, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_path(monkeypatch, path)
    rel = con.sql("SELECT i % 3 AS x, 'a' AS y, i AS v FROM range(7) t(i)")
    with pytest.raises(zarrsql.WriteError, match=r"more than one row for the dimension tuple \(x=0, y=a\)"):
        zarrsql.to_xarray(rel, ["x", "y"])


def test_null_dimension_and_unknown_dims_are_refused(con: zarrsql.Connection) -> None:
    with pytest.raises(zarrsql.WriteError, match="dimension column 'x' is NULL"):
        zarrsql.to_xarray(con.sql("SELECT CASE WHEN i = 1 THEN NULL ELSE i END AS x, i AS v FROM range(3) t(i)"), ["x"])
    with pytest.raises(zarrsql.ParameterError, match="dims names 'nope'"):
        zarrsql.to_xarray(con.sql("SELECT 1 AS x"), ["nope"])
    with pytest.raises(zarrsql.ParameterError, match=r"dimensions cannot be known: pass dims="):
        zarrsql.to_xarray(con.sql("SELECT 1 AS x, 2 AS v"))
    with pytest.raises(zarrsql.ParameterError, match="list of column names"):
        zarrsql.to_xarray(con.sql("SELECT 1 AS x"), "x")


def test_an_aggregate_that_dropped_a_dimension_needs_dims(con: zarrsql.Connection, store: str) -> None:
    rel = con.sql(f"SELECT lat, lon, avg(air) AS air FROM read_zarr('{store}') GROUP BY lat, lon")
    with pytest.raises(zarrsql.ParameterError, match=r"\['time', 'lat', 'lon'\], not all kept"):
        zarrsql.to_xarray(rel)
    ds = zarrsql.to_xarray(rel, ["lat", "lon"])
    expected = xr.open_zarr(store).air.mean("time")  # avg skips NULL (the NaN), as xarray's mean skips NaN
    xr.testing.assert_allclose(ds.air.sortby(["lat", "lon"]), expected.sortby(["lat", "lon"]).drop_attrs())


def test_a_struct_column_is_refused_naming_it(con: zarrsql.Connection) -> None:
    with pytest.raises(zarrsql.WriteError, match="column 's' has type struct"):
        zarrsql.to_xarray(con.sql("SELECT 1 AS x, {'a': 1} AS s"), ["x"])


def test_template_restores_attributes_encodings_and_coordinates(
    con: zarrsql.Connection, store: str, tmp_path: Path
) -> None:
    source = weather().assign_coords(land=(("lat", "lon"), np.arange(35).reshape(7, 5) % 2 == 0))
    source.to_zarr(tmp_path / "t.zarr")
    rel = con.sql(f"SELECT time, lat, lon, air FROM read_zarr('{tmp_path / 't.zarr'}') WHERE lat < 50")
    ds = zarrsql.to_xarray(rel, template=str(tmp_path / "t.zarr"))
    assert ds.attrs == {"title": "weather"}
    assert ds.air.attrs["long_name"] == "air temperature"
    assert ds.time.encoding["units"].startswith("hours since")
    expected_land = source.land.sel(lat=ds.lat.values)
    np.testing.assert_array_equal(ds.land.values, expected_land.values)
    assert "land" in ds.coords
    assert "land" not in ds.data_vars
