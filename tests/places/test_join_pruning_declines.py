"""Join pruning lists the other side's keys in a statement of their own and pushes them into the
zarr side as literals. Where those keys may not be the ones the join compares with, it must
decline, and where they may change later, a kept relation must not return stale rows:

* a CTE named like a real table: alone, the name is the table (`WITH st AS ... JOIN st`);
* an other side that gives other rows when run again (`ORDER BY random() LIMIT 1`, samples,
  `random()`, `now()`, a view hiding one of them);
* keys compared under a collation (a `COLLATE NOCASE` column, a `COLLATE` in the statement,
  the `default_collation` setting), which plain literals would compare case-sensitively;
* a relation (or a view made from it) fetched after its other side gained keys.

Rows are compared with the same statement on plain DuckDB over xarray's `to_dataframe()` of
the store (the oracle); work units come from `zarrsql.trace()` (counted on DuckDB 2 only,
where the pushed keys reach the scan).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

pytestmark = pytest.mark.timeout(300)

#: 3 x 4 cells, one work unit each (chunks of 1 x 1): 12 units.
GRID = xr.Dataset(
    {"air": (("lat", "lon"), np.arange(12.0).reshape(3, 4))},
    coords={"lat": [10.0, 20.0, 30.0], "lon": [0.0, 1.0, 2.0, 3.0]},
)
#: Stations along a string dimension, one work unit per station: 3 units.
NAMED = xr.Dataset(
    {"v": (("station", "level"), np.arange(6.0).reshape(3, 2))},
    coords={"station": ["oslo", "rome", "paris"], "level": [850, 500]},
)
#: Four stations, each on a grid cell: a RIGHT JOIN finds an `air` value for every one.
STATIONS = "SELECT * FROM (VALUES (10.0, 0.0), (20.0, 1.0), (30.0, 2.0), (30.0, 3.0)) t(lat, lon)"
SETUP = [f"CREATE TABLE st AS {STATIONS}"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("join_declines")
    paths = {"grid": str(root / "grid.zarr"), "named": str(root / "named.zarr")}
    GRID.to_zarr(paths["grid"], mode="w", encoding={"air": {"chunks": (1, 1)}})
    # Zarr v2: zarr-python warns that v3 has no specification for fixed-length strings yet
    NAMED.to_zarr(paths["named"], mode="w", encoding={"v": {"chunks": (1, 2)}}, zarr_format=2)
    return paths


def _connect(setup: list[str]) -> tuple[zarrsql.Connection, duckdb.DuckDBPyConnection]:
    """A zarrsql connection and the oracle (plain DuckDB, `grid` and `named` as xarray's
    frames), both given the tables of `setup`."""
    con, plain = zarrsql.connect(), duckdb.connect()
    plain.register("grid_frame", GRID.to_dataframe().reset_index())
    plain.register("named_frame", NAMED.to_dataframe().reset_index())
    plain.execute("CREATE TABLE grid AS SELECT * FROM grid_frame")
    plain.execute("CREATE TABLE named AS SELECT * FROM named_frame")
    for statement in setup:
        con.execute(statement)
        plain.execute(statement)
    return con, plain


def _both(sql: str, stores: dict[str, str], con, plain) -> tuple[list[tuple], list[tuple], zarrsql.Trace]:
    """The statement's rows on zarrsql (`{grid}` / `{named}` the stores) and on the oracle,
    and zarrsql's trace."""
    mine = sql.format(grid=f"read_zarr('{stores['grid']}')", named=f"read_zarr('{stores['named']}')")
    with zarrsql.trace() as t:
        rows = con.sql(mine).fetchall()
    return rows, plain.sql(sql.format(grid="grid", named="named")).fetchall(), t


# -- 1. a CTE named like a table -------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "WITH st AS (SELECT 30.0 AS lat, 3.0 AS lon) SELECT lat, lon, air FROM {grid} JOIN st USING (lat, lon)",
        "WITH st AS (SELECT 30.0 AS lat, 3.0 AS lon) "
        "SELECT lat, lon, air FROM {grid} WHERE (lat, lon) IN (SELECT lat, lon FROM st)",
        "WITH st AS (SELECT 30.0 AS lat) SELECT lat, lon, air FROM {grid} z JOIN (SELECT * FROM st) s USING (lat) "
        "ORDER BY ALL",
        "WITH st AS (SELECT 30.0 AS lat) "
        "SELECT lat, lon, air FROM {grid} WHERE lat IN (SELECT lat FROM (SELECT * FROM st)) ORDER BY ALL",
    ],
)
def test_a_cte_named_like_a_table_is_never_listed_as_the_table(stores, sql) -> None:
    con, plain = _connect(["CREATE TABLE st AS SELECT 10.0 AS lat, 0.0 AS lon"])  # the CTE's name, other keys
    rows, expected, _ = _both(sql, stores, con, plain)
    assert rows == expected
    assert rows  # the CTE's keys are on the grid: the join is not empty


def test_a_cte_named_like_the_zarr_view_is_not_pruned_as_the_zarr_table(tmp_path) -> None:
    """`v` is a view of a store with a float32 `lat`, but the statement's CTE `v` (a DOUBLE
    `lat` of 45.1, no float32 value) is what the join reads: keys narrowed to float32 for the
    store's dimension would leave 45.1 out and drop the CTE's row."""
    path = str(tmp_path / "f32.zarr")
    xr.Dataset({"x": ("lat", [1.0, 2.0])}, coords={"lat": np.array([45.0, 46.0], "float32")}).to_zarr(path)
    con, plain = _connect(["CREATE TABLE d AS SELECT 45.1::DOUBLE AS lat"])
    con.execute(f"CREATE VIEW v AS SELECT * FROM read_zarr('{path}')")
    sql = "WITH v AS (SELECT 45.1::DOUBLE AS lat, 7 AS n) SELECT n FROM v JOIN d USING (lat)"
    assert con.sql(sql).fetchall() == plain.sql(sql).fetchall() == [(7,)]


# -- 2. an other side that is not the same when run again ---------------------------------------

RANDOM_SIDES = [
    "(SELECT * FROM st ORDER BY random() LIMIT 1)",
    "(SELECT * FROM st ORDER BY uuid() LIMIT 1)",
    "(SELECT * FROM st ORDER BY gen_random_uuid() LIMIT 2)",
    "(SELECT * FROM st WHERE random() < 0.5)",
    "(SELECT * FROM st USING SAMPLE 1 ROWS)",
    "(SELECT * FROM st TABLESAMPLE reservoir(2 ROWS))",
    "(SELECT lat, lon FROM (SELECT *, random() AS r FROM st) QUALIFY row_number() OVER (ORDER BY r) = 1)",
    "picked",  # a view hiding ORDER BY random() LIMIT 1
]


@pytest.mark.parametrize("side", RANDOM_SIDES)
def test_an_other_side_picked_at_random_finds_its_cells_every_time(stores, side) -> None:
    """Each run picks its own stations, and every station is a grid cell, so a RIGHT JOIN finds
    `air` for each row picked; keys listed by another run would leave some NULL."""
    con, _ = _connect([*SETUP, "CREATE VIEW picked AS SELECT * FROM st ORDER BY random() LIMIT 1"])
    sql = f"SELECT s.lat, s.lon, z.air FROM read_zarr('{stores['grid']}') z RIGHT JOIN {side} s USING (lat, lon)"
    for _ in range(20):
        rows = con.sql(sql).fetchall()
        assert all(air is not None for _, _, air in rows), rows


@pytest.mark.parametrize(
    "side",
    [
        "(SELECT * FROM st LIMIT 2)",  # LIMIT picks among rows in no fixed order
        "(SELECT * FROM st ORDER BY lat LIMIT 3 OFFSET 1)",  # ties at lat 30
        "(SELECT * FROM st WHERE now() > TIMESTAMP '2000-01-01')",  # now() differs between two queries
        "(SELECT * FROM st WHERE random() < 2)",  # volatile, even when it keeps every row
        "(SELECT DISTINCT ON (lat) lat, lon FROM st)",
        "(SELECT lat, first(lon) AS lon FROM st GROUP BY lat)",
    ],
)
def test_an_other_side_that_may_change_between_runs_is_not_listed(stores, side) -> None:
    con, plain = _connect(SETUP)
    sql = "SELECT s.lat, s.lon, z.air FROM {grid} z RIGHT JOIN " + side + " s USING (lat, lon) ORDER BY ALL"
    rows, expected, t = _both(sql, stores, con, plain)
    assert all(air is not None for _, _, air in rows)
    if "LIMIT" not in side and "DISTINCT ON" not in side and "first" not in side:
        assert rows == expected
    if HAS_SOURCES:
        assert t.work_units_read == t.work_units_planned == 12


# -- 3. keys under a collation --------------------------------------------------------------------

NOCASE = ["CREATE TABLE sn (station VARCHAR COLLATE NOCASE)", "INSERT INTO sn VALUES ('ROME'), ('Oslo')"]
PLAIN_NAMES = ["CREATE TABLE pn (station VARCHAR)", "INSERT INTO pn VALUES ('ROME'), ('Oslo')"]


@pytest.mark.parametrize(
    ("setup", "sql"),
    [
        (NOCASE, "SELECT station, level, v FROM {named} JOIN sn USING (station) ORDER BY ALL"),
        (NOCASE, "SELECT station, level, v FROM {named} WHERE station IN (SELECT station FROM sn) ORDER BY ALL"),
        (
            [*NOCASE, "CREATE VIEW snv AS SELECT * FROM sn"],
            "SELECT z.station, level, v FROM {named} z JOIN snv s ON z.station = s.station ORDER BY ALL",
        ),
        (
            PLAIN_NAMES,
            "SELECT station, level, v FROM {named} "
            "JOIN (SELECT station COLLATE NOCASE AS station FROM pn) USING (station) ORDER BY ALL",
        ),
        (
            PLAIN_NAMES,
            "SELECT z.station, level, v FROM {named} z JOIN pn s ON z.station = s.station COLLATE NOCASE ORDER BY ALL",
        ),
        (
            [*PLAIN_NAMES, "SET default_collation = 'nocase'"],
            "SELECT z.station, level, v FROM {named} z JOIN pn USING (station) ORDER BY ALL",
        ),
    ],
)
def test_keys_compared_under_a_collation_match_as_the_join_does(stores, setup, sql) -> None:
    con, plain = _connect(setup)
    rows, expected, _ = _both(sql, stores, con, plain)
    assert rows == expected
    assert {r[0] for r in rows} == {"oslo", "rome"}  # 'ROME' and 'Oslo' match without case


# -- 4. a kept relation after its other side changed ----------------------------------------------


def _rows_or_refusal(fetch, expected: list[tuple]) -> None:
    """A kept relation fetched again: the rows of the statement now, or an error saying to run
    it again, never other rows."""
    outcome: list[tuple] | str
    try:
        outcome = fetch()
    except (duckdb.Error, zarrsql.ZarrSQLError) as err:
        outcome = str(err)
    if isinstance(outcome, str):
        assert "run the statement again" in outcome
    else:
        assert outcome == expected


JOIN_SQL = "SELECT lat, lon, air FROM {grid} JOIN st USING (lat, lon) ORDER BY ALL"
IN_SQL = "SELECT lat, lon, air FROM {grid} WHERE (lat, lon) IN (SELECT lat, lon FROM st) ORDER BY ALL"


@pytest.mark.parametrize("sql", [JOIN_SQL, IN_SQL])
def test_a_relation_fetched_after_its_other_side_gained_keys_gives_no_stale_rows(stores, sql) -> None:
    con, plain = _connect(["CREATE TABLE st (lat DOUBLE, lon DOUBLE)", "INSERT INTO st VALUES (10, 0)"])
    mine = sql.format(grid=f"read_zarr('{stores['grid']}')")
    relation = con.sql(mine)
    relation.create_view("kept")
    assert relation.fetchall() == plain.sql(sql.format(grid="grid")).fetchall() == [(10.0, 0.0, 0.0)]
    for c in (con, plain):
        c.execute("INSERT INTO st VALUES (30, 3)")
    expected = plain.sql(sql.format(grid="grid")).fetchall()
    assert len(expected) == 2
    _rows_or_refusal(relation.fetchall, expected)
    _rows_or_refusal(lambda: con.sql("SELECT * FROM kept").fetchall(), expected)
    with pytest.raises(zarrsql.ZarrSQLError, match="run the statement again"):
        con.execute("SELECT * FROM kept").fetchall()  # through the wrapper: zarrsql's own error
    assert con.sql(mine).fetchall() == expected  # run again: the rows as they are now


@pytest.mark.parametrize("sql", [JOIN_SQL, IN_SQL])
def test_a_relation_whose_other_side_kept_its_keys_gives_the_rows_as_they_are(stores, sql) -> None:
    """Rows added with keys already listed, and keys removed: the guard passes, and the rows are
    the statement's own (the pushed keys still cover every key of the other side)."""
    con, plain = _connect(["CREATE TABLE st (lat DOUBLE, lon DOUBLE)", "INSERT INTO st VALUES (10, 0), (20, 1)"])
    relation = con.sql(sql.format(grid=f"read_zarr('{stores['grid']}')"))
    assert relation.fetchall() == plain.sql(sql.format(grid="grid")).fetchall()
    for c in (con, plain):
        c.execute("INSERT INTO st VALUES (10, 0), (NULL, 1)")
        c.execute("DELETE FROM st WHERE lat = 20")
    expected = plain.sql(sql.format(grid="grid")).fetchall()
    assert relation.fetchall() == expected
    assert len(expected) == (2 if sql == JOIN_SQL else 1)


def test_a_relation_whose_other_store_changed_gives_no_stale_rows(stores, tmp_path) -> None:
    """The other side is a smaller zarrsql table (a station store keyed on `lat`): rewritten in
    place with another latitude, the kept relation must not join with the old one."""
    path = str(tmp_path / "few.zarr")
    xr.Dataset({"elev": ("lat", [1.0])}, coords={"lat": [10.0]}).to_zarr(path, mode="w")
    con = zarrsql.connect()
    sql = f"SELECT lat, lon, air FROM read_zarr('{stores['grid']}') JOIN read_zarr('{path}') USING (lat) ORDER BY ALL"
    relation = con.sql(sql)
    assert relation.fetchall() == [(10.0, lo, air) for lo, air in zip(GRID.lon.values, GRID.air.values[0], strict=True)]
    zarr.open_array(path + "/lat", mode="r+")[:] = [30.0]  # same shape and chunks: data only
    expected = [(30.0, lo, air) for lo, air in zip(GRID.lon.values, GRID.air.values[2], strict=True)]
    _rows_or_refusal(relation.fetchall, expected)
    assert con.sql(sql).fetchall() == expected


# -- what still prunes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "side",
    [
        "st",
        "st_view",  # a view over a table
        "(SELECT lat, lon + 0 AS lon FROM st WHERE lat > 15)",  # deterministic functions and filters
        "frame",  # a registered pandas DataFrame
    ],
)
def test_a_steady_other_side_still_prunes_and_gives_the_joins_rows(stores, side) -> None:
    """Unchanged other sides still prune: the statement run at once reads only the units of
    the listed keys, the guard reaching its failure for none of them."""
    con, plain = _connect([*SETUP, "CREATE VIEW st_view AS SELECT * FROM st"])
    frame = plain.sql("SELECT * FROM st").df()
    for c in (con, plain):
        c.register("frame", frame)
    sql = "SELECT lat, lon, air FROM {grid} z JOIN " + side + " s USING (lat, lon) ORDER BY ALL"
    rows, expected, t = _both(sql, stores, con, plain)
    assert rows == expected
    if HAS_SOURCES:
        assert t.work_units_read == len(expected) < t.work_units_planned  # one unit per cell
