"""Joins and key subqueries whose other side is itself a zarrsql read (another store, another
array or table of the same store) prune like those over a DuckDB table, and a side that is a
whole large zarrsql table is never scanned just to list keys for a smaller one.

Rows are compared with DuckDB over pandas copies of the stores (xarray's `to_dataframe()`)
and with anndata. Work units: the large store must read only the units holding a key, and at
most once; the small sides are each read at most twice (listed for their keys, then read by
the statement).
"""

from __future__ import annotations

import warnings

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

LAT = np.arange(60, 30, -1.5, dtype="float32")  # 20 values, descending, float32
LON = np.arange(0, 40, 2.0, dtype="float32")  # 20 values
TIME = pd.date_range("2023-01-01", periods=24, freq="h")
CHUNKS = {"time": 12, "lat": 5, "lon": 5}
GRID_UNITS = 2 * 4 * 4  # the grid's chunks, one work unit each

#: Station tables, each a store of its own. `by_lat` keys on a float32 dimension `lat`; `by_id`
#: holds lat/lon as data variables along `station`, with a missing latitude (NULL) and a point
#: off the grid (45.2 is a float32 value no cell has); `by_double` keys on a float64 `lat`, one
#: of whose values (45.1) is not a float32 value and so matches no cell.
STATIONS = {
    "by_lat": xr.Dataset({"elev": ("lat", [1.0, 2.0])}, coords={"lat": np.array([58.5, 45.0], "float32")}),
    "by_id": xr.Dataset(
        {
            "lat": ("station", np.array([58.5, 45.0, np.nan, 45.2], "float32")),
            "lon": ("station", np.array([2.0, 20.0, 4.0, 22.0], "float32")),
        },
        coords={"station": np.arange(4)},
    ),
    "by_double": xr.Dataset({"elev": ("lat", [1.0, 2.0])}, coords={"lat": np.array([58.5, 45.1], "float64")}),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("zarr_joins")
    rng = np.random.default_rng(5)
    grid = xr.Dataset(
        {"t": (("time", "lat", "lon"), rng.normal(size=(24, 20, 20)).astype("float32"))},
        coords={"time": TIME, "lat": LAT, "lon": LON},
    )
    paths = {"grid": str(root / "grid.zarr")}
    grid.chunk(CHUNKS).to_zarr(paths["grid"], consolidated=True)
    for name, ds in STATIONS.items():
        paths[name] = str(root / f"{name}.zarr")
        ds.to_zarr(paths[name], consolidated=True)
    return paths


@pytest.fixture(scope="module")
def oracle(stores) -> duckdb.DuckDBPyConnection:
    """Plain DuckDB holding each store as a table of the same name, from xarray's frames."""
    plain = duckdb.connect()
    for name, path in stores.items():
        frame = xr.open_zarr(path).to_dataframe().reset_index()
        plain.register(f"{name}_frame", frame)
        plain.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_frame")
    plain.execute("CREATE TABLE lat_axis AS SELECT lat FROM grid GROUP BY lat")
    return plain


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _zarr_sql(sql: str, stores: dict[str, str]) -> str:
    names = {name: f"read_zarr('{path}')" for name, path in stores.items()}
    return sql.format(**names, lat_axis=f"read_zarr('{stores['grid']}', array_path := 'lat')")


def _assert_same_rows(rows: list[tuple], expected: list[tuple]) -> None:
    assert len(rows) == len(expected), (rows, expected)
    for got, want in zip(rows, expected, strict=True):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g == (pytest.approx(w, rel=1e-6, abs=1e-9) if isinstance(w, float) else w), (rows, expected)


def _units_holding(lats: set[float], points: set[tuple[float, float]] | None = None) -> int:
    """Units of the grid holding a cell whose lat is in `lats` or, given `points`, whose
    (lat, lon) is one of them: both time blocks of each such cell's (lat, lon) block."""
    blocks = {
        (j // 5, k // 5)
        for j, la in enumerate(LAT.astype(float))
        for k, lo in enumerate(LON.astype(float))
        if ((la, lo) in points if points is not None else la in lats)
    }
    return 2 * len(blocks)


def _planned(con, sql: str) -> int:
    with zarrsql.trace() as t:
        con.sql(sql).fetchall()
    return t.work_units_planned


def _check(con, oracle, stores, sql: str, *, holding: int, small: str) -> None:
    """Rows as DuckDB's over the copies; the grid read once, only its `holding` units, and the
    small side `small` read at most twice."""
    with zarrsql.trace() as t:
        rows = con.sql(_zarr_sql(sql, stores)).fetchall()
    _assert_same_rows(rows, oracle.sql(sql.format(**{n: n for n in stores}, lat_axis="lat_axis")).fetchall())
    small_units = _planned(con, _zarr_sql(f"SELECT * FROM {{{small}}}", stores))
    # DuckDB 1.5 hands the scan an Arrow filter, of which an OR of (lat, lon) pairs does not prune
    most = holding if HAS_SOURCES else GRID_UNITS
    assert holding <= t.work_units_read <= most + 2 * small_units, (t, holding, small_units)


@pytest.mark.parametrize(
    ("sql", "small", "lats", "points"),
    [
        ("SELECT count(*), sum(t) FROM {grid} WHERE lat IN (SELECT lat FROM {by_lat})", "by_lat", {58.5, 45.0}, None),
        (
            "SELECT s.elev, count(*), sum(z.t) FROM {grid} z JOIN {by_lat} s USING (lat) GROUP BY ALL ORDER BY 1",
            "by_lat",
            {58.5, 45.0},
            None,
        ),
        (
            "SELECT s.elev, count(*), sum(z.t) FROM {grid} z JOIN {by_lat} s ON z.lat = s.lat GROUP BY ALL ORDER BY 1",
            "by_lat",
            {58.5, 45.0},
            None,
        ),
        (  # keys of the same store's `lat` array (a table of its own, array_path :=)
            "SELECT count(*), sum(t) FROM {grid} WHERE lat IN (SELECT lat FROM {lat_axis} WHERE lat > 50)",
            "lat_axis",
            {float(v) for v in LAT if v > 50},
            None,
        ),
        (  # keys with a NULL latitude and one off the grid
            "SELECT count(*), sum(t) FROM {grid} WHERE lat IN (SELECT lat FROM {by_id})",
            "by_id",
            {58.5, 45.0},
            None,
        ),
        (
            "SELECT count(*), sum(t) FROM {grid} WHERE (lat, lon) IN (SELECT lat, lon FROM {by_id})",
            "by_id",
            {58.5, 45.0},
            {(58.5, 2.0), (45.0, 20.0)},
        ),
        (  # a DOUBLE key that is no float32 value matches nothing; 58.5 still prunes
            "SELECT count(*), sum(z.t) FROM {grid} z JOIN {by_double} s USING (lat)",
            "by_double",
            {58.5},
            None,
        ),
    ],
)
def test_a_zarr_read_on_the_other_side_prunes_the_grid(con, oracle, stores, sql, small, lats, points) -> None:
    _check(con, oracle, stores, sql, holding=_units_holding(lats, points), small=small)


@pytest.mark.parametrize(
    ("sql", "small", "lats", "points"),
    [
        (
            "SELECT s.elev, count(*), sum(z.t) FROM {by_lat} s JOIN {grid} z USING (lat) GROUP BY ALL ORDER BY 1",
            "by_lat",
            {58.5, 45.0},
            None,
        ),
        (
            "SELECT s.station, count(*), sum(z.t) FROM {by_id} s JOIN {grid} z ON s.lat = z.lat AND s.lon = z.lon "
            "GROUP BY ALL ORDER BY 1",
            "by_id",
            {58.5, 45.0},
            {(58.5, 2.0), (45.0, 20.0)},
        ),
        (  # the grid on the NULL-supplying side: every station stays, the NULL one unmatched
            "SELECT s.station, count(z.t), sum(z.t) FROM {by_id} s LEFT JOIN {grid} z ON s.lat = z.lat "
            "AND s.lon = z.lon GROUP BY ALL ORDER BY 1",
            "by_id",
            {58.5, 45.0},
            {(58.5, 2.0), (45.0, 20.0)},
        ),
        ("SELECT count(*), sum(z.t) FROM {by_double} s JOIN {grid} z USING (lat)", "by_double", {58.5}, None),
    ],
)
def test_the_small_store_first_reads_the_grid_once(con, oracle, stores, sql, small, lats, points) -> None:
    """Listing the keys of the grid to prune the small side first would read all of it, then
    read it again for the statement."""
    _check(con, oracle, stores, sql, holding=_units_holding(lats, points), small=small)


@pytest.mark.parametrize(
    "sql",
    [
        # the grid on the preserved side of a LEFT join: only the small side could be pruned
        "SELECT count(*), count(s.elev), sum(z.t) FROM {grid} z LEFT JOIN {by_lat} s USING (lat)",
        # keys listed from the whole grid for the small store's IN
        "SELECT count(*), sum(elev) FROM {by_lat} WHERE lat IN (SELECT lat FROM {grid})",
        # NOT IN is not pruned; with a NULL key it keeps no row
        "SELECT count(*), sum(t) FROM {grid} WHERE lat NOT IN (SELECT lat FROM {by_id})",
        "SELECT count(*), sum(t) FROM {grid} WHERE lat NOT IN (SELECT lat FROM {by_lat})",
    ],
)
def test_the_grid_is_never_listed_for_keys_of_a_smaller_store(con, oracle, stores, sql) -> None:
    small = "by_id" if "by_id" in sql else "by_lat"
    _check(con, oracle, stores, sql, holding=GRID_UNITS, small=small)


# --------------------------------------------------------------------------------------
# AnnData: cells picked by an obs column, their rows of obs_var
# --------------------------------------------------------------------------------------

N_OBS, N_VAR, OBS_CHUNK = 400, 50, 50  # X chunked (50, 25): 8 x 2 = 16 work units


@pytest.fixture(scope="module")
def adata_store(tmp_path_factory: pytest.TempPathFactory):
    import anndata as ad

    rng = np.random.default_rng(3)
    obs = pd.DataFrame(
        {"n_counts": np.arange(N_OBS) % 97},  # 3 is the count of cells 3, 100, 197, 294 and 391
        index=[f"cell_{i}" for i in range(N_OBS)],
    )
    var = pd.DataFrame(index=[f"gene_{j}" for j in range(N_VAR)])
    adata = ad.AnnData(X=rng.random((N_OBS, N_VAR)).astype("float32"), obs=obs, var=var)
    path = tmp_path_factory.mktemp("adata_joins") / "cells.zarr"
    with warnings.catch_warnings():  # the writer's own notices about formats are not under test
        warnings.simplefilter("ignore")
        adata.write_zarr(path, chunks=(OBS_CHUNK, 25))
    return str(path), adata


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*), sum(X) FROM {x} WHERE obs IN (SELECT obs FROM {obs} WHERE n_counts = 3)",
        "SELECT count(*), sum(x.X) FROM {x} x JOIN (SELECT obs FROM {obs} WHERE n_counts = 3) o USING (obs)",
        "SELECT count(*), sum(x.X) FROM (SELECT obs FROM {obs} WHERE n_counts = 3) o JOIN {x} x ON o.obs = x.obs",
    ],
)
def test_cells_picked_from_obs_read_only_their_units_of_obs_var(con, adata_store, sql) -> None:
    path, adata = adata_store
    picked = adata[adata.obs.n_counts == 3]
    with zarrsql.trace() as t:
        rows = con.sql(
            sql.format(
                x=f"read_zarr('{path}', table_name := 'obs_var')", obs=f"read_zarr('{path}', table_name := 'obs')"
            )
        ).fetchall()
    assert rows[0][0] == picked.n_obs * N_VAR
    assert rows[0][1] == pytest.approx(float(picked.X.astype("float64").sum()), rel=1e-6)
    blocks = {adata.obs_names.get_loc(name) // OBS_CHUNK for name in picked.obs_names}
    holding = 2 * len(blocks)  # each block of cells is 2 units (of 25 genes)
    obs_units = _planned(con, f"SELECT * FROM read_zarr('{path}', table_name := 'obs')")
    assert holding <= t.work_units_read <= holding + 2 * obs_units, (t, holding, obs_units)
