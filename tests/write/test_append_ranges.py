"""Grid appends into arrays narrower than what the relation holds: a value the stored dtype
cannot hold is refused, never wrapped or made infinite by numpy's cast.

- a time stored as int32 counts (`seconds since 2000-01-01`, as xarray writes with that
  encoding): 2100-01-01 is 3,155,760,000 s, beyond int32's maximum; it was stored wrapped and
  read back (by xarray and zarrsql) as 1963-11-25;
- a NaT (a NULL, or a cell no row fills) in an integer time array: stored as the array's
  `_FillValue`, int64's NaT in an int64 array, refused when the array has no code for it (it
  became 0, the origin);
- a finite DOUBLE beyond float32's (or float16's) range: it was stored as inf, with numpy's
  RuntimeWarning leaking; infinities and NaN of the relation itself are kept.

Expected values come from xarray (the stores as it writes and reads them), numpy and pandas.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.errors import AppendSchemaError

FORMATS = [2, 3]
SECONDS_2000 = {"units": "seconds since 2000-01-01", "dtype": "int32"}


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _files(store: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(store)), p.read_bytes()) for p in store.rglob("*") if p.is_file())


def _append(con: zarrsql.Connection, sql: str, store: Path, append_dim: str) -> None:
    zarrsql.to_zarr(con.sql(sql), str(store), mode="a", append_dim=append_dim, connection=con)


# -- int32 time counts ---------------------------------------------------------------------
def _int32_time_axis(path: Path, zarr_format: int) -> Path:
    times = pd.to_datetime(["2000-01-01 00:00:00", "2000-01-01 00:00:30"])
    ds = xr.Dataset({"v": (("time",), [1.0, 2.0])}, coords={"time": times})
    ds.to_zarr(path, encoding={"time": SECONDS_2000}, zarr_format=zarr_format)
    return path


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_time_beyond_int32_counts_is_refused_and_store_kept(tmp_path: Path, con, zarr_format: int) -> None:
    store = _int32_time_axis(tmp_path / "s.zarr", zarr_format)
    before = _files(store)
    with pytest.raises(AppendSchemaError) as caught:
        _append(con, "SELECT TIMESTAMP '2100-01-01' AS time, 3.0 AS v", store, "time")
    message = str(caught.value)
    for part in ("2100-01-01", "'time'", "int32", "3155760000", "new store"):
        assert part in message
    assert _files(store) == before
    assert xr.open_zarr(store).time.values.tolist() == pd.to_datetime(
        ["2000-01-01 00:00:00", "2000-01-01 00:00:30"]
    ).values.tolist()


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_time_within_int32_counts_is_stored_exactly(tmp_path: Path, con, zarr_format: int) -> None:
    store = _int32_time_axis(tmp_path / "s.zarr", zarr_format)
    _append(con, "SELECT TIMESTAMP '2068-01-19 03:14:07' AS time, 3.0 AS v", store, "time")
    # 2068-01-19 03:14:07 is 2**31 - 1 s after 2000-01-01: the largest count int32 holds
    expected = pd.Timestamp("2000-01-01") + pd.Timedelta(seconds=2**31 - 1)
    assert xr.open_zarr(store).time.values[-1] == expected.to_datetime64()
    assert zarr.open_group(str(store))["time"].dtype == np.dtype("int32")


def _int32_time_variable(path: Path, zarr_format: int, *, fill: int | None) -> Path:
    encoding = {**SECONDS_2000, **({"_FillValue": fill} if fill is not None else {})}
    tv = pd.to_datetime(["2000-01-01", "2000-01-02"]).values.reshape(1, 2)
    ds = xr.Dataset({"tv": (("t", "y"), tv)}, coords={"t": [0], "y": [0, 1]})
    ds.to_zarr(path, encoding={"tv": encoding}, zarr_format=zarr_format)
    return path


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_time_variable_before_int32_range_is_refused(tmp_path: Path, con, zarr_format: int) -> None:
    store = _int32_time_variable(tmp_path / "s.zarr", zarr_format, fill=None)
    before = _files(store)
    sql = "SELECT 1 AS t, y, TIMESTAMP '1900-01-01' AS tv FROM range(2) r(y)"  # -3.16e9 s: below int32
    with pytest.raises(AppendSchemaError, match=r"1900-01-01.*'tv'") as caught:
        _append(con, sql, store, "t")
    assert "int32" in str(caught.value)
    assert _files(store) == before


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_null_time_is_stored_as_the_arrays_fill_value(tmp_path: Path, con, zarr_format: int) -> None:
    store = _int32_time_variable(tmp_path / "s.zarr", zarr_format, fill=-99)
    # t=1: y=0 a time, y=1 NULL; t=2: y=0 has no row (a missing cell), y=1 a time
    sql = (
        "SELECT * FROM (VALUES (1, 0, TIMESTAMP '2000-01-05'), (1, 1, NULL), (2, 1, TIMESTAMP '2000-01-06')) "
        "r(t, y, tv)"
    )
    _append(con, sql, store, "t")
    got = xr.open_zarr(store).tv.values
    expected = pd.to_datetime(["2000-01-01", "2000-01-02", "2000-01-05", None, None, "2000-01-06"]).values
    np.testing.assert_array_equal(got, expected.reshape(3, 2))
    assert zarr.open_group(str(store))["tv"][1:, :].tolist() == [[345600, -99], [-99, 432000]]


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_null_time_without_a_code_for_it_is_refused(tmp_path: Path, con, zarr_format: int) -> None:
    store = _int32_time_variable(tmp_path / "s.zarr", zarr_format, fill=None)
    before = _files(store)
    sql = "SELECT 1 AS t, y, CASE WHEN y = 0 THEN TIMESTAMP '2000-01-05' END AS tv FROM range(2) r(y)"
    with pytest.raises(AppendSchemaError, match=r"'tv' .*int32.*COALESCE"):
        _append(con, sql, store, "t")
    assert _files(store) == before


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_missing_time_cell_without_a_code_for_it_is_refused(tmp_path: Path, con, zarr_format: int) -> None:
    store = _int32_time_variable(tmp_path / "s.zarr", zarr_format, fill=None)
    before = _files(store)
    with pytest.raises(AppendSchemaError, match=r"'tv' .*missing cells.*int32.*_FillValue.*COALESCE"):
        _append(con, "SELECT 1 AS t, 0 AS y, TIMESTAMP '2000-01-05' AS tv", store, "t")  # y=1 has no row
    assert _files(store) == before


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_missing_cell_of_int64_time_variable_reads_as_nat(tmp_path: Path, con, zarr_format: int) -> None:
    tv = pd.to_datetime(["2000-01-01", "2000-01-02"]).values.reshape(1, 2)
    store = tmp_path / "s.zarr"
    xr.Dataset({"tv": (("t", "y"), tv)}, coords={"t": [0], "y": [0, 1]}).to_zarr(store, zarr_format=zarr_format)
    _append(con, "SELECT 1 AS t, 0 AS y, TIMESTAMP '2000-01-05' AS tv", store, "t")  # y=1 has no row
    expected = pd.to_datetime(["2000-01-01", "2000-01-02", "2000-01-05", None]).values.reshape(2, 2)
    np.testing.assert_array_equal(xr.open_zarr(store).tv.values, expected)


# -- float32 and float16 arrays -------------------------------------------------------------
def _float_store(path: Path, dtype: str, zarr_format: int, encoding: dict | None = None) -> Path:
    ds = xr.Dataset({"v": (("t",), np.array([1.0, 2.0], dtype=dtype))}, coords={"t": [0, 1]})
    ds.to_zarr(path, zarr_format=zarr_format, encoding={"v": encoding} if encoding else None)
    return path


@pytest.mark.parametrize("zarr_format", FORMATS)
@pytest.mark.parametrize("value", ["1e300", "-1e300", "3.5e38"])
def test_double_beyond_float32_is_refused(tmp_path: Path, con, zarr_format: int, value: str) -> None:
    store = _float_store(tmp_path / "s.zarr", "float32", zarr_format)
    before = _files(store)
    with pytest.raises(AppendSchemaError) as caught:  # numpy's RuntimeWarning would fail the test too
        _append(con, f"SELECT 2 AS t, {value}::DOUBLE AS v", store, "t")
    message = str(caught.value)
    assert "'v'" in message and "float32" in message and repr(float(value)) in message
    assert _files(store) == before


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_float32_keeps_the_relations_infinities_nan_and_largest_values(tmp_path: Path, con, zarr_format: int) -> None:
    store = _float_store(tmp_path / "s.zarr", "float32", zarr_format)
    values = ["'inf'", "'-inf'", "'nan'", "3.0e38", "-3.0e38", "1e-50"]
    sql = " UNION ALL ".join(f"SELECT {2 + k} AS t, {v}::DOUBLE AS v" for k, v in enumerate(values))
    _append(con, sql, store, "t")
    expected = np.array([1.0, 2.0, np.inf, -np.inf, np.nan, 3.0e38, -3.0e38, 1e-50]).astype(np.float32)
    got = xr.open_zarr(store).v.values
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_integer_beyond_float16_is_refused(tmp_path: Path, con, zarr_format: int) -> None:
    store = _float_store(tmp_path / "s.zarr", "float16", zarr_format)
    before = _files(store)
    with pytest.raises(AppendSchemaError, match=r"'v' has the value 70000.*float16"):
        _append(con, "SELECT 2 AS t, 70000 AS v", store, "t")
    assert _files(store) == before
    _append(con, "SELECT 2 AS t, 60000 AS v", store, "t")
    np.testing.assert_array_equal(xr.open_zarr(store).v.values, np.array([1, 2, 60000], dtype=np.float16))


@pytest.mark.parametrize("zarr_format", FORMATS)
def test_packed_float32_code_beyond_range_is_refused(tmp_path: Path, con, zarr_format: int) -> None:
    encoding = {"dtype": "float32", "scale_factor": 0.5, "add_offset": 0.0}
    store = _float_store(tmp_path / "s.zarr", "float64", zarr_format, encoding)
    before = _files(store)
    with pytest.raises(AppendSchemaError, match=r"'v' has the value 2e\+38.*packed.*float32"):
        _append(con, "SELECT 2 AS t, 2e38::DOUBLE AS v", store, "t")  # float32 holds 2e38, not its code 4e38
    assert _files(store) == before
