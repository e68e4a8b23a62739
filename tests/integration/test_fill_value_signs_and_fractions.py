"""Zarr fill values that look like something else: a float fill of -0.0 is a zero (it equals
0.0, so as a sentinel it would hide every real zero), and a fractional fill on an integer
array is not a value of its type (numpy would truncate 1.5 to 1 and hide every real 1).
Oracles: zarr-python's raw values and xarray, and zarr-python's own refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.errors import MetadataError

DATA = [0.0, 1.0, -0.0, 2.0, 0.0]


def _values(con: zarrsql.Connection, path: Path) -> list[float | None]:
    return [row[0] for row in con.execute(f"SELECT v FROM read_zarr('{path}') ORDER BY x").fetchall()]


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_negative_zero_fill_hides_no_zero(tmp_path: Path, zarr_format: int, dtype: str) -> None:
    path = tmp_path / "negzero.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    dims = {"dimension_names": ["x"]} if zarr_format == 3 else {}
    attrs = {} if zarr_format == 3 else {"_ARRAY_DIMENSIONS": ["x"]}
    array = group.create_array("v", shape=(5,), chunks=(2,), dtype=dtype, fill_value=-0.0, attributes=attrs, **dims)
    array[:] = np.array(DATA, dtype=dtype)
    raw = zarr.open_array(path / "v")[:]
    expected = xr.open_zarr(path, consolidated=False)["v"].values if zarr_format == 3 else raw
    assert np.array_equal(raw, np.array(DATA, dtype=dtype))
    got = _values(zarrsql.connect(), path)
    assert None not in got
    np.testing.assert_array_equal(np.array(got, dtype=dtype), expected)


def test_a_negative_zero_fill_still_fills_a_chunk_never_written(tmp_path: Path) -> None:
    """A missing chunk reads as its fill: -0.0, a value like any zero, not NULL."""
    path = tmp_path / "sparse.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    array = group.create_array("v", shape=(4,), chunks=(2,), dtype="float64", fill_value=-0.0, dimension_names=["x"])
    array[:2] = [5.0, 6.0]  # the second chunk is never written
    expected = zarr.open_array(path / "v")[:]
    got = _values(zarrsql.connect(), path)
    assert got == expected.tolist() == [5.0, 6.0, 0.0, 0.0]


def _int32_store_with_fill(path: Path, values: list[int], fill: float) -> Path:
    """A v2 int32 array of `values` whose `.zarray` fill_value is rewritten to `fill` as JSON
    writes it (zarr-python itself would refuse to write a fractional one)."""
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array(
        "v",
        shape=(len(values),),
        chunks=(len(values),),
        dtype="int32",
        fill_value=7,
        attributes={"_ARRAY_DIMENSIONS": ["x"]},
    )[:] = values
    meta = path / "v" / ".zarray"
    doc = json.loads(meta.read_text())
    doc["fill_value"] = fill
    meta.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("fill", [1.5, -0.25])
def test_a_fractional_fill_on_an_integer_array_is_refused(tmp_path: Path, fill: float) -> None:
    path = _int32_store_with_fill(tmp_path / "fraction.zarr", [0, 1, 2, 1], fill)
    with pytest.raises(Exception, match="integer"):  # zarr-python refuses the metadata itself
        zarr.open_array(path / "v")[:]
    with pytest.raises(MetadataError, match=r"fill_value .* is not a value of data type"):
        _values(zarrsql.connect(), path)


def test_a_whole_float_fill_on_an_integer_array_is_its_integer(tmp_path: Path) -> None:
    """2.0 is the integer 2, as JSON writers that spell every number as a float give it."""
    raw = [0, 2, 3, 2]
    path = _int32_store_with_fill(tmp_path / "whole.zarr", raw, 2.0)
    assert zarr.open_array(path / "v")[:].tolist() == raw
    assert _values(zarrsql.connect(), path) == [None if v == 2 else v for v in raw]


def test_a_packed_v2_variable_with_a_zero_fill_value_masks_it_as_xarray_does(tmp_path: Path) -> None:
    """xarray writes `_FillValue: 0` of a v2 variable only as the `.zarray` fill_value: for a
    packed variable that zero is the sentinel (it read as `add_offset`); an unpacked one keeps
    its zeros as data (zarr-python 2's default fill is 0), which the docs tell."""
    path = tmp_path / "xr_v2.zarr"
    ds = xr.Dataset(
        {"pk": (("x",), [10.0, np.nan, 12.5, -3.0 + 0.5]), "cnt": (("x",), [1.0, np.nan, 3.0, 0.0])},
        coords={"x": [0, 1, 2, 3]},
    )
    ds.to_zarr(
        path,
        zarr_format=2,
        encoding={
            "pk": {"dtype": "int16", "scale_factor": 0.5, "add_offset": -3.0, "_FillValue": 0},
            "cnt": {"dtype": "int32", "_FillValue": -1},
        },
    )
    assert zarr.open_array(path / "pk").fill_value == 0
    assert "_FillValue" not in zarr.open_array(path / "pk").attrs  # only the fill_value records it
    expected = xr.open_zarr(path)["pk"].values
    got = [row[0] for row in zarrsql.connect().execute(f"SELECT pk FROM read_zarr('{path}') ORDER BY x").fetchall()]
    assert [None if np.isnan(v) else float(v) for v in expected] == got
    assert got[1] is None and got[3] == -2.5  # the packed 1 is data, the packed 0 is missing
