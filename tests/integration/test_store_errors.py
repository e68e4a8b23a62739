"""Local stores that are not quite stores: links that leave the store or loop, and files.

A symbolic link out of the store, or a loop of links, is refused by name, and only that entry:
the rest of the store reads as xarray reads it. Nothing outside the store is opened or listed
(checked with an audit hook that sees every `open` and directory listing of the process).

A file given as a store gets an error saying what kind of file it is and how to convert it:
HDF5 (AnnData .h5ad, NetCDF4, .h5, told by the signature, not only by the name), NetCDF3, a
zipped Zarr store, Parquet, a store's own metadata document. Every file is made by its real
writer (anndata, h5py, xarray, zarr-python, DuckDB).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql

SECRET = 987654.25  # every value of the array outside the store: it must never come back


# -- what the process opens --------------------------------------------------------------------

_watch = threading.local()
_seen: list[str] = []
_watching = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _watching or getattr(_watch, "busy", False):
        return
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], str | bytes | os.PathLike):
        _watch.busy = True  # realpath below must not audit itself
        try:
            _seen.append(os.path.realpath(os.fsdecode(args[0])))
        finally:
            _watch.busy = False


sys.addaudithook(_audit)  # hooks cannot be removed: it records only inside `opened_paths`


@pytest.fixture
def opened_paths() -> Iterator[list[str]]:
    """Every path the process opens or lists while the test runs, resolved."""
    global _watching
    _seen.clear()
    _watching = True
    yield _seen
    _watching = False


def _under(paths: list[str], folder: Path) -> list[str]:
    root = os.path.realpath(folder)
    return [p for p in paths if p == root or p.startswith(root + os.sep)]


# -- stores with links -----------------------------------------------------------------------


def _dataset() -> xr.Dataset:
    x = np.arange(6)
    return xr.Dataset(
        {"temp": ("x", np.linspace(-2.0, 3.0, 6)), "rain": ("x", np.array([0.0, 1.5, 0.0, 2.25, 4.0, 0.5]))},
        coords={"x": x * 10},
    )


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A store outside the stores under test, whose variable would show up if it were read."""
    folder = tmp_path / "elsewhere" / "secret.zarr"
    xr.Dataset({"secret": ("x", np.full(6, SECRET))}, coords={"x": np.arange(6) * 10}).to_zarr(
        folder, consolidated=False
    )
    return folder


def _store(tmp_path: Path, name: str, *, consolidated: bool) -> tuple[Path, xr.Dataset]:
    """A store written by xarray, and what xarray reads back from it (before any link)."""
    path = tmp_path / name
    _dataset().to_zarr(path, consolidated=consolidated)
    with xr.open_zarr(path, consolidated=consolidated) as ds:
        return path, ds.load()


def _rows(con: zarrsql.Connection, path: Path) -> list[tuple[Any, ...]]:
    return con.execute(f"SELECT x, temp, rain FROM read_zarr('{path}') ORDER BY x").fetchall()


def _xarray_rows(ds: xr.Dataset) -> list[tuple[Any, ...]]:
    return [(int(x), float(t), float(r)) for x, t, r in zip(ds.x.values, ds.temp.values, ds.rain.values, strict=True)]


@pytest.mark.parametrize("consolidated", [False, True], ids=["walked", "consolidated"])
def test_a_link_out_of_the_store_is_refused_and_the_rest_reads(
    consolidated: bool, tmp_path: Path, outside: Path, opened_paths: list[str]
) -> None:
    path, expected = _store(tmp_path, "linked.zarr", consolidated=consolidated)
    os.symlink(outside / "secret", path / "linked", target_is_directory=True)
    con = zarrsql.connect()
    assert _rows(con, path) == _xarray_rows(expected)
    tables = con.execute(f"SELECT data_vars FROM read_zarr_tables('{path}')").fetchall()
    assert tables == [(["rain", "temp"],)]
    q = f"SELECT * FROM read_zarr('{path}', array_path := 'linked')"
    with pytest.raises(zarrsql.StoreReadError) as info:
        con.execute(q).fetchall()
    for fragment in ("'linked'", f"store '{os.path.realpath(path)}'", "symbolic link", "outside the store"):
        assert fragment in str(info.value), str(info.value)
    with pytest.raises(zarrsql.StoreReadError, match="'linked'.*outside the store"):
        con.sql(q).fetchall()  # refused while binding, inside the wrapper
    assert _under(opened_paths, outside.parent) == []
    assert _under(opened_paths, path)  # the audit sees the store's own files: it is watching


def test_the_walk_lists_the_refused_link_with_its_reason(tmp_path: Path, outside: Path) -> None:
    path, _ = _store(tmp_path, "linked.zarr", consolidated=False)
    os.symlink(outside / "secret", path / "linked", target_is_directory=True)
    rows = zarrsql.connect().execute(f"SELECT name, role, attrs FROM read_zarr_metadata('{path}')").fetchall()
    roles = {name: role for name, role, _ in rows}
    assert roles == {"linked": "unsupported", "rain": "data", "temp": "data", "x": "coord"}
    reason = next(attrs for name, _, attrs in rows if name == "linked")
    assert "symbolic link" in reason, reason
    assert "outside the store" in reason, reason


def test_a_link_consolidated_into_the_metadata_is_refused_when_its_chunks_are_read(
    tmp_path: Path, outside: Path, opened_paths: list[str]
) -> None:
    """zarr-python's consolidate follows the link, so the store's metadata names the array:
    its chunks are still refused, and the variables beside it read."""
    path, expected = _store(tmp_path, "linked.zarr", consolidated=False)
    os.symlink(outside / "secret", path / "linked", target_is_directory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))
    opened_paths.clear()  # consolidating (zarr-python's doing) read the link's metadata
    con = zarrsql.connect()
    assert _rows(con, path) == _xarray_rows(expected)
    with pytest.raises(zarrsql.StoreReadError, match="'linked'.*symbolic link.*outside the store"):
        con.execute(f"SELECT linked FROM read_zarr('{path}')").fetchall()
    assert _under(opened_paths, outside.parent) == []


@pytest.mark.parametrize("consolidated", [False, True], ids=["walked", "consolidated"])
def test_a_loop_of_links_is_refused_and_the_rest_reads(consolidated: bool, tmp_path: Path) -> None:
    path, expected = _store(tmp_path, "loop.zarr", consolidated=consolidated)
    os.symlink(path / "loop_b", path / "loop_a", target_is_directory=True)
    os.symlink(path / "loop_a", path / "loop_b", target_is_directory=True)
    con = zarrsql.connect()
    assert _rows(con, path) == _xarray_rows(expected)
    with pytest.raises(zarrsql.StoreReadError) as info:
        con.execute(f"SELECT * FROM read_zarr('{path}', array_path := 'loop_a')").fetchall()
    assert "'loop_a'" in str(info.value), str(info.value)
    assert "loop of symbolic links" in str(info.value), str(info.value)
    if not consolidated:
        roles = dict(con.execute(f"SELECT name, role FROM read_zarr_metadata('{path}')").fetchall())
        assert roles["loop_a"] == roles["loop_b"] == "unsupported"


def test_a_loop_inside_an_array_is_refused_by_name(tmp_path: Path) -> None:
    """A chunk key that is a looping link fails the query that needs it, naming the link."""
    path, _ = _store(tmp_path, "chunkloop.zarr", consolidated=True)
    chunk = next(p for p in (path / "rain" / "c").iterdir())
    chunk.unlink()
    os.symlink(chunk, chunk)
    con = zarrsql.connect()
    with pytest.raises(zarrsql.StoreReadError) as info:
        con.execute(f"SELECT rain FROM read_zarr('{path}')").fetchall()
    assert f"'rain/c/{chunk.name}'" in str(info.value), str(info.value)
    assert "loop" in str(info.value), str(info.value)
    assert con.execute(f"SELECT count(temp) FROM read_zarr('{path}', array_path := 'temp')").fetchall() == [(6,)]


# -- files given as stores ----------------------------------------------------------------------


def _netcdf3(path: Path) -> None:
    _dataset().to_netcdf(path, engine="scipy")  # scipy writes NetCDF3 (classic)


def _zipped_store(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = zarr.storage.ZipStore(str(path), mode="w")
        zarr.create_array(store, name="v", data=np.arange(4.0))
        store.close()


def _plain_zip(path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", "hello")


def _parquet(path: Path) -> None:
    duckdb.connect().execute(f"COPY (SELECT 1 AS a) TO '{path}' (FORMAT parquet)")


FILES: dict[str, tuple[str, Callable[[Path], None], type[zarrsql.ZarrSQLError], tuple[str, ...]]] = {
    # name: (file name, writer, error class, message fragments)
    # HDF5 and NetCDF4 files are read in place (tests/virtual/test_hdf5_files.py), AnnData's
    # .h5ad too (tests/anndata/test_h5ad_in_place.py)
    "netcdf3": ("x.nc", _netcdf3, zarrsql.StoreNotFoundError, ("NetCDF3", "xarray.open_dataset", "to_zarr")),
    "zipped-store": ("x.zarr.zip", _zipped_store, zarrsql.UnsupportedError, ("zip", "unzip")),
    "zip": ("x.zip", _plain_zip, zarrsql.StoreNotFoundError, ("zip archive", "no Zarr store")),
    "parquet": ("x.parquet", _parquet, zarrsql.StoreNotFoundError, ("Parquet", "read_parquet")),
    "text": ("notes.txt", lambda p: p.write_text("hello"), zarrsql.StoreNotFoundError, ("is a file", "folder")),
}


@pytest.mark.parametrize("kind", list(FILES))
def test_a_file_given_as_a_store_says_what_it_is(kind: str, tmp_path: Path) -> None:
    name, write, cls, fragments = FILES[kind]
    path = tmp_path / name
    write(path)
    con = zarrsql.connect()
    for run in (
        lambda: con.execute(f"SELECT * FROM read_zarr('{path}')").fetchall(),
        lambda: con.execute(f"SELECT * FROM read_zarr_metadata('{path}')").fetchall(),
        lambda: zarrsql.read_zarr(str(path), connection=con).fetchall(),
    ):
        with pytest.raises(cls) as info:
            run()
        text = str(info.value)
        assert f"'{path}'" in text, text
        for fragment in fragments:
            assert fragment in text, (fragment, text)
        assert "does not exist" not in text, text
    assert isinstance(info.value, zarrsql.ZarrSQLError)


def test_hdf5_is_told_by_its_signature_not_its_name(tmp_path: Path) -> None:
    """Control for the name rule: a text file called .h5ad is not called HDF5."""
    path = tmp_path / "fake.h5ad"
    path.write_text("not hdf5 at all")
    with pytest.raises(zarrsql.StoreNotFoundError) as info:
        zarrsql.connect().execute(f"SELECT * FROM read_zarr('{path}')").fetchall()
    assert "HDF5" not in str(info.value), str(info.value)
    assert "is a file" in str(info.value), str(info.value)


def test_a_store_s_metadata_document_points_at_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "real.zarr"
    _dataset().to_zarr(folder, consolidated=True)
    with pytest.raises(zarrsql.StoreNotFoundError) as info:
        zarrsql.connect().execute(f"SELECT * FROM read_zarr('{folder / 'zarr.json'}')").fetchall()
    assert "metadata document" in str(info.value), str(info.value)
    assert f"'{folder}'" in str(info.value), str(info.value)


def test_error_classes_derive_from_zarrsql_and_the_builtin() -> None:
    """A caller catching the builtin or ZarrSQLError catches every store error."""
    for cls, builtin in (
        (zarrsql.StoreNotFoundError, FileNotFoundError),
        (zarrsql.StoreReadError, OSError),
        (zarrsql.UnsupportedError, NotImplementedError),
        (zarrsql.DecodeError, ValueError),
        (zarrsql.ParameterError, ValueError),
    ):
        assert issubclass(cls, zarrsql.ZarrSQLError), cls
        assert issubclass(cls, builtin), cls
