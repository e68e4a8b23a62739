"""The user guide read as a contract: claims a tester found untrue, now true of code and page.

Each test checks the behaviour against an oracle (xarray, zarr-python, numpy) and, where the
page was what was wrong, that the page now says what the code does (the SQL it gives for
`ds.isel` is taken from the page and run).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"


def _guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


def _table_row(first_cell: str) -> str:
    """The row of one of the guide's tables whose first cell starts with `first_cell`."""
    rows = [line for line in _guide().splitlines() if line.startswith(f"| {first_cell}")]
    assert len(rows) == 1, rows
    return rows[0]


# -- D1: a misaligned group's coord_vars ---------------------------------------------------------


def _misaligned_store(path: Path, *, own_x: bool) -> None:
    """A root of 5 `x` values and a group `mis` whose `baz` has 7, with or without its own `x`."""
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("x", shape=(5,), dtype="f8", dimension_names=["x"])[:] = np.arange(5.0)
    root.create_array("v", shape=(5,), dtype="f8", dimension_names=["x"])[:] = 1.0
    group = root.create_group("mis")
    if own_x:
        group.create_array("x", shape=(7,), dtype="f8", dimension_names=["x"])[:] = np.arange(7.0) * 10
    group.create_array("baz", shape=(7,), dtype="f8", dimension_names=["x"])[:] = np.arange(7.0) + 0.5


@pytest.mark.parametrize("own_x", [True, False], ids=["own-x", "no-own-x"])
def test_a_misaligned_group_lists_no_coord_vars_and_its_arrays_read_as_the_guide_says(
    tmp_path: Path, own_x: bool
) -> None:
    path = tmp_path / "mis.zarr"
    _misaligned_store(path, own_x=own_x)
    con = zarrsql.connect()
    listed = con.execute(f"SELECT coord_vars FROM read_zarr_tables('{path}') WHERE group_path = '/mis'").fetchall()
    assert listed == [([],)]
    rows = con.execute(f"SELECT * FROM read_zarr('{path}', array_path := 'mis/baz')").fetchall()
    group = zarr.open_group(path, mode="r")["mis"]
    # the group's own 7-value x labels the axis; without it, positions (the root's 5 cannot)
    labels = group["x"][:].tolist() if own_x else list(range(7))
    assert rows == list(zip(labels, group["baz"][:].tolist(), strict=True))
    assert "`coord_vars` list only coordinates of the right length" not in _guide()
    assert "Its tables list no `coord_vars`" in _guide()


# -- D2: table_name := on a group of no tables -----------------------------------------------------


@pytest.mark.parametrize("selection", ["table_name := 'x'", "dims := ['x']", None])
def test_selecting_in_a_group_without_tables_names_its_subgroups(tmp_path: Path, selection: str | None) -> None:
    path = tmp_path / "nested.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_group("sim").create_group("fine").create_array("foo", shape=(3,), dtype="f8", dimension_names=["x"])
    extra = f", {selection}" if selection else ""
    with pytest.raises(zarrsql.SelectionError) as info:
        zarrsql.connect().execute(f"SELECT * FROM read_zarr('{path}', group_path := 'sim'{extra})").fetchall()
    message = str(info.value)
    assert "group '/sim'" in message, message
    assert "has no tables" in message, message
    assert "it has the groups ['/sim/fine']: pass group_path :=" in message, message
    assert "its tables:" not in message, message


# -- D3: zarr_sample's points as a subquery ----------------------------------------------------------


@pytest.fixture
def grid_store(tmp_path: Path) -> tuple[Path, xr.Dataset]:
    ds = xr.Dataset(
        {"t": (("lat", "lon"), np.arange(6.0).reshape(2, 3))}, coords={"lat": [10.0, 20.0], "lon": [0.0, 1.0, 2.0]}
    )
    path = tmp_path / "grid.zarr"
    ds.to_zarr(path)
    return path, ds


@pytest.mark.parametrize("points_arg", ["{q}", "points := {q}"])
def test_points_given_as_a_subquery_are_refused_with_the_string_form(
    grid_store: tuple[Path, xr.Dataset], points_arg: str
) -> None:
    path, ds = grid_store
    query = "SELECT 11.0 AS lat, 1.2 AS lon"
    con = zarrsql.connect()
    statement = f"SELECT * FROM zarr_sample('{path}', {points_arg.format(q=f'({query})')})"
    for run in (lambda: con.execute(statement).fetchall(), lambda: con.sql(statement).fetchall()):
        with pytest.raises(zarrsql.ParameterError) as info:
            run()
        message = str(info.value)
        assert "query as a string" in message, message
        assert f"zarr_sample('{path}', '{query}')" in message, message
    # the form the message gives reads what xarray's nearest selection reads
    rows = con.execute(f"SELECT t FROM zarr_sample('{path}', '{query}')").fetchall()
    assert rows == [(float(ds.t.sel(lat=11.0, lon=1.2, method="nearest")),)]
    assert "query\nas a string" in _guide() or "query as a string" in _guide()


def test_another_argument_given_as_a_subquery_names_it(grid_store: tuple[Path, xr.Dataset]) -> None:
    path, _ = grid_store
    with pytest.raises(zarrsql.ParameterError, match=r"the group_path of read_zarr\(\) is a subquery"):
        zarrsql.connect().execute(f"SELECT * FROM read_zarr('{path}', group_path := (SELECT 'x'))").fetchall()


# -- D4: COPY ... TO 'out.zarr' ------------------------------------------------------------------------


def test_copy_to_a_zarr_path_writes_zarr_and_asks_for_dims_as_the_guide_says(tmp_path: Path) -> None:
    source = tmp_path / "src.zarr"
    ds = xr.Dataset({"a": (("x",), np.arange(3.0))}, coords={"x": [1, 2, 3]})
    ds.to_zarr(source)
    con = zarrsql.connect()
    con.execute(f"COPY (SELECT * FROM read_zarr('{source}')) TO '{tmp_path / 'copy.zarr'}'")
    with xr.open_zarr(tmp_path / "copy.zarr") as written:
        xr.testing.assert_equal(written.load(), ds)
    values = "SELECT * FROM (VALUES (1, 0.0), (2, 1.0), (3, 2.0)) t(x, a)"  # ds's rows, no table
    with pytest.raises(zarrsql.ParameterError, match=r"DIMS \(\.\.\.\)"):
        con.execute(f"COPY ({values}) TO '{tmp_path / 'values.zarr'}'")
    con.execute(f"COPY ({values}) TO '{tmp_path / 'values.zarr'}' (DIMS (x))")
    with xr.open_zarr(tmp_path / "values.zarr") as written:
        xr.testing.assert_allclose(written.load(), ds)
    row = _table_row("`COPY ... TO 'out.zarr'`")
    assert "not supported" not in row, row
    assert "DIMS (...)" in row, row


# -- D5: ds.isel(lat=0) ---------------------------------------------------------------------------


def _isel_where() -> str:
    """The `WHERE` the guide's "Coming from xarray" table gives for `ds.isel(lat=0)`."""
    row = _table_row("`ds.isel(lat=0)`")
    found = re.search(r"`(WHERE lat = [^`]*)`", row)
    assert found, row
    return found.group(1)


@pytest.mark.parametrize(
    "lat",
    [np.arange(40.0), np.arange(40.0)[::-1].copy(), np.r_[5.0, 1.0, 3.0, np.arange(10.0, 47.0)]],
    ids=["ascending", "descending", "unordered"],
)
def test_the_guides_isel_mapping_picks_what_xarray_picks(tmp_path: Path, lat: np.ndarray) -> None:
    ds = xr.Dataset(
        {"v": (("lat", "lon"), np.arange(lat.size * 3.0).reshape(-1, 3))},
        coords={"lat": lat, "lon": [0.0, 1.0, 2.0]},
    )
    path = tmp_path / "axis.zarr"
    ds.to_zarr(path, encoding={"lat": {"chunks": (7,)}, "v": {"chunks": (7, 1)}})  # the axis spans chunks
    where = _isel_where().replace("store.zarr", str(path))
    got = zarrsql.connect().execute(f"SELECT lon, v FROM read_zarr('{path}') {where} ORDER BY lon").fetchall()
    first = ds.v.isel(lat=0)
    assert got == list(zip(first.lon.values.tolist(), first.values.tolist(), strict=True))


# -- small: format := 'hdf5', a linked group --------------------------------------------------------


def test_format_hdf5_reads_an_hdf5_file_and_the_parameter_table_lists_it(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    pytest.importorskip("kerchunk")
    ds = xr.Dataset({"t": (("x",), np.array([1.5, 2.5, 4.0]))}, coords={"x": [10, 20, 30]})
    path = tmp_path / "data.bin"  # a name that does not say HDF5
    ds.to_netcdf(path, engine="h5netcdf")
    rows = zarrsql.connect().execute(f"SELECT x, t FROM read_zarr('{path}', format := 'hdf5') ORDER BY x").fetchall()
    assert rows == list(zip(ds.x.values.tolist(), ds.t.values.tolist(), strict=True))
    assert "'hdf5'" in _table_row("`format`")


def test_format_hdf5_on_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    from zarrsql.errors import StoreNotFoundError

    path = tmp_path / "store.zarr"
    xr.Dataset({"t": (("x",), np.arange(3.0))}).to_zarr(path)
    with pytest.raises(StoreNotFoundError, match="is a folder, not an HDF5 file.*leave format := out"):
        zarrsql.connect().execute(f"SELECT * FROM read_zarr('{path}', format := 'hdf5')").fetchall()


@pytest.mark.parametrize("group_path", ["linked", "linked/deeper"])
def test_reading_a_linked_group_is_refused_as_a_store_read(tmp_path: Path, group_path: str) -> None:
    outside = tmp_path / "elsewhere.zarr"
    xr.Dataset({"secret": ("x", np.full(3, 7.0))}).to_zarr(outside / "deeper", consolidated=False)
    path = tmp_path / "store.zarr"
    xr.Dataset({"temp": ("x", np.arange(3.0))}).to_zarr(path, consolidated=False)
    os.symlink(outside, path / "linked", target_is_directory=True)
    with pytest.raises(zarrsql.StoreReadError) as info:
        zarrsql.connect().execute(f"SELECT * FROM read_zarr('{path}', group_path := '{group_path}')").fetchall()
    for fragment in (f"group '/{group_path}'", "'linked'", "symbolic link", "outside the store"):
        assert fragment in str(info.value), str(info.value)
