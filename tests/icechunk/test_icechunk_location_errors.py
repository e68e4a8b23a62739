"""Icechunk reads at their edges: `format := 'icechunk'` on a file (an Icechunk panic) or on a
missing folder, `as_of` before a branch's first commit, and `'anonymous'` for a local virtual
chunk container. The oracle for times is Icechunk's own history of the repository."""

from __future__ import annotations

import datetime
import re
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import ParameterError, StoreNotFoundError, ZarrSQLError


@pytest.mark.parametrize("name", ["a.nc", "refs.json"])
def test_format_icechunk_on_a_file_is_a_zarrsql_error(tmp_path: Path, name: str, capfd) -> None:
    path = tmp_path / name
    if name.endswith(".nc"):
        xr.Dataset({"v": ("x", np.arange(3.0))}).to_netcdf(path, engine="h5netcdf")
    else:
        path.write_text("{}")
    with pytest.raises(ZarrSQLError, match="it is a file, and a repository is a folder; leave format := out"):
        zarrsql.sql(f"SELECT * FROM read_zarr('{path}', format := 'icechunk')").fetchall()
    assert "panicked" not in capfd.readouterr().err  # Icechunk was never asked


def test_format_icechunk_on_a_missing_folder_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no-repo-here"
    with pytest.raises(StoreNotFoundError, match="the folder does not exist"):
        zarrsql.read_zarr(str(missing), format="icechunk").fetchall()
    assert not missing.exists()


def test_as_of_before_the_first_commit_says_when_that_was(tmp_path: Path) -> None:
    import icechunk

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    time.sleep(0.05)
    before = datetime.datetime.now(datetime.UTC)  # after the empty initial snapshot, before any commit
    time.sleep(0.05)
    session = repo.writable_session("main")
    xr.Dataset({"v": ("x", np.arange(3.0))}).to_zarr(session.store, zarr_format=3, consolidated=False)
    session.commit("first data")
    history = list(repo.ancestry(branch="main"))
    first_commit = history[-2].written_at  # history is newest first; [-1] is the initial snapshot
    assert history[-1].written_at <= before < first_commit
    with pytest.raises(ParameterError, match=re.escape(f"its first was written at {first_commit.isoformat()}")):
        zarrsql.read_zarr(str(tmp_path / "repo"), as_of=before).fetchall()


def test_as_of_on_a_branch_without_commits_says_so(tmp_path: Path) -> None:
    import icechunk

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    with pytest.raises(ParameterError, match="has no commits yet"):
        zarrsql.read_zarr(str(tmp_path / "repo"), as_of=datetime.datetime.now(datetime.UTC)).fetchall()
    assert len(list(repo.ancestry(branch="main"))) == 1


def test_anonymous_for_a_local_container_says_to_give_null(virtual) -> None:
    sql = f"SELECT count(*) FROM read_zarr('{virtual.path}', virtual_chunks := MAP {{'{virtual.prefix}': 'anonymous'}})"
    with pytest.raises(ParameterError) as err:
        zarrsql.sql(sql).fetchall()
    message = str(err.value)
    assert "not understood" not in message
    assert f"which '{virtual.prefix}' is not; give NULL" in message
