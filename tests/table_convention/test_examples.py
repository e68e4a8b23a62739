"""Every example of the table convention's document (and a few more) read as SQL tables and
compared with the oracle, in Zarr format 2 and 3."""

from __future__ import annotations

import math

import numpy as np
import pytest
import zarr

import zarrsql
from tests.table_convention.oracle import expected_rows, normalize
from tests.table_convention.stores import EXAMPLES


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


@pytest.mark.parametrize("group", EXAMPLES)
def test_rows_and_column_order_match_the_oracle(con, stores, fmt, group) -> None:
    store = stores("examples.zarr", fmt)
    names, rows = expected_rows(store, group)
    rel = con.sql(f"SELECT * FROM read_zarr('{store}', group_path := '{group}')")
    assert rel.columns == names  # table:columns order, under each column's name
    assert normalize(rel.fetchall()) == rows


#: DuckDB types the fixture definitions imply (stores.py): inline/sub-group categoricals of
#: distinct strings are ENUMs, a (N, 24) float32 array FLOAT[24], geometry GeoArrow-native.
TYPES = {
    "weather_stations": ["VARCHAR", "FLOAT", "BIGINT"],
    "survey_plots": ["VARCHAR", "ENUM('forest', 'cropland', 'grassland', 'wetland', 'urban')", "FLOAT"],
    "station_hourly": ["VARCHAR", "FLOAT[24]"],
    "trajectories": ["VARCHAR", "ENUM('ship', 'glider', 'float', 'drifter')", "STRUCT(x DOUBLE, y DOUBLE)[]"],
    "stations": ["VARCHAR", "STRUCT(x DOUBLE, y DOUBLE)"],
    "parcels": ["INTEGER", "VARCHAR", "STRUCT(x DOUBLE, y DOUBLE)[][]"],
    "tracks_3d": ["BIGINT", "STRUCT(x DOUBLE, y DOUBLE, z DOUBLE, m DOUBLE)[]"],
    "stations_3d": ["VARCHAR", "STRUCT(x DOUBLE, y DOUBLE, z DOUBLE)"],  # stored y, x, z
    "readings": ["SMALLINT", "VARCHAR", "VARCHAR"],
}


@pytest.mark.parametrize("group", sorted(TYPES))
def test_column_types(con, stores, group) -> None:
    rel = con.sql(f"SELECT * FROM read_zarr('{stores('examples.zarr')}', group_path := '{group}')")
    assert [str(t) for t in rel.types] == TYPES[group]


def test_sub_group_categorical_is_an_enum_of_its_categories(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    cats = zarr.open_array(store, path="forest_inventory/species/categories", mode="r")[...].tolist()
    codes = zarr.open_array(store, path="forest_inventory/species/codes", mode="r")[...]
    rel = con.sql(f"SELECT species FROM read_zarr('{store}', group_path := 'forest_inventory')")
    assert str(rel.types[0]) == "ENUM(" + ", ".join(f"'{c}'" for c in cats) + ")"
    nulls = con.sql(
        f"SELECT count(*) FILTER (species IS NULL) FROM read_zarr('{store}', group_path := 'forest_inventory')"
    ).fetchall()[0][0]
    assert nulls == int((codes == -1).sum()) > 0  # -1 codes are NULL


def test_nullable_sub_group_keeps_its_full_range(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    values = zarr.open_array(store, path="forest_inventory/depth_m/values", mode="r")[...]
    mask = zarr.open_array(store, path="forest_inventory/depth_m/mask", mode="r")[...]
    got = con.sql(
        f"SELECT max(depth_m), min(depth_m), count(depth_m) FROM read_zarr('{store}', group_path := 'forest_inventory')"
    ).fetchall()[0]
    kept = values[~mask]
    assert got == (float(kept.max()), float(kept.min()), int((~mask).sum()))


def test_sentinel_nan_is_null_even_without_nan_as_null(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    canopy = zarr.open_array(store, path="survey_plots/canopy_pct", mode="r")[...]
    temps = zarr.open_array(store, path="station_hourly/temperature_c", mode="r")[...]
    nulls = con.sql(
        f"SELECT count(*) FILTER (canopy_pct IS NULL) FROM read_zarr('{store}', "
        "group_path := 'survey_plots', nan_as_null := false)"
    ).fetchall()[0][0]
    assert nulls == int(np.isnan(canopy).sum()) > 0  # "missing_value": "NaN" is the sentinel
    # temperature_c has no sentinel: with nan_as_null := false its NaN stay values
    nan_values = con.sql(
        f"SELECT count(*) FILTER (isnan(v)) FROM (SELECT unnest(temperature_c::FLOAT[]) AS v "
        f"FROM read_zarr('{store}', group_path := 'station_hourly', nan_as_null := false))"
    ).fetchall()[0][0]
    assert nan_values == int(np.isnan(temps).sum()) > 0


def test_fixed_multi_valued_column_works_with_list_functions(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    temps = zarr.open_array(store, path="station_hourly/temperature_c", mode="r")[...].astype(np.float64)
    got = con.sql(
        f"SELECT station_id, list_max(temperature_c::FLOAT[]) FROM read_zarr('{store}', "
        "group_path := 'station_hourly') ORDER BY station_id"
    ).fetchall()
    for (sid, hi), row in zip(got, temps, strict=True):
        want = np.nanmax(row) if not np.isnan(row).all() else None
        assert (hi is None and want is None) or math.isclose(hi, want, rel_tol=1e-6), sid


def test_index_in_the_middle_keeps_the_declared_order(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    rel = con.sql(f"SELECT * FROM read_zarr('{store}', group_path := 'readings')")
    assert rel.columns == ["Temp (dC)", "reading_id", "status"]
    tables = con.sql(f"SELECT dims, coord_vars FROM read_zarr_tables('{store}', group_path := 'readings')").fetchall()
    assert tables == [(["reading_id"], ["readings/rid"])]  # the index (node rid) is the row coordinate


def test_table_name_mount_and_python_api(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    n = zarr.open_array(store, path="survey_plots/plot_id", mode="r").shape[0]
    by_name = con.sql(
        f"SELECT count(*) FROM read_zarr('{store}', group_path := 'survey_plots', table_name := 'survey_plots')"
    ).fetchall()[0][0]
    assert by_name == n
    zarrsql.mount(con, store, f"ex{fmt}")
    assert con.sql(f"SELECT count(*) FROM ex{fmt}.survey_plots.survey_plots").fetchall()[0][0] == n
    rel = zarrsql.read_zarr(store, group_path="trajectories", geometry="wkb", connection=con)
    assert [str(t) for t in rel.types] == ["VARCHAR", "ENUM('ship', 'glider', 'float', 'drifter')", "BLOB"]


def test_root_group_table_is_named_after_the_store(con, stores, fmt) -> None:
    store = stores("plots.zarr", fmt)
    assert con.sql(f"SELECT table_name, dims FROM read_zarr_tables('{store}')").fetchall() == [("plots", ["plot"])]
    assert con.sql(f"SELECT * FROM read_zarr('{store}')").fetchall() == [("a", 1.5), ("b", 2.5), ("c", 0.25)]


def test_table_columns_without_registration_is_not_a_table(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    assert con.sql(f"SELECT * FROM read_zarr_tables('{store}', group_path := 'unregistered')").fetchall() == []


def test_positional_rows_have_no_column_and_keep_their_order(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    ids = zarr.open_array(store, path="weather_stations/station_id", mode="r")[...].tolist()
    rel = con.sql(f"SELECT * FROM read_zarr('{store}', group_path := 'weather_stations')")
    assert "row" not in rel.columns
    assert [r[0] for r in rel.fetchall()] == ids
