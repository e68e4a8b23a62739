"""`zarrsql.to_xarray` without `dims=` takes the table's dimensions however the one zarrsql
table is named (a `'x.zarr'` string, a view, a mount, a CTE), compared with what xarray opens
of the same store; relations whose rows come from more than that table still ask for dims."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from tests.write.frames import weather

#: The mount's name; the views it makes are named by the tables' dimensions
#: (`time_lat_lon` at the root, `ocean.time_lon` in the group).
MOUNT = "tree"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tree: the weather table at the root, a group `ocean` over two of its dimensions."""
    path = tmp_path_factory.mktemp("dims_through_views") / "tree.zarr"
    sst = np.random.default_rng(1).normal(290.0, 2.0, (9, 5))
    ocean = xr.Dataset({"sst": (("time", "lon"), sst)})
    xr.DataTree.from_dict({"/": weather(), "/ocean": ocean}).to_zarr(path, zarr_format=3, consolidated=True)
    return str(path)


@pytest.fixture(scope="module")
def con(store: str) -> zarrsql.Connection:
    con = zarrsql.connect()
    zarrsql.mount(con, store, MOUNT)
    con.execute(f"CREATE VIEW over_read AS SELECT * FROM read_zarr('{store}')")
    con.execute(f"CREATE VIEW over_string AS SELECT * FROM '{store}'")
    con.execute("CREATE VIEW over_view AS SELECT time, lat, lon, air, counts, seen FROM over_read")
    con.execute(f"CREATE VIEW ocean_view AS SELECT * FROM read_zarr('{store}', group_path := 'ocean')")
    return con


@pytest.fixture(scope="module")
def root(store: str) -> xr.Dataset:
    return xr.open_zarr(store).load().drop_attrs()


@pytest.fixture(scope="module")
def ocean(store: str) -> xr.Dataset:
    tree = xr.open_datatree(store, engine="zarr")
    return tree["ocean"].to_dataset()[["sst"]].load().drop_attrs()  # sst and its (inherited) coordinates


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM '{store}'",
        "SELECT * FROM over_read",
        "SELECT * FROM over_string",
        "SELECT * FROM over_view",
        f"SELECT * FROM {MOUNT}.time_lat_lon",
        f"SELECT * FROM {MOUNT}.main.time_lat_lon",
        "WITH c AS (SELECT * FROM '{store}') SELECT * FROM c",
    ],
)
def test_the_root_table_named_any_way_gives_its_dimensions(
    con: zarrsql.Connection, store: str, root: xr.Dataset, query: str
) -> None:
    ds = zarrsql.to_xarray(con.sql(query.format(store=store)))
    assert list(ds.sizes) == ["time", "lat", "lon"]
    xr.testing.assert_equal(ds, root)


@pytest.mark.parametrize("query", [f"SELECT * FROM {MOUNT}.ocean.time_lon", "SELECT * FROM ocean_view"])
def test_a_group_table_through_a_view_gives_its_dimensions(
    con: zarrsql.Connection, ocean: xr.Dataset, query: str
) -> None:
    ds = zarrsql.to_xarray(con.sql(query))
    assert list(ds.sizes) == ["time", "lon"]
    xr.testing.assert_equal(ds, ocean)


def test_a_filtered_mounted_view_keeps_its_dimensions(con: zarrsql.Connection, root: xr.Dataset) -> None:
    ds = zarrsql.to_xarray(con.sql(f"SELECT * FROM {MOUNT}.time_lat_lon WHERE lat < 50 ORDER BY time, lat DESC, lon"))
    xr.testing.assert_equal(ds, root.where(root.lat < 50, drop=True))


def test_a_relation_of_the_python_api_over_a_view_keeps_its_dimensions(
    con: zarrsql.Connection, root: xr.Dataset
) -> None:
    """`.filter` wraps the view in a subquery (a CTE in DuckDB 2): still one table read."""
    ds = zarrsql.to_xarray(con.sql("SELECT * FROM over_view").filter("lon > 2"))
    xr.testing.assert_equal(ds, root.where(root.lon > 2, drop=True))


def test_a_subquery_that_only_filters_keeps_the_dimensions(con: zarrsql.Connection, root: xr.Dataset) -> None:
    """The subquery reads another table, but the rows are still the root table's."""
    rel = con.sql(
        f"SELECT * FROM {MOUNT}.time_lat_lon WHERE lon IN (SELECT lon FROM {MOUNT}.ocean.time_lon WHERE lon < 3)"
    )
    xr.testing.assert_equal(zarrsql.to_xarray(rel), root.where(root.lon < 3, drop=True))


def test_to_zarr_of_a_mounted_view_needs_no_dims(con: zarrsql.Connection, ocean: xr.Dataset, tmp_path: Path) -> None:
    out = tmp_path / "ocean.zarr"
    zarrsql.to_zarr(con.sql(f"SELECT * FROM {MOUNT}.ocean.time_lon"), out, connection=con)
    xr.testing.assert_equal(xr.open_zarr(out).load().drop_attrs(), ocean)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT a.time, a.lat, a.lon, a.air, b.air AS air2 FROM over_read a JOIN over_string b USING (time, lat, lon)",
        f"SELECT * FROM {MOUNT}.time_lat_lon UNION ALL SELECT * FROM over_read",
        "WITH c AS (SELECT * FROM '{store}') SELECT * FROM c UNION ALL SELECT * FROM c",
        f"SELECT * FROM {MOUNT}.ocean.time_lon JOIN labels USING (lon)",
        f"SELECT * FROM {MOUNT}.ocean.time_lon, range(2) r(k)",
    ],
    ids=["join of two views", "union with a view", "a CTE read twice", "join to a DataFrame", "cross join"],
)
def test_rows_from_a_second_table_still_ask_for_dims(con: zarrsql.Connection, store: str, query: str) -> None:
    labels = pd.DataFrame({"lon": np.float32([0.0, 2.5]), "label": ["a", "b"]})  # noqa: F841 (read by its name)
    with pytest.raises(zarrsql.ParameterError, match=r"dimensions cannot be known: pass dims="):
        zarrsql.to_xarray(con.sql(query.format(store=store)))


def test_an_aggregate_through_a_mounted_view_that_dropped_a_dimension_asks_for_dims(
    con: zarrsql.Connection, root: xr.Dataset
) -> None:
    rel = con.sql(f"SELECT lat, lon, avg(air) AS air FROM {MOUNT}.time_lat_lon GROUP BY lat, lon")
    with pytest.raises(zarrsql.ParameterError, match=r"\['time', 'lat', 'lon'\], not all kept"):
        zarrsql.to_xarray(rel)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM renamed",
        "SELECT * FROM '{store}' AS z(lat, time, lon, air, counts, seen)",
        "WITH c(lat, time, lon, air, counts, seen) AS (SELECT * FROM over_read) SELECT * FROM c",
    ],
    ids=["view", "table alias", "CTE"],
)
def test_columns_renamed_on_the_way_are_not_taken_for_the_table(
    con: zarrsql.Connection, store: str, query: str
) -> None:
    """A column list (`v(a, b, ...)`) may give a dimension's name to another column: not followed."""
    con.execute(f"CREATE OR REPLACE VIEW renamed(lat, time, lon, air, counts, seen) AS SELECT * FROM '{store}'")
    with pytest.raises(zarrsql.ParameterError, match=r"dimensions cannot be known: pass dims="):
        zarrsql.to_xarray(con.sql(query.format(store=store)))


def test_finding_the_dimensions_leaves_no_view_behind(con: zarrsql.Connection) -> None:
    """DuckDB 1.5 runs the catalog lookups beside a temporary view of the relation: dropped."""
    before = con.sql("SELECT database_name, schema_name, view_name FROM duckdb_views()").fetchall()
    zarrsql.to_xarray(con.sql("SELECT * FROM over_view"))
    after = con.sql("SELECT database_name, schema_name, view_name FROM duckdb_views()").fetchall()
    assert sorted(after) == sorted(before)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT lat AS time, time AS lat, lon, air, counts, seen FROM over_read",
        "SELECT * REPLACE (lat AS lon, lon AS lat) FROM '{store}'",
        "SELECT * FROM swapped",
        "WITH c AS (SELECT lon AS lat, lat AS lon, time, air FROM over_read) SELECT * FROM c",
    ],
    ids=["select list", "star replace", "view", "CTE"],
)
def test_a_select_list_that_swaps_dimension_names_asks_for_dims(
    con: zarrsql.Connection, store: str, query: str
) -> None:
    """Before, the names matched the table's, so `time` was taken as the time dimension while it
    held latitudes (found by a hunter in session 27)."""
    con.execute("CREATE OR REPLACE VIEW swapped AS SELECT lat AS time, time AS lat, lon, air FROM over_read")
    with pytest.raises(zarrsql.ParameterError, match=r"dimensions cannot be known: pass dims="):
        zarrsql.to_xarray(con.sql(query.format(store=store)))


def test_columns_named_as_they_are_keep_the_dimensions(con: zarrsql.Connection, root: xr.Dataset) -> None:
    rel = con.sql("SELECT o.time AS time, o.lat AS lat, lon AS lon, air, counts, seen FROM over_read o")
    xr.testing.assert_equal(zarrsql.to_xarray(rel), root)
