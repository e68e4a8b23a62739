"""Reference sets whose chunks live on HTTP and S3 (the suite's local servers), and remote
sets and HDF5 files: the same rows as xarray on the local file, and the server's own log
shows the chunks travel as HTTP Range requests, adjacent ones coalesced."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import zarrsql
from tests.oracles import assert_frames_equal
from tests.virtual.conftest import BUCKET, VirtualFiles
from tests.virtual.h5col_files import expected_obs

COLUMNS = "time, latitude, longitude, t2m, u10, sp"


def _frame(con: zarrsql.Connection, store: str, extra: str = "") -> pd.DataFrame:
    return con.sql(f"SELECT {COLUMNS} FROM read_zarr('{store}'{extra})").df()


@pytest.mark.parametrize("name", ["era_http.json", "era_http.parq", "era_local.json", "era.nc"])
def test_http_sets_and_files_read_what_xarray_reads(
    name: str, served: Any, era_oracle: pd.DataFrame, fresh: None
) -> None:
    served.reset()
    actual = _frame(zarrsql.connect(), served.url(f"/{name}"))
    assert_frames_equal(actual, era_oracle, rtol={"sp": 1e-12})


def test_chunks_are_ranged_gets_and_adjacent_ones_travel_together(
    served: Any, virtual: VirtualFiles, fresh: None
) -> None:
    """t2m's units each span two adjacent chunks: one Range GET per unit, not one per chunk."""
    served.reset()
    con = zarrsql.connect()
    with zarrsql.trace() as t:
        con.execute(f"SELECT avg(t2m) FROM read_zarr('{served.url('/era_http.json')}')").fetchall()
    gets = served.count("GET", where=lambda p: p.endswith("/era.nc"))
    assert gets == 2  # two work units, each one coalesced request for two chunks
    assert t.requests >= gets + 1  # the set itself too (and any validation request)


def test_s3_targets_read_what_xarray_reads(
    s3_virtual: str, virtual: VirtualFiles, era_oracle: pd.DataFrame, fresh: None
) -> None:
    opts = f", storage_options := MAP {{'endpoint_url': '{s3_virtual}'}}"
    con = zarrsql.connect()
    assert_frames_equal(_frame(con, str(virtual.root / "era_s3.json"), opts), era_oracle, rtol={"sp": 1e-12})
    assert_frames_equal(_frame(con, f"s3://{BUCKET}/era.json", opts), era_oracle, rtol={"sp": 1e-12})
    assert_frames_equal(_frame(con, f"s3://{BUCKET}/era.nc", opts), era_oracle, rtol={"sp": 1e-12})


def test_an_h5col_table_reads_from_s3(s3_virtual: str, virtual: VirtualFiles, fresh: None) -> None:
    opts = f", storage_options := MAP {{'endpoint_url': '{s3_virtual}'}}, group_path := 'obs'"
    rows = zarrsql.connect().sql(f"SELECT * FROM read_zarr('s3://{BUCKET}/obs.h5'{opts})").fetchall()
    assert rows == [tuple(r.values()) for r in expected_obs(virtual.obs)]
