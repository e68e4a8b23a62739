"""Grid appends to stores that hold more than the variables the relation writes.

A variable without the append dimension (a land mask over latitude) stays as stored, as
xarray's own append leaves it; an array over the append dimension alone (a coordinate such
as `valid_time(time)` or ERA5's `expver`) grows from a column of its name, one value per step;
the oracle is xarray appending the same step to a copy of the store. Any other array along the
append dimension (CF bounds `time_bnds(time, nv)`, a 2-D coordinate) cannot grow from one row
per cell. Before, the append grew time and the variables but left such arrays shorter, and
xarray could no longer open the store; now they grow or the append is refused, the store left
byte for byte as it was.
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
        {"time_bnds": (("time", "nv"), np.arange(6).reshape(3, 2), False)},  # CF bounds
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


#: Arrays over the append dimension alone: a text coordinate (ERA5's `expver`), a time one
#: (`valid_time`), a narrow integer one and a data variable.
STEP_ARRAYS = {
    "label": (("time",), np.array(["a", "b", "c"]), True),
    "valid": (("time",), pd.date_range("2024-01-01 06:00", periods=3, freq="D").values, True),
    "n": (("time",), np.array([1, 2, 3], dtype="int16"), True),
    "daily": (("time",), np.array([0.5, 1.5, 2.5]), False),
}
STEP_COLUMNS = "'d' AS label, TIMESTAMP '2024-01-04 06:00' AS valid, 4 AS n, 3.5 AS daily"


def test_arrays_over_the_append_dimension_alone_grow_from_their_columns(tmp_path: Path) -> None:
    """One value per new step, from a column of the array's name; the oracle is xarray's own
    append of the same step (those arrays given along time) to a copy of the store."""
    ds = _base(**STEP_ARRAYS)
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    _write(ds, ours)
    shutil.copytree(ours, theirs)
    con = zarrsql.connect()
    query = NEW_STEP.replace("AS air", f"AS air, {STEP_COLUMNS}")
    zarrsql.to_zarr(query, str(ours), mode="a", append_dim="time", connection=con)
    rows = con.sql(query).df()
    step = rows.drop(columns=list(STEP_ARRAYS)).set_index(["time", "lat"]).to_xarray()
    first = rows.groupby("time").first()
    step = step.assign_coords({n: ("time", first[n].to_numpy()) for n in ("label", "valid")})
    step = step.assign_coords(n=("time", first["n"].to_numpy().astype("int16")))
    step["daily"] = ("time", first["daily"].to_numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step.to_zarr(theirs, append_dim="time")
    got, expected = xr.open_zarr(ours).load(), xr.open_zarr(theirs).load()
    assert got.sizes == {"time": 4, "lat": 2}
    xr.testing.assert_identical(got, expected)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ("'d' AS label, TIMESTAMP '2024-01-04 06:00' AS valid, 4 AS n", "add a column 'daily'"),
        (STEP_COLUMNS.replace("'d' AS label", "CASE WHEN lat > 1 THEN 'd' ELSE 'e' END AS label"), "more than one"),
        (STEP_COLUMNS.replace("4 AS n", "40000 AS n"), "int16"),
    ],
    ids=["a step column missing", "two values in one step", "beyond the stored dtype"],
)
def test_a_step_array_the_rows_cannot_grow_is_refused(tmp_path: Path, columns: str, message: str) -> None:
    path = tmp_path / "s.zarr"
    _write(_base(**STEP_ARRAYS), path)
    before = _contents(path)
    with pytest.raises(zarrsql.ZarrSQLError, match=message):
        zarrsql.to_zarr(NEW_STEP.replace("AS air", f"AS air, {columns}"), str(path), mode="a", append_dim="time")
    assert _contents(path) == before
