"""HDF5 and kerchunk reads at their edges: an H5Col time column's HDF5 fill value, version
parameters and `virtual_chunks :=` on a kerchunk reference set, and `format := 'zarr'` on a
file of another format. Oracles: h5py and numpy on the files written here, xarray on NetCDF."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.kerchunk_refs import kerchunk_refs
from zarrsql.errors import ParameterError, StoreNotFoundError, StoreReadError

#: The CF time units of the `day` column below.
EPOCH = np.datetime64("2000-01-01", "D")


def _h5col_with_time_column(path: Path) -> None:
    """An H5Col table whose `day` column has CF time units and a fill value of -1 (row 1 and
    row 3 missing), beside an int column `samples` with the same fill."""
    with h5py.File(path, "w") as f:
        g = f.create_group("obs")
        g.attrs.update({"CLASS": "COLUMN_TABLE", "VERSION": "1.0", "NROWS": np.uint64(4)})
        g.attrs["column-order"] = ["day", "samples"]
        day = g.create_dataset("day", data=np.array([0, -1, 2, -1], dtype="i4"), fillvalue=np.int32(-1))
        day.attrs["units"] = "days since 2000-01-01"
        g.create_dataset("samples", data=np.array([5, -1, 7, 8], dtype="i4"), fillvalue=np.int32(-1))


def _h5py_rows(path: Path) -> list[tuple]:
    """The table by the H5Col rule, read with h5py: a value equal to the fill value is NULL."""
    with h5py.File(path) as f:
        day, samples = f["obs/day"], f["obs/samples"]
        days = [None if v == day.fillvalue else (EPOCH + int(v)).astype("datetime64[us]").item() for v in day[:]]
        counts = [None if v == samples.fillvalue else int(v) for v in samples[:]]
    return list(zip(days, counts, strict=True))


def test_an_h5col_time_columns_fill_value_is_null(tmp_path: Path) -> None:
    path = tmp_path / "time_fill.h5"
    _h5col_with_time_column(path)
    rows = zarrsql.read_zarr(str(path), group_path="obs").fetchall()
    assert rows == _h5py_rows(path)
    assert rows[1] == (None, None)


def test_a_netcdf_time_variable_keeps_xarrays_reading(tmp_path: Path) -> None:
    """Outside an H5Col table, kerchunk's reading stays: xarray decodes by `_FillValue` only."""
    path = tmp_path / "plain.nc"
    ds = xr.Dataset({"v": ("time", np.array([1.0, 2.0, 3.0]))}, coords={"time": np.array([0, 1, 2], dtype="i4")})
    ds.time.attrs["units"] = "days since 2000-01-01"
    ds.to_netcdf(path, engine="h5netcdf")
    expected = xr.open_dataset(path, engine="h5netcdf").to_dataframe().reset_index()
    rows = zarrsql.read_zarr(str(path)).fetchall()
    assert [r[0] for r in rows] == [t.to_pydatetime() for t in expected["time"]]
    assert [r[1] for r in rows] == expected["v"].tolist()


@pytest.fixture(scope="module")
def reference_set(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A NetCDF file and a kerchunk set of it whose chunk is a byte range of the file."""
    folder = tmp_path_factory.mktemp("refs")
    nc = folder / "a.nc"
    xr.Dataset({"v": ("x", np.arange(300.0))}).to_netcdf(nc, engine="h5netcdf")
    refs = folder / "a.json"
    refs.write_text(json.dumps(kerchunk_refs(nc, inline_threshold=0)))
    return nc, refs


@pytest.mark.parametrize("version", [{"tag": "v1"}, {"branch": "main"}, {"snapshot": "XXXX"}])
def test_version_parameters_on_a_kerchunk_set_are_refused(reference_set: tuple[Path, Path], version) -> None:
    _, refs = reference_set
    with pytest.raises(ParameterError, match=f"{next(iter(version))} := apply to Icechunk.*kerchunk reference set"):
        zarrsql.read_zarr(str(refs), **version).fetchall()


def test_as_of_on_a_kerchunk_set_is_refused(reference_set: tuple[Path, Path]) -> None:
    _, refs = reference_set
    with pytest.raises(ParameterError, match="as_of := apply to Icechunk"):
        zarrsql.sql(f"SELECT * FROM read_zarr('{refs}', as_of := TIMESTAMP '2026-01-01')").fetchall()


def _sum_with(refs: Path, prefix: str, value: str = "NULL") -> list[tuple]:
    with zarrsql.connect() as con:
        return con.execute(
            f"SELECT count(*), sum(v) FROM read_zarr('{refs}', virtual_chunks := MAP {{'{prefix}': {value}}})"
        ).fetchall()


def test_virtual_chunks_on_a_kerchunk_set_authorize_its_files(reference_set: tuple[Path, Path]) -> None:
    nc, refs = reference_set
    expected = xr.open_dataset(nc, engine="h5netcdf").v.values
    assert _sum_with(refs, f"file://{nc.parent}/") == [(expected.size, float(expected.sum()))]


def test_a_file_outside_the_authorized_containers_is_refused(reference_set: tuple[Path, Path]) -> None:
    nc, refs = reference_set
    with pytest.raises(StoreReadError, match=f"points at 'file://{nc}'.*MAP {{'file://{nc.parent}/': NULL}}"):
        _sum_with(refs, "s3://elsewhere/")


def test_a_container_prefix_authorizes_its_own_folder_only(reference_set: tuple[Path, Path]) -> None:
    """'file:///data' must not authorize '/data2/...': the prefix ends on a path boundary."""
    nc, refs = reference_set
    truncated = str(nc.parent)[:-1]  # '/tmp/.../refs0' -> '/tmp/.../refs', a prefix of it as text only
    with pytest.raises(StoreReadError, match="which no virtual_chunks := prefix authorizes"):
        _sum_with(refs, f"file://{truncated}")
    expected = xr.open_dataset(nc, engine="h5netcdf").v.values
    assert _sum_with(refs, f"file://{nc.parent}") == [(expected.size, float(expected.sum()))]


def test_an_unknown_container_access_word_is_refused_by_name(reference_set: tuple[Path, Path]) -> None:
    nc, refs = reference_set
    with pytest.raises(ParameterError, match="value 'secret' for .* is not understood; give NULL"):
        _sum_with(refs, f"file://{nc.parent}/", "'secret'")


def test_anonymous_for_a_local_container_says_to_give_null(reference_set: tuple[Path, Path]) -> None:
    nc, refs = reference_set
    with pytest.raises(ParameterError, match="public s3:// or gs:// bucket, which .* is not; give NULL"):
        _sum_with(refs, f"file://{nc.parent}/", "'anonymous'")


def test_format_zarr_on_an_hdf5_file_names_format_hdf5(reference_set: tuple[Path, Path]) -> None:
    nc, refs = reference_set
    with pytest.raises(StoreNotFoundError, match="pass format := 'hdf5' or leave format := out") as err:
        zarrsql.read_zarr(str(nc), format="zarr").fetchall()
    assert "Zarr only" not in str(err.value)
    with pytest.raises(StoreNotFoundError, match="pass format := 'kerchunk'"):
        zarrsql.read_zarr(str(refs), format="zarr").fetchall()
