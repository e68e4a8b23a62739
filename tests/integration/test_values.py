"""Values read exactly: every dtype, the missing-value rules, packing, NaN vs NULL, CF time.

Expected values come from the raw arrays read with zarr-python (numpy) and the rule under
test spelled out here, from xarray where it decodes the same way, or from cftime.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import cftime
import numpy as np
import pytest
import zarr

import zarrsql

FORMATS = pytest.mark.parametrize("fmt", ["", "v2/"], ids=["v3", "v2"])


def raw(path: str, name: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_array(f"{path}/{name}", mode="r")[...]


def column(con: zarrsql.Connection, path: str, name: str, **params: object) -> list:
    rel = zarrsql.read_zarr(path, connection=con, **params)
    return [r[0] for r in rel.order("i").select(f'"{name}"').fetchall()]


@FORMATS
def test_every_dtype_round_trips(fmt: str, fixture_path: Callable[[str], str]) -> None:
    path = fixture_path(fmt + "dtypes.zarr")
    with zarrsql.connect() as con:
        types = dict(con.sql(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_zarr('{path}'))").fetchall())
        for name, sql_type in [("b", "BOOLEAN"), ("i8", "TINYINT"), ("i16", "SMALLINT"), ("i32", "INTEGER"),
                               ("i64", "BIGINT"), ("u8", "UTINYINT"), ("u16", "USMALLINT"), ("u32", "UINTEGER"),
                               ("u64", "UBIGINT"), ("f32", "FLOAT"), ("f64", "DOUBLE")]:
            assert types[name] == sql_type
            expected = raw(path, name)
            got = column(con, path, name)
            if expected.dtype.kind == "f":
                # NaN reads as NULL by default; every other value bit-exact
                assert [None if math.isnan(v) else v for v in expected.tolist()] == got
            else:
                assert expected.tolist() == got
        assert types["s"] == types["fixb"] == types["fixu"] == "VARCHAR"
        assert column(con, path, "s") == raw(path, "s").tolist()
        assert column(con, path, "fixu") == raw(path, "fixu").tolist()
        assert column(con, path, "fixb") == [b.decode() for b in raw(path, "fixb").tolist()]
        assert types["dt"] == "TIMESTAMP" and types["td"] == "INTERVAL"
        dt = raw(path, "dt")
        assert column(con, path, "dt") == [None if np.isnat(v) else v.astype("M8[us]").item() for v in dt]
        td = raw(path, "td")
        assert column(con, path, "td") == [None if np.isnat(v) else v.astype("m8[us]").item() for v in td]


@FORMATS
def test_missing_value_rules(fmt: str, fixture_path: Callable[[str], str]) -> None:
    path = fixture_path(fmt + "missing.zarr")

    def masked(values: np.ndarray, sentinel: float) -> list:
        return [None if (v == sentinel or (isinstance(v, float) and math.isnan(v))) else v for v in values.tolist()]

    with zarrsql.connect() as con:
        # _FillValue attribute
        assert column(con, path, "fill_attr") == masked(raw(path, "fill_attr"), -9999)
        # missing_value attribute
        assert column(con, path, "missing_attr") == masked(raw(path, "missing_attr"), -1)
        # _FillValue NaN with missing_value: missing_value is the sentinel (NaN is NULL anyway)
        assert column(con, path, "nan_fill_and_missing") == masked(raw(path, "nan_fill_and_missing"), -999)
        # no CF attribute: a non-zero Zarr fill_value is the sentinel, also for unwritten chunks
        nonzero = raw(path, "nonzero_fill")
        assert 7 in nonzero.tolist()
        assert column(con, path, "nonzero_fill") == masked(nonzero, 7)
        # an all-zero fill_value is not a sentinel: zeros are data
        zero = raw(path, "zero_fill")
        assert 0 in zero.tolist() and column(con, path, "zero_fill") == zero.tolist()
        # packed: sentinel compared on the stored integer, then value * 0.5 + 10
        packed = raw(path, "packed")
        assert column(con, path, "packed") == [None if v == -1 else v * 0.5 + 10.0 for v in packed.tolist()]


@FORMATS
def test_nan_as_null_switch(fmt: str, fixture_path: Callable[[str], str]) -> None:
    """f64 has a zero fill_value, so no NaN sentinel: NaN is NULL by default, NaN when asked."""
    path = fixture_path(fmt + "dtypes.zarr")
    values = raw(path, "f64")
    assert np.isnan(values).any()
    with zarrsql.connect() as con:
        default = column(con, path, "f64")
        kept = column(con, path, "f64", nan_as_null=False)
        n_nan = con.sql(f"SELECT count(*) FILTER (isnan(f64)) FROM read_zarr('{path}', nan_as_null := false)").fetchall()[0][0]
        finite = con.sql(f"SELECT count(f64) FILTER (NOT isinf(f64)) FROM read_zarr('{path}')").fetchall()[0][0]
    assert default == [None if math.isnan(v) else v for v in values.tolist()]
    assert [v is not None and math.isnan(v) for v in kept] == np.isnan(values).tolist()
    assert n_nan == int(np.isnan(values).sum())
    # count() skips what is NULL: NaN no longer counts as a value
    assert finite == int(np.isfinite(values).sum())


@FORMATS
def test_nan_sentinel_stays_null(fmt: str, fixture_path: Callable[[str], str]) -> None:
    """nan_data's Zarr fill_value is NaN: NaN is its sentinel, NULL even with nan_as_null := false."""
    path = fixture_path(fmt + "missing.zarr")
    values = raw(path, "nan_data")
    with zarrsql.connect() as con:
        kept = column(con, path, "nan_data", nan_as_null=False)
    fill = zarr.open_array(f"{path}/nan_data", mode="r").fill_value
    if fill is not None and np.isnan(fill):
        assert kept == [None if math.isnan(v) else v for v in values.tolist()]
    else:  # v2 written with fill_value null: no sentinel, NaN kept
        assert [v is not None and math.isnan(v) for v in kept] == np.isnan(values).tolist()


def test_xarray_base64_fill_value(fixture_path: Callable[[str], str]) -> None:
    from oracles import assert_frames_equal, xarray_frame

    path = fixture_path("xr_float_fill.zarr")
    with zarrsql.connect() as con:
        actual = zarrsql.read_zarr(path, connection=con).df()
    expected = xarray_frame(path, variables=sorted(c for c in actual.columns if c != "i"), dims=["i"])
    assert_frames_equal(actual, expected)


def _cftime_micros(values: np.ndarray, units: str, calendar: str) -> list:
    out = []
    for d in cftime.num2date(values, units, calendar=calendar, only_use_cftime_datetimes=True):
        out.append(np.datetime64(f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}.{d.microsecond:06d}", "us").item())
    return out


@FORMATS
@pytest.mark.parametrize("axis", ["t_hours", "t_days_float", "t_noleap", "t_360_real"])
def test_time_axes_decode_like_cftime(axis: str, fmt: str, fixture_path: Callable[[str], str]) -> None:
    path = fixture_path(fmt + "times.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.open_array(f"{path}/{axis}", mode="r")
    attrs = arr.attrs
    expected = _cftime_micros(arr[...], attrs["units"], attrs.get("calendar", "standard"))
    with zarrsql.connect() as con:
        rel = zarrsql.read_zarr(path, connection=con, table_name=axis)
        assert dict(zip(rel.columns, rel.types))[axis] == "TIMESTAMP"
        got = [r[0] for r in rel.order(axis).select(axis).fetchall()]
        raw_numbers = [r[0] for r in zarrsql.read_zarr(path, connection=con, table_name=axis, decode_times=False)
                       .order(axis).select(axis).fetchall()]
    assert got == sorted(expected)
    assert raw_numbers == sorted(arr[...].tolist())


@FORMATS
@pytest.mark.parametrize("axis", ["t_360", "t_julian_early", "t_months"])
def test_time_axes_that_keep_their_numbers(axis: str, fmt: str, fixture_path: Callable[[str], str]) -> None:
    """360_day with a Feb 30, a standard axis referenced before 1582, and months: numbers stay."""
    path = fixture_path(fmt + "times.zarr")
    stored = raw(path, axis)
    with zarrsql.connect() as con:
        rel = zarrsql.read_zarr(path, connection=con, table_name=axis)
        assert dict(zip(rel.columns, rel.types))[axis] != "TIMESTAMP"
        got = [r[0] for r in rel.order(axis).select(axis).fetchall()]
        units = con.sql(f"SELECT attrs FROM read_zarr_metadata('{path}', array_path := '{axis}')").fetchall()[0][0]
    assert got == sorted(stored.tolist())
    assert "since" in units  # the units stay visible in the metadata


@FORMATS
def test_time_zone_offset_applied(fmt: str, fixture_path: Callable[[str], str]) -> None:
    path = fixture_path(fmt + "times.zarr")
    stored = raw(path, "t_tz")
    with zarrsql.connect() as con:
        got = [r[0] for r in zarrsql.read_zarr(path, connection=con, table_name="t_tz").order("t_tz").select("t_tz").fetchall()]
    # hours since 2000-01-01 00:00:00 +05:00 is 1999-12-31T19:00 UTC plus the offset in hours
    base = np.datetime64("1999-12-31T19:00", "us")
    assert got == [(base + np.timedelta64(int(h), "h")).item() for h in sorted(stored.tolist())]
