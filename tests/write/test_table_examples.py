"""The table layout against the Zarr table convention's own examples (seed 000): each
example's table is written from a DuckDB relation, then checked array by array with
zarr-python (the layout and attributes the convention gives, the values from the numpy data
the relation was built from) and read back by zarrsql equal to the relation, types included.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import zarr

from tests.write.table_oracle import UUID, columns, expected, relation, root, zarrsql_read
from zarrsql.write.table import write_table

N = 37  # rows: not a multiple of the chunk, so the last chunk is partial
CHUNK = 10


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def _write(rel: duckdb.DuckDBPyRelation, out: Path, **kw: object) -> None:
    write_table(rel.to_arrow_reader(7), str(out), chunks=CHUNK, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", [2, 3])
def test_weather_stations_minimal_table_no_index(con: duckdb.DuckDBPyConnection, tmp_path: Path, fmt: int) -> None:
    rng = np.random.default_rng(1)
    ids = [f"WMO{i:05d}" for i in range(N)]
    elevation = rng.uniform(0, 3000, N).astype(np.float32)
    observed = rng.integers(1_600_000_000, 1_700_000_000, N, dtype=np.int64)
    rel = relation(con, pa.table({"station_id": ids, "elevation_m": elevation, "observed_at": observed}))
    out = tmp_path / "weather_stations.zarr"
    _write(rel, out, zarr_format=fmt)

    g = root(out)
    conventions = g.attrs["zarr_conventions"]
    assert [c["uuid"] for c in conventions] == [UUID]
    assert conventions[0]["name"] == "table"
    assert columns(out) == [{"name": n, "node": n} for n in ("station_id", "elevation_m", "observed_at")]
    assert "table:index" not in g.attrs
    assert "table:primary_geometry" not in g.attrs
    assert g["station_id"][:].tolist() == ids
    np.testing.assert_array_equal(g["elevation_m"][:], elevation)
    assert g["elevation_m"].dtype == np.float32
    assert g["observed_at"].dtype == np.int64
    np.testing.assert_array_equal(g["observed_at"][:], observed)
    assert {g[n].chunks[0] for n in ("station_id", "elevation_m", "observed_at")} == {CHUNK}
    assert g["elevation_m"].attrs["type"] == "float32"
    assert zarrsql_read(out) == expected(rel)


def test_survey_plots_index_inline_categorical_and_missing(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    covers = ["forest", "cropland", "grassland", "wetland", "urban"]
    codes = rng.integers(0, len(covers), N)
    canopy = rng.uniform(0, 100, N).astype(np.float32)
    surveyed = rng.random(N) > 0.3
    table = pa.table(
        {
            "plot_id": [f"P{i:03d}" for i in range(N)],
            "land_cover": pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), pa.array(covers)),
            "canopy_pct": pa.array(canopy, mask=~surveyed),
        }
    )
    enum = "ENUM(" + ", ".join(f"'{c}'" for c in covers) + ")"
    rel = relation(con, table, f"SELECT plot_id, land_cover::VARCHAR::{enum} AS land_cover, canopy_pct FROM t")
    out = tmp_path / "survey_plots.zarr"
    _write(rel, out, index="plot_id")

    g = root(out)
    assert g.attrs["table:index"] == "plot_id"
    land = g["land_cover"]
    assert isinstance(land, zarr.Array)
    assert land.attrs["categories"] == covers
    assert land.attrs["ordered"] is False
    np.testing.assert_array_equal(land[:], codes)
    # a NULL in a float column gets a mask (a NaN sentinel would confuse NaN data with NULL)
    canopy_node = g["canopy_pct"]
    assert isinstance(canopy_node, zarr.Group)
    assert canopy_node.attrs["encoding-type"] == "nullable"
    np.testing.assert_array_equal(canopy_node["mask"][:], ~surveyed)
    np.testing.assert_array_equal(canopy_node["values"][:][surveyed], canopy[surveyed])
    assert canopy_node["values"].chunks[0] == canopy_node["mask"].chunks[0] == land.chunks[0] == CHUNK
    assert zarrsql_read(out) == expected(rel)


def test_forest_inventory_heavyweight_categorical_is_anndata_readable(
    con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    from anndata.io import read_elem

    rng = np.random.default_rng(3)
    species = [f"Species {i:04d}" for i in range(4000)]
    picked = rng.integers(0, 4000, N)
    present = rng.random(N) > 0.1
    con.register("names", pa.table({"name": species}))
    con.sql("CREATE TYPE species_t AS ENUM (SELECT name FROM names)")
    given = [species[p] if ok else None for p, ok in zip(picked, present, strict=True)]
    table = pa.table({"plot_id": [f"F{i}" for i in range(N)], "name": pa.array(given, pa.string())})
    rel = relation(con, table, "SELECT plot_id, name::species_t AS species FROM t")
    out = tmp_path / "forest_inventory.zarr"
    _write(rel, out)

    node = root(out)["species"]
    assert isinstance(node, zarr.Group)
    assert node.attrs["encoding-type"] == "categorical"
    assert node.attrs["ordered"] is False
    codes = node["codes"][:]
    assert codes.dtype == np.int16
    cats = node["categories"][:]
    # codes index the categories (or -1 for NULL): the value of every row is the one given
    assert [cats[c] if c >= 0 else None for c in codes] == given
    # AnnData reads the same group as its own categorical (codes + categories, ordered)
    as_anndata = read_elem(node)
    assert list(as_anndata.categories) == species
    assert [None if pd.isna(v) else v for v in as_anndata] == given
    types, names, rows = zarrsql_read(out)
    want_types, want_names, want_rows = expected(rel)
    assert names == want_names
    assert rows == want_rows
    assert types[1].startswith("ENUM(")
    assert want_types[1].startswith("ENUM(")


def test_station_hourly_fixed_multi_valued_column(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    temps = rng.normal(10, 5, (N, 24)).astype(np.float32)
    table = pa.table(
        {
            "station_id": [f"S{i}" for i in range(N)],
            "temperature_c": pa.FixedSizeListArray.from_arrays(pa.array(temps.ravel()), 24),
        }
    )
    rel = relation(con, table)
    out = tmp_path / "station_hourly.zarr"
    _write(rel, out, index="station_id")

    a = root(out)["temperature_c"]
    assert isinstance(a, zarr.Array)
    assert a.shape == (N, 24)
    assert a.chunks == (CHUNK, 24)
    assert a.metadata.dimension_names[0] == "station_id"
    np.testing.assert_array_equal(a[:], temps)
    assert "encoding-type" not in a.attrs  # a fixed multi-valued column stays a plain array
    assert zarrsql_read(out) == expected(rel)


def _tracks(rng: np.random.Generator) -> list[object]:
    import shapely

    return [shapely.LineString(rng.uniform(-50, 50, (int(rng.integers(2, 9)), 2))) for _ in range(N)]


def _wkb_table(geoms: list[object], **others: list[str]) -> pa.Table:
    """The columns `others` and a WKB column `g` tagged as GeoArrow WKB (as DuckDB tags it)."""
    import shapely

    fields = [pa.field(k, pa.string()) for k in others]
    fields.append(pa.field("g", pa.binary(), metadata={"ARROW:extension:name": "geoarrow.wkb"}))
    arrays = [pa.array(v, pa.string()) for v in others.values()]
    arrays.append(pa.array(list(shapely.to_wkb(geoms)), pa.binary()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def test_trajectories_linestring_primary_geometry(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    import shapely

    rng = np.random.default_rng(5)
    geoms = _tracks(rng)
    platforms = ["ship", "glider", "float", "drifter"]
    table = _wkb_table(geoms, trajectory_id=[f"T{i}" for i in range(N)], platform=[platforms[i % 4] for i in range(N)])
    rel = relation(
        con,
        table,
        "SELECT trajectory_id, platform::ENUM('ship', 'glider', 'float', 'drifter') AS platform, "
        "g::GEOMETRY AS track FROM t",
    )
    out = tmp_path / "trajectories.zarr"
    _write(rel, out, index="trajectory_id")

    g = root(out)
    assert g.attrs["table:primary_geometry"] == "track"
    assert g.attrs["table:index"] == "trajectory_id"
    track = g["track"]
    assert isinstance(track, zarr.Group)
    assert {k: track.attrs[k] for k in ("encoding-type", "axes", "type")} == {
        "encoding-type": "linestring",
        "axes": ["x", "y"],
        "type": "float64",
    }
    counts = shapely.get_num_coordinates(geoms)
    np.testing.assert_array_equal(track["geom_offsets"][:], np.concatenate([[0], np.cumsum(counts)]))
    np.testing.assert_array_equal(track["coords"][:], shapely.get_coordinates(geoms))
    _, names, rows = zarrsql_read(out, geometry="wkb")
    assert names == ["trajectory_id", "platform", "track"]
    back = shapely.from_wkb([r[2] for r in rows])
    assert all(shapely.equals_exact(a, b, tolerance=0) for a, b in zip(back, geoms, strict=True))
    assert [r[:2] for r in rows] == [r[:2] for r in rel.fetchall()]


def test_stations_point_geometry(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    import shapely

    rng = np.random.default_rng(6)
    xy = rng.uniform(-180, 180, (N, 2))
    geoms = list(shapely.points(xy))
    rel = relation(
        con,
        _wkb_table(geoms, station_id=[f"S{i}" for i in range(N)]),
        "SELECT station_id, g::GEOMETRY AS location FROM t",
    )
    out = tmp_path / "stations.zarr"
    _write(rel, out, index="station_id")

    a = root(out)["location"]
    assert isinstance(a, zarr.Array)
    assert a.shape == (N, 2)
    assert a.chunks == (CHUNK, 2)
    assert a.attrs["encoding-type"] == "point"
    assert a.attrs["axes"] == ["x", "y"]
    np.testing.assert_array_equal(a[:], xy)
    types, _, rows = zarrsql_read(out)
    assert types[1] == "STRUCT(x DOUBLE, y DOUBLE)"
    assert [(r[1]["x"], r[1]["y"]) for r in rows] == [tuple(p) for p in xy.tolist()]


def test_a_name_that_is_no_safe_node_gets_another_node(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    rel = relation(con, pa.table({"Temp (dC)": pa.array([1, 2, 3], pa.int16()), "a/b": ["x", "y", "z"]}))
    out = tmp_path / "readings.zarr"
    _write(rel, out)
    entries = columns(out)
    assert [e["name"] for e in entries] == ["Temp (dC)", "a/b"]
    nodes = [e["node"] for e in entries]
    assert all("/" not in n and " " not in n for n in nodes)
    assert root(out)[nodes[0]][:].tolist() == [1, 2, 3]
    assert zarrsql_read(out) == expected(rel)
