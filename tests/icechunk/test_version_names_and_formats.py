"""Version names that name nothing, and formats that do not fit the location, around Icechunk
repositories: each is an error naming the problem and the fix, never a silent read of main or
an error about a 'main' nobody asked for, and never an error about what the location is not
without saying what it is.

What each location is comes from its writers' own readers: Icechunk opens the repository (and
says a plain Zarr store or a reference set is no repository), zarr opens the plain store.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from cli_runner import assert_one_error, run_cli
from icechunk_fixtures import open_repo
from zarrsql.errors import ParameterError, StoreNotFoundError

BLANK_NAMES = ["", "   "]
NAMING_PARAMETERS = ["branch", "tag", "snapshot"]


def _assert_names_empty_version(message: str, parameter: str, value: str) -> None:
    assert f"{parameter} := {value!r} names no version" in message, message
    assert "name a branch (branch := 'dev'), a tag (tag := 'v1') or a snapshot id" in message, message
    assert f"leave {parameter} := out to read the tip of branch 'main'" in message, message
    assert "has no" not in message, message  # not an unknown 'main' or '' looked up in the repository


def _icechunk_storage(path: Path):
    import icechunk

    return icechunk.local_filesystem_storage(str(path))


# -- empty and blank version names ------------------------------------------------------------


@pytest.mark.parametrize("value", BLANK_NAMES)
@pytest.mark.parametrize("parameter", NAMING_PARAMETERS)
def test_an_empty_version_name_in_sql_is_a_parameter_error(versions, parameter: str, value: str) -> None:
    assert "main" in open_repo(versions.path).list_branches()  # main exists: an empty name must not read it
    with pytest.raises(ParameterError) as err:
        zarrsql.sql(f"SELECT count(*) FROM read_zarr('{versions.path}', {parameter} := '{value}')").fetchall()
    _assert_names_empty_version(str(err.value), parameter, value)


@pytest.mark.parametrize("parameter", NAMING_PARAMETERS)
def test_an_empty_version_name_from_python_is_a_parameter_error(versions, parameter: str) -> None:
    with pytest.raises(ParameterError) as err:
        zarrsql.read_zarr(str(versions.path), **{parameter: ""}).fetchall()
    _assert_names_empty_version(str(err.value), parameter, "")


@pytest.mark.parametrize("parameter", NAMING_PARAMETERS)
def test_an_empty_version_name_as_a_query_parameter_is_a_parameter_error(versions, parameter: str) -> None:
    with zarrsql.connect() as con, pytest.raises(ParameterError) as err:
        con.sql(f"SELECT count(*) FROM read_zarr(?, {parameter} := ?)", params=[str(versions.path), ""]).fetchall()
    _assert_names_empty_version(str(err.value), parameter, "")


def test_an_empty_branch_with_as_of_is_a_parameter_error(versions) -> None:
    with pytest.raises(ParameterError) as err:
        zarrsql.read_zarr(str(versions.path), branch="", as_of=versions.as_of).fetchall()
    _assert_names_empty_version(str(err.value), "branch", "")


def test_an_empty_version_name_in_listings_and_mounts_is_a_parameter_error(versions) -> None:
    with zarrsql.connect() as con:
        with pytest.raises(ParameterError) as listed:
            con.execute(f"SELECT * FROM read_zarr_tables('{versions.path}', tag := '')").fetchall()
        _assert_names_empty_version(str(listed.value), "tag", "")
        with pytest.raises(ParameterError) as mounted:
            con.execute(f"SELECT * FROM zarr_mount('{versions.path}', 'empty', branch := '')").fetchall()
        _assert_names_empty_version(str(mounted.value), "branch", "")


def test_an_empty_version_name_on_the_command_line_is_one_error(versions) -> None:
    sql = f"SELECT count(*) FROM read_zarr('{versions.path}', snapshot := '')"
    out = run_cli("query", str(versions.plain), sql)
    assert_one_error(out, "snapshot := '' names no version", "leave snapshot := out")


def test_a_named_branch_still_reads_its_version(versions) -> None:
    """The check refuses only names that name nothing: main named explicitly reads main."""
    session = open_repo(versions.path).readonly_session(branch="main")
    expected = xr.open_zarr(session.store, consolidated=False)["t2m"].size
    counted = zarrsql.sql(f"SELECT count(*) FROM read_zarr('{versions.path}', branch := 'main')").fetchall()
    assert counted == [(expected,)]


# -- a format that does not fit the location ----------------------------------------------------


@pytest.mark.parametrize("form", ["path", "trailing slash", "file url"])
@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "kerchunk"])
def test_another_format_on_a_repository_says_it_is_a_repository(versions, fmt: str, form: str) -> None:
    assert open_repo(versions.path).list_branches()  # Icechunk opens it: it is a repository
    location = {
        "path": str(versions.path),
        "trailing slash": f"{versions.path}/",
        "file url": f"file://{versions.path}",
    }
    given = location[form]
    with pytest.raises(StoreNotFoundError) as err:
        zarrsql.sql(f"SELECT count(*) FROM read_zarr('{given}', format := '{fmt}')").fetchall()
    message = str(err.value)
    assert f"'{given}' is not " in message, message
    assert "it is an Icechunk repository" in message, message
    assert f"format := '{fmt}' does not read" in message, message
    assert "pass format := 'icechunk' or leave format := out" in message, message


def test_format_zarr_with_a_version_on_a_repository_says_it_is_a_repository(versions) -> None:
    """Not "tag := applies to Icechunk repositories ... which has no versions": it is one."""
    with pytest.raises(StoreNotFoundError) as err:
        zarrsql.sql(f"SELECT count(*) FROM read_zarr('{versions.path}', format := 'zarr', tag := 'v1')").fetchall()
    assert f"'{versions.path}' is not a Zarr store: it is an Icechunk repository" in str(err.value)
    assert "pass format := 'icechunk'" in str(err.value)


def test_format_zarr_on_a_session_from_python_says_it_is_a_session(versions) -> None:
    session = open_repo(versions.path).readonly_session(tag="v1")
    with pytest.raises(ParameterError) as err:
        zarrsql.read_zarr(session, format="zarr").fetchall()
    assert "an Icechunk session given from Python" in str(err.value)
    assert "leave format := out" in str(err.value)


@pytest.mark.parametrize(("zarr_format", "root"), [(3, "zarr.json"), (2, ".zgroup")])
def test_format_icechunk_on_a_plain_zarr_store_says_it_is_one(tmp_path: Path, zarr_format: int, root: str) -> None:
    import zarr

    import icechunk

    store = tmp_path / "plain.zarr"
    xr.Dataset({"v": ("x", np.arange(3.0))}).to_zarr(store, zarr_format=zarr_format, consolidated=False)
    assert zarr.open_group(store, mode="r").metadata.zarr_format == zarr_format  # zarr reads it
    assert not icechunk.Repository.exists(_icechunk_storage(store))  # Icechunk finds no repository
    with pytest.raises(StoreNotFoundError) as err:
        zarrsql.sql(f"SELECT count(*) FROM read_zarr('{store}', format := 'icechunk')").fetchall()
    message = str(err.value)
    assert f"no Icechunk repository at '{store}': it is a plain Zarr store (its root holds {root})" in message
    assert "leave format := out to read it as what it is, or pass format := 'zarr'" in message
    assert sorted(p.name for p in store.iterdir() if p.is_dir()) == ["v"]  # nothing written into it


def test_format_icechunk_on_a_kerchunk_parquet_set_says_it_is_one(tmp_path: Path) -> None:
    pytest.importorskip("kerchunk")
    from kerchunk.df import refs_to_dataframe
    from tests.kerchunk_refs import kerchunk_refs

    import icechunk

    nc = tmp_path / "a.nc"
    xr.Dataset({"v": ("x", np.arange(3.0))}).to_netcdf(nc, engine="h5netcdf")
    with warnings.catch_warnings():  # kerchunk writes through pandas' fastparquet engine, deprecated in pandas 3
        warnings.filterwarnings("ignore", message="The 'fastparquet' engine is deprecated")
        refs_to_dataframe(kerchunk_refs(nc), str(tmp_path / "a.parq"), record_size=2)
    assert not icechunk.Repository.exists(_icechunk_storage(tmp_path / "a.parq"))
    with pytest.raises(StoreNotFoundError) as err:
        zarrsql.sql(f"SELECT count(*) FROM read_zarr('{tmp_path / 'a.parq'}', format := 'icechunk')").fetchall()
    assert re.search(r"it is a kerchunk reference set \(a Parquet folder\).*pass format := 'kerchunk'", str(err.value))
