"""The Parquet layout of kerchunk reference sets, read record by record (store/parquet_records.py).

The oracle is xarray on the NetCDF file the references point into. Sets are written by
kerchunk's own `refs_to_dataframe`, with small records so that arrays span several files;
what is damaged (a record file gone or not Parquet) must be named, never read as fill values.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kerchunk.df import refs_to_dataframe

import zarrsql
from tests.oracles import assert_frames_equal
from tests.virtual.conftest import VirtualFiles
from zarrsql.engine.source import HAS_SOURCES

SQL = "SELECT time, latitude, longitude, t2m, u10, sp FROM read_zarr('{}')"


def _parquet(refs: dict[str, Any], out: Path, record_size: int) -> Path:
    refs_to_dataframe(refs, str(out), record_size=record_size)
    return out


def test_inline_chunks_read_from_the_records(virtual: VirtualFiles, era_oracle: pd.DataFrame, tmp_path: Path) -> None:
    """Chunks kept inline (the `raw` column) read as the referenced ones do."""
    refs = json.loads(virtual.json_inline.read_text())
    assert any(isinstance(v, str) for k, v in refs["refs"].items() if k.startswith("t2m/") and ".z" not in k)
    store = _parquet(refs, tmp_path / "inline.parq", record_size=3)
    actual = zarrsql.connect().sql(SQL.format(store)).df()
    assert_frames_equal(actual, era_oracle, rtol={"sp": 1e-12})


@pytest.mark.parametrize("record_size", [1, 5, 100_000])
def test_any_record_size_reads_what_xarray_reads(
    virtual: VirtualFiles, era_oracle: pd.DataFrame, tmp_path: Path, record_size: int
) -> None:
    """One chunk per file, a few per file, and every chunk in one (padded) file."""
    refs = json.loads(virtual.json_v1.read_text())
    store = _parquet(refs, tmp_path / f"r{record_size}.parq", record_size)
    actual = zarrsql.connect().sql(SQL.format(store)).df()
    assert_frames_equal(actual, era_oracle, rtol={"sp": 1e-12})


def _damaged(virtual: VirtualFiles, tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "damaged.parq"
    shutil.copytree(virtual.parquet, store)
    records = sorted((store / "t2m").glob("refs.*.parq"))
    assert len(records) > 1  # the fixture's records hold two chunks each
    return store, records[1]


def test_a_missing_record_file_is_named_not_read_as_fill(virtual: VirtualFiles, tmp_path: Path) -> None:
    store, record = _damaged(virtual, tmp_path)
    record.unlink()
    con = zarrsql.connect()
    with pytest.raises(zarrsql.ZarrSQLError, match=r"t2m/refs\.1\.parq.*does not exist"):
        con.execute(f"SELECT sum(t2m) FROM read_zarr('{store}')").fetchall()
    # the arrays whose records are whole still read
    ((count,),) = con.execute(f"SELECT count(u10) FROM read_zarr('{store}')").fetchall()
    assert count > 0


def test_a_record_that_is_not_parquet_is_named(virtual: VirtualFiles, tmp_path: Path) -> None:
    store, record = _damaged(virtual, tmp_path)
    record.write_bytes(b"this is not a Parquet file")
    with pytest.raises(zarrsql.ZarrSQLError, match=r"cannot read the reference record 't2m/refs\.1\.parq'"):
        zarrsql.connect().execute(f"SELECT sum(t2m) FROM read_zarr('{store}')").fetchall()


def test_reading_needs_no_pandas(virtual: VirtualFiles, tmp_path: Path) -> None:
    """The records are read with pyarrow alone: neither fsspec's reference mapper nor
    fastparquet is loaded, nor pandas (0.4 s to import) on DuckDB 2.x (1.5's pyarrow-dataset
    scan path imports pandas of its own)."""
    import subprocess
    import sys

    code = (
        "import sys, zarrsql\n"
        f"zarrsql.connect().sql(\"SELECT sum(t2m) FROM read_zarr('{virtual.parquet}')\").fetchall()\n"
        "print(*(m in sys.modules for m in ('pandas', 'fastparquet', 'fsspec.implementations.reference')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pandas, fastparquet, mapper = out.stdout.split()
    assert (fastparquet, mapper) == ("False", "False")
    if HAS_SOURCES:
        assert pandas == "False"
