"""Reading a coordinate alone with `array_path :=`: the cheap way to list its values."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import xarray as xr

import zarrsql


def _store(tmp_path: Path) -> tuple[str, xr.Dataset]:
    ds = xr.Dataset(
        {"t": (("time", "lat"), np.arange(6, dtype="f4").reshape(2, 3))},
        coords={
            "time": np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[ns]"),
            "lat": np.array([45.0, 45.1, 45.2], dtype="f4"),
        },
    )
    path = str(tmp_path / "c.zarr")
    ds.to_zarr(path, mode="w", consolidated=False)
    return path, xr.open_zarr(path, consolidated=False)


def test_a_coordinate_read_alone_is_one_column_of_its_values(tmp_path: Path) -> None:
    path, oracle = _store(tmp_path)
    rel = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{path}', array_path := 'lat')")
    assert rel.columns == ["lat"]
    got = np.array([v for (v,) in rel.fetchall()], dtype="f4")
    np.testing.assert_array_equal(got, oracle["lat"].values)


def test_a_time_coordinate_read_alone_decodes_like_xarray(tmp_path: Path) -> None:
    path, oracle = _store(tmp_path)
    rel = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{path}', array_path := 'time')")
    assert rel.columns == ["time"]
    got = np.array([v for (v,) in rel.fetchall()], dtype="datetime64[ns]")
    np.testing.assert_array_equal(got, oracle["time"].values)


def test_show_tables_after_from_a_store_string_lists_what_plain_duckdb_lists(tmp_path: Path) -> None:
    path, _ = _store(tmp_path)
    con = zarrsql.connect()
    con.sql("CREATE TABLE mine AS SELECT 1 AS a")
    assert con.sql(f"SELECT count(*) FROM '{path}'").fetchall() == [(6,)]
    plain = duckdb.connect()
    plain.sql("CREATE TABLE mine AS SELECT 1 AS a")
    assert con.sql("SHOW TABLES").fetchall() == plain.sql("SHOW TABLES").fetchall()
    assert [r[2] for r in con.sql("SHOW ALL TABLES").fetchall()] == ["mine"]
