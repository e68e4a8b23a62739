"""`as_of := now()` changes each time DuckDB binds the statement, so no scan registered for
one binding serves the next: the error says so and how to pass the time instead (it was
"statement still had unregistered zarr scans after 32 rounds"). The parameter form reads
the branch as it is now, as xarray does on a read-only session of the branch."""

from __future__ import annotations

import datetime as dt

import pytest

import zarrsql
from icechunk_fixtures import Versions


@pytest.mark.parametrize("volatile", ["now()", "current_timestamp"])
def test_as_of_a_volatile_value_says_how_to_pass_it(versions: Versions, volatile: str) -> None:
    with pytest.raises(zarrsql.ZarrSQLError, match=r"now\(\).*parameter"):
        zarrsql.connect().sql(f"SELECT count(*) FROM read_zarr('{versions.path}', as_of := {volatile})").fetchall()


def test_as_of_the_current_time_as_a_parameter_reads_the_branch(versions: Versions) -> None:
    import icechunk
    import xarray as xr

    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(versions.path)))
    expected = xr.open_zarr(repo.readonly_session("main").store, consolidated=False).sizes
    con = zarrsql.connect()
    now = dt.datetime.now(dt.timezone.utc)
    got = con.sql(f"SELECT count(DISTINCT time) FROM read_zarr('{versions.path}', as_of := ?)", params=[now])
    assert got.fetchall() == [(expected["time"],)]
