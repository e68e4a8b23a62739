"""A new store written through a symbolic link on local disk: the link's target is written
(replaced with mode="w", as xarray's `to_zarr` through the link replaces it) and the link stays.

zarrsql used to rename the link itself aside and put a directory in its place: the link was
gone, its target kept the old data and a writer lock of the finished process, so every later
append to the target from that process was refused with StoreLockedError naming itself.
A link to nothing, or to a directory that is not a store, is refused as the same path
without a link would be, and left as it was.

Expected values come from xarray (the stores read back) and numpy.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import StoreExistsError

FORMATS = [2, 3]
LOCK = ".zarrsql-write.lock"


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _rows(con: zarrsql.Connection, start: int, stop: int):
    return con.sql(f"SELECT range::INT AS x, range * 0.5 AS v FROM range({start}, {stop})")


def _expected(stop: int) -> xr.Dataset:
    return xr.Dataset({"v": (("x",), np.arange(stop) * 0.5)}, coords={"x": np.arange(stop, dtype=np.int32)})


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_replace_through_link_replaces_its_target(tmp_path: Path, con, zarr_format: int) -> None:
    real, link = tmp_path / "real.zarr", tmp_path / "link.zarr"
    zarrsql.to_zarr(_rows(con, 0, 4), str(real), dims=["x"], zarr_format=zarr_format, connection=con)
    link.symlink_to(real)
    zarrsql.to_zarr(_rows(con, 0, 6), str(link), dims=["x"], mode="w", zarr_format=zarr_format, connection=con)
    assert link.is_symlink() and os.readlink(link) == str(real)
    xr.testing.assert_identical(xr.open_zarr(real).load(), xr.open_zarr(link).load())
    xr.testing.assert_equal(xr.open_zarr(real).load(), _expected(6))
    assert not (real / LOCK).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.zarr", "real.zarr"]  # no staging left


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_append_after_replace_through_link(tmp_path: Path, con, zarr_format: int) -> None:
    real, link = tmp_path / "real.zarr", tmp_path / "link.zarr"
    zarrsql.to_zarr(_rows(con, 0, 4), str(real), dims=["x"], zarr_format=zarr_format, connection=con)
    link.symlink_to(real)
    zarrsql.to_zarr(_rows(con, 0, 6), str(link), dims=["x"], mode="w", zarr_format=zarr_format, connection=con)
    zarrsql.to_zarr(_rows(con, 6, 8), str(real), mode="a", append_dim="x", connection=con)  # no stale lock
    zarrsql.to_zarr(_rows(con, 8, 9), str(link), mode="a", append_dim="x", connection=con)
    xr.testing.assert_equal(xr.open_zarr(real).load(), _expected(9))
    assert not (real / LOCK).exists()


def test_create_through_link_to_empty_directory(tmp_path: Path, con) -> None:
    real, link = tmp_path / "real", tmp_path / "link.zarr"
    real.mkdir()
    link.symlink_to(real)
    zarrsql.to_zarr(_rows(con, 0, 3), str(link), dims=["x"], connection=con)  # mode "w-": an empty directory
    assert link.is_symlink()
    xr.testing.assert_equal(xr.open_zarr(real).load(), _expected(3))


def test_relative_link_chain_replaces_the_final_target(tmp_path: Path, con) -> None:
    real = tmp_path / "data" / "real.zarr"
    real.parent.mkdir()
    zarrsql.to_zarr(_rows(con, 0, 2), str(real), dims=["x"], connection=con)
    (tmp_path / "hop.zarr").symlink_to(Path("data") / "real.zarr")
    (tmp_path / "link.zarr").symlink_to("hop.zarr")
    zarrsql.to_zarr(_rows(con, 0, 5), str(tmp_path / "link.zarr"), dims=["x"], mode="w", connection=con)
    assert (tmp_path / "link.zarr").is_symlink() and (tmp_path / "hop.zarr").is_symlink()
    xr.testing.assert_equal(xr.open_zarr(real).load(), _expected(5))
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.zarr"]


@pytest.mark.parametrize("mode", ["w", "w-"])
def test_dangling_link_is_refused_and_kept(tmp_path: Path, con, mode: str) -> None:
    link = tmp_path / "link.zarr"
    link.symlink_to(tmp_path / "nowhere.zarr")
    with pytest.raises(StoreExistsError, match="link.zarr"):
        zarrsql.to_zarr(_rows(con, 0, 3), str(link), dims=["x"], mode=mode, connection=con)
    assert link.is_symlink() and not (tmp_path / "nowhere.zarr").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.zarr"]


def test_link_to_a_directory_that_is_no_store_is_refused(tmp_path: Path, con) -> None:
    folder, link = tmp_path / "mine", tmp_path / "link.zarr"
    folder.mkdir()
    (folder / "notes.txt").write_text("kept")
    link.symlink_to(folder)
    with pytest.raises(StoreExistsError, match="not a Zarr store"):
        zarrsql.to_zarr(_rows(con, 0, 3), str(link), dims=["x"], mode="w", connection=con)
    assert link.is_symlink() and sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
