"""Virtual chunks: a repository of VirtualiZarr manifests over NetCDF files, read only from
the containers a query authorizes; the oracle is xarray on the NetCDF files themselves."""

from __future__ import annotations

import h5py
import pytest

import zarrsql
from icechunk_fixtures import netcdf_frame, write_virtual
from oracles import assert_frames_equal
from zarrsql.errors import ParameterError, StoreReadError

KEYS = ["time", "lat", "lon"]


def _authorized(prefix: str) -> str:
    return f"virtual_chunks := MAP {{'{prefix}': NULL}}"


def test_authorized_virtual_chunks_read_the_netcdf_values(virtual):
    actual = zarrsql.sql(f"SELECT * FROM read_zarr('{virtual.path}', {_authorized(virtual.prefix)})").df()
    assert_frames_equal(actual, netcdf_frame(virtual.files), sort_by=KEYS, check_column_order=False)


def test_python_keyword_takes_none_for_no_credentials(virtual):
    actual = zarrsql.read_zarr(str(virtual.path), virtual_chunks={virtual.prefix: None}).df()
    assert_frames_equal(actual, netcdf_frame(virtual.files), sort_by=KEYS, check_column_order=False)


def _execute(sql: str) -> list:
    """Run `sql` with `execute`, which raises zarrsql's own error for a failed read (a relation
    fetched by DuckDB outside zarrsql's wrapper would wrap it in DuckDB's)."""
    with zarrsql.connect() as con:
        return con.execute(sql).fetchall()


def test_an_unauthorized_container_is_named(virtual):
    with pytest.raises(StoreReadError) as err:
        _execute(f"SELECT t2m FROM read_zarr('{virtual.path}')")
    assert f"container '{virtual.prefix}'" in str(err.value)
    assert f"virtual_chunks := MAP {{'{virtual.prefix}': NULL}}" in str(err.value)


def test_metadata_reads_without_authorization(virtual):
    names = zarrsql.sql(f"SELECT name FROM read_zarr_metadata('{virtual.path}') ORDER BY name").fetchall()
    assert names == [("lat",), ("lon",), ("t2m",), ("time",), ("tp",)]


def test_authorizing_an_undeclared_prefix_names_the_declared_ones(virtual):
    with pytest.raises(ParameterError) as err:
        zarrsql.sql(f"SELECT * FROM read_zarr('{virtual.path}', {_authorized('file:///elsewhere/')})").fetchall()
    assert "['file:///elsewhere/']" in str(err.value)
    assert virtual.prefix in str(err.value)


def test_unknown_credentials_text_is_refused(virtual):
    with pytest.raises(ParameterError, match="virtual_chunks := value 'secret'"):
        zarrsql.sql(
            f"SELECT * FROM read_zarr('{virtual.path}', virtual_chunks := MAP {{'{virtual.prefix}': 'secret'}})"
        ).fetchall()


def test_trace_counts_the_bytes_of_the_referenced_files(virtual):
    sql = f"SELECT t2m FROM read_zarr('{virtual.path}', {_authorized(virtual.prefix)})"
    zarrsql.sql(sql).fetchall()  # metadata and coordinates cached
    with zarrsql.trace() as t:
        zarrsql.sql(sql).fetchall()
    sizes = []
    for f in virtual.files:
        with h5py.File(f, "r") as h5:
            dset = h5["t2m"]
            sizes += [dset.id.get_chunk_info(i).size for i in range(dset.id.get_num_chunks())]
    assert t.requests == len(sizes)
    assert t.bytes_read == sum(sizes)


def test_a_missing_referenced_file_is_an_error(tmp_path):
    copy = write_virtual(tmp_path)
    copy.files[1].unlink()
    with pytest.raises(StoreReadError) as err:
        _execute(f"SELECT t2m FROM read_zarr('{copy.path}', {_authorized(copy.prefix)})")
    message = str(err.value)
    assert "'t2m/c/" in message
    assert str(copy.path) in message
    assert f"{copy.files[1]} not found" in message
