"""`describe` and the selection errors on DataTree stores.

- An auxiliary coordinate (CF `coordinates`, a scalar among them) is a column of its table:
  `describe` shows it with its units and does not list it among the arrays in no table.
- A child group without a coordinate of its own, whose dimension has another length than an
  ancestor's, is misaligned (as xarray says), not "a coordinate of the wrong length".
- A `group_path` naming no group lists the groups where it was looked for and offers the
  nearest one (one differing only in letter case above all: group paths are case-sensitive);
  a misspelt `table_name` is offered the nearest table; a `group_path` naming an array says
  to read it with `array_path :=`, in one sentence and then the fix.

Stores are written by xarray and zarr-python; expected columns, units, values and group
names come from xarray (`open_datatree`, `to_dataframe`) and zarr-python, not from zarrsql.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql


@pytest.fixture
def con() -> Iterator[zarrsql.Connection]:
    with zarrsql.connect() as c:
        yield c


def _write_tree(tree: dict[str, xr.Dataset], store: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.DataTree.from_dict(tree).to_zarr(store, mode="w")


def _open_tree(store: Path) -> xr.DataTree:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_datatree(store, engine="zarr")


def _values(store: Path, group: str, name: str) -> list[float]:
    """The values of one variable of one group, as xarray reads them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(store, group=group, engine="zarr") as ds:
            return [float(v) for v in ds[name].values]


def _selection_error(con: zarrsql.Connection, sql: str) -> str:
    with pytest.raises(zarrsql.SelectionError) as caught:
        con.sql(sql).fetchall()
    return str(caught.value)


def _subgroups(store: Path, group: str = "") -> list[str]:
    """The groups directly in `group`, as zarr-python lists them, in zarrsql's display form."""
    prefix = f"/{group}/" if group else "/"
    return sorted(prefix + name for name, _ in zarr.open_group(store, path=group, mode="r").groups())


# -- describe: auxiliary coordinates are columns ------------------------------------------
@pytest.fixture
def aux_store(tmp_path: Path) -> Path:
    """/g: v(y, x) with the auxiliary coordinates lat(y, x) and lab(x) and a scalar height."""
    store = tmp_path / "aux.zarr"
    lat = xr.DataArray(np.arange(6.0).reshape(2, 3) + 40, dims=("y", "x"), attrs={"units": "degrees_north"})
    group = xr.Dataset(
        {"v": (("y", "x"), np.arange(6.0).reshape(2, 3), {"units": "K"})},
        coords={"lat": lat, "lab": ("x", ["a", "b", "c"]), "height": ((), 2.0, {"units": "m"})},
    )
    _write_tree({"/": xr.Dataset(coords={"x": [1, 2, 3]}), "/g": group}, store)
    return store


def test_auxiliary_coordinates_are_columns_not_unread(con: zarrsql.Connection, aux_store: Path) -> None:
    oracle = _open_tree(aux_store)["g"].to_dataset()
    oracle_columns = set(oracle.to_dataframe().reset_index().columns)
    d = zarrsql.describe(str(aux_store), connection=con)
    (table,) = [t for t in d.table_list() if t.group_path == "/g"]
    assert {c.name for c in table.columns} == oracle_columns
    unread = {a.path: a.reason for a in d.unread}
    for name in ("lat", "lab", "height"):
        assert f"g/{name}" not in unread, unread
    # units come from the arrays' attributes, as xarray reads them, for the auxiliary ones too
    units = {c.name: c.units for c in table.columns}
    assert units["lat"] == oracle["lat"].attrs["units"]
    assert units["height"] == oracle["height"].attrs["units"]
    assert units["v"] == oracle["v"].attrs["units"]
    assert "g/lat" not in repr(d)
    assert "g/lab" not in repr(d)


def test_auxiliary_coordinate_of_an_unreadable_table_has_its_tables_reason(
    con: zarrsql.Connection, tmp_path: Path
) -> None:
    """An auxiliary coordinate of a table that cannot be read by name is listed with that
    table's problem, not with a role reason that says no table has its dimensions."""
    store = tmp_path / "mis.zarr"
    _write_tree({"/": xr.Dataset(coords={"x": [1, 2, 3]})}, store)
    group = xr.Dataset({"w": (("x",), np.arange(4.0))}, coords={"lab": ("x", list("abcd"))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group.to_zarr(store, group="g", mode="a")
    with pytest.raises(ValueError, match="not aligned"):
        _open_tree(store)  # xarray refuses the group
    unread = {a.path: a.reason for a in zarrsql.describe(str(store), connection=con).unread}
    assert "misaligned" in unread["g/w"]
    assert unread["g/lab"] == unread["g/w"]


# -- a misaligned group is called misaligned ----------------------------------------------
def _misaligned_store(tmp_path: Path) -> Path:
    """The root has x of 3 values; /g has no x of its own and w(x) of 4."""
    store = tmp_path / "misaligned.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=3)
    root.create_array("x", shape=(3,), dtype="i8", dimension_names=["x"])[:] = [1, 2, 3]
    w = root.create_group("g").create_array("w", shape=(4,), dtype="f8", dimension_names=["x"])
    w[:] = [0.5, 1.5, 2.5, 3.5]
    return store


def test_group_without_own_coordinate_is_misaligned(con: zarrsql.Connection, tmp_path: Path) -> None:
    store = _misaligned_store(tmp_path)
    with pytest.raises(ValueError, match="group '/g' is not aligned with its parents"):
        _open_tree(store)
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{store}', group_path := 'g')")
    assert "group '/g' is misaligned: dimension 'x' has length 4 here and 3 in '/'" in msg, msg
    assert msg.endswith("read single arrays with array_path :="), msg
    assert "coordinate 'x' has length" not in msg
    (table,) = [t for t in zarrsql.describe(str(store), connection=con).table_list() if t.group_path == "/g"]
    assert table.name is None
    assert table.problem is not None
    assert "is misaligned" in table.problem
    # the fix the message gives reads the array, its axis as positions (the root's x cannot label it)
    rows = con.sql(f"SELECT x, value FROM read_zarr('{store}', array_path := 'g/w') ORDER BY x").fetchall()
    values = np.asarray(zarr.open_array(store / "g" / "w", mode="r")[:])
    assert rows == [(i, float(v)) for i, v in enumerate(values.tolist())]


def test_coordinate_of_wrong_length_in_its_own_group_is_still_named(con: zarrsql.Connection, tmp_path: Path) -> None:
    """With no ancestor to be misaligned with, a coordinate of another length than its
    dimension's is reported as that."""
    store = tmp_path / "short.zarr"
    root = zarr.open_group(store, mode="w", zarr_format=3)
    root.create_array("x", shape=(3,), dtype="i8", dimension_names=["x"])[:] = [1, 2, 3]
    root.create_array("w", shape=(4,), dtype="f8", dimension_names=["x"])[:] = 1.0
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{store}')")
    assert "coordinate 'x' has length 3 but dimension 'x' has 4" in msg, msg
    assert "misaligned" not in msg


# -- group_path and table_name that select nothing ----------------------------------------
@pytest.fixture
def nested_store(tmp_path: Path) -> Path:
    store = tmp_path / "nested.zarr"
    _write_tree(
        {
            "/": xr.Dataset(coords={"x": [1, 2, 3]}),
            "/Simulation": xr.Dataset({"w": (("x",), np.arange(3.0))}),
            "/Simulation/fine": xr.Dataset({"u": (("x",), np.arange(3.0) * 2)}),
            "/Simulation/coarse": xr.Dataset({"c": (("x",), np.arange(3.0) * 3)}),
        },
        store,
    )
    return store


def test_group_differing_only_in_case_is_named(con: zarrsql.Connection, nested_store: Path) -> None:
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{nested_store}', group_path := 'simulation')")
    assert "group_path '/simulation' is not a group" in msg
    assert "case-sensitive" in msg
    assert msg.endswith("did you mean group_path := '/Simulation'?"), msg
    assert str(_subgroups(nested_store)) in msg
    # the group it names is the one xarray reads
    got = con.sql(f"SELECT w FROM read_zarr('{nested_store}', group_path := '/Simulation') ORDER BY x").fetchall()
    assert [r[0] for r in got] == _values(nested_store, "Simulation", "w")


@pytest.mark.parametrize(
    ("given", "meant", "looked_in"),
    [("Simulaton", "/Simulation", ""), ("Simulation/fien", "/Simulation/fine", "Simulation")],
)
def test_misspelt_group_path_lists_groups_and_suggests(
    con: zarrsql.Connection, nested_store: Path, given: str, meant: str, looked_in: str
) -> None:
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{nested_store}', group_path := '{given}')")
    assert f"group_path '/{given}' is not a group of store '{nested_store}'" in msg
    assert f"the groups in '/{looked_in}': {_subgroups(nested_store, looked_in)}" in msg, msg
    assert msg.endswith(f"did you mean group_path := '{meant}'?"), msg
    assert "case-sensitive" not in msg


def test_group_path_far_from_every_group_lists_them(con: zarrsql.Connection, nested_store: Path) -> None:
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{nested_store}', group_path := 'qqqq')")
    assert str(_subgroups(nested_store)) in msg
    assert "did you mean" not in msg
    assert msg.endswith("pass one of them to group_path :=, or list the groups that hold tables with read_zarr_tables")


def test_group_path_in_a_store_of_one_group_points_to_the_root(con: zarrsql.Connection, tmp_path: Path) -> None:
    store = tmp_path / "flat.zarr"
    _write_tree({"/": xr.Dataset({"v": (("x",), [1.0, 2.0])})}, store)
    assert _subgroups(store) == []
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{store}', group_path := 'qqqq')")
    assert msg == (
        f"group_path '/qqqq' is not a group of store '{store}' ('/' has no groups); "
        "pass group_path := '/', or list the groups that hold tables with read_zarr_tables"
    )


def test_many_groups_are_counted_not_all_listed(con: zarrsql.Connection, tmp_path: Path) -> None:
    store = tmp_path / "many.zarr"
    _write_tree(
        {"/": xr.Dataset(coords={"x": [1, 2]})}
        | {f"/member{k:02d}": xr.Dataset({"v": (("x",), [float(k), 0.0])}) for k in range(25)},
        store,
    )
    groups = _subgroups(store)
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{store}', group_path := 'member7')")
    listed = re.search(r"the groups in '/': (\[[^\]]*\]) and (\d+) more", msg)
    assert listed is not None, msg
    assert ast.literal_eval(listed.group(1)) == groups[:10]
    assert int(listed.group(2)) == len(groups) - 10
    assert "did you mean group_path := '/member" in msg


def test_misspelt_table_name_is_offered_the_nearest(con: zarrsql.Connection, nested_store: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_dataset(nested_store, group="Simulation", engine="zarr") as oracle:
            (table,) = {"_".join(map(str, oracle[v].dims)) for v in oracle.data_vars}
    msg = _selection_error(
        con, f"SELECT * FROM read_zarr('{nested_store}', group_path := 'Simulation', table_name := 'xx')"
    )
    assert f"has no table named 'xx'; its tables: {table} ['x']" in msg
    assert msg.endswith(f"did you mean table_name := '{table}'?"), msg
    far = _selection_error(
        con, f"SELECT * FROM read_zarr('{nested_store}', group_path := 'Simulation', table_name := 'surface')"
    )
    assert "did you mean" not in far
    assert f"its tables: {table} ['x']" in far


def test_group_path_naming_an_array_says_to_use_array_path(con: zarrsql.Connection, nested_store: Path) -> None:
    msg = _selection_error(con, f"SELECT * FROM read_zarr('{nested_store}', group_path := 'Simulation/w')")
    assert msg == (
        f"group_path '/Simulation/w' is an array of store '{nested_store}', not a group; "
        "read it with array_path := 'Simulation/w' in place of group_path :="
    )
    # the fix reads the array xarray reads
    got = con.sql(f"SELECT value FROM read_zarr('{nested_store}', array_path := 'Simulation/w') ORDER BY x")
    assert [r[0] for r in got.fetchall()] == _values(nested_store, "Simulation", "w")


@pytest.mark.parametrize("listing", ["read_zarr_tables", "read_zarr_metadata"])
def test_the_listings_offer_the_nearest_group_too(tmp_path, listing: str) -> None:
    """The listing functions take `group_path :=` as read_zarr does, and miss it alike."""
    path = tmp_path / "listed.zarr"
    xr.DataTree.from_dict({"/Simulation": xr.Dataset({"v": (("x",), [1.0, 2.0])})}).to_zarr(path)
    assert "Simulation" in xr.open_datatree(path, engine="zarr").children
    with zarrsql.connect() as con, pytest.raises(zarrsql.SelectionError, match=r"did you mean group_path := '/Simulation'"):
        con.sql(f"SELECT * FROM {listing}('{path}', group_path := 'Simulaton')").fetchall()
