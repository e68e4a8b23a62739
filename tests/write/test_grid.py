"""`zarrsql.to_zarr(..., layout="grid")`: `xr.open_zarr` of the output equals `to_xarray` of
the relation and xarray's own pivot of the same rows; the metadata is what xarray writes
(checked with zarr-python); failures publish nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql
from tests.write.frames import PATHS, pivot, use_path, weather

DIMS = ["time", "lat", "lon"]


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return weather().to_dataframe().reset_index()


@pytest.fixture(params=list(PATHS))
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    use_path(monkeypatch, request.param)
    return str(request.param)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_open_zarr_equals_to_xarray_and_the_pivot(
    con: zarrsql.Connection, frame: pd.DataFrame, tmp_path: Path, zarr_format: int, path: str
) -> None:
    """Holes (a filtered result), descending latitude, NaN, NaT, CF time, int→float."""
    rel = con.sql("SELECT * FROM frame WHERE counts % 4 <> 1 ORDER BY lat DESC, lon, time")
    out = tmp_path / "out.zarr"
    zarrsql.to_zarr(rel, out, dims=DIMS, chunks={"time": 4, "lat": 3}, zarr_format=zarr_format, connection=con)
    opened = xr.open_zarr(out).load()
    ordered = frame[frame.counts % 4 != 1].sort_values(["lat", "lon", "time"], ascending=[False, True, True])
    xr.testing.assert_equal(opened, pivot(ordered, DIMS))
    xr.testing.assert_equal(opened, zarrsql.to_xarray(rel, DIMS))
    assert opened.counts.dtype == np.float64  # promoted: some cells are missing


def test_the_metadata_is_what_xarray_writes(
    con: zarrsql.Connection, frame: pd.DataFrame, tmp_path: Path, path: str
) -> None:
    out = tmp_path / "meta.zarr"
    zarrsql.to_zarr(con.sql("SELECT * FROM frame"), out, dims=DIMS, chunks=(4, 7, 5), connection=con)
    group = zarr.open_consolidated(out)  # consolidated metadata is there
    air, counts, time = group["air"], group["counts"], group["time"]
    assert air.metadata.dimension_names == ("time", "lat", "lon")
    assert air.chunks == (4, 7, 5)
    assert [c.to_dict()["name"] for c in air.compressors] == ["zstd"]
    assert np.isnan(air.fill_value)
    assert "_FillValue" in air.attrs
    assert counts.dtype == np.int32  # complete: kept as stored
    assert time.attrs["units"] == "hours since 1970-01-01"
    assert time.attrs["calendar"] == "proleptic_gregorian"
    assert group["seen"].attrs["units"].endswith("since 1970-01-01")
    np.testing.assert_array_equal(group["lat"][:], frame.lat.unique())
    xr.testing.assert_equal(xr.open_zarr(out).load(), weather().drop_attrs())


def test_zarr_v2_dimension_names_are_array_dimensions(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "v2.zarr"
    zarrsql.to_zarr("SELECT i AS x, i * 2 AS v FROM range(5) t(i)", out, dims=["x"], zarr_format=2, connection=con)
    attrs = json.loads((out / "v" / ".zattrs").read_text())
    assert attrs["_ARRAY_DIMENSIONS"] == ["x"]
    assert json.loads((out / "v" / ".zarray").read_text())["compressor"]["id"] == "zstd"
    np.testing.assert_array_equal(xr.open_zarr(out).v.values, np.arange(5) * 2)


def test_read_back_by_zarrsql(con: zarrsql.Connection, frame: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "back.zarr"
    zarrsql.to_zarr(con.sql("SELECT * FROM frame"), out, dims=DIMS, connection=con)
    back = zarrsql.read_zarr(out, connection=con).order("time, lat DESC, lon").df()
    expected = frame.sort_values(["time", "lat", "lon"], ascending=[True, False, True]).reset_index(drop=True)
    np.testing.assert_allclose(back.air.to_numpy(dtype=float), expected.air.to_numpy(), equal_nan=True)
    np.testing.assert_array_equal(back.counts.to_numpy(), expected.counts.to_numpy())


def test_text_columns_and_dates(con: zarrsql.Connection, tmp_path: Path, path: str) -> None:
    out = tmp_path / "text.zarr"
    sql = "SELECT 'st' || i AS station, DATE '2021-03-01' + i::INT AS day, 'n' || i AS name FROM range(3) t(i)"
    zarrsql.to_zarr(sql, out, dims=["station"], connection=con)
    opened = xr.open_zarr(out).load()
    assert list(opened.station.values) == ["st0", "st1", "st2"]
    assert list(opened.name.values) == ["n0", "n1", "n2"]
    np.testing.assert_array_equal(opened.day.values, pd.date_range("2021-03-01", periods=3).values)


def test_mode_w_dash_refuses_an_existing_store(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "exists.zarr"
    zarrsql.to_zarr("SELECT i AS x, i AS v FROM range(3) t(i)", out, dims=["x"], connection=con)
    with pytest.raises(zarrsql.ZarrSQLError, match='mode="w"'):
        zarrsql.to_zarr("SELECT i AS x, -i AS v FROM range(3) t(i)", out, dims=["x"], connection=con)
    np.testing.assert_array_equal(xr.open_zarr(out).v.values, [0, 1, 2])
    zarrsql.to_zarr("SELECT i AS x, -i AS v FROM range(4) t(i)", out, dims=["x"], mode="w", connection=con)
    np.testing.assert_array_equal(xr.open_zarr(out).v.values, [0, -1, -2, -3])


def _left_over(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_failed_overwrite_leaves_the_old_store(con: zarrsql.Connection, tmp_path: Path, path: str) -> None:
    """The duplicate is in the last chunk of the sorted stream: earlier chunks are written
    when it is found, and still nothing reaches the target."""
    out = tmp_path / "old.zarr"
    zarrsql.to_zarr("SELECT i AS x, i * 1.0 AS v FROM range(10) t(i)", out, dims=["x"], connection=con)
    bad = "SELECT i AS x, i * 2.0 AS v FROM range(100) t(i) UNION ALL SELECT 99, 0.5"
    with pytest.raises(zarrsql.WriteError, match=r"dimension tuple \(x=99\)"):
        zarrsql.to_zarr(bad, out, dims=["x"], chunks=10, mode="w", connection=con)
    np.testing.assert_array_equal(xr.open_zarr(out).v.values, np.arange(10.0))
    assert _left_over(tmp_path) == ["old.zarr"]
    with pytest.raises(zarrsql.WriteError):
        zarrsql.to_zarr(bad, tmp_path / "new.zarr", dims=["x"], chunks=10, connection=con)
    assert _left_over(tmp_path) == ["old.zarr"]  # a failed new store leaves nothing


@pytest.mark.parametrize(
    ("sql", "error", "text"),
    [
        ("SELECT 1 AS x, {'a': 1} AS s", zarrsql.WriteError, "column 's' has type struct"),
        ("SELECT 1 AS x, [1, 2] AS l", zarrsql.WriteError, "or write it with layout='table'"),
        ("SELECT i AS x, CASE WHEN i = 0 THEN NULL ELSE 'a' END AS t FROM range(2) t(i)", zarrsql.WriteError,
         "text column 't' would have missing cells"),
        ("SELECT NULL::INT AS x, 1 AS v", zarrsql.WriteError, "dimension column 'x' is NULL"),
        ("SELECT 1 AS x, 1 AS v", zarrsql.ParameterError, "dims names 'y'"),
    ],
)  # fmt: skip
def test_bad_input_names_the_column(
    con: zarrsql.Connection, tmp_path: Path, sql: str, error: type[Exception], text: str, path: str
) -> None:
    dims = ["y"] if "dims names" in text else ["x"]
    with pytest.raises(error, match=text.replace("(", r"\(").replace("[", r"\[")):
        zarrsql.to_zarr(sql, tmp_path / "bad.zarr", dims=dims, connection=con)
    assert not (tmp_path / "bad.zarr").exists()


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"layout": "cube"}, "layout must be 'grid' or 'table'"),
        ({"mode": "x"}, "mode must be"),
        ({"mode": "a"}, "pass append_dim="),
        ({"append_dim": "x"}, "needs mode='a'"),
        ({"zarr_format": 4}, "zarr_format must be 2 or 3"),
        ({"chunks": 0}, "chunks must be a positive int"),
        ({"chunks": (1, 2)}, "chunks has 2 lengths for 1 dims"),
        ({"chunks": {"y": 3}}, "chunks names 'y'"),
    ],
)
def test_bad_arguments_are_refused(con: zarrsql.Connection, tmp_path: Path, kwargs: dict, text: str) -> None:
    with pytest.raises(zarrsql.ParameterError, match=text.replace("(", r"\(")):
        zarrsql.to_zarr("SELECT 1 AS x, 1 AS v", tmp_path / "a.zarr", **{"dims": ["x"], **kwargs}, connection=con)
    assert not (tmp_path / "a.zarr").exists()


def test_default_chunks_bound_a_chunk(con: zarrsql.Connection, tmp_path: Path) -> None:
    from zarrsql.write.chunking import TARGET_CELLS

    out = tmp_path / "big.zarr"
    zarrsql.to_zarr("SELECT i // 2048 AS a, i % 2048 AS b, 1.0 AS v FROM range(2048 * 1024) t(i)", out,
                    dims=["a", "b"], connection=con)  # fmt: skip
    chunks = zarr.open_array(out / "v").chunks
    assert TARGET_CELLS // 4 < np.prod(chunks) <= TARGET_CELLS  # bounded, yet not needlessly small
    assert float(xr.open_zarr(out).v.sum()) == 2048 * 1024


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_consolidated_false_leaves_no_consolidated_metadata(
    con: zarrsql.Connection, tmp_path: Path, zarr_format: int
) -> None:
    out = tmp_path / "plain.zarr"
    zarrsql.to_zarr("SELECT i AS x, i * 0.5 AS v FROM range(4) t(i)", out, dims=["x"], consolidated=False,
                    zarr_format=zarr_format, connection=con)  # fmt: skip
    with pytest.raises((ValueError, KeyError, FileNotFoundError)):
        zarr.open_consolidated(out, zarr_format=zarr_format)
    np.testing.assert_array_equal(xr.open_zarr(out, consolidated=False).v.values, np.arange(4) * 0.5)


def test_layout_table_goes_to_the_table_writer(con: zarrsql.Connection, tmp_path: Path) -> None:
    """The front function hands a table layout to write_table: rows read back as written."""
    out = tmp_path / "table.zarr"
    sql = "SELECT i AS id, (i * 0.25)::DOUBLE AS x, 'r' || i AS name FROM range(7) t(i)"
    zarrsql.to_zarr(sql, out, layout="table", chunks=3, connection=con)
    back = zarrsql.read_zarr(out, connection=con).order("id").fetchall()
    assert back == con.sql(sql + " ORDER BY id").fetchall()
    zarrsql.to_zarr(
        "SELECT 7::BIGINT AS id, 1.75::DOUBLE AS x, 'r7' AS name", out, layout="table", mode="a", connection=con
    )
    assert zarrsql.read_zarr(out, connection=con).aggregate("count(*), max(id)").fetchall() == [(8, 7)]
    with pytest.raises(zarrsql.ParameterError, match="dims is for layout='grid'"):
        zarrsql.to_zarr(sql, tmp_path / "t2.zarr", layout="table", dims=["id"], connection=con)
