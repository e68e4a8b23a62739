"""Grid appends to time axes whose origin lies outside numpy's nanosecond range (1677-2262):
`days since 0001-01-01` and `seconds since 1600-01-01`, as older climate files and xarray
itself write them. The counts are taken in microseconds, so ordinary dates append exactly;
they were refused as "cannot hold exactly" (the origin wrapped as nanoseconds). A unit or a
value finer than a microsecond still counts in nanoseconds. Expected values come from xarray
reading the appended store, and from pandas' own arithmetic on the dates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import ZarrSQLError


def _store(path: Path, units: str, zarr_format: int, dtype: str = "int64") -> Path:
    times = pd.to_datetime(["2020-01-01", "2020-01-02"])
    ds = xr.Dataset({"v": ("time", [1.0, 2.0])}, coords={"time": times})
    ds.to_zarr(path, encoding={"time": {"units": units, "dtype": dtype}}, zarr_format=zarr_format)
    return path


def _append(sql: str, store: Path) -> None:
    con = zarrsql.connect()
    zarrsql.to_zarr(con.sql(sql), str(store), mode="a", append_dim="time", connection=con)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize(
    ("units", "dtype"),
    [("days since 0001-01-01", "int64"), ("seconds since 1600-01-01", "int64"), ("hours since 0001-01-01", "float64")],
)
def test_dates_append_exactly_after_a_far_origin(tmp_path: Path, zarr_format: int, units: str, dtype: str) -> None:
    store = _store(tmp_path / "far.zarr", units, zarr_format, dtype)
    _append(
        "SELECT * FROM (VALUES (TIMESTAMP '2020-01-03', 3.0), (TIMESTAMP '2020-01-04', 4.0)) t(time, v)",
        store,
    )
    back = xr.open_zarr(store, consolidated=None if zarr_format == 3 else True)
    expected = pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-04"]).to_numpy()
    np.testing.assert_array_equal(back.time.values, expected)
    np.testing.assert_array_equal(back.v.values, [1.0, 2.0, 3.0, 4.0])
    raw = xr.open_zarr(store, decode_times=False, consolidated=None if zarr_format == 3 else True).time.values
    origin = pd.Timestamp(units.partition(" since ")[2])
    step = pd.Timedelta(1, unit=units.split()[0][0] if units.startswith(("d", "h")) else "s")
    assert raw[-1] == (pd.Timestamp("2020-01-04").to_pydatetime() - origin.to_pydatetime()) / step.to_pytimedelta()


def test_a_time_finer_than_the_unit_is_still_refused(tmp_path: Path) -> None:
    store = _store(tmp_path / "far.zarr", "days since 0001-01-01", 2)
    with pytest.raises(ZarrSQLError, match="cannot hold exactly"):
        _append("SELECT TIMESTAMP '2020-01-03 06:00' AS time, 3.0 AS v", store)
    with pytest.raises(ZarrSQLError, match="cannot hold exactly"):
        _append("SELECT TIMESTAMP_NS '2020-01-03 00:00:00.000000001' AS time, 3.0 AS v", store)


def test_nanosecond_units_still_count_nanoseconds(tmp_path: Path) -> None:
    store = _store(tmp_path / "ns.zarr", "nanoseconds since 2000-01-01", 2)
    _append("SELECT TIMESTAMP_NS '2020-01-03 00:00:00.000000007' AS time, 3.0 AS v", store)
    back = xr.open_zarr(store)
    assert back.time.values[-1] == np.datetime64("2020-01-03T00:00:00.000000007", "ns")
