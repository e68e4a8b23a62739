"""CF and Zarr corners found by trying stores as users write them, each against xarray or
zarr-python: a packed (scale_factor) time and duration, a 0-d coordinate of a Zarr v3
store, and missing chunks of a v2 datetime array without a fill value."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql


def _naive_micros(values: np.ndarray) -> list:
    return [None if np.isnat(v) else v.astype("datetime64[us]").item() for v in values]


def test_a_packed_time_and_duration_decode_as_xarray_does(tmp_path) -> None:
    path = str(tmp_path / "packed.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    time = group.create_array(
        "time", shape=(4,), dtype="int32", dimension_names=["time"], fill_value=None,
        attributes={"units": "hours since 2000-01-01", "scale_factor": 0.5, "_FillValue": -1},
    )  # fmt: skip
    time[:] = [0, 1, 48, -1]
    step = group.create_array(
        "step", shape=(4,), dtype="int16", dimension_names=["time"], fill_value=None,
        attributes={"units": "hours", "scale_factor": 0.25},
    )  # fmt: skip
    step[:] = [0, 2, 4, 6]
    group.create_array("v", shape=(4,), dtype="float64", dimension_names=["time"], fill_value=None)[:] = [1, 2, 3, 4]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_zarr(path, consolidated=False, decode_timedelta=True)
        want_time, want_step = ds.time.values, ds.step.values
    assert want_time.dtype.kind == "M" and want_step.dtype.kind == "m"
    con = zarrsql.connect()
    rel = con.sql(f"SELECT time, step FROM read_zarr('{path}') ORDER BY v")
    assert [str(t) for t in rel.types] == ["TIMESTAMP", "INTERVAL"]
    rows = rel.fetchall()
    assert [r[0] for r in rows] == _naive_micros(want_time)
    assert [r[1] for r in rows] == [v.astype("timedelta64[us]").item() for v in want_step]
    # the decoded column filters as a time, and its bounds are times
    cut = np.datetime64("2000-01-01T00:30")
    want = int(np.sum(want_time >= cut))
    got = con.sql(f"SELECT count(*) FROM read_zarr('{path}') WHERE time >= TIMESTAMP '2000-01-01 00:30'").fetchall()
    assert got == [(want,)]
    assert con.sql(f"SELECT max(time) FROM read_zarr('{path}')").fetchall() == [(_naive_micros(want_time[:3])[2],)]


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_scalar_coordinate_is_a_column_in_both_formats(tmp_path, fmt: int) -> None:
    path = str(tmp_path / f"scalar{fmt}.zarr")
    ds = xr.Dataset({"v": (("x",), np.arange(3.0))}, coords={"x": [0.0, 1.0, 2.0], "height": 2.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=fmt)
        frame = xr.open_zarr(path).to_dataframe().reset_index()
    rel = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{path}') ORDER BY x")
    assert sorted(rel.columns) == sorted(frame.columns)
    rows = rel.fetchall()
    for k, name in enumerate(rel.columns):
        assert [r[k] for r in rows] == frame.sort_values("x")[name].tolist()


def test_missing_chunks_of_a_v2_datetime_without_fill_are_null(tmp_path) -> None:
    path = str(tmp_path / "dt.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=2)
    x = group.create_array("x", shape=(4,), dtype="int64", chunks=(2,), attributes={"_ARRAY_DIMENSIONS": ["x"]})
    x[:] = range(4)
    for name, dtype in (("dt", "datetime64[ns]"), ("td", "timedelta64[s]")):
        a = group.create_array(
            name, shape=(4,), dtype=dtype, chunks=(2,), fill_value=None, attributes={"_ARRAY_DIMENSIONS": ["x"]}
        )
        a[:2] = np.array([1, 2]).astype(dtype)
        assert not os.path.exists(os.path.join(path, name, "1"))  # the second chunk was never written
    back = zarr.open_group(path, mode="r")
    want_dt = _naive_micros(back["dt"][:])
    want_td = [None if np.isnat(v) else v.astype("timedelta64[us]").item() for v in back["td"][:]]
    assert want_dt[2:] == [None, None]  # zarr-python reads NaT there
    got = zarrsql.connect().sql(f"SELECT dt, td FROM read_zarr('{path}') ORDER BY x").fetchall()
    assert [r[0] for r in got] == want_dt
    assert [r[1] for r in got] == want_td
