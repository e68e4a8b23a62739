"""A store key's token changes whenever what a read of the key returns could have changed,
and is taken before the key is read, so that cached metadata and decoded coordinates are
never kept for a store that moved on (old coordinates beside new values).

- A local file replaced by one of the same size and mtime (a reproducible archive extracted
  over the last, an in-place rewrite with its mtime set back) is seen by its inode and change
  time.
- A document or coordinate chunk rewritten between zarrsql's read and its token is read again
  by the next query, instead of its old value being kept under the new token. The real race
  is rare (a writer landing in a window of microseconds), so these tests place the writer in
  that window with a deterministic hook on the read.
- A store path that is a symbolic link (or lies below one) switched to another version is
  read as the version it names now.
- A NetCDF file read in place, or a kerchunk reference set, follows the file: rewritten in
  place, replaced, or the set made again.

The oracles are xarray, zarr-python and h5py reading the files as they are on disk.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.metadata.tree import clear_cache
from zarrsql.scan import coords
from zarrsql.store.local import LocalStore

pytestmark = pytest.mark.timeout(120)

#: The words of the error a relation raises when it cannot read the store as it is now.
CHANGED = "changed since this relation was made"


@pytest.fixture(autouse=True)
def _no_cached_trees() -> Iterator[None]:
    """The metadata cache is process-wide: each test starts and ends without one."""
    clear_cache()
    yield
    clear_cache()


#: Uncompressed chunks: their sizes are fixed by the shape, whatever the values.
RAW = {"compressors": None}


def _write_zarr(path: Path, x: np.ndarray, v: np.ndarray, **extra: Any) -> None:
    ds = xr.Dataset({"v": (("x",), v)}, coords={"x": x})
    ds.to_zarr(path, mode="w", consolidated=False, encoding={"x": RAW, "v": RAW}, **extra)


def _zarr_oracle(path: Path) -> list[tuple[int, float]]:
    with xr.open_zarr(path, consolidated=False) as ds:
        return [(int(a), float(b)) for a, b in zip(ds.x.values, ds.v.values, strict=True)]


def _kept_answer(rel: duckdb.DuckDBPyRelation) -> list[tuple[Any, ...]] | None:
    """A kept relation's rows fetched again; None when it refuses because the store changed
    (right too: its answer was computed from what the store was)."""
    try:
        return rel.fetchall()
    except duckdb.Error as err:
        if CHANGED not in str(err):
            raise
        return None


def _rows(con: zarrsql.Connection | duckdb.DuckDBPyRelation, sql: str | None = None) -> list[tuple[int, float]]:
    rel = con.sql(sql) if sql is not None else con
    return [(int(a), float(b)) for a, b in rel.fetchall()]


def _replace_file(path: Path, data: bytes) -> None:
    """An atomic writer: the new bytes in a file beside, then renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# -- files of the same size and mtime ---------------------------------------------------------


def _archive(folder: Path) -> bytes:
    """`folder` as a reproducible tar archive: every member's mtime set to one instant."""

    def fixed(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = 1704067200  # 2024-01-01, as `tar --mtime` or SOURCE_DATE_EPOCH give
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=folder.name, filter=fixed)
    return buffer.getvalue()


def _extract(archive: bytes, where: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="tar")


def _overwrite_keeping_times(source: Path, target: Path) -> None:
    """Each file of `source` written into the same-named file of `target` (same inode), its
    modification time set back to the old one's."""
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        old = target / file.relative_to(source)
        st = old.stat()
        with open(old, "r+b") as f:
            f.write(file.read_bytes())
            f.truncate()
        os.utime(old, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("how", ["extracted over it", "overwritten in place"])
def test_a_store_replaced_by_files_of_the_same_size_and_mtime_is_read_anew(tmp_path: Path, how: str) -> None:
    versions = []
    for k in (1, 2):
        folder = tmp_path / f"build{k}" / "data.zarr"
        _write_zarr(folder, np.arange(6) + 100 * k, np.full(6, float(k)))
        versions.append(folder)
    if how == "extracted over it":
        _extract(_archive(versions[0]), tmp_path)
    else:
        shutil.copytree(versions[0], tmp_path / "data.zarr")
    path = tmp_path / "data.zarr"
    sql = f"SELECT x, v FROM read_zarr('{path}') ORDER BY x"
    with zarrsql.connect() as con:
        assert _rows(con, sql) == _zarr_oracle(path)
        if how == "extracted over it":
            shutil.rmtree(path)
            _extract(_archive(versions[1]), tmp_path)
        else:
            _overwrite_keeping_times(versions[1], path)
        expected = _zarr_oracle(path)
        assert expected[0] == (200, 2.0)  # version 2's first row, as written
        assert _rows(con, sql) == expected


def test_a_netcdf_file_rewritten_in_place_with_its_mtime_set_back_is_read_anew(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("kerchunk")
    nc = tmp_path / "x.nc"
    xr.Dataset({"v": (("x",), np.zeros(6))}, coords={"x": np.arange(6)}).to_netcdf(nc, engine="h5netcdf")
    sql = f"SELECT x, v FROM read_zarr('{nc}') ORDER BY x"
    with zarrsql.connect() as con:
        _rows(con, sql)
        st = nc.stat()
        with h5py.File(nc, "r+") as f:  # same layout: the scanned offsets still hold
            f["x"][...] = np.arange(6) * 10
            f["v"][...] = 1.0
        os.utime(nc, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert nc.stat().st_size == st.st_size
        with xr.open_dataset(nc, engine="h5netcdf") as ds:
            expected = [(int(a), float(b)) for a, b in zip(ds.x.values, ds.v.values, strict=True)]
        assert expected[1] == (10, 1.0)
        assert _rows(con, sql) == expected


# -- a write between the read and the token ---------------------------------------------------


def _after_reading(monkeypatch: pytest.MonkeyPatch, key: str, write: Callable[[], None]) -> Callable[[], None]:
    """Arms a writer that runs once, right after a `LocalStore.get_many` that read `key`
    returns (the window between zarrsql's read and the token it used to take after it)."""
    armed: list[bool] = []
    read = LocalStore.get_many

    def get_many(self: LocalStore, keys: Any) -> list[bytes | None]:
        out = read(self, keys)
        if armed and key in keys:
            armed.clear()
            write()
        return out

    monkeypatch.setattr(LocalStore, "get_many", get_many)
    return lambda: armed.append(True)


def _query_during_the_write(con: zarrsql.Connection, sql: str) -> None:
    """The query the writer lands in: refusing it, or answering either version, is right."""
    with contextlib.suppress(duckdb.Error):
        con.sql(sql).fetchall()


def test_a_coordinate_chunk_replaced_right_after_its_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.zarr"
    _write_zarr(path, np.arange(4), np.zeros(4))
    chunk = path / "x" / "c" / "0"

    def put(k: int) -> None:
        _replace_file(chunk, (np.arange(4, dtype="<i8") + 100 * k).tobytes())

    arm = _after_reading(monkeypatch, "x/c/0", lambda: put(2))
    sql = f"SELECT min(x), max(x), sum(x) FROM read_zarr('{path}')"
    with zarrsql.connect() as con:
        con.sql(sql).fetchall()
        put(1)
        arm()
        _query_during_the_write(con, sql)
        x = zarr.open_array(path / "x", mode="r")[:]
        assert x.tolist() == [200, 201, 202, 203]  # version 2, as `put` wrote it
        assert con.sql(sql).fetchall() == [(int(x.min()), int(x.max()), int(x.sum()))]
    with zarrsql.connect() as other:  # the cache is the process's: another connection too
        assert other.sql(f"SELECT max(x) FROM read_zarr('{path}')").fetchall() == [(int(x.max()),)]


def test_a_metadata_document_rewritten_right_after_its_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.zarr"
    _write_zarr(path, np.arange(4), np.zeros(4))

    def set_units(units: str) -> None:
        zarr.open_array(path / "v", mode="r+").attrs["units"] = units

    arm = _after_reading(monkeypatch, "v/zarr.json", lambda: set_units("K"))
    sql = f"SELECT attrs FROM read_zarr_metadata('{path}') WHERE name = 'v'"
    with zarrsql.connect() as con:
        con.sql(sql).fetchall()
        set_units("m")
        arm()
        _query_during_the_write(con, sql)
        expected = dict(zarr.open_array(path / "v", mode="r").attrs)
        assert expected["units"] == "K"
        assert json.loads(con.sql(sql).fetchall()[0][0]) == expected


def _after_region(monkeypatch: pytest.MonkeyPatch, array: str, write: Callable[[], None]) -> Callable[[], None]:
    """Arms a writer that runs once, right after the coordinate loaders' `read_region` of
    `array` returns (whichever store method, or zarr-python, read its chunks)."""
    armed: list[bool] = []
    read = coords.read_region

    def read_region(store: Any, meta: Any, region: Any) -> np.ndarray:
        out = read(store, meta, region)
        if armed and meta.path == array:
            armed.clear()
            write()
        return out

    monkeypatch.setattr(coords, "read_region", read_region)
    return lambda: armed.append(True)


def test_an_auxiliary_coordinate_rewritten_right_after_its_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "aux.zarr"
    ds = xr.Dataset(
        {"t": (("y", "x"), np.zeros((2, 3)), {"coordinates": "lon"})},
        coords={"y": [0, 1], "x": [0, 1, 2], "lon": (("y", "x"), np.arange(6.0).reshape(2, 3))},
    )
    ds.to_zarr(path, mode="w", consolidated=False)

    def put_lon(offset: float) -> None:
        zarr.open_array(path / "lon", mode="r+")[:] = np.arange(6.0).reshape(2, 3) + offset

    arm = _after_region(monkeypatch, "lon", lambda: put_lon(200.0))
    sql = f"SELECT y, x, lon FROM read_zarr('{path}') ORDER BY y, x"
    with zarrsql.connect() as con:
        con.sql(sql).fetchall()
        put_lon(100.0)
        arm()
        _query_during_the_write(con, sql)
        with xr.open_zarr(path, consolidated=False) as now:
            expected = [(int(y), int(x), float(now.lon.values[y, x])) for y in range(2) for x in range(3)]
        assert expected[0][2] == 200.0  # the second write's first value
        assert con.sql(sql).fetchall() == expected


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3:UserWarning")
def test_a_coordinate_zarrsql_reads_through_zarr_python_rewritten_after_its_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinate whose codecs zarrsql leaves to zarr-python (a Delta filter) is loaded by
    `read_region` rather than with the prefetched chunks: its tokens too come first."""
    from zarr.codecs.numcodecs import Delta

    path = tmp_path / "delta.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    x = root.create_array("x", shape=(4,), dtype="i8", filters=[Delta(dtype="i8")], dimension_names=["x"])
    x[:] = np.arange(4)
    v = root.create_array("v", shape=(4,), dtype="f8", dimension_names=["x"])
    v[:] = np.zeros(4)

    def put_x(offset: int) -> None:
        zarr.open_array(path / "x", mode="r+")[:] = np.arange(4) + offset

    arm = _after_region(monkeypatch, "x", lambda: put_x(200))
    sql = f"SELECT min(x), max(x) FROM read_zarr('{path}')"
    with zarrsql.connect() as con:
        con.sql(sql).fetchall()
        put_x(100)
        arm()
        _query_during_the_write(con, sql)
        now = zarr.open_array(path / "x", mode="r")[:]
        assert now.tolist() == [200, 201, 202, 203]  # the second write's values
        assert con.sql(sql).fetchall() == [(int(now.min()), int(now.max()))]


# -- a store path that is a link switched to another version ----------------------------------


@pytest.mark.parametrize("link_at", ["the store", "its parent folder"])
def test_relations_over_a_link_switched_to_another_version_read_the_new_one(tmp_path: Path, link_at: str) -> None:
    for k in (1, 2):
        if link_at == "the store":
            _write_zarr(tmp_path / f"v{k}.zarr", np.arange(4) + 10 * k, np.full(4, float(k)))
        else:
            _write_zarr(tmp_path / f"release{k}" / "s.zarr", np.arange(4) + 10 * k, np.full(4, float(k)))
    name = "current.zarr" if link_at == "the store" else "current"
    link = tmp_path / name
    target = {k: tmp_path / (f"v{k}.zarr" if link_at == "the store" else f"release{k}") for k in (1, 2)}
    os.symlink(target[1], link)
    path = link if link_at == "the store" else link / "s.zarr"

    def switch(to: Path) -> None:  # an atomic deploy: a new link renamed over the old
        os.symlink(to, tmp_path / "next")
        os.replace(tmp_path / "next", link)

    with zarrsql.connect() as con:
        scan = con.sql(f"SELECT x, v FROM read_zarr('{path}') ORDER BY x")
        answer = con.sql(f"SELECT count(*), min(x), max(x) FROM read_zarr('{path}')")
        assert _rows(scan) == _zarr_oracle(path)
        answer.fetchall()
        switch(target[2])
        expected = _zarr_oracle(path)
        assert expected[0] == (20, 2.0)  # version 2's first row, as written
        assert _rows(scan) == expected
        assert _rows(con, f"SELECT x, v FROM read_zarr('{path}') ORDER BY x") == expected
        assert _kept_answer(answer) in (None, [(len(expected), expected[0][0], expected[-1][0])])


# -- NetCDF files read in place and kerchunk reference sets -----------------------------------


def _netcdf(path: Path, x0: int, value: float) -> None:
    if path.exists():
        path.unlink()
    xr.Dataset({"v": (("x",), np.full(4, value))}, coords={"x": np.arange(4) + x0}).to_netcdf(path, engine="h5netcdf")


def _netcdf_oracle(path: Path) -> list[tuple[int, float]]:
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return [(int(a), float(b)) for a, b in zip(ds.x.values, ds.v.values, strict=True)]


def _kerchunk(nc: Path, refs: Path, layout: str) -> None:
    """A kerchunk reference set of `nc` at `refs`, as JSON or kerchunk's Parquet layout."""
    from tests.kerchunk_refs import kerchunk_refs

    made = kerchunk_refs(nc, inline_threshold=0)
    if layout == "json":
        refs.write_text(json.dumps(made))
        return
    from kerchunk.df import refs_to_dataframe

    shutil.rmtree(refs, ignore_errors=True)
    refs_to_dataframe(made, str(refs))


@pytest.mark.parametrize("mtime", ["moved", "set back"])
def test_a_kerchunk_set_over_a_netcdf_file_rewritten_in_place_reads_the_new_values(tmp_path: Path, mtime: str) -> None:
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("kerchunk")
    nc, refs = tmp_path / "a.nc", tmp_path / "a.json"
    _netcdf(nc, 0, 0.0)
    _kerchunk(nc, refs, "json")
    sql = f"SELECT x, v FROM read_zarr('{refs}') ORDER BY x"
    with zarrsql.connect() as con:
        assert _rows(con, sql) == _netcdf_oracle(nc)
        st = nc.stat()
        with h5py.File(nc, "r+") as f:  # in place: the references still point at the values
            f["x"][...] = np.arange(4) * 10
            f["v"][...] = 1.0
        if mtime == "set back":
            os.utime(nc, ns=(st.st_atime_ns, st.st_mtime_ns))
        expected = _netcdf_oracle(nc)
        assert expected[1] == (10, 1.0)
        assert _rows(con, sql) == expected


def test_relations_over_a_netcdf_file_replaced_read_the_new_file(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    pytest.importorskip("kerchunk")
    nc = tmp_path / "x.nc"
    _netcdf(nc, 0, 0.0)
    with zarrsql.connect() as con:
        scan = con.sql(f"SELECT x, v FROM read_zarr('{nc}') ORDER BY x")
        answer = con.sql(f"SELECT count(*), min(x), max(x) FROM read_zarr('{nc}')")
        assert _rows(scan) == _netcdf_oracle(nc)
        answer.fetchall()
        _netcdf(nc, 7, 1.0)  # a new version of the file, same shape
        expected = _netcdf_oracle(nc)
        assert expected[0] == (7, 1.0)
        assert _rows(scan) == expected
        con.sql(f"SELECT count(*) FROM read_zarr('{nc}')").fetchall()  # another statement reads the new file
        assert _kept_answer(answer) in (None, [(4, 7, 10)])  # the new file's x: 7 .. 10


@pytest.mark.parametrize("layout", ["json", "parquet"])
def test_relations_over_a_kerchunk_set_made_again_read_the_new_set(tmp_path: Path, layout: str) -> None:
    pytest.importorskip("h5py")
    pytest.importorskip("kerchunk")
    refs = tmp_path / ("a.json" if layout == "json" else "a.parq")
    _netcdf(tmp_path / "a1.nc", 0, 0.0)
    _kerchunk(tmp_path / "a1.nc", refs, layout)
    with zarrsql.connect() as con:
        scan = con.sql(f"SELECT x, v FROM read_zarr('{refs}') ORDER BY x")
        answer = con.sql(f"SELECT count(*), min(x), max(x) FROM read_zarr('{refs}')")
        assert _rows(scan) == _netcdf_oracle(tmp_path / "a1.nc")
        answer.fetchall()
        _netcdf(tmp_path / "a2.nc", 7, 1.0)
        _kerchunk(tmp_path / "a2.nc", refs, layout)  # the set made again, of another file
        expected = _netcdf_oracle(tmp_path / "a2.nc")
        assert _rows(scan) == expected
        assert _kept_answer(answer) in (None, [(4, 7, 10)])  # a2.nc's x: 7 .. 10
