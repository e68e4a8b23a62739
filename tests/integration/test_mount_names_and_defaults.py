"""Mount names and the databases an unmount may detach.

A database name given to zarr_mount / zarr_unmount / zarr_mounts names the database DuckDB's
catalog finds under it: ignoring the case of ASCII letters only ('FDB' is 'fdb', 'Ü' is not
'ü'). Only a database zarr_mount attached is detached (by zarr_unmount, or replaced by
replace := true); the connection's own database and one the user attached keep existing, and
an unmount drops their zarr views. Objects of the user's are never dropped with a mount: a
schema holding one is kept, a database holding one is not detached. An unmount that cannot
complete is refused before anything changes.

Oracles: DuckDB's own catalog, asked on the plain DuckDB connection (`duckdb_databases()`,
`duckdb_views()`, `duckdb_schemas()`), the contents of the user's objects, and xarray for
the values a mounted view reads.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A root table `x` and a table `y` in the group 'g one' (a schema of its own when mounted)."""
    path = str(tmp_path / "s.zarr")
    xr.Dataset({"v": (("x",), np.arange(3.0))}, coords={"x": [1, 2, 3]}).to_zarr(path, mode="w")
    xr.Dataset({"w": (("y",), np.array([5.0, 7.0]))}, coords={"y": [10, 20]}).to_zarr(path, group="g one", mode="a")
    return path


def _databases(con: zarrsql.Connection) -> set[str]:
    rows = con.duckdb.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal").fetchall()
    return {name for (name,) in rows}


def _zarr_views(con: zarrsql.Connection, database: str) -> set[tuple[str, str]]:
    rows = con.duckdb.execute(
        "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal "
        "AND sql LIKE '%read_zarr(%'",
        [database],
    ).fetchall()
    return {(schema, view) for schema, view in rows}


def _schemas(con: zarrsql.Connection, database: str) -> set[str]:
    rows = con.duckdb.execute("SELECT schema_name FROM duckdb_schemas() WHERE database_name = ?", [database]).fetchall()
    return {name for (name,) in rows}


def _root_values(store: str) -> list[tuple[int, float]]:
    with xr.open_zarr(store) as ds:
        return [(int(x), float(v)) for x, v in zip(ds["x"].values, ds["v"].values, strict=True)]


# --- 1. existing := true with the database name in another case


def test_existing_with_the_name_in_another_case_keeps_the_users_view(store: str, tmp_path: Path) -> None:
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{tmp_path / 'f.duckdb'}' AS fdb")
        con.execute("CREATE VIEW fdb.main.x AS SELECT 42 AS mine")
        for spelled in ("fdb", "FDB", "Fdb"):
            with pytest.raises(zarrsql.ParameterError, match=r"fdb\.main\.x already exists as a view that zarrsql"):
                con.sql(f"SELECT * FROM zarr_mount('{store}', '{spelled}', existing := true)")
        assert con.duckdb.execute("SELECT * FROM fdb.main.x").fetchall() == [(42,)]
        assert _zarr_views(con, "fdb") == set()


def test_existing_with_the_name_in_another_case_mounts_into_that_database(store: str, tmp_path: Path) -> None:
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{tmp_path / 'f.duckdb'}' AS fdb")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'FDB', existing := true)").fetchall()
        assert _databases(con) == {"memory", "fdb"}
        assert _zarr_views(con, "fdb") == {("main", "x"), ("g one", "y")}
        assert con.sql("SELECT x, v FROM fdb.x ORDER BY x").fetchall() == _root_values(store)
        listed = con.sql("SELECT database_name, schema_name, view_name FROM zarr_mounts('FDB')").fetchall()
        assert {(d, s, v) for d, s, v in listed} == {("fdb", "main", "x"), ("fdb", "g one", "y")}


def test_a_name_differing_beyond_ascii_is_another_database(store: str) -> None:
    """DuckDB folds only ASCII letters: 'Ü' and 'ü' are two databases, as its catalog says."""
    with zarrsql.connect() as con:
        con.execute("ATTACH ':memory:' AS \"ü\"")
        con.execute('CREATE TABLE "ü".main.mine AS SELECT 1 AS a')
        with pytest.raises(zarrsql.ParameterError, match=r"needs the database 'Ü' to be attached already.*'ü' is"):
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'Ü', existing := true)")
        with pytest.raises(zarrsql.ParameterError, match=r"no database named 'Ü' is attached"):
            con.sql("SELECT * FROM zarr_unmount('Ü')")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'Ü')").fetchall()  # DuckDB attaches 'Ü' beside 'ü'
        assert _databases(con) == {"memory", "ü", "Ü"}
        assert _zarr_views(con, "Ü") == {("main", "x"), ("g one", "y")}
        assert _zarr_views(con, "ü") == set()
        assert con.sql("SELECT count(*) FROM zarr_mounts('ü')").fetchall() == [(0,)]
        assert con.sql("SELECT count(*) FROM zarr_mounts('Ü')").fetchall() == [(2,)]
        con.sql("SELECT * FROM zarr_unmount('Ü')").fetchall()
        assert _databases(con) == {"memory", "ü"}
        assert con.duckdb.execute('SELECT a FROM "ü".main.mine').fetchall() == [(1,)]


# --- 2. unmount and replace with the mount name in another case


def test_unmount_with_the_name_in_another_case_detaches_the_mount(store: str) -> None:
    with zarrsql.connect() as con:
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'mm')").fetchall()
        removed = con.sql("SELECT schema_name, view_name FROM zarr_unmount('MM')").fetchall()
        assert set(removed) == {("main", "x"), ("g one", "y")}
        assert _databases(con) == {"memory"}


def test_replace_with_the_name_in_another_case_remounts(store: str) -> None:
    with zarrsql.connect() as con:
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'mm')").fetchall()
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'MM', replace := true)").fetchall()
        names = {name.lower() for name in _databases(con)}
        assert names == {"memory", "mm"}
        (attached,) = (name for name in _databases(con) if name.lower() == "mm")
        assert _zarr_views(con, attached) == {("main", "x"), ("g one", "y")}
        assert con.sql("SELECT x, v FROM mm.x ORDER BY x").fetchall() == _root_values(store)


@pytest.mark.parametrize(
    "make",
    [
        "CREATE TABLE {schema}.mine AS SELECT 1 AS a",
        "CREATE VIEW {schema}.mine AS SELECT 1 AS a",
        "CREATE SEQUENCE {schema}.mine",
        "CREATE MACRO {schema}.mine() AS 1",
        "CREATE TYPE {schema}.mine AS INTEGER",
    ],
    ids=["table", "view", "sequence", "macro", "type"],
)
def test_unmount_keeps_a_mounted_schema_holding_the_users_object(store: str, tmp_path: Path, make: str) -> None:
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{tmp_path / 'f.duckdb'}' AS fdb")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'fdb', existing := true)").fetchall()
        con.execute(make.format(schema='fdb."g one"'))
        mounted = _zarr_views(con, "fdb")
        removed = con.sql("SELECT schema_name, view_name FROM zarr_unmount('FDB')").fetchall()
        assert set(removed) == mounted
        assert _zarr_views(con, "fdb") == set()
        assert "g one" in _schemas(con, "fdb")
        assert _databases(con) == {"memory", "fdb"}
        if make.startswith("CREATE TABLE") or make.startswith("CREATE VIEW"):
            assert con.duckdb.execute('SELECT a FROM fdb."g one".mine').fetchall() == [(1,)]


def test_unmount_drops_the_schemas_it_leaves_empty(store: str, tmp_path: Path) -> None:
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{tmp_path / 'f.duckdb'}' AS fdb")
        con.execute("CREATE TABLE fdb.main.mine AS SELECT 1 AS a")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'fdb', existing := true)").fetchall()
        con.sql("SELECT * FROM zarr_unmount('Fdb')").fetchall()
        assert _schemas(con, "fdb") == {"main"}
        assert con.duckdb.execute("SELECT a FROM fdb.main.mine").fetchall() == [(1,)]


def test_unmount_of_the_current_database_is_refused_and_changes_nothing(store: str) -> None:
    with zarrsql.connect() as con:
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'mm')").fetchall()
        con.execute("USE mm")
        with pytest.raises(zarrsql.ParameterError, match=r"current database.*USE"):
            con.sql("SELECT * FROM zarr_unmount('mm')")
        with pytest.raises(zarrsql.ParameterError, match=r"current database.*USE"):
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'MM', replace := true)")
        assert _zarr_views(con, "mm") == {("main", "x"), ("g one", "y")}
        con.execute("USE memory")
        con.sql("SELECT * FROM zarr_unmount('mm')").fetchall()
        assert _databases(con) == {"memory"}


# --- 3. databases zarr_mount did not attach


def test_unmount_of_the_connections_own_database_drops_its_views(store: str) -> None:
    """'memory' holds only the zarr views: still not zarr_mount's to detach (nor DuckDB's)."""
    with zarrsql.connect() as con:
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'memory', existing := true)").fetchall()
        removed = con.sql("SELECT schema_name, view_name FROM zarr_unmount('memory')").fetchall()
        assert set(removed) == {("main", "x"), ("g one", "y")}
        assert _databases(con) == {"memory"}
        assert _zarr_views(con, "memory") == set()
        assert _schemas(con, "memory") == {"main"}
        assert con.sql("SELECT current_database()").fetchall() == [("memory",)]


def test_a_database_the_user_attached_is_never_detached_or_replaced(store: str) -> None:
    with zarrsql.connect() as con:
        con.execute("ATTACH ':memory:' AS u")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'u', existing := true)").fetchall()
        with pytest.raises(zarrsql.ParameterError, match=r"'u' is an in-memory database that zarr_mount did not"):
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'U', replace := true)")
        assert _zarr_views(con, "u") == {("main", "x"), ("g one", "y")}
        con.sql("SELECT * FROM zarr_unmount('U')").fetchall()
        assert _databases(con) == {"memory", "u"}
        assert _zarr_views(con, "u") == set()
        assert _schemas(con, "u") == {"main"}


def test_a_copy_of_a_mount_is_the_users_database(store: str) -> None:
    """COPY FROM DATABASE copies zarr_mount's mark too; the copy is still not zarr_mount's."""
    with zarrsql.connect() as con:
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'mm')").fetchall()
        con.execute("ATTACH ':memory:' AS u")
        con.execute("COPY FROM DATABASE mm TO u")
        assert _zarr_views(con, "u") == {("main", "x"), ("g one", "y")}
        con.sql("SELECT * FROM zarr_unmount('u')").fetchall()
        assert _databases(con) == {"memory", "mm", "u"}
        con.sql("SELECT * FROM zarr_unmount('mm')").fetchall()
        assert _databases(con) == {"memory", "u"}


def test_a_mount_the_user_added_a_table_to_is_kept_with_it(store: str) -> None:
    with zarrsql.connect() as con:
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'mm')").fetchall()
        con.execute("CREATE TABLE mm.main.mine AS SELECT 1 AS a")
        with pytest.raises(zarrsql.ParameterError, match=r"holding 1 table\(s\) or view\(s\) that zarrsql did not"):
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'mm', replace := true)")
        con.sql("SELECT * FROM zarr_unmount('mm')").fetchall()
        assert _databases(con) == {"memory", "mm"}
        assert _zarr_views(con, "mm") == set()
        assert con.duckdb.execute("SELECT a FROM mm.main.mine").fetchall() == [(1,)]


def test_a_cursor_unmounts_its_connections_mount(store: str) -> None:
    """The mark lives in the database, so every connection of the DuckDB instance sees it."""
    with zarrsql.connect() as con:
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'mm')").fetchall()
        cursor = con.cursor()
        cursor.sql("SELECT * FROM zarr_unmount('MM')").fetchall()
        assert _databases(con) == {"memory"}
        cursor.close()


def test_a_file_database_is_never_detached(store: str, tmp_path: Path) -> None:
    file = tmp_path / "f.duckdb"
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{file}' AS fdb")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'fdb', existing := true)").fetchall()
        con.sql("SELECT * FROM zarr_unmount('FDB')").fetchall()
        assert _databases(con) == {"memory", "fdb"}
    with duckdb.connect(str(file)) as plain:
        assert plain.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchall() == [(0,)]
