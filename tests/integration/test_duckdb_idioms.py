"""DuckDB idioms that must work on a zarrsql connection exactly as on a plain DuckDB one.

* `FROM df`: DuckDB finds Python objects (pandas and polars frames, Arrow tables, relations)
  by their variable name in the caller's frame. Through the zarrsql wrapper that frame must
  still be the user's, never one of zarrsql's own (whose locals must not shadow a user name).
* `name = value` named parameters, which DuckDB accepts, mean `name := value` in zarrsql's
  functions (and only there: comparisons elsewhere stay comparisons).
* `COPY ... TO` keeps working for CSV and Parquet; `os.PathLike` stores are accepted.

The oracle for every query over a store is plain DuckDB running the same SQL on xarray's
`to_dataframe()` of the store (through `oracles.xarray_frame`).
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

import zarrsql
from oracles import xarray_frame

pytestmark = pytest.mark.timeout(60)

# A module global: DuckDB looks at the caller's globals after its locals.
GLOBAL_STATIONS = pd.DataFrame({"name": ["north", "south"], "lat": [75.0, 15.0], "lon": [200.0, 330.0]})

JOIN = """
    SELECT s.name, a.time, a.air
    FROM {source} AS a JOIN {stations} AS s ON a.lat = s.lat AND a.lon = s.lon
    WHERE a.time < TIMESTAMP '2013-01-03'
    ORDER BY s.name, a.time
"""


@pytest.fixture(scope="module")
def air(fixture_path: Callable[[str], str]) -> str:
    return fixture_path("air_temperature.zarr")


@pytest.fixture(scope="module")
def air_frame(air: str) -> pd.DataFrame:
    return xarray_frame(air, variables="air")


@pytest.fixture
def con() -> Iterator[zarrsql.Connection]:
    with zarrsql.connect() as c:
        yield c


def stations_frame() -> pd.DataFrame:
    # grid points of the store (lat 15..75 by 2.5, lon 200..330 by 2.5), plus one off the grid
    return pd.DataFrame(
        {"name": ["a", "b", "c", "off-grid"], "lat": [40.0, 72.5, 15.0, 41.1], "lon": [250.0, 300.0, 330.0, 250.0]}
    )


def oracle(air_frame: pd.DataFrame, stations: pd.DataFrame) -> list[tuple[Any, ...]]:
    """The join on plain DuckDB over xarray's frame of the store."""
    plain = duckdb.connect()
    plain.register("xr_air", air_frame)
    plain.register("xr_stations", stations)
    rows = plain.sql(JOIN.format(source="xr_air", stations="xr_stations")).fetchall()
    plain.close()
    assert len(rows) > 0
    return rows


def store_join(air: str, stations_name: str) -> str:
    return JOIN.format(source=f"read_zarr('{air}')", stations=stations_name)


# --------------------------------------------------------------------------------------
# FROM <python variable>
# --------------------------------------------------------------------------------------


def test_join_store_to_pandas_frame(con: zarrsql.Connection, air: str, air_frame: pd.DataFrame) -> None:
    stations = stations_frame()
    expected = oracle(air_frame, stations)
    assert con.sql(store_join(air, "stations")).fetchall() == expected
    assert con.execute(store_join(air, "stations")).fetchall() == expected
    assert con.query(store_join(air, "stations")).fetchall() == expected


def test_join_on_registered_and_default_connections(air: str, air_frame: pd.DataFrame) -> None:
    stations = stations_frame()
    expected = oracle(air_frame, stations)
    raw = duckdb.connect()
    try:
        assert zarrsql.register(raw).sql(store_join(air, "stations")).fetchall() == expected
    finally:
        raw.close()
    assert zarrsql.sql(store_join(air, "stations")).fetchall() == expected


def test_module_globals_are_seen(con: zarrsql.Connection, air: str, air_frame: pd.DataFrame) -> None:
    expected = oracle(air_frame, GLOBAL_STATIONS)
    assert con.sql(store_join(air, "GLOBAL_STATIONS")).fetchall() == expected


def test_lazy_relation_fetched_elsewhere(con: zarrsql.Connection, air: str, air_frame: pd.DataFrame) -> None:
    stations = stations_frame()
    expected = oracle(air_frame, stations)
    rel = con.sql(store_join(air, "stations"))

    def fetch_later() -> list[tuple[Any, ...]]:
        stations = pd.DataFrame({"name": ["other"], "lat": [15.0], "lon": [200.0]})  # noqa: F841 - must not be seen
        return rel.fetchall()

    # as on plain DuckDB, the relation keeps the frame it was made with
    plain = duckdb.connect()
    plain_rel = plain.sql("SELECT count(*) FROM stations")

    def plain_later() -> list[tuple[Any, ...]]:
        stations = pd.DataFrame({"name": ["other"], "lat": [15.0], "lon": [200.0]})  # noqa: F841
        return plain_rel.fetchall()

    assert plain_later() == [(len(stations),)]
    assert fetch_later() == expected
    assert fetch_later() == expected  # and again
    plain.close()


@pytest.mark.parametrize("name", ["query", "args", "kwargs", "fn", "frame", "text", "self", "state", "local"])
def test_user_names_are_not_shadowed_by_zarrsql_locals(con: zarrsql.Connection, name: str) -> None:
    """Names zarrsql's own frames use: the user's object of that name is the one read."""
    frame = pd.DataFrame({"v": [3, 1, 2]})
    namespace = {name: frame, "con": con}
    exec(f"rows = con.sql('SELECT v FROM {name} ORDER BY v').fetchall()", namespace)
    assert namespace["rows"] == [(1,), (2,), (3,)]


def test_unknown_name_fails_as_on_plain_duckdb(con: zarrsql.Connection) -> None:
    """No zarrsql local stands in for a name the user does not have."""
    with pytest.raises(duckdb.CatalogException) as plain_err:
        duckdb.connect().sql("SELECT * FROM query")
    with pytest.raises(duckdb.CatalogException) as err:
        con.sql("SELECT * FROM query")
    assert str(err.value).splitlines()[0] == str(plain_err.value).splitlines()[0]


def test_arrow_table_and_relations(con: zarrsql.Connection, air: str, air_frame: pd.DataFrame) -> None:
    stations = stations_frame()
    expected = oracle(air_frame, stations)
    stations_arrow = pa.Table.from_pandas(stations)  # noqa: F841 - read by name in the SQL
    assert con.sql(store_join(air, "stations_arrow")).fetchall() == expected
    stations_rel = con.sql("SELECT * FROM stations")  # noqa: F841 - a relation, itself over a frame
    assert con.sql(store_join(air, "stations_rel")).fetchall() == expected
    # a relation zarrsql.read_zarr returned, joined to the frame
    air_rel = zarrsql.read_zarr(air, connection=con)  # noqa: F841 - read by name in the SQL
    assert con.sql(JOIN.format(source="air_rel", stations="stations_rel")).fetchall() == expected
    assert con.sql(JOIN.format(source="air_rel", stations="stations")).fetchall() == expected
    # on the default connection too
    default_rel = zarrsql.read_zarr(air)  # noqa: F841 - read by name in the SQL
    assert zarrsql.sql(JOIN.format(source="default_rel", stations="stations")).fetchall() == expected


def test_polars_frame(con: zarrsql.Connection, air: str, air_frame: pd.DataFrame) -> None:
    pl = pytest.importorskip("polars")  # not installed in every test environment
    stations = pl.from_pandas(stations_frame())  # noqa: F841 - read by name in the SQL
    assert con.sql(store_join(air, "stations")).fetchall() == oracle(air_frame, stations_frame())


NOTEBOOK_CELLS = [
    "import pandas as pd\nimport zarrsql\ncon = zarrsql.connect()",
    "stations = pd.DataFrame({STATIONS})",
    "rel = con.sql('''{QUERY}''')",
    "rows = rel.fetchall()",
    "rows_default = zarrsql.sql('''{QUERY}''').fetchall()",
]


def notebook_cells(air: str) -> list[str]:
    spec = repr(stations_frame().to_dict(orient="list"))
    return [c.replace("{STATIONS}", spec).replace("{QUERY}", store_join(air, "stations")) for c in NOTEBOOK_CELLS]


def test_notebook_namespace(air: str, air_frame: pd.DataFrame) -> None:
    """Code run the way a notebook runs cells: `exec` in one namespace dict."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for cell in notebook_cells(air):
        exec(compile(cell, "<cell>", "exec"), namespace)
    expected = oracle(air_frame, stations_frame())
    assert namespace["rows"] == expected
    assert namespace["rows_default"] == expected
    namespace["con"].close()


def test_ipython_shell(air: str, air_frame: pd.DataFrame) -> None:
    pytest.importorskip("IPython")  # Jupyter's kernel runs cells with IPython's InteractiveShell
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        for cell in notebook_cells(air):
            result = shell.run_cell(cell)
            assert result.success, result.error_in_exec or result.error_before_exec
        expected = oracle(air_frame, stations_frame())
        assert shell.user_ns["rows"] == expected
        assert shell.user_ns["rows_default"] == expected
        shell.user_ns["con"].close()
    finally:
        InteractiveShell.clear_instance()


# --------------------------------------------------------------------------------------
# name = value
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def era5(fixture_path: Callable[[str], str]) -> str:
    return fixture_path("era5_like.zarr")


@pytest.mark.parametrize(
    ("walrus", "equals"),
    [
        ("table_name := 'time_latitude_longitude'", "table_name = 'time_latitude_longitude'"),
        ("\"table\" := 'time_latitude_longitude'", "\"table\" = 'time_latitude_longitude'"),
        ("dims := ['time', 'latitude', 'longitude']", "dims = ['time', 'latitude', 'longitude']"),
        (
            "dims := ['time', 'latitude', 'longitude'], decode_times := false",
            "dims=['time', 'latitude', 'longitude'],decode_times=false",
        ),
        (
            "table_name := 'time_latitude_longitude', bounds := [['latitude', '40', '60']]",
            "TABLE_NAME = 'time_latitude_longitude', bounds = [['latitude', '40', '60']]",
        ),
    ],
)
def test_equals_is_named_parameter(con: zarrsql.Connection, era5: str, walrus: str, equals: str) -> None:
    q = "SELECT count(*), min(latitude), max(latitude), min(time)::VARCHAR FROM read_zarr('{}', {})"
    expected = con.sql(q.format(era5, walrus)).fetchall()
    assert con.sql(q.format(era5, equals)).fetchall() == expected
    assert con.execute(q.format(era5, equals)).fetchall() == expected


def test_equals_matches_xarray(con: zarrsql.Connection, era5: str) -> None:
    frame = xarray_frame(era5, dims=["time", "latitude", "longitude"])
    got = con.sql(
        f"SELECT count(*), sum(\"2m_temperature\") FROM read_zarr('{era5}', table_name = 'time_latitude_longitude')"
    ).fetchall()
    assert got[0][0] == len(frame)
    assert got[0][1] == pytest.approx(float(frame["2m_temperature"].sum()), rel=1e-6)


def test_equals_array_path_and_listings(con: zarrsql.Connection, fixture_path: Callable[[str], str]) -> None:
    datatree = fixture_path("datatree.zarr")
    walrus = con.sql(f"SELECT * FROM read_zarr_tables('{datatree}', group_path := 'simulation') ORDER BY ALL")
    equals = con.sql(f"SELECT * FROM read_zarr_tables('{datatree}', group_path = 'simulation') ORDER BY ALL")
    assert equals.fetchall() == walrus.fetchall() != []
    unnamed = fixture_path("unnamed.zarr")
    arrays = [r[0] for r in con.sql(f"SELECT name FROM read_zarr_metadata('{unnamed}')").fetchall()]
    array = arrays[0]
    walrus_rows = con.sql(f"SELECT * FROM read_zarr('{unnamed}', array_path := '{array}') ORDER BY ALL").fetchall()
    equals_rows = con.sql(f"SELECT * FROM read_zarr('{unnamed}', array_path = '{array}') ORDER BY ALL").fetchall()
    assert equals_rows == walrus_rows != []


def test_comparisons_elsewhere_stay_comparisons(con: zarrsql.Connection, era5: str) -> None:
    """An `=` inside an expression, a subquery, or outside zarrsql's calls is not touched."""
    frame = xarray_frame(era5, dims=["time", "latitude", "longitude"])
    n_lat40 = int((frame["latitude"] == 40).sum())
    q = (
        f"SELECT count(*) FROM read_zarr('{era5}', table_name = 'time_latitude_longitude', "
        "decode_times = (1 = 1), nan_as_null = ('a' = 'b')) AS r WHERE latitude = 40 AND r.time = r.time"
    )
    assert con.sql(q).fetchall() == [(n_lat40,)]
    # with decode_times = (1 = 2), i.e. false, time stays the stored numbers
    q_raw = f"SELECT typeof(time) FROM read_zarr('{era5}', table_name = 'time_latitude_longitude', " + (
        "decode_times = (1 = 2)) LIMIT 1"
    )
    assert con.sql(q_raw).fetchall()[0][0] != "TIMESTAMP"
    # a zarrsql call inside a subquery, with comparisons around it
    q_sub = (
        f"SELECT (SELECT count(*) FROM read_zarr('{era5}', table_name = 'time_latitude_longitude') "
        "WHERE latitude = 40) = ?, 1 = 1, 'a' = 'b'"
    )
    assert con.execute(q_sub, [n_lat40]).fetchall() == [(True, True, False)]


def test_equals_in_a_stored_view(con: zarrsql.Connection, era5: str) -> None:
    con.execute(f"CREATE VIEW surface AS SELECT * FROM read_zarr('{era5}', table_name = 'time_latitude_longitude')")
    expected = len(xarray_frame(era5, dims=["time", "latitude", "longitude"]))
    assert con.sql("SELECT count(*) FROM surface").fetchall() == [(expected,)]


# --------------------------------------------------------------------------------------
# COPY, os.PathLike, SHOW TABLES
# --------------------------------------------------------------------------------------


def test_copy_to_csv_and_parquet_still_works(
    con: zarrsql.Connection, air: str, air_frame: pd.DataFrame, tmp_path: pathlib.Path
) -> None:
    q = f"SELECT time, lat, lon, air FROM read_zarr('{air}') WHERE lat = 40 AND lon = 250 ORDER BY time"
    con.execute(f"COPY ({q}) TO '{tmp_path / 'out.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY ({q}) TO '{tmp_path / 'out.csv'}'")
    sel = air_frame[(air_frame["lat"] == 40) & (air_frame["lon"] == 250)].sort_values("time")
    back = pd.read_parquet(tmp_path / "out.parquet")
    assert back["air"].tolist() == pytest.approx(sel["air"].tolist())
    assert len(pd.read_csv(tmp_path / "out.csv")) == len(sel) > 0


def test_pathlike_stores(con: zarrsql.Connection, air: str, air_frame: pd.DataFrame, tmp_path: pathlib.Path) -> None:
    path = pathlib.Path(air)
    assert zarrsql.read_zarr(path, connection=con).aggregate("count(*)").fetchall() == [(len(air_frame),)]
    meta = zarrsql.read_zarr_metadata(path, connection=con).fetchall()
    assert meta == zarrsql.read_zarr_metadata(air, connection=con).fetchall() != []
    assert (
        zarrsql.read_zarr_tables(path, connection=con).fetchall()
        == zarrsql.read_zarr_tables(air, connection=con).fetchall()
    )
    assert (
        zarrsql.read_zarr_views(path, "db", connection=con).fetchall()
        == zarrsql.read_zarr_views(air, "db", connection=con).fetchall()
    )
    mounted = zarrsql.mount(con, path, "airdb")
    assert mounted.fetchall()
    assert con.sql("SELECT count(*) FROM airdb.time_lat_lon").fetchall() == [(len(air_frame),)]

    class Custom(os.PathLike):  # any os.PathLike, not only pathlib
        def __fspath__(self) -> str:
            return air

    assert zarrsql.read_zarr(Custom(), connection=con).aggregate("count(*)").fetchall() == [(len(air_frame),)]


def test_zarr_group_on_a_local_store(con: zarrsql.Connection, fixture_path: Callable[[str], str]) -> None:
    import zarr

    datatree = fixture_path("datatree.zarr")
    root = zarr.open_group(datatree, mode="r")
    assert (
        zarrsql.read_zarr_tables(root, connection=con).fetchall()
        == zarrsql.read_zarr_tables(datatree, connection=con).fetchall()
    )
    coarse = root["simulation/coarse"]
    got = zarrsql.read_zarr(coarse, connection=con).df()
    expected = xarray_frame(datatree, group="simulation/coarse", variables="bar")
    assert got["bar"].tolist() == pytest.approx(expected["bar"].tolist())
    assert len(got) == coarse["bar"].size


def test_show_tables_hides_internal_names(con: zarrsql.Connection, air: str) -> None:
    con.execute("CREATE TABLE mine (a INTEGER)")
    assert con.sql(f"SELECT count(*) FROM read_zarr('{air}')").fetchall()[0][0] > 0
    assert con.sql(f"SELECT count(*) FROM read_zarr_tables('{air}')").fetchall()[0][0] > 0
    # the registrations are there (DuckDB lists them) ...
    assert any(n.startswith("__zarrsql_") for (n,) in con.duckdb.sql("SHOW TABLES").fetchall())
    # ... but not on the zarrsql connection
    assert con.sql("SHOW TABLES").fetchall() == [("mine",)]
    assert con.execute("SHOW TABLES;").fetchall() == [("mine",)]
    assert [r[2] for r in con.sql("SHOW ALL TABLES").fetchall()] == ["mine"]


def test_show_and_describe_alone_hide_internal_names(con: zarrsql.Connection, air: str) -> None:
    """`SHOW` and `DESCRIBE` with no argument list every table with its columns, as plain
    DuckDB does: the user's, not the registrations behind `read_zarr` or a `'x.zarr'` string."""
    con.execute("CREATE TABLE mine (a INTEGER)")
    assert air.endswith(".zarr")
    assert con.sql(f"SELECT count(*) FROM '{air}'").fetchall()[0][0] > 0
    assert con.sql(f"SELECT count(*) FROM read_zarr('{air}')").fetchall()[0][0] > 0
    internal = [r[2] for r in con.duckdb.sql("SHOW").fetchall() if r[2] != "mine"]
    assert air in internal
    assert any(n.startswith("__zarrsql_") for n in internal)
    for statement in ("SHOW", "DESCRIBE", "show;", "DESCRIBE -- all of them"):
        assert [(r[2], r[3]) for r in con.sql(statement).fetchall()] == [("mine", ["a"])], statement
        assert [r[2] for r in con.execute(statement).fetchall()] == ["mine"], statement


def test_plain_duckdb_connection_is_told_to_use_the_wrapper(con: zarrsql.Connection, air: str) -> None:
    with pytest.raises(duckdb.Error, match=r"zarrsql\.Connection") as err:
        con.duckdb.sql(f"SELECT count(*) FROM read_zarr('{air}', decode_times := false)").fetchall()
    assert "__zarrsql_" not in str(err.value)
    # once the wrapper has registered the scan, the plain connection reads it as before
    n = con.sql(f"SELECT count(*) FROM read_zarr('{air}')").fetchall()
    assert con.duckdb.sql(f"SELECT count(*) FROM read_zarr('{air}')").fetchall() == n


def test_script_in_a_subprocess(air: str, air_frame: pd.DataFrame, tmp_path: pathlib.Path) -> None:
    """A plain script's module-level names, as a user writes it first."""
    import subprocess

    script = tmp_path / "script.py"
    lines = [
        "import pandas as pd",
        "import zarrsql",
        f"stations = pd.DataFrame({stations_frame().to_dict(orient='list')!r})",
        f"rows = zarrsql.sql({store_join(air, 'stations')!r}).fetchall()",
        "print(len(rows), rows[0][0], rows[-1][0])",
    ]
    script.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    expected = oracle(air_frame, stations_frame())
    assert out.stdout.split() == [str(len(expected)), expected[0][0], expected[-1][0]]
