"""An array that repeats a dimension name (`['x', 'x']`: a square matrix over one dimension).

xarray opens such an array and zarr-python reads it. It is no table (one column per
dimension cannot be), and the table's error says to read it with `array_path :=`, which
then reads it with distinct dimension columns (`x`, `x_1`, as clashing data columns are
renamed) that `dims :=` may rename. Expected values come from zarr-python and xarray.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("repeated") / "dup.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    g.create_array("m", shape=(3, 3), dtype="float64", dimension_names=["y", "y"])[:] = np.arange(9.0).reshape(3, 3)
    g.create_array("y", shape=(3,), dtype="float64", dimension_names=["y"])[:] = [10.0, 20.0, 30.0]
    sub = zarr.open_group(path / "plain", mode="w", zarr_format=3)
    sub.create_array("v", shape=(2, 2), dtype="float64", dimension_names=["x", "x"])[:] = [[0.0, 1.0], [2.0, 3.0]]
    return path


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _xarray(store: Path, group: str | None, name: str) -> xr.DataArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray warns of the repeated name, and reads on
        return xr.open_zarr(store, group=group, consolidated=False)[name].load()


def _cells(values: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> list[tuple]:
    """One row per cell in row-major order: (row label, column label, value)."""
    r, c = np.meshgrid(np.arange(values.shape[0]), np.arange(values.shape[1]), indexing="ij")
    return [(rows[i].item(), cols[j].item(), values[i, j].item()) for i, j in zip(r.ravel(), c.ravel(), strict=True)]


def test_an_array_path_read_gets_distinct_columns_labelled_by_the_coordinate(store: Path, con) -> None:
    rel = con.sql(f"SELECT * FROM read_zarr('{store}', array_path := 'm')")
    assert rel.columns == ["y", "y_1", "m"]
    da = _xarray(store, None, "m")
    assert da.dims == ("y", "y")
    y = zarr.open_array(store, path="y")[:]
    assert rel.fetchall() == _cells(da.values, y, y)


def test_without_a_coordinate_the_axes_are_positions(store: Path, con) -> None:
    rel = con.sql(f"SELECT * FROM read_zarr('{store}', array_path := 'plain/v')")
    assert rel.columns == ["x", "x_1", "value"]  # a path with a '/' names its column `value`
    values = zarr.open_array(store, path="plain/v")[:]
    positions = np.arange(values.shape[0])
    assert rel.fetchall() == _cells(values, positions, positions)


def test_dims_renames_the_axes_of_such_an_array(store: Path, con) -> None:
    rel = con.sql(f"SELECT * FROM read_zarr('{store}', array_path := 'm', dims := ['row', 'col'])")
    assert rel.columns == ["row", "col", "m"]
    da = _xarray(store, None, "m")
    y = zarr.open_array(store, path="y")[:]
    assert rel.fetchall() == _cells(da.values, y, y)


def test_a_filter_on_the_second_axis_keeps_its_cells(store: Path, con) -> None:
    got = con.sql(f"SELECT y, y_1, m FROM read_zarr('{store}', array_path := 'm') WHERE y_1 = 20").fetchall()
    da = _xarray(store, None, "m")
    y = zarr.open_array(store, path="y")[:]
    assert got == [row for row in _cells(da.values, y, y) if row[1] == 20.0]


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ("['a', 'a']", "distinct ignoring case"),
        ("['a', 'A']", "distinct ignoring case"),
        ("['a']", "gives 1 names but array 'm' has 2 axes"),
    ],
)
def test_dims_for_such_an_array_must_be_distinct_names(store: Path, con, dims: str, message: str) -> None:
    with pytest.raises(zarrsql.ParameterError, match=message):
        con.sql(f"SELECT * FROM read_zarr('{store}', array_path := 'm', dims := {dims})").fetchall()


def test_the_table_error_points_to_a_read_that_works(store: Path, con) -> None:
    with pytest.raises(zarrsql.SelectionError, match="repeat; read the arrays with array_path :=") as err:
        con.sql(f"SELECT * FROM read_zarr('{store}', group_path := 'plain')").fetchall()
    assert "columns" not in str(err.value)
    values = zarr.open_array(store, path="plain/v")[:]
    got = con.sql(f"SELECT * FROM read_zarr('{store}', array_path := 'plain/v')").fetchall()
    assert got == _cells(values, np.arange(2), np.arange(2))


def test_the_metadata_listing_names_the_columns_an_array_path_read_uses(store: Path, con) -> None:
    rows = con.sql(f"SELECT name, dims, array_path_dims FROM read_zarr_metadata('{store}') WHERE name = 'm'").fetchall()
    assert rows == [("m", ["y", "y"], ["y", "y_1"])]


def test_a_dimension_name_that_is_no_string_is_called_so(tmp_path: Path, con) -> None:
    path = tmp_path / "v2.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=2)
    g.create_array("v", shape=(3,), dtype="float64", attributes={"_ARRAY_DIMENSIONS": [5]})[:] = [1.0, 2.0, 3.0]
    with pytest.raises(zarrsql.MetadataError, match="hold 5, which is not a string") as err:
        con.sql(f"SELECT * FROM read_zarr('{path}', array_path := 'v')").fetchall()
    assert "do not match" not in str(err.value)
