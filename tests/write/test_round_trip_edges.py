"""Round trips at the edges of what xarray writes: CF-packed arrays and float-encoded time
appended to, empty strings in Zarr v2, chunk lengths kept, template coordinates, and the
hints of refusals. Expected values come from xarray (`xr.open_zarr`), zarr and numpy."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.errors import AppendSchemaError, ParameterError, UnwritableColumnError

pytestmark = pytest.mark.filterwarnings("ignore")


def _open(path: Path) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_zarr(path).load()


def _packed_store(path: Path) -> xr.Dataset:
    """Three days of `t`, stored by xarray as int16 codes with scale 0.5 and offset 100."""
    ds = xr.Dataset({"t": ("time", [10.0, 11.0, 12.0])}, coords={"time": pd.date_range("2024-01-01", periods=3)})
    encoding = {"t": {"dtype": "int16", "scale_factor": 0.5, "add_offset": 100.0, "_FillValue": -32768}}
    ds.to_zarr(path, encoding=encoding)
    return ds


# -- 1: CF-packed integer arrays ------------------------------------------------------------
@pytest.mark.parametrize("value_sql", ["13.0", "CAST(13 AS SMALLINT)", "13::BIGINT"])
def test_append_to_packed_integer_array_packs_the_values(tmp_path: Path, value_sql: str) -> None:
    store = tmp_path / "s.zarr"
    _packed_store(store)
    con = zarrsql.connect()
    rel = con.sql(f"SELECT TIMESTAMP '2024-01-04' AS time, {value_sql} AS t")
    zarrsql.to_zarr(rel, store, mode="a", append_dim="time", connection=con)
    assert _open(store).t.values.tolist() == [10.0, 11.0, 12.0, 13.0]
    # the raw code is what xarray's CF encoding gives: round((13 - 100) / 0.5)
    assert zarr.open_array(store / "t")[3] == np.int16(round((13.0 - 100.0) / 0.5))


def test_append_to_packed_integer_array_stores_null_as_fill_value(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    _packed_store(store)
    con = zarrsql.connect()
    rel = con.sql("SELECT * FROM (VALUES (TIMESTAMP '2024-01-04', 13.25), (TIMESTAMP '2024-01-05', NULL)) v(time, t)")
    zarrsql.to_zarr(rel, store, mode="a", append_dim="time", connection=con)
    back = _open(store).t.values
    # 13.25 packs to round(-173.5) = -174 (numpy rounds half to even), which unpacks to 13.0
    assert back[3] == pytest.approx(np.int16(np.around((13.25 - 100.0) / 0.5)) * 0.5 + 100.0)
    assert np.isnan(back[4])
    assert zarr.open_array(store / "t")[4] == -32768


def test_append_to_packed_integer_array_refuses_codes_outside_the_dtype(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    _packed_store(store)
    con = zarrsql.connect()
    rel = con.sql("SELECT TIMESTAMP '2024-01-04' AS time, 1e6 AS t")  # code 1999800: no int16
    with pytest.raises(AppendSchemaError, match="int16"):
        zarrsql.to_zarr(rel, store, mode="a", append_dim="time", connection=con)
    assert _open(store).t.values.tolist() == [10.0, 11.0, 12.0]


# -- 2: CF-scaled float arrays ----------------------------------------------------------------
def test_append_to_scaled_float_array_packs_the_values(tmp_path: Path) -> None:
    full = xr.Dataset(
        {"v": (("time", "lat"), np.arange(12.0).reshape(6, 2))},
        coords={"time": pd.date_range("2024-01-01", periods=6, freq="D"), "lat": [30.0, 20.0]},
    )
    encoding = {"v": {"dtype": "float32", "scale_factor": 0.5, "add_offset": 100.0}}
    full.isel(time=slice(0, 3)).to_zarr(tmp_path / "s.zarr", encoding=encoding)
    full.to_zarr(tmp_path / "all.zarr")
    con = zarrsql.connect()
    sql = f"SELECT * FROM read_zarr('{tmp_path / 'all.zarr'}') WHERE time >= '2024-01-04'"
    zarrsql.to_zarr(sql, tmp_path / "s.zarr", mode="a", append_dim="time", connection=con)
    np.testing.assert_allclose(_open(tmp_path / "s.zarr").v.values, full.v.values)


# -- 3: empty strings in Zarr v2 --------------------------------------------------------------
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_empty_string_round_trips_in_grid_variable_and_coordinate(tmp_path: Path, zarr_format: int) -> None:
    con = zarrsql.connect()
    rel = con.sql("SELECT * FROM (VALUES (1, 'a'), (2, ''), (3, 'c')) t(x, s)")
    zarrsql.to_zarr(rel, tmp_path / "g.zarr", dims=["x"], zarr_format=zarr_format, connection=con)
    assert _open(tmp_path / "g.zarr").s.values.tolist() == ["a", "", "c"]
    read = con.sql(f"SELECT s FROM read_zarr('{tmp_path / 'g.zarr'}') ORDER BY x").fetchall()
    assert [r[0] for r in read] == ["a", "", "c"]
    coord = con.sql("SELECT * FROM (VALUES ('', 1.0), ('b', 2.0)) t(name, v)")
    zarrsql.to_zarr(coord, tmp_path / "c.zarr", dims=["name"], zarr_format=zarr_format, connection=con)
    assert _open(tmp_path / "c.zarr").name.values.tolist() == ["", "b"]
    read = con.sql(f"SELECT name FROM read_zarr('{tmp_path / 'c.zarr'}') ORDER BY v").fetchall()
    assert [r[0] for r in read] == ["", "b"]


def test_v2_text_array_has_null_fill_value_as_xarray_writes(tmp_path: Path) -> None:
    xr.Dataset({"s": ("x", np.array(["a", ""], dtype=object))}, coords={"x": [1, 2]}).to_zarr(
        tmp_path / "oracle.zarr", zarr_format=2
    )
    oracle = json.loads((tmp_path / "oracle.zarr" / "s" / ".zarray").read_text())["fill_value"]
    con = zarrsql.connect()
    rel = con.sql("SELECT * FROM (VALUES (1, 'a'), (2, '')) t(x, s)")
    zarrsql.to_zarr(rel, tmp_path / "g.zarr", dims=["x"], zarr_format=2, connection=con)
    assert json.loads((tmp_path / "g.zarr" / "s" / ".zarray").read_text())["fill_value"] == oracle


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_empty_string_round_trips_in_table_layout(tmp_path: Path, zarr_format: int) -> None:
    con = zarrsql.connect()
    rel = con.sql("SELECT * FROM (VALUES (1, 'a'), (2, ''), (3, 'c')) t(x, s)")
    zarrsql.to_zarr(rel, tmp_path / "t.zarr", layout="table", zarr_format=zarr_format, connection=con)
    assert _open(tmp_path / "t.zarr").s.values.tolist() == ["a", "", "c"]
    read = con.sql(f"SELECT s FROM read_zarr('{tmp_path / 't.zarr'}') ORDER BY x").fetchall()
    assert [r[0] for r in read] == ["a", "", "c"]


# -- 4: float-encoded time ---------------------------------------------------------------------
def test_append_to_float_encoded_time_axis(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    times = pd.date_range("2024-01-01", periods=3, freq="h")
    xr.Dataset({"v": ("time", np.arange(3.0))}, coords={"time": times}).to_zarr(
        store, encoding={"time": {"units": "hours since 2024-01-01", "dtype": "float64"}}
    )
    con = zarrsql.connect()
    rel = con.sql("SELECT TIMESTAMP '2024-01-01 03:30' AS time, 3.0 AS v")
    zarrsql.to_zarr(rel, store, mode="a", append_dim="time", connection=con)
    back = _open(store)
    expected = pd.DatetimeIndex([*times, pd.Timestamp("2024-01-01 03:30")])
    np.testing.assert_array_equal(back.time.values, expected.values)
    assert back.v.values.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert zarr.open_array(store / "time")[:].tolist() == [0.0, 1.0, 2.0, 3.5]


def test_append_of_numbers_to_float_encoded_time_is_refused_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    times = pd.date_range("2024-01-01", periods=3, freq="h")
    xr.Dataset({"v": ("time", np.arange(3.0))}, coords={"time": times}).to_zarr(
        store, encoding={"time": {"units": "hours since 2024-01-01", "dtype": "float64"}}
    )
    con = zarrsql.connect()
    rel = con.sql("SELECT 3.0::DOUBLE AS time, 3.0 AS v")
    with pytest.raises(AppendSchemaError, match="TIMESTAMP"):
        zarrsql.to_zarr(rel, store, mode="a", append_dim="time", connection=con)


# -- 5: the hint for an INTERVAL -----------------------------------------------------------------
def test_interval_refusal_does_not_point_to_the_table_layout(tmp_path: Path) -> None:
    con = zarrsql.connect()
    rel = con.sql("SELECT range AS x, INTERVAL 1 HOUR * range AS d FROM range(3)")
    with pytest.raises(UnwritableColumnError) as caught:
        zarrsql.to_zarr(rel, tmp_path / "g.zarr", dims=["x"], connection=con)
    assert "layout='table'" not in str(caught.value)
    assert "epoch" in str(caught.value)


# -- 6: an Icechunk repository folder as target -----------------------------------------------------
@pytest.mark.parametrize(("mode", "extra"), [("w-", {}), ("w", {}), ("a", {"append_dim": "x"})])
def test_icechunk_repository_path_as_target_asks_for_a_session(tmp_path: Path, mode: str, extra: dict) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xr.Dataset({"v": ("x", [1.0, 2.0])}, coords={"x": [0, 1]}).to_zarr(session.store, consolidated=False)
    session.commit("first")
    before = sorted(p.name for p in (tmp_path / "repo").iterdir())
    con = zarrsql.connect()
    rel = con.sql("SELECT 5 AS x, 3.0 AS v")
    with pytest.raises(ParameterError, match="writable_session"):
        zarrsql.to_zarr(rel, str(tmp_path / "repo"), mode=mode, dims=["x"], connection=con, **extra)
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == before


# -- 7: requested chunk lengths kept --------------------------------------------------------------------
def test_requested_chunk_length_is_kept_past_a_short_first_write(tmp_path: Path) -> None:
    ds = xr.Dataset(
        {"air": (("time", "lat"), np.arange(10.0).reshape(5, 2))},
        coords={"time": pd.date_range("2024-01-01", periods=5, freq="D"), "lat": [60.0, 45.0]},
    )
    ds.to_zarr(tmp_path / "air.zarr")
    # the oracle: xarray keeps the chunk length asked for on a short first write
    ds.isel(time=slice(0, 2)).to_zarr(tmp_path / "oracle.zarr", encoding={"air": {"chunks": (4, 2)}})
    con = zarrsql.connect()
    src = f"SELECT * FROM read_zarr('{tmp_path / 'air.zarr'}') WHERE "
    out = tmp_path / "out.zarr"
    zarrsql.to_zarr(src + "time < '2024-01-03'", out, chunks={"time": 4}, connection=con)
    assert zarr.open_array(out / "air").chunks == zarr.open_array(tmp_path / "oracle.zarr" / "air").chunks
    zarrsql.to_zarr(src + "time >= '2024-01-03'", out, mode="a", append_dim="time", chunks={"time": 4}, connection=con)
    assert zarr.open_array(out / "air").chunks == (4, 2)
    xr.testing.assert_equal(_open(out).air, ds.air)
    read = con.sql(f"SELECT air FROM read_zarr('{out}') ORDER BY time, lat DESC").fetchall()
    assert [r[0] for r in read] == ds.air.values.ravel().tolist()


# -- 8: template coordinates ------------------------------------------------------------------------------
def test_template_gives_back_non_dimension_coordinates(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    xr.Dataset({"v": ("x", [1.0, 2.0])}, coords={"x": [0, 1], "height": 2.0, "label": ("x", ["a", "b"])}).to_zarr(store)
    original = _open(store)
    for sql in (f"SELECT * FROM read_zarr('{store}')", f"SELECT x, v FROM read_zarr('{store}')"):
        out = zarrsql.to_xarray(zarrsql.sql(sql), ["x"], template=str(store))
        assert sorted(out.coords) == sorted(original.coords), sql
        assert sorted(out.data_vars) == sorted(original.data_vars), sql
        assert out.height.dims == original.height.dims == ()
        assert out.height.item() == original.height.item()
        assert out.label.values.tolist() == original.label.values.tolist()
