"""Every version selector of an Icechunk repository reads that version's rows; the oracle is
xarray reading the same version through Icechunk's own session."""

from __future__ import annotations

import pytest

import zarrsql
from icechunk_fixtures import frame, open_repo, write_versions, xarray_version
from oracles import assert_frames_equal
from zarrsql.errors import ParameterError


def xr_open(session):
    import xarray as xr

    return xr.open_zarr(session.store, consolidated=False).load()


KEYS = ["time", "lat", "lon"]


def _read(path, **params):
    return zarrsql.read_zarr(str(path), **params).df()


@pytest.mark.parametrize(
    ("params", "version"),
    [
        ({}, {"branch": "main"}),
        ({"branch": "main"}, {"branch": "main"}),
        ({"tag": "v1"}, {"tag": "v1"}),
        ({"branch": "dev"}, {"branch": "dev"}),
        ({"format": "icechunk", "branch": "dev"}, {"branch": "dev"}),
    ],
)
def test_each_selector_reads_its_version(versions, params, version):
    expected = frame(xarray_version(versions.path, **version))
    assert_frames_equal(_read(versions.path, **params), expected, sort_by=KEYS, check_column_order=False)


def test_snapshot_id_reads_that_snapshot(versions):
    expected = frame(xarray_version(versions.path, snapshot_id=versions.first))
    assert len(expected) == 24 * 10 * 12
    actual = _read(versions.path, snapshot=versions.first)
    assert_frames_equal(actual, expected, sort_by=KEYS, check_column_order=False)


def test_as_of_reads_the_branch_at_that_time(versions):
    expected = frame(xarray_version(versions.path, snapshot_id=versions.first))
    actual = zarrsql.sql(
        f"SELECT * FROM read_zarr('{versions.path}', as_of := TIMESTAMPTZ '{versions.as_of.isoformat()}')"
    ).df()
    assert_frames_equal(actual, expected, sort_by=KEYS, check_column_order=False)
    # from Python a datetime; a naive SQL TIMESTAMP is UTC
    naive = versions.as_of.replace(tzinfo=None).isoformat(sep=" ")
    assert len(zarrsql.read_zarr(str(versions.path), as_of=versions.as_of).df()) == len(expected)
    assert zarrsql.sql(
        f"SELECT count(*) FROM read_zarr('{versions.path}', branch := 'main', as_of := TIMESTAMP '{naive}')"
    ).fetchall()[0] == (len(expected),)


def test_versions_differ_where_the_history_says(versions):
    counts = {
        name: zarrsql.sql(f"SELECT count(DISTINCT time) FROM read_zarr('{versions.path}'{extra})").fetchall()[0][0]
        for name, extra in [("main", ""), ("v1", ", tag := 'v1'"), ("dev", ", branch := 'dev'")]
    }
    assert counts == {"main": 36, "v1": 24, "dev": 24}
    diff = zarrsql.sql(
        f"SELECT max(d.t2m - v.t2m), min(d.t2m - v.t2m) FROM read_zarr('{versions.path}', branch := 'dev') d "
        f"JOIN read_zarr('{versions.path}', tag := 'v1') v USING (time, lat, lon)"
    ).fetchall()[0]
    assert diff == pytest.approx((100.0, 100.0), abs=1e-3)


def test_listings_take_the_version(versions):
    tables = zarrsql.sql(f"SELECT shape FROM read_zarr_tables('{versions.path}', tag := 'v1')").fetchall()
    assert tables == [([24, 10, 12],)]
    shapes = dict(
        zarrsql.sql(f"SELECT name, shape FROM read_zarr_metadata('{versions.path}') WHERE name = 't2m'").fetchall()
    )
    assert shapes == {"t2m": [36, 10, 12]}


def test_from_clause_detects_a_repository(versions):
    assert zarrsql.sql(f"SELECT count(*) FROM '{versions.path}'").fetchall()[0] == (36 * 10 * 12,)


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ("branch := 'nope'", ["no branch 'nope'", "branches: ['dev', 'main']", "tags: ['v1']"]),
        ("tag := 'v9'", ["no tag 'v9'", "branches: ['dev', 'main']", "tags: ['v1']"]),
        ("snapshot := 'AAAAAAAAAAAAAAAAAAAA'", ["no snapshot 'AAAAAAAAAAAAAAAAAAAA'", "tags: ['v1']"]),
        ("branch := 'nope', as_of := TIMESTAMP '2030-01-01'", ["no branch 'nope'", "branches: ['dev', 'main']"]),
        ("as_of := TIMESTAMP '2000-01-01'", ["no snapshot at or before 2000-01-01", "its first was written at"]),
        ("tag := 'v1', branch := 'main'", ["pass one of branch :=, tag := or snapshot :="]),
        ("tag := 'v1', as_of := TIMESTAMP '2030-01-01'", ["as_of := picks the last snapshot of a branch"]),
        ("as_of := 'yesterday'", ["as_of := must be a time"]),
        ("format := 'parquet'", ["format := must be one of 'zarr', 'icechunk', 'kerchunk'"]),
    ],
)
def test_version_errors_name_what_exists(versions, extra, names):
    with pytest.raises(ParameterError) as err:
        zarrsql.sql(f"SELECT * FROM read_zarr('{versions.path}', {extra})").fetchall()
    for text in names:
        assert text in str(err.value)


def test_version_parameters_on_a_plain_store_are_refused(versions):
    with pytest.raises(ParameterError, match=r"tag := apply to Icechunk repositories.*plain Zarr store"):
        zarrsql.sql(f"SELECT * FROM read_zarr('{versions.plain}', tag := 'v1')").fetchall()


def test_a_repository_read_as_plain_zarr_names_the_format(versions):
    with pytest.raises(zarrsql.ZarrSQLError, match="is not a Zarr store"):
        zarrsql.sql(f"SELECT * FROM read_zarr('{versions.path}', format := 'zarr')").fetchall()


def test_a_folder_that_is_no_repository(tmp_path):
    with pytest.raises(zarrsql.ZarrSQLError, match="no Icechunk repository at"):
        zarrsql.sql(f"SELECT * FROM read_zarr('{tmp_path}', format := 'icechunk')").fetchall()


def test_sessions_and_stores_from_python(versions):
    repo = open_repo(versions.path)
    expected = frame(xarray_version(versions.path, tag="v1"))
    session = repo.readonly_session(tag="v1")
    for given in (session, session.store):
        actual = zarrsql.read_zarr(given).df()
        assert_frames_equal(actual, expected, sort_by=KEYS, check_column_order=False)
    assert zarrsql.read_zarr_tables(session).fetchall()[0][4] == [24, 10, 12]
    with pytest.raises(ParameterError, match="session already fixes its repository and version"):
        zarrsql.read_zarr(session, tag="v1").fetchall()


def test_a_writable_session_shows_its_uncommitted_changes(tmp_path):
    import zarr

    import icechunk

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    write_versions(repo)
    session = repo.writable_session("main")
    assert (zarrsql.read_zarr(session).df().tp < 0).sum() == 0
    zarr.open_group(session.store, mode="r+")["tp"][0, 0, 0] = -1.0
    rows = zarrsql.read_zarr(session).df()
    assert (rows.tp < 0).sum() == 1  # the change is seen though the snapshot id is the same
    expected = frame(xr_open(session))
    assert_frames_equal(rows, expected, sort_by=KEYS, check_column_order=False)


def test_a_branch_is_revalidated_and_a_tag_stays(tmp_path):
    import zarr

    import icechunk

    path = tmp_path / "repo"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    write_versions(repo)
    query = f"SELECT min(tp) FROM read_zarr('{path}'{{}})"
    assert zarrsql.sql(query.format("")).fetchall()[0][0] >= 0
    session = repo.writable_session("main")
    zarr.open_group(session.store, mode="r+")["tp"][0, 0, 0] = -5.0
    session.commit("a negative value")
    assert zarrsql.sql(query.format("")).fetchall()[0] == (-5.0,)  # the branch moved: seen
    assert zarrsql.sql(query.format(", tag := 'v1'")).fetchall()[0][0] >= 0


def test_metadata_is_cached_per_snapshot(versions):
    from zarrsql.metadata.tree import clear_cache

    sql = f"SELECT count(tp), max(tp) FROM read_zarr('{versions.path}', snapshot := '{versions.second}')"
    clear_cache()
    with zarrsql.trace() as cold:
        first = zarrsql.sql(sql).fetchall()[0]
    with zarrsql.trace() as warm:
        again = zarrsql.sql(sql).fetchall()[0]
    assert first == again
    assert cold.chunks_decoded > warm.chunks_decoded > 0  # cold also decodes the coordinates
    # the warm query reads chunks only: no metadata document again, no validation request
    assert warm.requests == warm.chunks_decoded
    assert cold.requests > warm.requests


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("snapshot_id", "snapshot"),
        ("asof", "as_of"),
        ("authorize_virtual_chunk_access", "virtual_chunks"),
        ("tags", "tag"),
    ],
)
def test_names_from_other_tools_get_a_hint(versions, name, meant):
    with pytest.raises(ParameterError, match=f"no parameter named '{name}'; did you mean {meant} :="):
        zarrsql.sql(f"SELECT * FROM read_zarr('{versions.path}', {name} := 'x')").fetchall()
    with pytest.raises(ParameterError, match=f"unknown keyword argument '{name}'; did you mean {meant}="):
        zarrsql.read_zarr(str(versions.path), **{name: "x"})


def test_a_format_without_a_store_class_is_named(versions):
    from zarrsql.store import open_store
    from zarrsql.store.choice import StoreChoice

    # a value the parser took but no FORMATS entry opens (as 'kerchunk' before its store lands)
    with pytest.raises(zarrsql.UnsupportedError, match="format := 'hdf9' is not readable by this zarrsql"):
        open_store(str(versions.path), None, StoreChoice(format="hdf9"))


def test_a_zarr_group_on_an_icechunk_store(versions):
    import zarr

    session = open_repo(versions.path).readonly_session(tag="v1")
    group = zarr.open_group(session.store, mode="r")
    expected = frame(xarray_version(versions.path, tag="v1"))
    assert_frames_equal(zarrsql.read_zarr(group).df(), expected, sort_by=KEYS, check_column_order=False)
