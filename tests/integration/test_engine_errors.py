"""Errors of the connection wrapper: each names the problem, where, and the fix.

COPY to Zarr, stores given as objects, unknown parameter names (SQL and Python), `FROM
'x.zarr'` on a store of several tables or on a folder that is no store, zarrsql's functions
run on the plain DuckDB connection, `existing := true` naming the wrong database, and SQL
keywords or unquoted values as parameters. A suggested fix is run where it can be, and must
then work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import numpy as np
import pytest
import zarr

import zarrsql
from oracles import xarray_frame

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def con() -> Iterator[zarrsql.Connection]:
    with zarrsql.connect() as c:
        yield c


@pytest.fixture(scope="module")
def era5(fixture_path: Callable[[str], str]) -> str:
    return fixture_path("era5_like.zarr")


@pytest.fixture(scope="module")
def datatree(fixture_path: Callable[[str], str]) -> str:
    return fixture_path("datatree.zarr")


def message(run: Callable[[], object], cls: type[BaseException], *fragments: str) -> str:
    """`run` raises `cls` with every fragment in its message; the message."""
    with pytest.raises(cls) as err:
        run()
    text = str(err.value)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    return text


# -- COPY ... TO 'x.zarr' -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "options"),
    [
        ("out.zarr", ""),
        ("out.zarr/", ""),
        ("x.zarr", " (FORMAT zarr)"),
        ("x", " (FORMAT zarr)"),
        ("x", " (FORMAT 'zarr')"),
    ],
)
def test_copy_to_zarr_without_dims_is_refused(
    con: zarrsql.Connection, tmp_path: Path, target: str, options: str
) -> None:
    """A COPY to Zarr is zarrsql's (tests/write/test_copy_statement.py); without DIMS for rows
    not read from a store it is refused, and nothing is written (not even DuckDB's CSV)."""
    con.execute("CREATE TABLE t AS SELECT 1 AS a")
    out = tmp_path / target
    for sql in (f"COPY (SELECT * FROM t) TO '{out}'{options}", f"COPY t TO '{out}'{options}"):
        message(lambda s=sql: con.execute(s), zarrsql.ParameterError, "dimensions cannot be known", "DIMS (")
        message(lambda s=sql: con.sql(s), zarrsql.ParameterError, "dimensions cannot be known")
    assert not out.exists()  # nothing was written (a plain DuckDB would write CSV at 'out.zarr')
    plain = duckdb.connect()
    plain.execute(f"COPY (SELECT 1 AS a) TO '{tmp_path / 'plain.zarr'}'")
    assert (tmp_path / "plain.zarr").is_file()


def test_copy_of_a_zarr_read_to_csv(con: zarrsql.Connection, era5: str, tmp_path: Path) -> None:
    """Reading Zarr and writing CSV or Parquet is not writing Zarr."""
    out = tmp_path / "from_zarr.csv"
    con.execute(f"COPY (SELECT * FROM read_zarr('{era5}', table_name := 'time_latitude_longitude')) TO '{out}'")
    assert len(out.read_text().splitlines()) - 1 == len(xarray_frame(era5, dims=["time", "latitude", "longitude"]))


# -- stores given as objects ----------------------------------------------------------------


def test_zarr_group_on_a_memory_store_is_refused(con: zarrsql.Connection) -> None:
    group = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    group.create_array("a", shape=(3,), dtype="f8", dimension_names=["x"])
    for fn in (zarrsql.read_zarr, zarrsql.read_zarr_metadata, zarrsql.read_zarr_tables):
        text = message(lambda f=fn: f(group, connection=con), zarrsql.StoreArgumentError, "MemoryStore", "path")
        assert "zarr.Group" in text
    message(lambda: zarrsql.mount(con, group, "m"), zarrsql.StoreArgumentError, "MemoryStore")


@pytest.mark.parametrize("store", [3, b"x.zarr", None, ["a.zarr"]])
def test_other_store_objects_are_type_errors(con: zarrsql.Connection, store: object) -> None:
    text = message(lambda: zarrsql.read_zarr(store, connection=con), TypeError, type(store).__name__, "path or URL")
    assert text
    with pytest.raises(zarrsql.ZarrSQLError):
        zarrsql.read_zarr_tables(store, connection=con)


def test_zarr_subgroup_where_a_whole_store_is_meant(con: zarrsql.Connection, datatree: str) -> None:
    sub = zarr.open_group(datatree, mode="r")["simulation"]
    message(lambda: zarrsql.mount(con, sub, "m"), zarrsql.StoreArgumentError, "'simulation'", "root group")
    message(lambda: zarrsql.read_zarr_views(sub, "m", connection=con), zarrsql.StoreArgumentError, "'simulation'")
    message(
        lambda: zarrsql.read_zarr(sub, connection=con, group_path="coarse"),
        zarrsql.ParameterError,
        "'simulation'",
        "group_path",
    )


# -- unknown parameter names ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "call", "closest"),
    [
        ("read_zarr", "read_zarr('{s}', tablename := 'x')", "table_name"),
        ("read_zarr", "read_zarr('{s}', tablename = 'x')", "table_name"),
        ("read_zarr", "read_zarr('{s}', decode_time := false)", "decode_times"),
        ("read_zarr_tables", "read_zarr_tables('{s}', grouppath := 'x')", "group_path"),
        ("read_zarr_views", "read_zarr_views('{s}', 'db', view_name := MAP {{}})", "view_names"),
    ],
)
def test_unknown_parameter_in_sql(con: zarrsql.Connection, era5: str, function: str, call: str, closest: str) -> None:
    sql = "SELECT * FROM " + call.format(s=era5)
    bad = re.search(r", (\w+) :?=", call.replace("'db', ", "")).group(1)  # type: ignore[union-attr]
    for run in (lambda: con.sql(sql), lambda: con.execute(sql)):
        text = message(run, zarrsql.ParameterError, f"'{bad}'", f"did you mean {closest} :=", f"{function}()")
        assert "Candidate macros" not in text
    # DuckDB's own error on a plain connection: what the rewrite replaces
    if " := " in call:
        message(lambda: con.duckdb.sql(sql), duckdb.BinderException, "does not support the supplied arguments")


def test_unknown_parameter_in_python(con: zarrsql.Connection, era5: str, tmp_path: Path) -> None:
    message(
        lambda: zarrsql.read_zarr(era5, connection=con, tabel_name="x"),
        zarrsql.ParameterError,
        "'tabel_name'",
        "table_name=",
    )
    # checked before any SQL: a store that does not exist is not looked at yet
    missing = str(tmp_path / "nope.zarr")
    message(lambda: zarrsql.read_zarr(missing, tabel_name="x"), zarrsql.ParameterError, "'tabel_name'")
    message(lambda: zarrsql.read_zarr_tables(missing, array_pth="x"), zarrsql.ParameterError, "array_path=")
    message(lambda: zarrsql.read_zarr_views(missing, "db", viewnames={}), zarrsql.ParameterError, "view_names=")
    # a known keyword still reaches the store
    message(lambda: zarrsql.read_zarr(missing, table_name="x"), zarrsql.StoreNotFoundError, "nope.zarr")


def test_other_binder_errors_are_kept(con: zarrsql.Connection, era5: str) -> None:
    """DuckDB's message stands when the cause is not a zarrsql argument."""
    base = f"read_zarr('{era5}', table_name := 'time_latitude_longitude')"
    message(lambda: con.sql(f"SELECT nosuch FROM {base}"), duckdb.BinderException, "nosuch")
    message(lambda: con.sql(f"SELECT * FROM {base} WHERE nosuch = 1"), duckdb.BinderException, "nosuch")
    message(
        lambda: con.sql(f"SELECT * FROM read_zarr('{era5}', table_name := 'x', 3)"),
        duckdb.BinderException,
        "positional argument following named argument",
    )


# -- FROM 'x.zarr' ----------------------------------------------------------------------------


def test_from_a_store_of_several_tables_shows_the_read_zarr_call(con: zarrsql.Connection, era5: str) -> None:
    text = message(
        lambda: con.sql(f"SELECT count(*) FROM '{era5}'"),
        zarrsql.SelectionError,
        "FROM takes no parameters",
        "time_latitude_longitude",
        "time_level_latitude_longitude",
    )
    suggested = re.search(r"SELECT \* FROM read_zarr\('[^']*', table_name := '[^']*'\)", text)
    assert suggested is not None, text
    # the suggestion runs, and reads the table it names
    rows = con.sql(f"SELECT count(*) FROM ({suggested.group(0)})").fetchall()
    assert rows == [(len(xarray_frame(era5, dims=["time", "latitude", "longitude"])),)]
    # and the FROM string stays unclaimed: the same error again, not "table does not exist"
    message(lambda: con.execute(f"SELECT * FROM '{era5}'"), zarrsql.SelectionError, "FROM takes no parameters")


@pytest.mark.parametrize("content", ["empty", "array_only", "other_files"])
def test_from_a_folder_that_is_no_store(con: zarrsql.Connection, tmp_path: Path, content: str) -> None:
    folder = tmp_path / "fake.zarr"
    folder.mkdir()
    if content == "array_only":
        np.save(folder / "data.npy", np.arange(3))
    elif content == "other_files":
        (folder / "README").write_text("not a store")
    for sql in (f"SELECT * FROM '{folder}'", f"SELECT * FROM '{folder}/'"):
        text = message(lambda s=sql: con.sql(s), zarrsql.StoreNotFoundError, "folder", "zarr.json", ".zgroup")
        assert "pg_" not in text
        assert "Did you mean" not in text
    # the folder becomes a store: the same statement then reads it
    g = zarr.open_group(folder, mode="w")
    a = g.create_array("v", shape=(3,), dtype="i4", dimension_names=["x"])
    a[:] = [4, 5, 6]
    assert con.sql(f"SELECT sum(v) FROM '{folder}'").fetchall() == [(15,)]


# -- the plain DuckDB connection ------------------------------------------------------------


def test_zarrsql_functions_on_the_plain_connection(con: zarrsql.Connection, era5: str) -> None:
    for sql in (
        f"SELECT * FROM read_zarr('{era5}', table_name := 'time_latitude_longitude')",
        f"SELECT * FROM read_zarr_tables('{era5}')",
        f"SELECT * FROM read_zarr_metadata('{era5}')",
        f"SELECT * FROM zarr_mount('{era5}', 'e5')",
    ):
        text = message(lambda s=sql: con.duckdb.sql(s).fetchall(), duckdb.Error, "con.duckdb", "zarrsql.Connection")
        assert not re.search(r"__zarrsql_\w+ does not exist", text)
    assert "e5" not in {r[0] for r in con.sql("SELECT database_name FROM duckdb_databases()").fetchall()}


# -- mount(..., existing=True) ----------------------------------------------------------------


def test_existing_names_the_connections_database(era5: str, tmp_path: Path) -> None:
    with zarrsql.connect(str(tmp_path / "a.duckdb")) as con:
        text = message(lambda: zarrsql.mount(con, era5, "main", existing=True), zarrsql.ParameterError, "'main'", "'a'")
        assert "ATTACH" in text
        message(
            lambda: con.sql(f"SELECT * FROM zarr_mount('{era5}', 'main', existing := true)"),
            zarrsql.ParameterError,
            "'a'",
        )
        # the advice works: mount into 'a'
        mounted = zarrsql.mount(con, era5, "a", existing=True).fetchall()
        assert mounted
        n = con.sql("SELECT count(*) FROM a.time_latitude_longitude").fetchall()
        assert n == [(len(xarray_frame(era5, dims=["time", "latitude", "longitude"])),)]


# -- keywords and unquoted values -----------------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "fragments", "fixed"),
    [
        ("group := 'simulation/coarse'", ['"group" :=', "group_path :="], "\"group\" := 'simulation/coarse'"),
        ("group = 'simulation/coarse'", ['"group" :=', "group_path :="], "group_path := 'simulation/coarse'"),
        ("table := 'x_y'", ['"table" :=', "table_name :=", "'x_y'"], "\"table\" := 'x_y'"),
        ("group := simulation", ['"group" :=', "'simulation'"], "\"group\" := 'simulation/coarse'"),
    ],
)
def test_keyword_parameter_names(
    con: zarrsql.Connection, datatree: str, arg: str, fragments: list[str], fixed: str
) -> None:
    sql = f"SELECT count(*) FROM read_zarr('{datatree}', {arg}"
    if "table" in arg:
        sql += ", group_path := 'simulation/coarse'"
    sql += ")"
    text = message(lambda: con.sql(sql), zarrsql.ParameterError, "SQL keyword", *fragments)
    assert "double quotes" in text
    good = f"SELECT count(*) FROM read_zarr('{datatree}', {fixed}"
    good += ", group_path := 'simulation/coarse')" if "table" in fixed else ")"
    expected = len(xarray_frame(datatree, group="simulation/coarse", variables="bar"))
    assert con.sql(good).fetchall() == [(expected,)]


def test_plain_syntax_errors_are_kept(con: zarrsql.Connection, datatree: str) -> None:
    message(
        lambda: con.sql(f"SELEC * FROM read_zarr('{datatree}', group_path := 'simulation')"),
        duckdb.ParserException,
        "syntax error",
    )


def test_unquoted_value(con: zarrsql.Connection, datatree: str) -> None:
    text = message(
        lambda: con.sql(f"SELECT count(*) FROM read_zarr('{datatree}', group_path := simulation/coarse)"),
        zarrsql.ParameterError,
        "not quoted",
        "group_path := 'simulation/coarse'",
    )
    assert "single quotes" in text
    fixed = re.search(r"group_path := '[^']*'", text).group(0)  # type: ignore[union-attr]
    expected = len(xarray_frame(datatree, group="simulation/coarse", variables="bar"))
    assert con.sql(f"SELECT count(*) FROM read_zarr('{datatree}', {fixed})").fetchall() == [(expected,)]
