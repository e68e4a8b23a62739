"""`to_zarr` into a writable Icechunk session (zarrsql issue 12, item 2): written through a
fork merged into the session only when complete, published by the user's commit; xarray on
the committed snapshot is the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import icechunk
import zarrsql


@pytest.fixture
def repo(tmp_path):
    return icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        c.execute(
            "CREATE TABLE t AS SELECT (i // 4)::BIGINT AS time, (i % 4)::DOUBLE AS lat, i * 0.5 AS v "
            "FROM range(12) r(i)"
        )
        yield c


def _committed(repo) -> xr.Dataset:
    return xr.open_zarr(repo.readonly_session("main").store, consolidated=False)


def test_a_grid_written_into_a_session_opens_after_the_commit(repo, con) -> None:
    session = repo.writable_session("main")
    zarrsql.to_zarr(con.sql("SELECT * FROM t"), session, dims=["time", "lat"], connection=con)
    assert session.has_uncommitted_changes
    session.commit("write t")
    ds = _committed(repo)
    np.testing.assert_array_equal(ds.v.values, (np.arange(12) * 0.5).reshape(3, 4))
    np.testing.assert_array_equal(ds.lat.values, [0.0, 1.0, 2.0, 3.0])


def test_an_append_along_a_dimension_commits_with_the_session(repo, con) -> None:
    session = repo.writable_session("main")
    zarrsql.to_zarr(con.sql("SELECT * FROM t"), session, dims=["time", "lat"], connection=con)
    session.commit("first")
    session = repo.writable_session("main")
    zarrsql.to_zarr(con.sql("SELECT time + 3 AS time, lat, v + 100 AS v FROM t"), session, mode="a",
                    append_dim="time", connection=con)  # fmt: skip
    assert _committed(repo).v.shape == (3, 4)  # nothing visible before the commit
    session.commit("second")
    ds = _committed(repo)
    assert ds.v.shape == (6, 4)
    np.testing.assert_array_equal(ds.time.values, np.arange(6))
    np.testing.assert_array_equal(ds.v.values[3:], (np.arange(12) * 0.5 + 100).reshape(3, 4))


def test_a_table_written_and_appended_reads_back(repo, con) -> None:
    con.execute("CREATE TABLE rows AS SELECT i AS id, i * 1.5 AS x FROM range(5) r(i)")
    session = repo.writable_session("main")
    zarrsql.to_zarr(con.sql("SELECT * FROM rows"), session, layout="table", connection=con)
    session.commit("t")
    session = repo.writable_session("main")
    zarrsql.to_zarr(con.sql("SELECT id + 5 AS id, x FROM rows"), session, layout="table", mode="a", connection=con)
    session.commit("t2")
    rows = zarrsql.read_zarr(repo.readonly_session("main"), connection=con).fetchall()
    assert sorted(rows) == [(i, i * 1.5 if i < 5 else (i - 5) * 1.5) for i in range(10)]


def test_a_refused_or_failed_write_leaves_the_session_unchanged(repo, con) -> None:
    session = repo.writable_session("main")
    zarrsql.to_zarr(con.sql("SELECT * FROM t"), session, dims=["time", "lat"], connection=con)
    session.commit("first")
    session = repo.writable_session("main")
    with pytest.raises(zarrsql.StoreExistsError, match="mode='w'"):
        zarrsql.to_zarr(con.sql("SELECT * FROM t"), session, dims=["time", "lat"], connection=con)
    with pytest.raises(zarrsql.WriteError):  # a duplicate tuple found while writing
        zarrsql.to_zarr(con.sql("SELECT * FROM t UNION ALL SELECT * FROM t"), session, mode="w",
                        dims=["time", "lat"], connection=con)  # fmt: skip
    assert not session.has_uncommitted_changes
    np.testing.assert_array_equal(_committed(repo).v.values, (np.arange(12) * 0.5).reshape(3, 4))


def test_read_only_and_dirty_sessions_are_refused_with_the_fix(repo, con) -> None:
    with pytest.raises(zarrsql.ParameterError, match="writable_session"):
        zarrsql.to_zarr(con.sql("SELECT * FROM t"), repo.readonly_session("main"), dims=["time", "lat"],
                        connection=con)  # fmt: skip
    session = repo.writable_session("main")
    import zarr

    zarr.open_group(session.store, mode="w").attrs["note"] = "mine"
    with pytest.raises(zarrsql.WriteError, match="uncommitted changes"):
        zarrsql.to_zarr(con.sql("SELECT * FROM t"), session, dims=["time", "lat"], mode="w", connection=con)
    with pytest.raises(zarrsql.ParameterError, match="format 3"):
        zarrsql.to_zarr(con.sql("SELECT * FROM t"), repo.writable_session("main"), dims=["time", "lat"],
                        zarr_format=2, connection=con)  # fmt: skip
