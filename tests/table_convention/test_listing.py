"""What the listings say about table-convention groups: tables, columns' arrays with their
`table:` marks and roles, and opaque columns (listed, left out, warned about)."""

from __future__ import annotations

import json
import warnings

import pytest
import zarr

import zarrsql
from zarrsql.metadata.tree import clear_cache


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _attrs(con, store: str, group: str) -> dict[str, tuple[str, dict]]:
    rows = con.sql(f"SELECT name, role, attrs FROM read_zarr_metadata('{store}', group_path := '{group}')").fetchall()
    return {name: (role, json.loads(attrs)) for name, role, attrs in rows}


def test_tables_list_each_group_once_with_its_row_dimension(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    rows = con.sql(
        f"SELECT group_path, table_name, dims, shape, chunk_shape FROM read_zarr_tables('{store}') "
        "WHERE group_path = '/trajectories' OR group_path = '/weather_stations'"
    ).fetchall()
    n_traj = zarr.open_array(store, path="trajectories/trajectory_id", mode="r").shape[0]
    n_weather = zarr.open_array(store, path="weather_stations/station_id", mode="r").shape[0]
    # chunk lengths are the fixtures' (stores.py): 4 rows for trajectories, 5 for weather_stations
    assert rows == [
        ("/trajectories", "trajectories", ["trajectory_id"], [n_traj], [4]),
        ("/weather_stations", "weather_stations", ["row"], [n_weather], [5]),
    ]


def test_index_and_primary_geometry_are_visible_in_the_metadata(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    listed = _attrs(con, store, "trajectories")
    role, attrs = listed["trajectories/trajectory_id"]
    assert role == "coord"
    assert attrs["table:index"] == "trajectory_id"
    assert attrs["table:column"] == "trajectory_id"
    for part in ("coords", "geom_offsets"):  # the arrays of the primary geometry column
        role, attrs = listed[f"trajectories/track/{part}"]
        assert role == "data"
        assert attrs["table:primary_geometry"] == "track"
        assert attrs["table:column"] == "track"
    role, attrs = listed["trajectories/platform"]
    assert attrs["categories"] == ["ship", "glider", "float", "drifter"]  # the array's own attributes stay
    assert "table:index" not in attrs
    assert "table:primary_geometry" not in attrs


def test_column_names_apart_from_nodes(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    listed = _attrs(con, store, "readings")
    assert listed["readings/temp_c"][1]["table:column"] == "Temp (dC)"
    assert listed["readings/rid"][1]["table:index"] == "reading_id"
    # an array read by path keeps its column's name
    rel = con.sql(f"SELECT * FROM read_zarr('{store}', array_path := 'readings/temp_c')")
    assert rel.columns == ["dim_0", "Temp (dC)"]


def test_opaque_columns_are_listed_left_out_and_warned_about(con, stores, fmt) -> None:
    store = stores("opaque.zarr", fmt)
    clear_cache()  # the warning comes with the analysis, once per (cached) store
    query = f"SELECT * FROM read_zarr('{store}', group_path := 'mixed')"
    with pytest.warns(zarrsql.ZarrSQLWarning) as caught:
        rel = con.sql(query)
    rows = rel.fetchall()
    texts = sorted(str(w.message) for w in caught if issubclass(w.category, zarrsql.ZarrSQLWarning))
    assert any("'shapes'" in t and "'multipolygon'" in t for t in texts)
    assert any("'blob'" in t and "'x-custom-bits'" in t for t in texts)
    assert rel.columns == ["id", "label"]
    assert rows == [(i, c) for i, c in enumerate("abcde")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the analysis is cached with the store: no second warning
        listed = _attrs(con, store, "mixed")
    assert listed["mixed/shapes/coords"][0] == "unsupported"
    assert listed["mixed/shapes/part_offsets"][0] == "unsupported"
    assert listed["mixed/blob"] == ("unsupported", {"encoding-type": "x-custom-bits", "table:column": "blob"})
