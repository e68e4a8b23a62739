"""A CF character array named in `coordinates` (`station_name(station, name_strlen)`, the
usual label of a time series station) is an auxiliary coordinate column of its table: one
VARCHAR per cell of its other dimensions, as xarray joins and shows it. It used to be left
out. Expected values come from xarray (`open_zarr`, `open_dataset`) on the same files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import h5netcdf
import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.kerchunk_refs import kerchunk_refs

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")  # v3 S1

NAMES = [b"alpha", b"be", b"gamma", b"", b"X"]


def _chars(words: list[bytes], width: int) -> np.ndarray:
    return np.array([list(w.ljust(width, b"\0")) for w in words], dtype=np.uint8).view("S1")


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _oracle(ds: xr.Dataset, label: str) -> list[tuple[Any, ...]]:
    """(time, station, label, temp) rows of xarray's dataset, in its own row order."""
    rows = []
    for t in range(ds.sizes["time"]):
        for s in range(ds.sizes["station"]):
            rows.append(
                (
                    int(ds.time.values[t]),
                    int(ds.station.values[s]),
                    _text(ds[label].values[s]),
                    float(ds.temp.values[t, s]),
                )
            )
    return rows


def _rows(path: Path | str, sql: str) -> list[tuple[Any, ...]]:
    return zarrsql.connect().sql(sql.format(p=path)).fetchall()


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def written_by_xarray(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    ds = xr.Dataset(
        {"temp": (("time", "station"), np.arange(10.0).reshape(2, 5))},
        coords={"time": [0, 1], "station": [10, 20, 30, 40, 50]},
    )
    ds["station_name"] = (("station", "name_strlen"), _chars(NAMES, 5))
    ds = ds.set_coords("station_name")
    # named by the variable, as a NetCDF file's converted metadata does (xarray itself puts a
    # coordinate whose dimensions no variable holds in the group's `coordinates`)
    ds.temp.encoding["coordinates"] = "station_name"
    path = tmp_path / f"stations-v{request.param}.zarr"
    ds.to_zarr(path, zarr_format=request.param, consolidated=request.param == 2)
    return path


def test_a_character_coordinate_is_a_column_of_its_table(written_by_xarray: Path) -> None:
    oracle = xr.open_zarr(written_by_xarray, consolidated=written_by_xarray.name.endswith("v2.zarr"))
    assert oracle.station_name.dims == ("station",)  # xarray joins it, as a coordinate
    got = _rows(
        written_by_xarray, "SELECT time, station, station_name, temp FROM read_zarr('{p}') ORDER BY time, station"
    )
    assert got == _oracle(oracle, "station_name")
    types = dict(_rows(written_by_xarray, "SELECT column_name, column_type FROM (DESCRIBE FROM read_zarr('{p}'))"))
    assert types["station_name"] == "VARCHAR"


def test_where_on_the_character_coordinate_keeps_every_matching_row(written_by_xarray: Path) -> None:
    oracle = xr.open_zarr(written_by_xarray, consolidated=written_by_xarray.name.endswith("v2.zarr"))
    rows = _oracle(oracle, "station_name")
    for where, keep in [
        ("station_name = 'be'", lambda r: r[2] == "be"),
        ("station_name IN ('alpha', 'gamma')", lambda r: r[2] in ("alpha", "gamma")),
        ("station_name = ''", lambda r: r[2] == ""),
        ("station_name LIKE 'g%' OR station >= 40", lambda r: r[2].startswith("g") or r[1] >= 40),
    ]:
        got = _rows(
            written_by_xarray,
            f"SELECT time, station, station_name, temp FROM read_zarr('{{p}}') WHERE {where} ORDER BY time, station",
        )
        assert got == [r for r in rows if keep(r)], where


def _netcdf(path: Path) -> None:
    """A NetCDF-C style time series: labels with a fill value, and labels with an encoding."""
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"time": 2, "station": 5, "name_strlen": 5}
        f.create_variable("time", ("time",), data=np.array([0, 1]))
        f.create_variable("station", ("station",), data=np.array([10, 20, 30, 40, 50]))
        v = f.create_variable("station_name", ("station", "name_strlen"), dtype="S1", fillvalue=b"X")
        v[...] = _chars(NAMES, 5)
        v = f.create_variable("station_code", ("station", "name_strlen"), dtype="S1")
        v[...] = _chars([w.upper() for w in NAMES], 5)
        v.attrs["_Encoding"] = "utf-8"
        v = f.create_variable("temp", ("time", "station"), data=np.arange(10.0).reshape(2, 5))
        v.attrs["coordinates"] = "station_name station_code"


@pytest.mark.parametrize("source", ["nc", "kerchunk"])
def test_netcdf_labels_with_fill_values_and_encodings(source: str, tmp_path: Path) -> None:
    nc = tmp_path / "series.nc"
    _netcdf(nc)
    oracle = xr.open_dataset(nc, engine="h5netcdf")
    assert set(oracle.coords) >= {"station_name", "station_code"}
    path: Path = nc
    if source == "kerchunk":
        path = tmp_path / "series.json"
        path.write_text(json.dumps(kerchunk_refs(nc)))
    for label in ("station_name", "station_code"):
        got = _rows(path, f"SELECT time, station, {label}, temp FROM read_zarr('{{p}}') ORDER BY time, station")
        assert got == _oracle(oracle, label), label
    # the fill value "X" masks a label (xarray: NaN); the encoded one is text as stored
    masked = sum(_text(v) is None for v in oracle.station_name.values.tolist()) * oracle.sizes["time"]
    assert masked > 0
    assert _rows(path, "SELECT count(*) FROM read_zarr('{p}') WHERE station_name IS NULL") == [(masked,)]


def test_an_encoding_python_does_not_know_leaves_the_coordinate_out(tmp_path: Path) -> None:
    path = tmp_path / "odd.nc"
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"station": 2, "nchar": 2}
        f.create_variable("station", ("station",), data=np.array([1, 2]))
        v = f.create_variable("code", ("station", "nchar"), dtype="S1")
        v[...] = np.array([[b"a", b"b"], [b"c", b""]])
        v.attrs["_Encoding"] = "no-such-encoding"
        v = f.create_variable("temp", ("station",), data=np.array([1.5, 2.5]))
        v.attrs["coordinates"] = "code"
    assert _rows(path, "SELECT * FROM read_zarr('{p}') ORDER BY station") == [(1, 1.5), (2, 2.5)]
