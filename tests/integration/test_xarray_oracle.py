"""Every named table of the xarray-written fixtures equals xarray's own reading of it.

The oracle is `xr.open_zarr(...).to_dataframe()` (tests/oracles.py); rows are compared after
sorting by the dimension columns, since a scan emits rows work unit by work unit.
"""

from __future__ import annotations

from collections.abc import Callable

import warnings

import pandas as pd
import pytest
import xarray as xr

import zarrsql
from oracles import assert_frames_equal, xarray_frame

# (store, group, table name, dimension names, data variables)
CASES = [
    ("air_temperature.zarr", None, "time_lat_lon", ["time", "lat", "lon"], ["air"]),
    ("era5_like.zarr", None, "time_latitude_longitude", ["time", "latitude", "longitude"],
     ["10m_u_component_of_wind", "2m_temperature", "total_precipitation"]),
    ("era5_like.zarr", None, "time_level_latitude_longitude", ["time", "level", "latitude", "longitude"],
     ["geopotential", "temperature"]),
    ("mixed_chunks.zarr", None, "time_lat_lon", ["time", "lat", "lon"], ["Tair", "dTdx"]),
    ("datatree.zarr", "simulation/fine", "x_y", ["x", "y"], ["foo"]),
    ("datatree.zarr", "simulation/coarse", "x_y", ["x", "y"], ["bar"]),
    ("labels.zarr", None, "station_hour", ["station", "hour"], ["temp"]),
    ("big_edge.zarr", None, "a_b_c", ["a", "b", "c"], ["v"]),
]


def datatree_frame(path: str, group: str, variables: list[str], dims: list[str]) -> pd.DataFrame:
    """xarray's DataTree view of a nested group, coordinates inherited from its ancestors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        groups = xr.open_groups(path, engine="zarr")
        # the misaligned sibling group of this fixture would make the whole tree invalid
        parts = group.split("/")
        lineage = ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
        tree = xr.DataTree.from_dict({p: groups[p] for p in lineage if p in groups})
        node = tree[group].to_dataset()
    return node[variables].to_dataframe().reset_index()[[*dims, *variables]]


@pytest.mark.parametrize("fmt", ["", "v2/"], ids=["v3", "v2"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}:{c[1] or '/'}:{c[2]}" for c in CASES])
def test_table_equals_xarray(case: tuple, fmt: str, fixture_path: Callable[[str], str]) -> None:
    store, group, table, dims, variables = case
    path = fixture_path(fmt + store)
    with zarrsql.connect() as con:
        actual = zarrsql.read_zarr(path, connection=con, group_path=group, table_name=table).df()
    expected = (datatree_frame(path, group, variables, dims) if group
                else xarray_frame(path, variables=variables, dims=dims))
    assert list(actual.columns) == [*dims, *sorted(variables)]
    assert_frames_equal(actual, expected[list(actual.columns)], sort_by=dims, rtol=1e-12)


@pytest.mark.parametrize("fmt", ["", "v2/"], ids=["v3", "v2"])
def test_projection_reads_one_variable(fmt: str, fixture_path: Callable[[str], str]) -> None:
    path = fixture_path(fmt + "era5_like.zarr")
    expected = xarray_frame(path, variables=["2m_temperature"], dims=["time", "latitude", "longitude"])
    with zarrsql.connect() as con, zarrsql.trace() as t:
        actual = con.sql(
            f"SELECT time, latitude, longitude, \"2m_temperature\" FROM read_zarr('{path}', "
            "table_name := 'time_latitude_longitude')"
        ).df()
    assert_frames_equal(actual, expected, sort_by=["time", "latitude", "longitude"])
    # one variable of three: only its chunks are decoded (2 work units of 24 hours)
    assert t.work_units_read == 2
    assert t.chunks_decoded == 2
