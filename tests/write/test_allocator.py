"""A write leaves the database's allocator setting as it found it (write/allocator.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql


def _setting(con: zarrsql.Connection) -> bool:
    ((value,),) = con.duckdb.execute("SELECT current_setting('allocator_background_threads')").fetchall()
    return bool(value)


def _source(tmp_path: Path) -> str:
    path = str(tmp_path / "src.zarr")
    xr.Dataset({"v": (("x", "y"), np.arange(12.0).reshape(3, 4))}, coords={"x": [1, 2, 3], "y": [5, 6, 7, 8]}).to_zarr(
        path, mode="w"
    )
    return path


def test_the_setting_is_restored_after_a_write_and_a_pivot(tmp_path: Path) -> None:
    src = _source(tmp_path)
    con = zarrsql.connect()
    assert _setting(con) is False
    zarrsql.to_zarr(con.sql(f"SELECT * FROM read_zarr('{src}')"), str(tmp_path / "out.zarr"), connection=con)
    assert _setting(con) is False
    zarrsql.to_xarray(con.sql(f"SELECT * FROM read_zarr('{src}')"))
    assert _setting(con) is False
    written = xr.open_zarr(tmp_path / "out.zarr").load()
    xr.testing.assert_equal(written["v"], xr.open_zarr(src)["v"].load())


def test_a_setting_the_user_chose_is_kept(tmp_path: Path) -> None:
    src = _source(tmp_path)
    con = zarrsql.connect()
    con.duckdb.execute("SET allocator_background_threads = true")
    try:
        zarrsql.to_zarr(con.sql(f"SELECT * FROM read_zarr('{src}')"), str(tmp_path / "out.zarr"), connection=con)
        assert _setting(con) is True
    finally:
        con.duckdb.execute("SET allocator_background_threads = false")


def test_a_failed_write_restores_it_too(tmp_path: Path) -> None:
    src = _source(tmp_path)
    con = zarrsql.connect()
    rel = con.sql(f"SELECT * FROM read_zarr('{src}')")
    with pytest.raises(zarrsql.ZarrSQLError, match="nope"):
        zarrsql.to_zarr(rel, str(tmp_path / "x.zarr"), dims=["nope"], connection=con)
    assert _setting(con) is False
    assert not (tmp_path / "x.zarr").exists()
