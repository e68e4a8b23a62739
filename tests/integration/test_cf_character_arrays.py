"""CF character arrays (an `S1` variable whose last dimension holds a string's characters)
read as one VARCHAR per cell of the other dimensions, as xarray decodes them.

xarray writes fixed-width bytes to NetCDF this way (`S3` becomes `S1` over `station` and a
`string3` dimension) and joins them back when it reads; NetCDF-C `char` variables and Zarr
stores holding `S1` arrays with dimension names read the same. Expected values come from
`xarray.open_dataset` / `xarray.open_zarr` on the same file; a variable xarray does not join
(its character dimension has a coordinate, or another variable uses it otherwise) keeps one
row per character.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import h5netcdf
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from tests.kerchunk_refs import kerchunk_refs

pytestmark = pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")  # v3 S1

CODES = np.array([b"AB", b"C", b"DEF", b"", b"GH"], dtype="S3")


def _text(value: Any) -> str | None:
    """An xarray value as the VARCHAR zarrsql gives: bytes as UTF-8 text, NaN as NULL."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _expected(da: xr.DataArray) -> list[tuple[Any, ...]]:
    """The rows of a 1-d variable over its dimension coordinate (or positions)."""
    (dim,) = da.dims
    index = da[dim].values.tolist() if dim in da.coords else list(range(da.sizes[dim]))
    return [(i, _text(v)) for i, v in zip(index, da.values.tolist(), strict=True)]


def _rows(sql: str) -> list[tuple[Any, ...]]:
    return zarrsql.connect().sql(sql).fetchall()


@pytest.fixture
def written_by_xarray(tmp_path: Path) -> Path:
    """xarray's own NetCDF of fixed-width bytes: `code(station, string3)` of `S1`."""
    path = tmp_path / "codes.nc"
    xr.Dataset(
        {"code": ("station", CODES), "temp": ("station", np.arange(5.0))},
        coords={"station": [101, 102, 103, 104, 105]},
    ).to_netcdf(path, engine="h5netcdf")
    return path


def _references(nc: Path, tmp_path: Path) -> Path:
    refs = tmp_path / "codes.json"
    refs.write_text(json.dumps(kerchunk_refs(nc)))
    return refs


@pytest.mark.parametrize("source", ["nc", "kerchunk"])
def test_xarray_netcdf_bytes_join_into_the_station_table(source: str, written_by_xarray: Path, tmp_path: Path) -> None:
    oracle = xr.open_dataset(written_by_xarray, engine="h5netcdf")
    assert oracle.code.dims == ("station",)
    path = written_by_xarray if source == "nc" else _references(written_by_xarray, tmp_path)
    assert _rows(f"SELECT table_name, dims FROM read_zarr_tables('{path}')") == [("station", ["station"])]
    assert _rows(f"SELECT station, code FROM read_zarr('{path}') ORDER BY station") == _expected(oracle.code)
    temps = _rows(f"SELECT temp FROM read_zarr('{path}') ORDER BY station")
    assert [t for (t,) in temps] == oracle.temp.values.tolist()


def test_where_on_the_joined_column_and_on_the_dimension(written_by_xarray: Path) -> None:
    frame = xr.open_dataset(written_by_xarray, engine="h5netcdf").to_dataframe().reset_index()
    frame["code"] = frame["code"].map(_text)
    table = f"read_zarr('{written_by_xarray}')"
    got = _rows(f"SELECT station FROM {table} WHERE code = 'DEF' OR code LIKE 'G%' ORDER BY station")
    assert [s for (s,) in got] == frame[frame.code.isin(["DEF"]) | frame.code.str.startswith("G")].station.tolist()
    got = _rows(f"SELECT station, code FROM {table} WHERE station >= 103 ORDER BY station")
    assert got == [tuple(r) for r in frame[frame.station >= 103][["station", "code"]].itertuples(index=False)]
    assert _rows(f"SELECT count(*) FROM {table} WHERE code = ''") == [(int((frame.code == "").sum()),)]


def _zarr_store(tmp_path: Path, zarr_format: int) -> Path:
    """S1 arrays with dimension names, chunked along the character dimension: `name` joins;
    `flag` (its dimension `letter` has a coordinate) and `grid` (its dimension `width` is
    also `other`'s, not as its last) do not. No Zarr fill_value in v2 (xarray would mask
    the strings equal to it there, zarrsql masks by the `_FillValue` attribute only)."""
    path = tmp_path / f"chars_v{zarr_format}.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)

    def array(name: str, data: np.ndarray, dims: list[str], chunks: tuple[int, ...]) -> None:
        kwargs: dict[str, Any] = {"dimension_names": dims} if zarr_format == 3 else {"fill_value": None}
        a = root.create_array(name, shape=data.shape, dtype=data.dtype, chunks=chunks, **kwargs)
        a[...] = data
        if zarr_format == 2:
            a.attrs["_ARRAY_DIMENSIONS"] = dims

    words = [b"alpha", b"be", b"", b"a\x00b", b"\xffz", b"omega"]
    chars = np.array([list(w.ljust(5, b"\0")) for w in words], dtype=np.uint8).view("S1")
    array("name", chars, ["row", "nchar"], (4, 2))
    array("row", np.arange(10, 16), ["row"], (6,))
    array("flag", chars[:, :2].copy(), ["row", "letter"], (6, 2))
    array("letter", np.array([0, 1]), ["letter"], (2,))
    array("grid", chars[:, :3].copy(), ["row", "width"], (6, 3))
    array("other", np.zeros((3, 6)), ["width", "row"], (3, 6))
    if zarr_format == 2:
        zarr.consolidate_metadata(path)
    return path


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_zarr_store_joins_what_open_zarr_joins(zarr_format: int, tmp_path: Path) -> None:
    path = _zarr_store(tmp_path, zarr_format)
    oracle = xr.open_zarr(path, consolidated=zarr_format == 2)
    assert oracle.name.dims == ("row",)
    assert oracle.flag.dims == ("row", "letter")
    assert oracle.grid.dims == ("row", "width")
    tables = dict(_rows(f"SELECT table_name, dims FROM read_zarr_tables('{path}')"))
    assert tables["row"] == ["row"]
    assert "row_nchar" not in tables
    got = _rows(f"SELECT row, name FROM read_zarr('{path}', table_name := 'row') ORDER BY row")
    assert got == _expected(oracle.name)  # trailing NULs end a string, NULs inside stay
    assert got[3][1] == "a\x00b"
    flags = _rows(f"SELECT count(*) FROM read_zarr('{path}', table_name := 'row_letter')")
    assert flags == [(oracle.flag.size,)]  # one row per character: not joined, as in xarray


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_where_prunes_the_joined_table_by_its_dimension(zarr_format: int, tmp_path: Path) -> None:
    path = _zarr_store(tmp_path, zarr_format)
    oracle = xr.open_zarr(path, consolidated=zarr_format == 2)
    expected = [r for r in _expected(oracle.name) if r[0] >= 14]
    with zarrsql.trace() as t:
        got = _rows(f"SELECT row, name FROM read_zarr('{path}', table_name := 'row') WHERE row >= 14 ORDER BY row")
    assert got == expected
    # rows 14 and 15 lie in the second of name's two row chunks (of 4 rows): one unit of two
    assert (t.work_units_planned, t.work_units_read) == (2, 1)


def _netcdf_edge_cases(path: Path) -> None:
    """NetCDF-C style character variables: fill values, an encoding, a scalar string."""
    rows = np.array([list(w.ljust(4, b"\0")) for w in [b"A\0B", b"X", b"B", b"", b"XY"]], dtype=np.uint8).view("S1")
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"station": 5, "nchar": 4, "strlen": 6}
        f.create_variable("station", ("station",), data=np.arange(5))
        v = f.create_variable("filled", ("station", "nchar"), dtype="S1", fillvalue=b"X")
        v[...] = rows
        v = f.create_variable("missing", ("station", "nchar"), dtype="S1")
        v[...] = rows
        v.attrs["missing_value"] = np.bytes_(b"B")  # a NetCDF char attribute: h5py reads bytes
        v = f.create_variable("encoded", ("station", "nchar"), dtype="S1", fillvalue=b"X")
        v[...] = rows
        v.attrs["_Encoding"] = "utf-8"
        latin = np.array([list("é".encode("latin-1").ljust(4, b"\0"))] * 5, dtype=np.uint8).view("S1")
        v = f.create_variable("latin", ("station", "nchar"), dtype="S1")
        v[...] = latin
        v.attrs["_Encoding"] = "latin-1"
        v = f.create_variable("title", ("strlen",), dtype="S1")
        v[...] = np.array(list(b"hello\0"), dtype=np.uint8).view("S1")


@pytest.mark.parametrize("source", ["nc", "kerchunk"])
def test_fill_values_encodings_and_nuls_as_xarray_decodes_them(source: str, tmp_path: Path) -> None:
    nc = tmp_path / "edges.nc"
    _netcdf_edge_cases(nc)
    oracle = xr.open_dataset(nc, engine="h5netcdf")
    path = nc if source == "nc" else _references(nc, tmp_path)
    for name in ("filled", "missing", "encoded", "latin"):
        got = _rows(f"SELECT station, {name} FROM read_zarr('{path}') ORDER BY station")
        assert got == _expected(oracle[name]), name


@pytest.mark.parametrize("source", ["nc", "kerchunk"])
def test_a_character_array_over_one_dimension_is_a_scalar_not_a_table(source: str, tmp_path: Path) -> None:
    nc = tmp_path / "edges.nc"
    _netcdf_edge_cases(nc)
    assert xr.open_dataset(nc, engine="h5netcdf").title.dims == ()  # xarray: a 0-d string
    path = nc if source == "nc" else _references(nc, tmp_path)
    assert _rows(f"SELECT table_name, dims FROM read_zarr_tables('{path}')") == [("station", ["station"])]


def test_an_encoding_python_does_not_know_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "odd.nc"
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"station": 2, "nchar": 2}
        v = f.create_variable("code", ("station", "nchar"), dtype="S1")
        v[...] = np.array([[b"a", b"b"], [b"c", b""]])
        v.attrs["_Encoding"] = "no-such-encoding"
    with pytest.raises(zarrsql.ZarrSQLError, match="_Encoding 'no-such-encoding'.*array_path := 'code'"):
        _rows(f"SELECT code FROM read_zarr('{path}')")
