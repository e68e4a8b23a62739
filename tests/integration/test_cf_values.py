"""CF value rules read exactly: `_Unsigned`, several missing values, fill values spelled as
numbers or base64, CF durations as INTERVAL, and `bounds :=` on float32 coordinates.

Fixtures are written by xarray (`to_zarr`), by zarr-python where xarray cannot write the
case, in both Zarr formats. Expected values come from `xr.open_zarr`, from numpy on the
raw arrays with the rule spelled out here, or from a plain DuckDB connection over xarray's
`to_dataframe()`.
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql

FORMATS = pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _nulls(values: Any) -> list[Any]:
    """xarray's decoded values with NaN/NaT as None (how they read in SQL)."""
    out = []
    for v in np.asarray(values).tolist():
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(None)
        else:
            out.append(v)
    return out


def _column(path: Path | str, name: str, order: str = "i", **params: Any) -> list[Any]:
    with zarrsql.connect() as con:
        rel = zarrsql.read_zarr(str(path), connection=con, **params)
        return [r[0] for r in rel.order(order).select(f'"{name}"').fetchall()]


def _sql_type(path: Path | str, name: str, **params: Any) -> str:
    with zarrsql.connect() as con:
        rel = zarrsql.read_zarr(str(path), connection=con, **params)
        return dict(zip(rel.columns, [str(t) for t in rel.types], strict=True))[name]


def _write(ds: xr.Dataset, path: Path, fmt: int) -> Path:
    ds.to_zarr(path, mode="w", zarr_format=fmt, consolidated=False)
    return path


def _raw_array(path: Path, name: str, values: np.ndarray, fmt: int, fill: Any, attrs: dict[str, Any]) -> None:
    """One array written by zarr-python, for cases xarray cannot write."""
    group = zarr.open_group(str(path), mode="a", zarr_format=fmt)
    extra = {"dimension_names": ["i"]} if fmt == 3 else {}
    array = group.create_array(name, shape=values.shape, dtype=values.dtype, fill_value=fill, **extra)
    array[...] = values
    array.attrs.update({**attrs, **({"_ARRAY_DIMENSIONS": ["i"]} if fmt == 2 else {})})


# ------------------------------------------------------------------------- _Unsigned

_UNSIGNED_DATA = {
    1: [0, 100, 200, 250],
    2: [0, 1000, 40000, 65000],
    4: [0, 7, 3_000_000_000, 4_000_000_000],
}


@FORMATS
@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("scale", [None, 1.0, 0.5])
def test_unsigned_true_reads_as_xarray(tmp_path: Path, fmt: int, width: int, scale: float | None) -> None:
    values = np.array([*_UNSIGNED_DATA[width], np.nan]) * (scale or 1.0)
    ds = xr.Dataset({"v": ("i", values)})
    ds.v.encoding = {"dtype": f"i{width}", "_Unsigned": "true", "_FillValue": 2 ** (8 * width) - 1}
    if scale is not None:
        ds.v.encoding["scale_factor"] = scale
    path = _write(ds, tmp_path / "u.zarr", fmt)
    assert zarr.open_array(str(path / "v")).dtype == np.dtype(f"i{width}")  # stored signed
    expected = _nulls(xr.open_zarr(path, consolidated=False).v.values)
    assert expected[2] == _UNSIGNED_DATA[width][2] * (scale or 1.0)  # beyond the signed range
    assert _column(path, "v") == expected
    if scale is None:
        assert _sql_type(path, "v") == {1: "UTINYINT", 2: "USMALLINT", 4: "UINTEGER"}[width]


@FORMATS
def test_unsigned_true_without_fill_value(tmp_path: Path, fmt: int) -> None:
    ds = xr.Dataset({"v": ("i", np.array([0, 127, 128, 255], dtype="u1"))})
    path = _write(ds, tmp_path / "u.zarr", fmt)
    group = zarr.open_group(str(path), mode="a")
    stored = group["v"][...].astype("i1")  # the same bytes, signed, as netCDF-3 stores them
    del group["v"]
    _raw_array(path, "v", stored, fmt, None if fmt == 2 else 0, {"_Unsigned": "true"})
    assert _column(path, "v") == xr.open_zarr(path, consolidated=False).v.values.tolist() == [0, 127, 128, 255]


@pytest.mark.parametrize(("fmt", "fill"), [(2, None), (2, 255), (3, None), (3, -1)])
def test_unsigned_false_on_unsigned_storage(tmp_path: Path, fmt: int, fill: int | None) -> None:
    """xarray does not write `_Unsigned: "false"`: the attribute is added to its store
    (v2 keeps the sentinel in the Zarr fill_value, v3 in `_FillValue`)."""
    ds = xr.Dataset({"v": ("i", np.array([251, 0, 100, 128, 255], dtype="u1"))})
    path = _write(ds, tmp_path / "s.zarr", fmt)
    attrs: dict[str, Any] = {"_Unsigned": "false"}
    if fill is not None and fmt == 3:
        attrs["_FillValue"] = fill
    zarr_fill = fill if fmt == 2 else 0
    stored = zarr.open_group(str(path))["v"][...]
    del zarr.open_group(str(path), mode="a")["v"]
    _raw_array(path, "v", stored, fmt, zarr_fill, attrs)
    expected = _nulls(xr.open_zarr(path, consolidated=False).v.values)
    assert expected[0] == -5
    assert (expected[-1] is None) == (fill is not None)
    assert _column(path, "v") == expected
    if fill is None:
        assert _sql_type(path, "v") == "TINYINT"


def test_unsigned_false_fill_in_storage_type(tmp_path: Path) -> None:
    """A `_FillValue` written in the stored (unsigned) type, 255, is the signed -1 (xarray
    raises on this; numpy oracle: the bytes viewed as int8, masked where stored == 255)."""
    raw = np.array([251, 0, 255, 128], dtype="u1")
    _raw_array(tmp_path / "s.zarr", "v", raw, 3, 0, {"_Unsigned": "false", "_FillValue": 255})
    signed = zarr.open_array(str(tmp_path / "s.zarr/v"))[...].view("i1")
    assert _column(tmp_path / "s.zarr", "v") == [None if r == 255 else int(v) for r, v in zip(raw, signed, strict=True)]


@FORMATS
@pytest.mark.parametrize("where", ["band > 150", "band = 200", "band BETWEEN 100 AND 250", "band IN (0, 250)"])
def test_unsigned_coordinate_filters_like_duckdb(tmp_path: Path, fmt: int, where: str) -> None:
    """An `_Unsigned` dimension reads unsigned, and WHERE on it (pushed down) matches DuckDB
    over xarray's frame."""
    ds = xr.Dataset({"v": ("band", np.arange(4.0))}, coords={"band": np.array([0, 100, 200, 250], dtype="u1")})
    path = _write(ds, tmp_path / "c.zarr", fmt)
    stored = zarr.open_group(str(path))["band"][...].astype("i1")
    attrs = dict(zarr.open_group(str(path))["band"].attrs)
    del zarr.open_group(str(path), mode="a")["band"]
    group = zarr.open_group(str(path), mode="a", zarr_format=fmt)
    extra = {"dimension_names": ["band"]} if fmt == 3 else {}
    band = group.create_array("band", shape=(4,), dtype="i1", fill_value=None if fmt == 2 else 0, **extra)
    band[...] = stored
    band.attrs.update({**attrs, "_Unsigned": "true"})
    oracle = xr.open_zarr(path, consolidated=False)
    assert oracle.band.values.tolist() == [0, 100, 200, 250]
    frame = oracle.to_dataframe().reset_index()  # noqa: F841
    query = "SELECT band, v FROM {} WHERE " + where + " ORDER BY band"
    with zarrsql.connect() as con:
        got = con.sql(query.format(f"read_zarr('{path}')")).fetchall()
        bounded = con.sql(f"SELECT band, v FROM read_zarr('{path}', bounds := [['band', '100', '250']]) ORDER BY band")
        assert bounded.fetchall() == duckdb.sql("SELECT band, v FROM frame WHERE band >= 100 ORDER BY band").fetchall()
    want = duckdb.sql(query.format("frame")).fetchall()
    assert want
    assert got == want


# ------------------------------------------------------------------------- several sentinels


@FORMATS
@pytest.mark.parametrize("dtype", ["i2", "i4", "f4", "f8"])
def test_list_valued_missing_value(tmp_path: Path, fmt: int, dtype: str) -> None:
    ds = xr.Dataset({"m": ("i", np.array([5, -1, -2, 7, -1], dtype=dtype))})
    ds.m.attrs["missing_value"] = [-1, -2]
    path = _write(ds, tmp_path / "m.zarr", fmt)
    expected = _nulls(xr.open_zarr(path, consolidated=False).m.values)
    assert expected == [5, None, None, 7, None]
    assert _column(path, "m") == expected


def test_list_valued_fill_value_v2(tmp_path: Path) -> None:
    """xarray reads a list `_FillValue` attribute in v2 when the Zarr fill_value is null."""
    _raw_array(tmp_path / "f.zarr", "f", np.array([5, -1, -2, 7], dtype="i4"), 2, None, {"_FillValue": [-1, -2]})
    expected = _nulls(xr.open_zarr(tmp_path / "f.zarr", consolidated=False).f.values)
    assert expected == [5, None, None, 7]
    assert _column(tmp_path / "f.zarr", "f") == expected


@FORMATS
def test_fill_value_and_missing_value_both_mask(tmp_path: Path, fmt: int) -> None:
    """xarray masks every value of both attributes (v2: the Zarr fill_value is its `_FillValue`)."""
    _raw_array(
        tmp_path / "b.zarr", "b", np.array([1, -9999, -1, 4], dtype="i4"), fmt, -9999,
        {"_FillValue": -9999, "missing_value": -1},
    )  # fmt: skip
    expected = _nulls(xr.open_zarr(tmp_path / "b.zarr", consolidated=False).b.values)
    assert expected == [1, None, None, 4]
    assert _column(tmp_path / "b.zarr", "b") == expected


# ------------------------------------------------------------------------- fill value spellings

_NC_FILL = -9.96921e36  # the netCDF default float fill, as converted archives write it


@FORMATS
def test_number_fill_attribute_is_read_as_float32(tmp_path: Path, fmt: int) -> None:
    """Attribute first, read in the array's type: float32(-9.96921e36) is the sentinel, though
    the Zarr fill_value is NaN (numpy oracle: raw == float32(attribute))."""
    values = np.array([1.0, _NC_FILL, 2.0, np.nan], dtype="f4")
    _raw_array(tmp_path / "n.zarr", "n", values, fmt, np.nan, {"_FillValue": _NC_FILL})
    raw = zarr.open_array(str(tmp_path / "n.zarr/n"))[...]
    masked = (raw == np.float32(_NC_FILL)) | np.isnan(raw)
    assert masked.tolist() == [False, True, False, True]
    assert _column(tmp_path / "n.zarr", "n") == [None if m else v for m, v in zip(masked, raw.tolist(), strict=True)]


@FORMATS
@pytest.mark.parametrize("dtype", ["i2", "i4", "u2"])
def test_number_fill_attribute_on_integers(tmp_path: Path, fmt: int, dtype: str) -> None:
    """An integer sentinel written as a whole float (as converters often do) is read as the integer."""
    info = np.iinfo(dtype)
    sentinel = int(info.max) if dtype.startswith("u") else int(info.min) + 1
    values = np.array([3, sentinel, 4], dtype=dtype)
    _raw_array(tmp_path / "n.zarr", "n", values, fmt, 0, {"_FillValue": float(sentinel)})
    raw = zarr.open_array(str(tmp_path / "n.zarr/n"))[...]
    assert _column(tmp_path / "n.zarr", "n") == [None if v == sentinel else v for v in raw.tolist()]


def _b64(value: float) -> str:
    return base64.b64encode(np.float64(value).tobytes()).decode()


@pytest.mark.parametrize(
    ("fill", "masked"),
    [(_b64(1e20), False), (_b64(float(np.float32(1e20))), True), (_b64(float("nan")), False)],
    ids=["inexact", "exact", "nan"],
)
def test_base64_fill_value_matches_xarray(tmp_path: Path, fill: str, masked: bool) -> None:
    """xarray's v3 spelling: the base64 float64 masks float32 data only when it is exact."""
    values = np.array([1.0, 1e20, 2.0, np.nan], dtype="f4")
    _raw_array(tmp_path / "b.zarr", "b", values, 3, np.nan, {"_FillValue": fill})
    expected = _nulls(xr.open_zarr(tmp_path / "b.zarr", consolidated=False).b.values)
    assert (expected[1] is None) == masked
    assert expected[3] is None
    assert _column(tmp_path / "b.zarr", "b") == expected


# ------------------------------------------------------------------------- durations


def _forecast(path: Path, fmt: int) -> xr.Dataset:
    step = pd.to_timedelta([0, 3, 6, 9, 12], unit="h")
    ds = xr.Dataset(
        {
            "t2m": (("step", "x"), np.arange(10.0).reshape(5, 2)),
            "lead": ("step", pd.to_timedelta([0, 90, np.nan, 30, 45], unit="min")),
            "valid": ("step", pd.date_range("2020-01-01", periods=5, freq="6h")),
        },
        coords={"step": step, "x": [10, 20]},
    )
    _write(ds, path, fmt)
    return xr.open_zarr(path, consolidated=False).load()


@FORMATS
def test_timedelta_reads_as_interval(tmp_path: Path, fmt: int) -> None:
    path = tmp_path / "f.zarr"
    oracle = _forecast(path, fmt)
    assert zarr.open_array(str(path / "lead")).attrs["units"] in ("minutes", "hours", "seconds")
    assert _sql_type(path, "lead", dims=["step"]) == "INTERVAL" == _sql_type(path, "step", dims=["step"])
    frame = oracle[["lead", "valid"]].to_dataframe().reset_index()
    with zarrsql.connect() as con:
        got = con.sql(
            f"SELECT step, lead, valid + lead AS due FROM read_zarr('{path}', dims := ['step']) ORDER BY step"
        ).fetchall()
    want = [
        (r.step.to_pytimedelta(), None if pd.isna(r.lead) else r.lead.to_pytimedelta(),
         None if pd.isna(r.lead) else (r.valid + r.lead).to_pydatetime())
        for r in frame.itertuples()
    ]  # fmt: skip
    assert got == want


@FORMATS
@pytest.mark.parametrize(
    "where",
    [
        "step > INTERVAL 3 HOURS",
        "step = INTERVAL '6 hours'",
        "step BETWEEN INTERVAL 3 HOURS AND INTERVAL 9 HOURS",
        "step IN (INTERVAL 0 HOURS, INTERVAL 12 HOURS)",
        "step IS NOT NULL AND x = 20",
        "NOT (step < INTERVAL 360 MINUTES)",
    ],
)
def test_filter_on_duration_dimension_matches_duckdb(tmp_path: Path, fmt: int, where: str) -> None:
    path = tmp_path / "f.zarr"
    frame = _forecast(path, fmt).to_dataframe().reset_index()[["step", "x", "t2m"]]  # noqa: F841
    query = "SELECT step, x, t2m FROM {} WHERE " + where + " ORDER BY step, x"
    with zarrsql.connect() as con:
        got = con.sql(query.format(f"read_zarr('{path}', dims := ['step', 'x'])")).fetchall()
    want = duckdb.sql(query.format("frame")).fetchall()
    assert want
    assert got == want


def test_bare_hours_units_decode_like_xarray(tmp_path: Path) -> None:
    """No `dtype` attribute: xarray decodes with decode_timedelta=True; integers stay exact."""
    big = 2**60 + 7  # nanoseconds beyond 2**53: a float would round it
    _raw_array(tmp_path / "d.zarr", "h", np.array([0, 6, -1, 48], dtype="i4"), 2, -1, {"units": "hours"})
    _raw_array(tmp_path / "d.zarr", "f", np.array([1.5, np.nan, 0.25, -2.0]), 2, np.nan, {"units": "hours"})
    _raw_array(tmp_path / "d.zarr", "n", np.array([big, 1000, 5, 0], dtype="i8"), 2, None, {"units": "nanoseconds"})
    oracle = xr.open_zarr(tmp_path / "d.zarr", consolidated=False, decode_timedelta=True)
    micro = _dt.timedelta(microseconds=1)
    for name in ("h", "f", "n"):
        values = oracle[name].values
        assert values.dtype.kind == "m"
        nanos = values.astype("m8[ns]").astype(np.int64).tolist()
        want = [None if pd.isna(v) else n // 1000 for v, n in zip(values, nanos, strict=True)]
        got = [None if v is None else v // micro for v in _column(tmp_path / "d.zarr", name)]
        assert got == want, name
    assert _column(tmp_path / "d.zarr", "n")[0] // micro == big // 1000  # exact past 2**53


def test_decode_times_false_keeps_duration_numbers(tmp_path: Path) -> None:
    path = tmp_path / "f.zarr"
    _forecast(path, 3)
    raw = zarr.open_array(str(path / "lead"))[...]
    step = zarr.open_array(str(path / "step"))[...]
    assert _sql_type(path, "lead", dims=["step"], decode_times=False) == "BIGINT"
    fill = zarr.open_array(str(path / "lead")).attrs.get("_FillValue")
    expected = [None if v == fill else v for v in raw.tolist()]
    assert _column(path, "lead", order="step", dims=["step"], decode_times=False) == expected
    assert _column(path, "step", order="step", dims=["step"], decode_times=False) == step.tolist()


def test_bounds_refuses_a_duration_dimension(tmp_path: Path) -> None:
    path = tmp_path / "f.zarr"
    _forecast(path, 3)
    with pytest.raises(zarrsql.ParameterError, match="duration"):
        _column(path, "t2m", order="step", dims=["step", "x"], bounds=[["step", "0", "3"]])


# ------------------------------------------------------------------------- bounds on float32


def _grid(tmp_path: Path, step: float, dtype: str) -> tuple[Path, pd.DataFrame]:
    lat = (np.arange(-40, 41) * step + 45.0).astype(dtype)
    ds = xr.Dataset({"v": ("lat", np.arange(lat.size, dtype="f8"))}, coords={"lat": lat})
    path = _write(ds, tmp_path / f"g{step}{dtype}.zarr", 3)
    return path, xr.open_zarr(path, consolidated=False).to_dataframe().reset_index()


def _texts(step: float) -> list[str]:
    return [f"{45.0 + k * step:.2f}".rstrip("0").rstrip(".") for k in range(-5, 6)]


@pytest.mark.parametrize("dtype", ["f4", "f8"])
@pytest.mark.parametrize("step", [0.1, 0.25, 0.01])
def test_bounds_select_what_where_selects(tmp_path: Path, step: float, dtype: str) -> None:
    path, frame = _grid(tmp_path, step, dtype)
    assert duckdb.sql("SELECT typeof(lat) FROM frame LIMIT 1").fetchall()[0][0] == (
        "FLOAT" if dtype == "f4" else "DOUBLE"
    )
    texts = _texts(step)
    with zarrsql.connect() as con:
        for low in texts[::2]:
            for high in [t for t in texts[1::2] if float(t) >= float(low)] + [low]:
                want = duckdb.sql(f"SELECT lat FROM frame WHERE lat BETWEEN {low} AND {high} ORDER BY lat").fetchall()
                got = con.sql(
                    f"SELECT lat FROM read_zarr('{path}', bounds := [['lat', '{low}', '{high}']]) ORDER BY lat"
                ).fetchall()
                pushed = con.sql(
                    f"SELECT lat FROM read_zarr('{path}') WHERE lat BETWEEN {low} AND {high} ORDER BY lat"
                ).fetchall()
                assert got == want == pushed, (low, high)
                if low == high:
                    assert len(want) == 1, low  # the grid holds every such value


def test_bounds_float32_single_point(tmp_path: Path) -> None:
    path, frame = _grid(tmp_path, 0.1, "f4")
    want = duckdb.sql("SELECT count(*) FROM frame WHERE lat BETWEEN 45.1 AND 45.1").fetchall()[0]
    with zarrsql.connect() as con:
        got = con.sql(f"SELECT count(*) FROM read_zarr('{path}', bounds := [['lat', '45.1', '45.1']])").fetchall()[0]
    assert got == want == (1,)


def test_bounds_numbers_from_python(tmp_path: Path) -> None:
    path, frame = _grid(tmp_path, 0.1, "f4")
    want = duckdb.sql("SELECT lat FROM frame WHERE lat BETWEEN 45.1 AND 45.3 ORDER BY lat").fetchall()
    assert len(want) == 3
    with zarrsql.connect() as con:
        for ends in (["45.1", "45.3"], [45.1, 45.3]):
            rel = zarrsql.read_zarr(str(path), connection=con, bounds=[["lat", *ends]])
            assert rel.order("lat").select("lat").fetchall() == want, ends
        rel = zarrsql.read_zarr(str(path), connection=con, bounds=[["lat", 45, None]])
        assert rel.count("*").fetchall()[0] == duckdb.sql("SELECT count(*) FROM frame WHERE lat >= 45").fetchall()[0]


@pytest.mark.parametrize("ends", ["10, 20", "45.1, 45.3", "NULL, 20"])
def test_bounds_numbers_in_sql_say_to_write_strings(tmp_path: Path, ends: str) -> None:
    path, frame = _grid(tmp_path, 0.1, "f4")
    with zarrsql.connect() as con:
        with pytest.raises(zarrsql.ParameterError, match=r"bounds := .*\[\['lat', '10', '20'\]\]"):
            con.sql(f"SELECT * FROM read_zarr('{path}', bounds := [['lat', {ends}]])").fetchall()
        strings = ", ".join("NULL" if e == "NULL" else f"'{e}'" for e in ends.split(", "))
        got = con.sql(f"SELECT count(*) FROM read_zarr('{path}', bounds := [['lat', {strings}]])").fetchall()[0]
    low, high = ends.split(", ")
    cond = f"lat <= {high}" if low == "NULL" else f"lat BETWEEN {low} AND {high}"
    assert got == duckdb.sql(f"SELECT count(*) FROM frame WHERE {cond}").fetchall()[0]
