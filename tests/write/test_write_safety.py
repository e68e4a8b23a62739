"""The writers' safety: stale chunks of a failed or killed append, a
mode="w" that ignored the writer lock or deleted what zarrsql did not create, a relation of a
non-default connection written without `connection=`, bad targets, COPY to Zarr, and a
failing query reported as an I/O error.

Oracles: `xr.open_zarr` and zarr-python (what is stored), numpy (the expected grid, built
from each query's definition), the file system (what is left), DuckDB (row counts).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.errors import ParameterError, StoreExistsError, StoreLockedError, WriteError, ZarrSQLError
from zarrsql.write import commit, lock


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _grid(con: zarrsql.Connection, path: Path, times: int, *, chunks: tuple[int, int]) -> None:
    """A grid v[t, y] = 10 t + y over t < `times`, y < 2."""
    zarrsql.to_zarr(
        f"SELECT t, y, (t * 10 + y)::DOUBLE AS v FROM range({times}) a(t), range(2) b(y)",
        path, dims=["t", "y"], chunks=chunks, connection=con,
    )  # fmt: skip


# ----------------------------------------------------------------------------- 1: stale chunks
def test_a_failed_append_leaves_no_chunk_a_later_append_would_show(con: zarrsql.Connection, tmp_path: Path) -> None:
    """The failed append wrote chunk (t=2, y=0) before its duplicate was found; the later append
    has no row there, so the cell must read as missing (NaN), not as the failed append's 999."""
    path = tmp_path / "g.zarr"
    _grid(con, path, 2, chunks=(1, 1))
    (path / "notes.txt").write_text("the user's")  # rollback removes nothing it did not create
    with pytest.raises(WriteError):
        zarrsql.to_zarr("SELECT * FROM (VALUES (2, 0, 999.0), (2, 1, 999.0), (2, 1, 998.0)) x(t, y, v)", path,
                        mode="a", append_dim="t", connection=con)  # fmt: skip
    zarrsql.to_zarr("SELECT 2 AS t, 1 AS y, 21.0 AS v", path, mode="a", append_dim="t", connection=con)
    expected = np.array([[0.0, 1.0], [10.0, 11.0], [np.nan, 21.0]])
    np.testing.assert_array_equal(xr.open_zarr(path).v.values, expected)
    got = con.sql(f"SELECT y, v FROM read_zarr('{path}') WHERE t = 2 ORDER BY y").fetchall()
    assert got[0][1] is None or np.isnan(got[0][1])
    assert (path / "notes.txt").read_text() == "the user's"
    assert not any(p.name.startswith(".zarrsql-append") for p in path.iterdir())


def test_a_failed_append_restores_the_chunk_across_the_old_end(con: zarrsql.Connection, tmp_path: Path) -> None:
    """Chunks of 2 steps over 3 steps: the failed append rewrote the chunk holding t = 2 and 3;
    a later append that misses y = 0 must not show the failed append's value at (3, 0)."""
    path = tmp_path / "g.zarr"
    _grid(con, path, 3, chunks=(2, 1))
    with pytest.raises(WriteError):
        zarrsql.to_zarr("SELECT * FROM (VALUES (3, 0, 999.0), (3, 1, 999.0), (3, 1, 998.0)) x(t, y, v)", path,
                        mode="a", append_dim="t", connection=con)  # fmt: skip
    zarrsql.to_zarr("SELECT 3 AS t, 1 AS y, 31.0 AS v", path, mode="a", append_dim="t", connection=con)
    expected = np.array([[0.0, 1.0], [10.0, 11.0], [20.0, 21.0], [np.nan, 31.0]])
    np.testing.assert_array_equal(xr.open_zarr(path).v.values, expected)


_DYING_APPEND = """
import os, sys
import zarrsql
from zarr.storage import LocalStore

written = []
plain_set = LocalStore.set

async def set_then_die(self, key, value):
    await plain_set(self, key, value)
    if key.startswith("v/c/"):
        written.append(key)
        if len(written) == 2:  # killed after two chunks of v: no cleanup runs (os._exit)
            os._exit(9)

LocalStore.set = set_then_die
zarrsql.to_zarr("SELECT t, y, 999.0 AS v FROM range(2, 6) a(t), range(2) b(y)", sys.argv[1],
                mode="a", append_dim="t", connection=zarrsql.connect())
"""


def test_a_killed_append_leaves_no_chunk_a_later_append_would_show(con: zarrsql.Connection, tmp_path: Path) -> None:
    path = tmp_path / "g.zarr"
    _grid(con, path, 2, chunks=(1, 1))
    killed = subprocess.run([sys.executable, "-c", _DYING_APPEND, str(path)], capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    assert (path / lock.LOCK_NAME).exists()  # it died holding the lock
    assert xr.open_zarr(path).sizes["t"] == 2
    zarrsql.to_zarr("SELECT 2 AS t, 1 AS y, 21.0 AS v", path, mode="a", append_dim="t", connection=con)
    expected = np.array([[0.0, 1.0], [10.0, 11.0], [np.nan, 21.0]])
    np.testing.assert_array_equal(xr.open_zarr(path).v.values, expected)


# ----------------------------------------------------------------------------- 2: the lock
@pytest.fixture
def live_writer_lock():  # noqa: ANN201 - yields a function
    """A writer lock held by another live process (a sleeping child) in a given store."""
    children: list[subprocess.Popen[bytes]] = []

    def hold(store: Path) -> None:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        children.append(child)
        owner = {"host": socket.gethostname(), "pid": child.pid}
        (store / lock.LOCK_NAME).write_text(json.dumps(owner))

    yield hold
    for child in children:
        child.kill()
        child.wait()


@pytest.mark.parametrize("layout", ["grid", "table"])
def test_mode_w_is_refused_while_another_process_appends(
    con: zarrsql.Connection, tmp_path: Path, live_writer_lock, layout: str  # noqa: ANN001
) -> None:  # fmt: skip
    path = tmp_path / "s.zarr"
    old = con.sql("SELECT range AS n, range * 0.5 AS x FROM range(4)")
    zarrsql.to_zarr(old, path, layout=layout, dims=["n"] if layout == "grid" else None, connection=con)
    live_writer_lock(path)
    new = con.sql("SELECT 7 AS n, 7.0 AS x")
    with pytest.raises(StoreLockedError, match="s.zarr"):
        zarrsql.to_zarr(new, path, layout=layout, mode="w", dims=["n"] if layout == "grid" else None, connection=con)
    dim = "n" if layout == "grid" else "row"
    np.testing.assert_array_equal(xr.open_zarr(path).x.values, np.arange(4) * 0.5)
    assert xr.open_zarr(path).sizes[dim] == 4


def test_mode_w_replaces_a_store_whose_writer_died(con: zarrsql.Connection, tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _grid(con, path, 2, chunks=(1, 1))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    (path / lock.LOCK_NAME).write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    zarrsql.to_zarr("SELECT 5 AS t, 0 AS y, 1.5 AS v", path, dims=["t", "y"], mode="w", connection=con)
    np.testing.assert_array_equal(xr.open_zarr(path).v.values, [[1.5]])
    assert not (path / lock.LOCK_NAME).exists()


# ----------------------------------------------------------------------------- 3: user files
def test_mode_w_refuses_a_directory_that_is_not_a_zarr_store(con: zarrsql.Connection, tmp_path: Path) -> None:
    docs = tmp_path / "mydocs"
    docs.mkdir()
    (docs / "thesis.txt").write_text("precious")
    with pytest.raises(StoreExistsError, match=r"mydocs.*not a Zarr store.*(choose another path|remove)"):
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", docs, dims=["a"], mode="w", connection=con)
    assert sorted(os.listdir(docs)) == ["thesis.txt"]
    assert (docs / "thesis.txt").read_text() == "precious"
    assert sorted(os.listdir(tmp_path)) == ["mydocs"]  # no staging directory left


def test_mode_w_refuses_a_plain_file(con: zarrsql.Connection, tmp_path: Path) -> None:
    target = tmp_path / "out.zarr"
    target.write_text("not a store")
    with pytest.raises(StoreExistsError, match="out.zarr.*file"):
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", target, dims=["a"], mode="w", connection=con)
    assert target.read_text() == "not a store"


@pytest.mark.parametrize("target", [".", "..", ""])
def test_mode_w_refuses_the_current_directory_and_its_ancestors(
    con: zarrsql.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:  # fmt: skip
    here = tmp_path / "work"
    here.mkdir()
    (here / "notes.txt").write_text("precious")
    monkeypatch.chdir(here)
    with pytest.raises(ZarrSQLError, match="current directory|empty"):
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", target, dims=["a"], mode="w", connection=con)
    assert sorted(os.listdir(here)) == ["notes.txt"]
    assert sorted(os.listdir(tmp_path)) == ["work"]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_mode_w_still_replaces_a_zarr_store_and_an_empty_directory(
    con: zarrsql.Connection, tmp_path: Path, zarr_format: int
) -> None:  # fmt: skip
    store = tmp_path / "s.zarr"
    zarr.open_group(str(store), mode="w", zarr_format=zarr_format).create_array("x", shape=(3,), dtype="f8")
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (store, empty):
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", target, dims=["a"], mode="w", connection=con)
        np.testing.assert_array_equal(xr.open_zarr(target).v.values, [2.0])


# ----------------------------------------------------------------------------- 4: connection
@pytest.mark.parametrize("derived", [False, True])
def test_an_append_without_connection_runs_on_the_relations_connection(tmp_path: Path, derived: bool) -> None:
    path = tmp_path / "a.zarr"
    con = zarrsql.connect()
    con.execute("CREATE TABLE steps AS SELECT range + 3 AS t, range * 1.0 AS v FROM range(3)")
    zarrsql.to_zarr(con.sql("SELECT range AS t, range * 1.0 AS v FROM range(3)"), path, dims=["t"])
    more = con.sql("SELECT * FROM steps")  # a table only this connection has
    if derived:
        more = more.filter("t >= 3")
    if not hasattr(more, "_con"):  # DuckDB 1.5: a relation does not tell its connection
        with pytest.raises(zarrsql.ZarrSQLError, match="connection=con"):
            zarrsql.to_zarr(more, path, mode="a", append_dim="t")
        zarrsql.to_zarr(more, path, mode="a", append_dim="t", connection=con)
    else:
        zarrsql.to_zarr(more, path, mode="a", append_dim="t")
    np.testing.assert_array_equal(xr.open_zarr(path).v.values, [0.0, 1.0, 2.0, 0.0, 1.0, 2.0])


# ----------------------------------------------------------------------------- 5: bad targets
@pytest.mark.parametrize("target", ["foo://bar/x.zarr", "http://example.invalid/x.zarr", "https://h.invalid/x"])
def test_a_target_that_cannot_be_written_is_a_zarrsql_error(con: zarrsql.Connection, target: str) -> None:
    with pytest.raises(ParameterError, match=target.split("://")[0]):
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", target, dims=["a"], connection=con)


def test_s3_without_credentials_is_a_zarrsql_error(con: zarrsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("s3fs")
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(WriteError, match="s3://no-such-bucket-zzzz/x.zarr.*storage_options"):
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", "s3://no-such-bucket-zzzz/x.zarr", dims=["a"], connection=con,
                        storage_options={"client_kwargs": '{"region_name": "us-east-1"}', "retries": "0"})  # fmt: skip


@pytest.mark.parametrize("layout", ["grid", "table"])
def test_appending_to_a_directory_that_is_not_a_store_says_so(
    con: zarrsql.Connection, tmp_path: Path, layout: str
) -> None:  # fmt: skip
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.txt").write_text("x")
    grid = {"append_dim": "a", "dims": ["a"]} if layout == "grid" else {}
    with pytest.raises(ZarrSQLError) as info:
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", docs, layout=layout, mode="a", connection=con, **grid)
    message = str(info.value)
    assert "not a Zarr store" in message
    assert "docs" in message
    assert 'mode="w-"' not in message
    assert 'pass mode="a"' not in message
    assert sorted(os.listdir(docs)) == ["x.txt"]


def test_an_empty_target_is_a_parameter_error(con: zarrsql.Connection) -> None:
    with pytest.raises(ParameterError, match="empty"):
        zarrsql.to_zarr("SELECT 1 AS a, 2.0 AS v", "", dims=["a"], connection=con)


# ----------------------------------------------------------------------------- 6: COPY
@pytest.fixture
def table_t(con: zarrsql.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> zarrsql.Connection:
    monkeypatch.chdir(tmp_path)
    con.execute("CREATE TABLE t AS SELECT range AS i, range * 1.5 AS v FROM range(10)")
    return con


def test_copy_with_layout_table_counts_the_rows_written(table_t: zarrsql.Connection, tmp_path: Path) -> None:
    ((count,),) = table_t.sql("SELECT count(*) FROM t").fetchall()
    assert table_t.execute("COPY t TO 'b.zarr' (LAYOUT table)").fetchall() == [(count,)]
    assert xr.open_zarr(tmp_path / "b.zarr").sizes["row"] == count
    again = table_t.execute("COPY (SELECT * FROM t WHERE i < 4) TO 'b.zarr' (LAYOUT table, MODE append)").fetchall()
    assert again == [(4,)]


def test_copy_of_a_table_with_a_column_list(table_t: zarrsql.Connection, tmp_path: Path) -> None:
    table_t.execute("COPY t(i, v) TO 'c.zarr' (DIMS (i))")
    np.testing.assert_array_equal(xr.open_zarr(tmp_path / "c.zarr").v.values, np.arange(10) * 1.5)
    table_t.execute("COPY t (v, i) TO 'd.zarr' (DIMS (i))")
    assert sorted(xr.open_zarr(tmp_path / "d.zarr").data_vars) == ["v"]


def test_copy_with_prepared_parameters_is_a_clear_error(table_t: zarrsql.Connection, tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match=r"parameter.*to_zarr"):
        table_t.execute("COPY (SELECT i, v + ? AS v FROM t) TO 'p.zarr' (DIMS (i))", [1.0])
    assert not (tmp_path / "p.zarr").exists()


# ----------------------------------------------------------------------------- 7: query errors
_FAILING = {
    "error": "CASE WHEN range = 150000 THEN error('boom') ELSE range END",
    "cast": "('' || CASE WHEN range = 150000 THEN 'x' ELSE range::VARCHAR END)::BIGINT",
}


@pytest.mark.parametrize("failure", sorted(_FAILING))
def test_a_failing_query_in_a_table_append_is_the_querys_error(
    con: zarrsql.Connection, tmp_path: Path, failure: str
) -> None:  # fmt: skip
    path = tmp_path / "t.zarr"
    zarrsql.to_zarr(con.sql("SELECT range AS n, range AS k FROM range(1000)"), path, layout="table", connection=con)
    query = f"SELECT range AS n, {_FAILING[failure]} AS k FROM range(1000, 200000)"
    with pytest.raises(WriteError) as info:
        zarrsql.to_zarr(con.sql(query), path, layout="table", mode="a", connection=con)
    message = str(info.value)
    assert "I/O error" not in message
    assert "query" in message
    assert xr.open_zarr(path).sizes["row"] == 1000


def _failing_append(error: OSError):  # noqa: ANN202 - a test callback
    def write(target: commit.StoreTarget) -> None:
        array = zarr.open_array(target.zarr_store, path="v", mode="r+")
        array.resize((6,))
        raise error

    return write


def test_an_error_without_errno_is_not_called_an_io_error(con: zarrsql.Connection, tmp_path: Path) -> None:
    """pyarrow carries a DuckDB error out of an Arrow stream as an OSError without errno: that is
    the query's failure, not the disk's; a real I/O error (with errno) is still called one."""
    path = tmp_path / "g.zarr"
    zarrsql.to_zarr("SELECT range AS t, range * 1.0 AS v FROM range(3)", path, dims=["t"], connection=con)
    with pytest.raises(WriteError) as info:
        commit.append_commit(str(path), None, _failing_append(OSError("Invalid Input Error: boom")))
    assert "I/O error" not in str(info.value)
    assert "boom" in str(info.value)
    with pytest.raises(WriteError, match="I/O error"):
        commit.append_commit(str(path), None, _failing_append(OSError(errno.ENOSPC, "No space left on device")))
    np.testing.assert_array_equal(xr.open_zarr(path).v.values, [0.0, 1.0, 2.0])
