"""`zarr_sample` / `zarrsql.sample` at the edges: float32 axes, a plain-number tolerance beside
time and label dimensions, duration (INTERVAL) dimensions, point columns named like table
columns, repeated coordinate values, and `method := 'exact'` with a tolerance. Expected
values from xarray's `.sel` on the same store."""

from __future__ import annotations

import datetime
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr

import zarrsql


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _write(path, ds: xr.Dataset) -> str:
    ds.to_zarr(path, mode="w", zarr_format=2)
    return str(path)


@pytest.fixture
def f32(tmp_path) -> str:
    lat = np.array([0.0, 0.1, 0.2, 0.3], dtype="float32")
    return _write(tmp_path / "f32.zarr", xr.Dataset({"v": ("lat", [10.0, 11.0, 12.0, 13.0])}, coords={"lat": lat}))


@pytest.fixture
def track(tmp_path) -> str:
    time = pd.date_range("2020-01-01", periods=4, freq="6h")
    ds = xr.Dataset(
        {"air": (("time", "lat"), np.arange(12.0).reshape(4, 3))}, coords={"time": time, "lat": [0.0, 10.0, 20.0]}
    )
    return _write(tmp_path / "track.zarr", ds)


@pytest.fixture
def labelled(tmp_path) -> str:
    ds = xr.Dataset(
        {"v": (("station", "level"), np.arange(6.0).reshape(2, 3))},
        coords={"station": ["oslo", "rome"], "level": [1000, 850, 500]},
    )
    return _write(tmp_path / "lab.zarr", ds)


@pytest.fixture
def steps(tmp_path) -> str:
    step = np.array([0, 3, 6], dtype="timedelta64[h]")
    return _write(tmp_path / "steps.zarr", xr.Dataset({"fc": ("step", [1.0, 2.0, 3.0])}, coords={"step": step}))


def test_float32_axis_matches_points_rounded_to_float32(f32, con) -> None:
    ds = xr.open_zarr(f32)
    points = pd.DataFrame({"id": [1, 2], "lat": [0.1, 0.15]})
    exact = zarrsql.sample(f32, points, method="exact", connection=con).df()
    assert exact.v.iloc[0] == float(ds.v.sel(lat=0.1))
    assert pd.isna(exact.v.iloc[1])
    nearest = zarrsql.sample(f32, points, connection=con).df()
    assert nearest.v.tolist() == [
        float(ds.v.sel(lat=0.1, method="nearest")),
        float(ds.v.sel(lat=0.15, method="nearest")),
    ]


def test_a_plain_number_tolerance_leaves_the_time_axis_alone(track, con) -> None:
    ds = xr.open_zarr(track)
    when = pd.Timestamp("2020-01-01 05:00")
    expected = float(ds.air.sel(lat=10.4, method="nearest", tolerance=1.0).sel(time=when, method="nearest"))
    points = pd.DataFrame({"id": [1], "time": [when], "lat": [10.4]})
    assert zarrsql.sample(track, points, tolerance=1.0, connection=con).df().air.tolist() == [expected]


def test_an_interval_tolerance_alone_applies_to_the_time_axis(track, con) -> None:
    ds = xr.open_zarr(track)
    when = pd.Timestamp("2020-01-01 05:00")
    points = pd.DataFrame({"time": [when], "lat": [10.4]})
    with pytest.raises(KeyError):
        ds.air.sel(time=when, method="nearest", tolerance=pd.Timedelta("30min"))
    far = zarrsql.sample(track, points, tolerance=datetime.timedelta(minutes=30), connection=con).df()
    assert pd.isna(far.air.iloc[0])
    expected = float(
        ds.air.sel(time=when, method="nearest", tolerance=pd.Timedelta("1h")).sel(lat=10.4, method="nearest")
    )
    near = con.sql(
        f"SELECT air FROM zarr_sample('{track}', $$SELECT TIMESTAMP '2020-01-01 05:00' AS time, 10.4 AS lat$$, "
        "tolerance := INTERVAL 1 HOUR)"
    ).fetchall()
    assert near == [(expected,)]


def test_a_plain_number_tolerance_beside_a_label_dimension(labelled, con) -> None:
    expected = xr.open_zarr(labelled).v.sel(station="rome").sel(level=860, method="nearest", tolerance=20).values.item()
    got = con.sql(
        f"SELECT v FROM zarr_sample('{labelled}', $$SELECT 'rome' AS station, 860 AS level$$, tolerance := 20)"
    ).fetchall()
    assert got == [(expected,)]


def test_a_tolerance_for_no_dimension_of_its_kind_is_refused(labelled, track, con) -> None:
    with pytest.raises(zarrsql.ParameterError, match=r"'station' holds labels"):
        zarrsql.sample(labelled, pd.DataFrame({"station": ["rome"]}), tolerance=1.0, connection=con).fetchall()
    with pytest.raises(zarrsql.ParameterError, match=r"'time' .* interval"):
        zarrsql.sample(
            track, pd.DataFrame({"time": [pd.Timestamp("2020-01-01")]}), tolerance=1.0, connection=con
        ).fetchall()


def test_a_negative_interval_tolerance_is_refused(track, con) -> None:
    with pytest.raises(zarrsql.ParameterError, match=r"'time' must be zero or more"):
        con.sql(
            f"SELECT * FROM zarr_sample('{track}', $$SELECT TIMESTAMP '2020-01-01' AS time$$, "
            "tolerance := MAP {'time': '-1 hour'})"
        ).fetchall()


def test_interval_points_on_a_duration_dimension(steps, con) -> None:
    ds = xr.open_zarr(steps)
    expected = float(ds.fc.sel(step=np.timedelta64(4, "h"), method="nearest"))
    got = con.sql(f"SELECT step, fc FROM zarr_sample('{steps}', $$SELECT INTERVAL 4 HOURS AS step$$)").fetchall()
    assert got == [(datetime.timedelta(hours=3), expected)]
    exact = con.sql(
        f"SELECT fc FROM zarr_sample('{steps}', $$SELECT INTERVAL 3 HOURS AS step$$, method := 'exact')"
    ).fetchall()
    assert exact == [(float(ds.fc.sel(step=np.timedelta64(3, "h"))),)]
    frame = pd.DataFrame({"step": pd.to_timedelta(["5h", "90min"])})
    by_frame = zarrsql.sample(steps, frame, connection=con).df()
    assert by_frame.fc.tolist() == [float(ds.fc.sel(step=s, method="nearest")) for s in frame.step]
    arrow = pa.table({"step": pa.array([datetime.timedelta(hours=6)], pa.duration("us"))})
    assert zarrsql.sample(steps, arrow, connection=con).df().fc.tolist() == [3.0]
    tolerated = zarrsql.sample(steps, frame, tolerance={"step": pd.Timedelta("1h")}, connection=con).df()
    assert tolerated.fc.iloc[0] == 3.0  # 5 h is 1 h from 6 h
    assert pd.isna(tolerated.fc.iloc[1])  # 90 min is 90 min from both 0 h and 3 h


def test_numbers_on_a_duration_dimension_are_refused(steps, con) -> None:
    with pytest.raises(zarrsql.ParameterError, match=r"'step' .*INTERVAL"):
        con.sql(f"SELECT * FROM zarr_sample('{steps}', $$SELECT 3 AS step$$)").fetchall()


def test_a_point_column_named_like_a_table_column_is_renamed(tmp_path, con) -> None:
    ds = xr.Dataset(
        {"t2m": (("time", "lat"), [[280.0, 290.0], [281.0, 291.0]])},
        coords={"time": pd.date_range("2020-01-01", periods=2), "lat": [0.0, 10.0]},
    )
    path = _write(tmp_path / "model.zarr", ds)
    obs = pd.DataFrame({"station": ["a"], "lat": [9.0], "T2M": [1.5]})
    got = zarrsql.sample(path, obs, connection=con).df()
    assert got.columns.tolist() == ["station", "point_lat", "point_T2M", "time", "lat", "t2m"]
    assert got.t2m.tolist() == xr.open_zarr(path).t2m.sel(lat=9.0, method="nearest").values.tolist()
    assert got.point_T2M.tolist() == [1.5, 1.5]
    # a column naming a dimension in other letters is that dimension, as in SQL: matched, so it
    # must hold times (session 27; before, `Time` was carried along and every time came back)
    with pytest.raises(zarrsql.ParameterError, match="'Time' must be a TIMESTAMP"):
        zarrsql.sample(path, obs.assign(Time=["local"]), connection=con).fetchall()


def test_a_repeated_coordinate_value_is_refused(tmp_path, con) -> None:
    ds = xr.Dataset({"v": ("lat", [1.0, 2.0, 3.0, 4.0])}, coords={"lat": [0.0, 10.0, 10.0, 20.0]})
    path = _write(tmp_path / "dup.zarr", ds)
    with pytest.raises(Exception):  # noqa: B017, PT011 - xarray refuses too
        xr.open_zarr(path).v.sel(lat=9.0, method="nearest")
    with pytest.raises(zarrsql.ZarrSQLError, match=r"'lat' .*repeats"):
        zarrsql.sample(path, pd.DataFrame({"id": [1], "lat": [9.0]}), connection=con).fetchall()


def test_exact_with_a_tolerance_is_refused(f32, con) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - xarray's refusal, the oracle
        xr.open_zarr(f32).v.sel(lat=xr.DataArray([0.1], dims="p"), tolerance=0.1)
    with pytest.raises(zarrsql.ParameterError, match=r"tolerance := .*'nearest'"):
        zarrsql.sample(f32, pd.DataFrame({"lat": [0.1]}), method="exact", tolerance=0.1, connection=con).fetchall()


@pytest.mark.parametrize(
    ("points", "says"),
    [
        ("stations", "zarr_sample's points 'stations' name no table or view"),
        ("'stations'", "zarr_sample's points 'stations' name no table or view"),
        ("'SELECT * FROM nowhere'", "zarr_sample's points query failed: Catalog Error"),
    ],
)
def test_points_that_name_nothing_are_a_parameter_error(tmp_path, points, says) -> None:
    from zarrsql.errors import ParameterError

    path = tmp_path / "s.zarr"
    xr.Dataset({"v": (("lat",), np.arange(3.0))}, coords={"lat": [1.0, 2.0, 3.0]}).to_zarr(path)
    with zarrsql.connect() as con, pytest.raises(ParameterError, match=re.escape(says)):
        con.sql(f"SELECT * FROM zarr_sample('{path}', {points})").fetchall()
