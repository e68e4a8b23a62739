"""Grid appends to stores that hold more than the variables the relation writes.

A variable without the append dimension (a land mask over latitude) stays as stored, as
xarray's own append leaves it; the oracle is xarray appending the same step to a copy of the
store. Any other array along the append dimension (a coordinate such as `valid_time(time)`, CF
bounds `time_bnds(time, nv)`, a variable over fewer dimensions) cannot grow from one row per
cell: before, the append grew time and the variables but left that array shorter, and xarray
could no longer open the store. Now it is refused and the store is left byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql

NEW_STEP = "SELECT TIMESTAMP '2024-01-04' AS time, lat, 9.0 + lat AS air FROM (VALUES (1.0), (2.0)) t(lat)"


def _base(**extra: tuple) -> xr.Dataset:
    ds = xr.Dataset(
        {"air": (("time", "lat"), np.arange(6.0).reshape(3, 2))},
        coords={"time": pd.date_range("2024-01-01", periods=3, freq="D"), "lat": [1.0, 2.0]},
    )
    for name, (dims, values, is_coord) in extra.items():
        if is_coord:
            ds = ds.assign_coords({name: (dims, values)})
        else:
            ds[name] = (dims, values)
    return ds


def _write(ds: xr.Dataset, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3)


def _contents(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha1(p.read_bytes()).hexdigest() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize("mask_name", ["land", "a_mask"])  # a_mask sorts before air: it must not decide the dims
def test_a_variable_without_the_append_dimension_stays(tmp_path: Path, mask_name: str) -> None:
    ds = _base(**{mask_name: (("lat",), np.array([1, 0], dtype="int8"), False)})
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    _write(ds, ours)
    shutil.copytree(ours, theirs)
    con = zarrsql.connect()
    zarrsql.to_zarr(NEW_STEP, str(ours), mode="a", append_dim="time", connection=con)
    step = con.sql(NEW_STEP).df().set_index(["time", "lat"]).to_xarray()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step.to_zarr(theirs, append_dim="time")
    got, expected = xr.open_zarr(ours).load(), xr.open_zarr(theirs).load()
    assert got.sizes == expected.sizes == {"time": 4, "lat": 2}
    xr.testing.assert_equal(got, expected)
    assert got[mask_name].values.tolist() == [1, 0]


def test_the_variable_without_the_append_dimension_as_a_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _write(_base(land=(("lat",), np.array([1, 0]), False)), path)
    before = _contents(path)
    with pytest.raises(zarrsql.AppendSchemaError, match="keeps it as stored"):
        zarrsql.to_zarr(NEW_STEP.replace("AS air", "AS air, 1 AS land"), str(path), mode="a", append_dim="time")
    assert _contents(path) == before


@pytest.mark.parametrize(
    "extra",
    [
        {"label": (("time",), np.array(["a", "b", "c"]), True)},  # a non-index coordinate (ERA5's valid_time)
        {"time_bnds": (("time", "nv"), np.arange(6).reshape(3, 2), False)},  # CF bounds
        {"daily": (("time",), np.arange(3.0), False)},  # a variable over fewer dimensions
        {"w": (("time", "lat"), np.ones((3, 2)), True)},  # a 2-D coordinate over the same dimensions
    ],
)
def test_another_array_along_the_append_dimension_is_refused(tmp_path: Path, extra: dict) -> None:
    path = tmp_path / "s.zarr"
    ds = _base(**extra)
    _write(ds, path)
    before = _contents(path)
    (name,) = extra
    with pytest.raises(zarrsql.AppendSchemaError, match=f"'{name}' over"):
        zarrsql.to_zarr(NEW_STEP, str(path), mode="a", append_dim="time")
    assert _contents(path) == before
    xr.testing.assert_identical(xr.open_zarr(path).load(), ds)  # still opens, as written
