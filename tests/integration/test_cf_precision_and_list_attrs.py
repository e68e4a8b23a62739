"""Two CF decoding corners, against xarray: a time reference date finer than the microsecond
(xarray writes `nanoseconds since 2000-01-01 00:00:00.000000001` itself for a datetime64[ns]
axis whose first value has nanoseconds), and `scale_factor` / `add_offset` written as
one-element lists (netCDF attributes are arrays; converters keep `[0.01]`).

The expected TIMESTAMP is xarray's datetime64[ns] value floored to the microsecond (what
numpy's cast to datetime64[us] does); filters are checked against DuckDB on a pandas copy.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.errors import MetadataError


def _open(path: str, **kwargs: object) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_zarr(path, **kwargs)  # type: ignore[arg-type]


def _floored(values: np.ndarray) -> list:
    """xarray's datetime64[ns] values as the TIMESTAMP (microseconds) DuckDB returns."""
    return [None if np.isnat(v) else v.astype("datetime64[us]").item() for v in values]


# ----------------------------------------------------------------- a nanosecond reference

#: The first value has nanoseconds, so xarray writes the reference with nine decimals; the
#: others straddle microsecond and day boundaries on both sides of it.
_NS_TIMES = [
    "2000-01-01 00:00:00.000000001",
    "2000-01-02 00:00:00",
    "1999-12-31 23:59:59.999999999",
    "2000-01-02 00:00:00.000000999",
    "2000-01-02 00:00:00.000001",
    "2000-01-03 00:00:00",
    "2000-01-01 23:59:59.999999",
    "2000-01-03 12:00:00.5",
]


def _ns_axis_store(tmp_path: Path, zarr_format: int) -> tuple[str, xr.Dataset]:
    path = str(tmp_path / f"nsref{zarr_format}.zarr")
    times = pd.to_datetime(_NS_TIMES, format="ISO8601")
    ds = xr.Dataset({"v": (("time",), np.arange(len(times), dtype=np.float64))}, coords={"time": times})
    ds.time.encoding["chunks"] = (2,)  # four chunks, so that a time filter can prune some
    ds.v.encoding["chunks"] = (2,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, mode="w", zarr_format=zarr_format, consolidated=zarr_format == 2)
    oracle = _open(path, consolidated=zarr_format == 2)
    return path, oracle


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_nanosecond_reference_date_is_not_cut_to_the_microsecond(tmp_path: Path, zarr_format: int) -> None:
    path, oracle = _ns_axis_store(tmp_path, zarr_format)
    units = oracle.time.encoding["units"]
    assert units.startswith("nanoseconds since")  # the case at hand: nine decimals
    assert units.endswith(".000000001")
    rows = zarrsql.connect().sql(f"SELECT time FROM read_zarr('{path}') ORDER BY v").fetchall()
    assert [r[0] for r in rows] == _floored(oracle.time.values)


_TIME_FILTERS = [
    "time >= DATE '2000-01-02'",
    "time < DATE '2000-01-02'",
    "time = TIMESTAMP '2000-01-02 00:00:00'",
    "time > TIMESTAMP '2000-01-02 00:00:00'",
    "time BETWEEN TIMESTAMP '1999-12-31 23:59:59.999999' AND TIMESTAMP '2000-01-01 00:00:00'",
    "time <= TIMESTAMP '2000-01-02 00:00:00.000001'",
    "date_trunc('day', time) = DATE '2000-01-02'",
]


@pytest.mark.parametrize("where", _TIME_FILTERS)
def test_time_filters_on_a_nanosecond_reference_keep_every_row(tmp_path: Path, where: str) -> None:
    path, oracle = _ns_axis_store(tmp_path, 2)
    frame = oracle.to_dataframe().reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")  # floors, as the TIMESTAMP does
    query = "SELECT v FROM {} WHERE " + where + " ORDER BY v"
    expected = duckdb.sql(query.format("frame")).fetchall()
    assert expected  # every filter here keeps some rows
    got = zarrsql.connect().sql(query.format(f"read_zarr('{path}')")).fetchall()
    assert got == expected


def test_a_pushed_time_filter_prunes_without_losing_the_midnight_row(tmp_path: Path) -> None:
    path, oracle = _ns_axis_store(tmp_path, 2)
    midnight = np.datetime64("2000-01-02T00:00:00", "us")
    floored = np.array(_floored(oracle.time.values), dtype="datetime64[us]")
    expected = sorted(oracle.v.values[floored == midnight].tolist())
    assert expected == [1.0, 3.0]  # 2000-01-02 exactly (read 1 us early before) and 999 ns past it
    where = "time = TIMESTAMP '2000-01-02 00:00:00'"
    with zarrsql.trace() as t:
        got = zarrsql.connect().sql(f"SELECT v FROM read_zarr('{path}') WHERE {where} ORDER BY v")
        rows = [r[0] for r in got.fetchall()]
    assert rows == expected
    # chunks of two rows: (0, 1), (2, 3), (4, 5), (6, 7); only the first two hold a match
    # (with DuckDB 1.5, which has no scan-source protocol, the scan also reads (6, 7))
    assert t.work_units_planned == 4
    assert 2 <= t.work_units_read <= 3


def _write_offsets(tmp_path: Path) -> tuple[str, xr.Dataset]:
    """Integer and float offsets from references with sub-microsecond digits, written directly."""
    path = str(tmp_path / "offsets.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=2)
    ns_offsets = [0, 499, 500, 1500, -500, -501, -1499, 86_399_999_999_500]
    ns_units = "nanoseconds since 2000-01-01T00:00:00.000000500"
    for name, dtype in (("t_int", "int64"), ("t_float", "float64")):
        array = group.create_array(
            name, shape=(len(ns_offsets),), dtype=dtype, chunks=(3,), fill_value=None,
            attributes={"_ARRAY_DIMENSIONS": ["i"], "units": ns_units},
        )  # fmt: skip
        array[:] = ns_offsets
    seconds = group.create_array(
        "t_seconds", shape=(4,), dtype="int32", chunks=(3,), fill_value=None,
        # ten decimals: digits past the nanosecond are cut, as pandas (and so xarray) reads them
        attributes={"_ARRAY_DIMENSIONS": ["j"], "units": "seconds since 2000-01-01 00:00:00.9999999999"},
    )  # fmt: skip
    seconds[:] = [0, 1, -1, 86_399]
    zarr.consolidate_metadata(path)
    return path, _open(path)


@pytest.mark.parametrize(("name", "dim"), [("t_int", "i"), ("t_float", "i"), ("t_seconds", "j")])
def test_offsets_from_a_sub_microsecond_reference_floor_as_xarray(tmp_path: Path, name: str, dim: str) -> None:
    path, oracle = _write_offsets(tmp_path)
    assert oracle[name].dtype.kind == "M"
    rows = zarrsql.connect().sql(f"SELECT {name} FROM read_zarr('{path}', dims := ['{dim}']) ORDER BY {dim}")
    assert [r[0] for r in rows.fetchall()] == _floored(oracle[name].values)


# ----------------------------------------------------------------- list packing attributes


def _packed_store(tmp_path: Path, zarr_format: int, attributes: dict, stored: list[int]) -> str:
    path = str(tmp_path / f"packed{zarr_format}.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    dims = {"_ARRAY_DIMENSIONS": ["i"]} if zarr_format == 2 else {}
    names = {} if zarr_format == 2 else {"dimension_names": ["i"]}
    n = len(stored)
    index = group.create_array("i", shape=(n,), dtype="i8", chunks=(n,), fill_value=None, attributes=dims, **names)
    index[:] = np.arange(n)
    packed = group.create_array(
        "t2m", shape=(n,), dtype="i2", chunks=(n,), fill_value=None, attributes={**dims, **attributes}, **names
    )
    packed[:] = stored
    if zarr_format == 2:
        zarr.consolidate_metadata(path)
    return path


_LIST_PACKINGS = [
    {"scale_factor": [0.01], "add_offset": [273.15], "_FillValue": [-32767]},  # as in a converted netCDF file
    {"scale_factor": [0.01], "add_offset": [273.15], "missing_value": -32767},
    {"scale_factor": [0.01], "add_offset": 273.15, "missing_value": -32767},
    {"scale_factor": [0.01]},
    {"add_offset": [0.5]},
    {"scale_factor": [[0.5]]},  # nested: xarray takes the one element too
]


@pytest.mark.parametrize("attributes", _LIST_PACKINGS)
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_one_element_list_packing_attributes_unpack_as_xarray(
    tmp_path: Path, zarr_format: int, attributes: dict
) -> None:
    if zarr_format == 3 and "_FillValue" in attributes:
        pytest.skip("xarray refuses a list _FillValue in Zarr v3 (it decodes that attribute itself)")
    path = _packed_store(tmp_path, zarr_format, attributes, [0, 100, -32767, 2500, 7])
    oracle = _open(path, consolidated=zarr_format == 2).t2m.values.astype(np.float64)  # object for some
    con = zarrsql.connect()
    rel = con.sql(f"SELECT t2m FROM read_zarr('{path}') ORDER BY i")
    assert [str(t) for t in rel.types] == ["DOUBLE"]
    got = [r[0] for r in rel.fetchall()]
    assert got == [None if np.isnan(x) else float(x) for x in oracle]
    low, high = 274.0, 300.0
    expected = np.flatnonzero((oracle >= low) & (oracle <= high)).tolist()
    rows = con.sql(f"SELECT i FROM read_zarr('{path}') WHERE t2m BETWEEN {low} AND {high} ORDER BY i").fetchall()
    assert [r[0] for r in rows] == expected


def test_a_packed_time_with_a_list_scale_factor_decodes_as_with_a_number(tmp_path: Path) -> None:
    # xarray itself fails on this time (the list makes its float type `object`), so the oracle
    # is xarray on the same store with the attribute written as the number it holds
    listed = _packed_store(tmp_path / "a", 3, {"units": "hours since 2000-01-01", "scale_factor": [0.5]}, [0, 1, 48])
    plain = _packed_store(tmp_path / "b", 3, {"units": "hours since 2000-01-01", "scale_factor": 0.5}, [0, 1, 48])
    expected = _floored(_open(plain, consolidated=False).t2m.values)
    rel = zarrsql.connect().sql(f"SELECT t2m FROM read_zarr('{listed}') ORDER BY i")
    assert [str(t) for t in rel.types] == ["TIMESTAMP"]
    assert [r[0] for r in rel.fetchall()] == expected


@pytest.mark.parametrize("value", [[0.01, 0.02], [], "0.01"])
def test_a_packing_attribute_that_is_not_one_number_is_refused(tmp_path: Path, value: object) -> None:
    path = _packed_store(tmp_path, 2, {"scale_factor": value}, [0, 100, 2500])
    with pytest.raises((ValueError, TypeError)):  # xarray cannot open it either
        _open(path).t2m.values  # noqa: B018
    with pytest.raises(MetadataError, match=r"array 't2m' has scale_factor .* not one number"):
        zarrsql.connect().sql(f"SELECT t2m FROM read_zarr('{path}')").fetchall()
