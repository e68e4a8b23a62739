"""The actions run from SQL (zarr_mount, zarr_unmount, zarr_mounts, zarr_sample).

A statement that only binds its query (EXPLAIN, DESCRIBE, PREPARE) performs no mount or
unmount; EXPLAIN ANALYZE and EXECUTE do. A relation over an action fetched again after other
statements does not perform it again. Refusals name what is wrong. DuckDB's own catalog
(`duckdb_databases()`, `duckdb_views()`, asked on a plain connection to a database file) is
the oracle of what is mounted; xarray of what a sample reads.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql

DUCKDB_2 = int(duckdb.__version__.split(".")[0]) >= 2


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = str(tmp_path / "s.zarr")
    xr.Dataset({"v": (("x",), np.arange(3.0))}, coords={"x": [1, 2, 3]}).to_zarr(path, mode="w")
    return path


def _databases(con: zarrsql.Connection) -> set[str]:
    rows = con.duckdb.execute(
        "SELECT database_name FROM duckdb_databases() WHERE NOT internal AND database_name <> 'memory'"
    ).fetchall()
    return {name for (name,) in rows}


def test_explain_of_zarr_mount_does_not_mount(store: str) -> None:
    with zarrsql.connect() as con:
        plan = con.sql(f"EXPLAIN SELECT * FROM zarr_mount('{store}', 'a')").fetchall()
        assert plan  # DuckDB printed a plan
        assert _databases(con) == set()
        con.execute(f"EXPLAIN (FORMAT json) SELECT * FROM zarr_mount('{store}', 'a')").fetchall()
        assert _databases(con) == set()


def test_explain_analyze_of_zarr_mount_mounts(store: str) -> None:
    with zarrsql.connect() as con:
        con.sql(f"EXPLAIN ANALYZE SELECT * FROM zarr_mount('{store}', 'a')").fetchall()
        assert _databases(con) == {"a"}
        con.sql(f"EXPLAIN (ANALYZE) SELECT * FROM zarr_mount('{store}', 'b')").fetchall()
        assert _databases(con) == {"a", "b"}


def test_explain_and_describe_of_zarr_unmount_keep_the_mount(store: str) -> None:
    with zarrsql.connect() as con:
        zarrsql.mount(con, store, "b")
        con.sql("EXPLAIN SELECT * FROM zarr_unmount('b')").fetchall()
        con.sql("DESCRIBE SELECT * FROM zarr_unmount('b')").fetchall()
        assert _databases(con) == {"b"}
        assert con.sql("SELECT v FROM b.main.x ORDER BY x").fetchall() == [(0.0,), (1.0,), (2.0,)]


def test_describe_of_zarr_mount_gives_its_columns_without_mounting(store: str) -> None:
    with zarrsql.connect() as con:
        described = con.sql(f"DESCRIBE SELECT * FROM zarr_mount('{store}', 'c')").fetchall()
        assert _databases(con) == set()
        # the columns API.md gives zarr_mount: read_zarr_tables' plus view_name
        tables = con.sql(f"DESCRIBE SELECT * FROM read_zarr_tables('{store}')").fetchall()
        expected = [(name, kind) for name, kind, *_ in tables] + [("view_name", "VARCHAR")]
        assert [(name, kind) for name, kind, *_ in described] == expected
        performed = con.sql(f"SELECT * FROM zarr_mount('{store}', 'c')")
        assert [(name, str(kind)) for name, kind in zip(performed.columns, performed.types, strict=True)] == expected


def test_explain_of_zarr_unmount_keeps_the_views_of_a_database_file(store: str, tmp_path: Path) -> None:
    file = str(tmp_path / "kept.duckdb")
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{file}' AS fdb")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'fdb', existing := true)").fetchall()
        con.sql("EXPLAIN SELECT * FROM zarr_unmount('fdb')").fetchall()
    with duckdb.connect(file) as plain:
        assert plain.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall() == [("x",)]


@pytest.mark.skipif(not DUCKDB_2, reason="DuckDB 1.5 runs a prepared statement without binding it again")
def test_prepare_does_not_mount_and_each_execute_does(store: str) -> None:
    with zarrsql.connect() as con:
        con.execute(f"PREPARE m AS SELECT view_name FROM zarr_mount('{store}', 'd')")
        assert _databases(con) == set()
        zarrsql.mount(con, store, "d")
        con.execute("PREPARE u AS SELECT view_name FROM zarr_unmount('d')")
        assert _databases(con) == {"d"}
        zarrsql.unmount(con, "d")
        assert con.execute("EXECUTE m").fetchall() == [("x",)]
        assert _databases(con) == {"d"}
        assert con.execute("EXECUTE u").fetchall() == [("x",)]
        assert _databases(con) == set()
        assert con.execute("EXECUTE m").fetchall() == [("x",)]  # a statement run again mounts again
        assert _databases(con) == {"d"}


@pytest.mark.skipif(DUCKDB_2, reason="DuckDB 2 binds a prepared statement again at each EXECUTE")
def test_prepare_of_a_mount_is_refused_on_duckdb_1(store: str) -> None:
    with zarrsql.connect() as con:
        zarrsql.mount(con, store, "d")
        with pytest.raises(zarrsql.ParameterError, match=r"PREPARE of a statement calling zarr_unmount"):
            con.execute("PREPARE u AS SELECT * FROM zarr_unmount('d')")
        assert _databases(con) == {"d"}


def test_zarr_mounts_relation_fetched_again_lists_the_mounts_as_they_are(store: str) -> None:
    with zarrsql.connect() as con:
        zarrsql.mount(con, store, "m1")
        listing = con.sql("SELECT DISTINCT database_name FROM zarr_mounts() ORDER BY 1")
        assert listing.fetchall() == [("m1",)]
        zarrsql.mount(con, store, "m2")
        assert listing.fetchall() == [(name,) for name in sorted(_databases(con))] == [("m1",), ("m2",)]
        con.sql("SELECT * FROM zarr_unmount('m1')").fetchall()
        assert listing.fetchall() == [("m2",)]


def test_zarr_mount_relation_fetched_again_does_not_mount_twice(store: str) -> None:
    with zarrsql.connect() as con:
        mounted = con.sql(f"SELECT view_name FROM zarr_mount('{store}', 'm')")
        assert _databases(con) == {"m"}
        con.sql("SELECT 1").fetchall()
        assert mounted.fetchall() == [("x",)]  # what it mounted, not "already in use"
        assert _databases(con) == {"m"}


def test_zarr_unmount_relation_fetched_again_does_not_unmount_a_remount(store: str) -> None:
    with zarrsql.connect() as con:
        zarrsql.mount(con, store, "m")
        removed = con.sql("SELECT view_name FROM zarr_unmount('m')")
        assert _databases(con) == set()
        zarrsql.mount(con, store, "n")
        assert removed.fetchall() == [("x",)]
        assert _databases(con) == {"n"}


def test_zarr_sample_relation_fetched_again_reads_the_same_points(store: str) -> None:
    expected = xr.open_zarr(store)["v"].sel(x=[2, 3]).values.tolist()
    with zarrsql.connect() as con:
        sample = con.sql(f"SELECT v FROM zarr_sample('{store}', 'SELECT * FROM (VALUES (2), (3)) t(x)')")
        con.sql("SELECT 1").fetchall()
        assert [v for (v,) in sample.fetchall()] == expected


def test_action_on_the_plain_duckdb_connection_is_refused(store: str) -> None:
    with zarrsql.connect() as con:
        with pytest.raises(duckdb.Error, match=r"zarr_mount\(\) was run outside the statements of a zarrsql"):
            con.duckdb.sql(f"SELECT * FROM zarr_mount('{store}', 'p')").fetchall()
        assert _databases(con) == set()


def test_replace_over_a_database_zarr_mount_did_not_attach_says_what_it_is(store: str, tmp_path: Path) -> None:
    file = str(tmp_path / "other.duckdb")
    with zarrsql.connect() as con:
        con.execute("ATTACH ':memory:' AS mine")
        with pytest.raises(zarrsql.ParameterError) as refused:
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'mine', replace := true)")
        message = str(refused.value)
        assert "replace := true only remounts a database that zarr_mount attached" in message
        assert "empty in-memory database" in message
        assert "pass replace := true" not in message
        con.execute(f"ATTACH '{file}' AS f")
        with pytest.raises(zarrsql.ParameterError, match=r"'f' is the database file '.*other\.duckdb'"):
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'f', replace := true)")
        con.execute("CREATE TABLE mine.t AS SELECT 1 AS a")
        with pytest.raises(zarrsql.ParameterError, match=r"holding 1 table\(s\) or view\(s\) that zarrsql did not"):
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'mine', replace := true)")
        assert con.sql("SELECT a FROM mine.t").fetchall() == [(1,)]


def test_existing_into_a_read_only_database_is_a_parameter_error(store: str, tmp_path: Path) -> None:
    file = str(tmp_path / "ro.duckdb")
    duckdb.connect(file).close()
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{file}' AS ro (READ_ONLY)")
        with pytest.raises(zarrsql.ParameterError, match=r"cannot mount the store into database 'ro': it is attached"):
            con.sql(f"SELECT * FROM zarr_mount('{store}', 'ro', existing := true)")
    with duckdb.connect(file) as plain:
        assert plain.execute("SELECT count(*) FROM duckdb_views() WHERE NOT internal").fetchall() == [(0,)]


def test_unmount_from_a_read_only_database_is_a_parameter_error(store: str, tmp_path: Path) -> None:
    file = str(tmp_path / "kept.duckdb")
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{file}' AS w")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'w', existing := true)").fetchall()
        con.execute("DETACH w")
        con.execute(f"ATTACH '{file}' AS w (READ_ONLY)")
        with pytest.raises(zarrsql.ParameterError, match=r"cannot unmount the zarr views of database 'w'"):
            con.sql("SELECT * FROM zarr_unmount('w')")
    with duckdb.connect(file) as plain:
        assert plain.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall() == [("x",)]
