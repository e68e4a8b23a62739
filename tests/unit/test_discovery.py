"""Discovery: each array's role, the tables of each group, their names and coordinates.

Small stores are written into `tmp_path` by zarr-python (and xarray for one case) and read
back through SQL, `read_zarr_metadata` and `read_zarr_tables`, the public interface of these
rules. What is expected follows the field guide ("One table per set of dimensions", "Groups
become schemas", "Arrays without dimension names") and xarray's DataTree rules; dimension
names, shapes and chunk shapes are checked against zarr-python's own reading of the store.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql


@pytest.fixture(scope="module")
def con() -> Iterator[zarrsql.Connection]:
    with zarrsql.connect() as c:
        yield c


# --------------------------------------------------------------------------------------
# writing stores
# --------------------------------------------------------------------------------------


def group(path: Path, fmt: int = 3, attrs: dict[str, Any] | None = None) -> zarr.Group:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(str(path), mode="w", zarr_format=fmt, attributes=attrs or {})


def subgroup(parent: zarr.Group, name: str, attrs: dict[str, Any] | None = None) -> zarr.Group:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parent.create_group(name, attributes=attrs or {})


def arr(g: zarr.Group, name: str, dims: list[str | None] | None, shape: tuple[int, ...], *,
        dtype: str = "f8", attrs: dict[str, Any] | None = None, values: np.ndarray | None = None) -> None:
    """An array with dimension names stored the format's way (v3 `dimension_names`, v2
    `_ARRAY_DIMENSIONS`), filled with `values` or 0, 1, 2, ..."""
    attrs = dict(attrs or {})
    kwargs: dict[str, Any] = {}
    if g.metadata.zarr_format == 3:
        kwargs["dimension_names"] = dims
    elif dims is not None:
        attrs["_ARRAY_DIMENSIONS"] = dims
    if shape:
        kwargs["chunks"] = tuple(max(1, (n + 1) // 2) for n in shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = g.create_array(name, shape=shape, dtype=dtype, attributes=attrs, **kwargs)
        if values is None:
            values = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
        a[...] = values


def consolidate(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))


def break_metadata(path: Path, name: str) -> None:
    """Make the array's own metadata document unreadable (truncated JSON)."""
    for key in ("zarr.json", ".zarray"):
        doc = path / name / key
        if doc.exists():
            doc.write_text(doc.read_text()[: len(doc.read_text()) // 2])
            return
    raise FileNotFoundError(path / name)


# --------------------------------------------------------------------------------------
# reading listings
# --------------------------------------------------------------------------------------


def metadata(con: zarrsql.Connection, store: Path, **params: str) -> dict[str, dict[str, Any]]:
    extra = "".join(f", {k} := '{v}'" for k, v in params.items())
    rows = con.execute(f"SELECT * FROM read_zarr_metadata('{store}'{extra})").fetchall()
    cols = ["name", "dims", "dtype", "shape", "chunk_shape", "attrs", "role", "array_path_dims"]
    out = {}
    for row in rows:
        rec = dict(zip(cols, row, strict=True))
        rec["attrs"] = json.loads(rec["attrs"])
        out[rec["name"]] = rec
    return out


def tables(con: zarrsql.Connection, store: Path, **params: str) -> list[dict[str, Any]]:
    extra = "".join(f", {k} := '{v}'" for k, v in params.items())
    rel = con.sql(f"SELECT * FROM read_zarr_tables('{store}'{extra})")
    cols = rel.columns
    return [dict(zip(cols, row, strict=True)) for row in rel.fetchall()]


def table_keys(rows: list[dict[str, Any]]) -> set[tuple]:
    """(group_path, table_name, dims, shape, data_vars, coord_vars) of every listed table."""
    return {(r["group_path"], r["table_name"], tuple(r["dims"]), tuple(r["shape"]), tuple(r["data_vars"]),
             tuple(r["coord_vars"])) for r in rows}


def columns(con: zarrsql.Connection, store: Path, **params: Any) -> list[str]:
    return zarrsql.read_zarr(str(store), connection=con, **params).columns


def zarr_dims(path: Path, name: str) -> list[str | None] | None:
    """Dimension names as zarr-python reads them (the oracle)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = zarr.open_group(str(path), mode="r")[name]
        if a.metadata.zarr_format == 3:
            names = a.metadata.dimension_names
            return None if names is None else list(names)
        return a.attrs.get("_ARRAY_DIMENSIONS")


# --------------------------------------------------------------------------------------
# roles
# --------------------------------------------------------------------------------------

FORMATS = pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])


def roles_store(path: Path, fmt: int) -> Path:
    g = group(path, fmt, attrs={"coordinates": "gaux"})
    arr(g, "x", ["x"], (4,), attrs={"bounds": "x_bnds"})
    arr(g, "y", ["y"], (3,))
    arr(g, "x_bnds", ["x", "nv"], (4, 2))
    arr(g, "t", ["x", "y"], (4, 3), attrs={"coordinates": "lat2d lon2d"})
    arr(g, "lat2d", ["x", "y"], (4, 3))
    arr(g, "lon2d", ["x", "y"], (4, 3))
    arr(g, "gaux", ["x"], (4,))
    arr(g, "k", [], (), values=np.array(9.81))
    arr(g, "cplx", ["q"], (2,), dtype="c16")
    arr(g, "noname", None, (5,))
    arr(g, "broken", ["x"], (4,))
    break_metadata(path, "broken")
    return path


EXPECTED_ROLES = {
    "x": "coord", "y": "coord", "x_bnds": "bounds", "t": "data", "lat2d": "aux_coord", "lon2d": "aux_coord",
    "gaux": "aux_coord", "k": "scalar", "cplx": "unsupported", "noname": "data", "broken": "unsupported",
}


@FORMATS
def test_roles(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    store = roles_store(tmp_path / "roles.zarr", fmt)
    meta = metadata(con, store)
    assert {name: m["role"] for name, m in meta.items()} == EXPECTED_ROLES
    for name in EXPECTED_ROLES.keys() - {"broken", "noname"}:
        assert meta[name]["dims"] == (zarr_dims(store, name) or []), name   # a 0-d array: [] or None
        assert meta[name]["array_path_dims"] == meta[name]["dims"], name
    # no dimension names: none declared, positions for an array_path read
    assert meta["noname"]["dims"] == []
    assert meta["noname"]["array_path_dims"] == ["dim_0"]
    # unsupported: dtype 'unsupported' and the reason in attrs
    assert meta["cplx"]["dtype"] == "unsupported" and "complex" in meta["cplx"]["attrs"]["error"]
    assert meta["broken"]["dtype"] == "unsupported" and meta["broken"]["attrs"]["error"]
    assert meta["k"]["shape"] == [] and meta["k"]["dims"] == []
    assert meta["x_bnds"]["shape"] == [4, 2] and meta["x_bnds"]["chunk_shape"] == [2, 1]
    assert meta["t"]["dtype"] == "float64" and meta["t"]["attrs"]["coordinates"] == "lat2d lon2d"


@FORMATS
def test_metadata_arrays_stay_out_of_tables(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    """Coordinates, bounds, auxiliary coordinates, scalars and unnamed arrays are no data
    variable of a table; an auxiliary coordinate the variable names becomes a column."""
    store = roles_store(tmp_path / "roles.zarr", fmt)
    rows = tables(con, store)
    by_name = {r["table_name"]: r for r in rows}
    assert by_name["x_y"]["data_vars"] == ["t"]
    assert by_name["x_y"]["coord_vars"] == ["x", "y"]
    listed = {v for r in rows for v in r["data_vars"]}
    assert listed.isdisjoint({"x", "y", "x_bnds", "lat2d", "lon2d", "gaux", "k", "noname", "broken"}), listed
    # `broken`'s dimensions are unknown, so it may be a column of x_y: the table is refused
    # rather than shown without it (xarray refuses the whole group) until it is repaired
    with pytest.raises(zarrsql.MetadataError, match="'/broken'"):
        columns(con, store, table_name="x_y")
    shutil.rmtree(store / "broken")
    # `t` names lat2d and lon2d in its `coordinates`: columns, as in xarray's to_dataframe
    assert columns(con, store, table_name="x_y") == ["x", "y", "lat2d", "lon2d", "t"]
    # an auxiliary coordinate, a bounds array and an unnamed one are still readable alone
    assert columns(con, store, array_path="lat2d") == ["x", "y", "lat2d"]
    assert columns(con, store, array_path="x_bnds") == ["x", "nv", "x_bnds"]
    assert columns(con, store, array_path="noname") == ["dim_0", "noname"]


# --------------------------------------------------------------------------------------
# tables: split by dimension names and shape, named by joining the names with '_'
# --------------------------------------------------------------------------------------


@FORMATS
def test_tables_split_by_dimension_names_and_shape(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "split.zarr"
    g = group(store, fmt)
    arr(g, "a", ["x", "y"], (4, 3))
    arr(g, "b", ["x", "y"], (4, 3), dtype="i4")
    arr(g, "c", ["y", "x"], (3, 4))                   # the same names in another order: another table
    arr(g, "d", ["x"], (4,))
    arr(g, "e", ["x", "w"], (4, 2))                   # the same names as f, another shape
    arr(g, "f", ["x", "w"], (4, 5))
    arr(g, "g", ["time", "level", "lat"], (2, 2, 2))
    arr(g, "h", ["grid_x", "grid_y"], (2, 3))
    rows = tables(con, store)
    assert table_keys(rows) == {
        ("/", "x_y", ("x", "y"), (4, 3), ("a", "b"), ()),
        ("/", "y_x", ("y", "x"), (3, 4), ("c",), ()),
        ("/", "x", ("x",), (4,), ("d",), ()),
        ("/", None, ("x", "w"), (4, 2), ("e",), ()),
        ("/", None, ("x", "w"), (4, 5), ("f",), ()),
        ("/", "time_level_lat", ("time", "level", "lat"), (2, 2, 2), ("g",), ()),
        ("/", "grid_x_grid_y", ("grid_x", "grid_y"), (2, 3), ("h",), ()),
    }
    assert all(r["schema_name"] == "main" for r in rows)
    assert columns(con, store, table_name="x_y") == ["x", "y", "a", "b"]
    assert columns(con, store, dims=["y", "x"]) == ["y", "x", "c"]
    assert columns(con, store, table_name="TIME_LEVEL_LAT") == ["time", "level", "lat", "g"]   # case ignored
    # the two (x, w) tables have no name and dims := cannot choose between them
    with pytest.raises(zarrsql.SelectionError, match="array_path"):
        zarrsql.read_zarr(str(store), connection=con, dims=["x", "w"])
    assert columns(con, store, array_path="f") == ["x", "w", "f"]
    count = con.execute(f"SELECT count(*) FROM read_zarr('{store}', table_name := 'x_y')").fetchall()
    assert count == [(12,)]


@FORMATS
def test_names_equal_ignoring_case_get_no_name(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "case.zarr"
    g = group(store, fmt)
    arr(g, "upper", ["X"], (4,), values=np.array([1.0, 2.0, 3.0, 4.0]))
    arr(g, "lower", ["x"], (3,), values=np.array([5.0, 6.0, 7.0]))
    arr(g, "other", ["t"], (2,))
    rows = tables(con, store)
    assert table_keys(rows) == {
        ("/", None, ("X",), (4,), ("upper",), ()),
        ("/", None, ("x",), (3,), ("lower",), ()),
        ("/", "t", ("t",), (2,), ("other",), ()),
    }
    with pytest.raises(zarrsql.SelectionError):
        zarrsql.read_zarr(str(store), connection=con, table_name="x")
    # dims := still reads each, exactly
    upper = con.execute(f"SELECT * FROM read_zarr('{store}', dims := ['X']) ORDER BY \"X\"").fetchall()
    lower = con.execute(f"SELECT * FROM read_zarr('{store}', dims := ['x']) ORDER BY x").fetchall()
    assert upper == [(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)]
    assert lower == [(0, 5.0), (1, 6.0), (2, 7.0)]


# --------------------------------------------------------------------------------------
# groups: coordinates from ancestors, misalignment
# --------------------------------------------------------------------------------------


@FORMATS
def test_coordinates_are_inherited_from_the_nearest_ancestor(fmt: int, tmp_path: Path,
                                                             con: zarrsql.Connection) -> None:
    store = tmp_path / "tree.zarr"
    root = group(store, fmt)
    arr(root, "x", ["x"], (3,), values=np.array([10.0, 20.0, 30.0]))
    a = subgroup(root, "a")
    arr(a, "foo", ["x", "y"], (3, 2))                    # x from the root, y positional
    b = subgroup(a, "b")
    arr(b, "x", ["x"], (3,), values=np.array([-1.0, -2.0, -3.0]))
    arr(b, "bar", ["x"], (3,))                           # x of its own group
    c = subgroup(b, "c")
    arr(c, "baz", ["x"], (3,))                           # x from a/b, the nearest
    rows = tables(con, store)
    assert table_keys(rows) == {
        ("/a", "x_y", ("x", "y"), (3, 2), ("a/foo",), ("x",)),
        ("/a/b", "x", ("x",), (3,), ("a/b/bar",), ("a/b/x",)),
        ("/a/b/c", "x", ("x",), (3,), ("a/b/c/baz",), ("a/b/x",)),
    }
    assert {r["group_path"]: r["schema_name"] for r in rows} == {"/a": "a", "/a/b": "a/b", "/a/b/c": "a/b/c"}
    foo = con.execute(f"SELECT x, y, foo FROM read_zarr('{store}', group_path := 'a') ORDER BY x, y").fetchall()
    assert foo == [(10.0, 0, 0.0), (10.0, 1, 1.0), (20.0, 0, 2.0), (20.0, 1, 3.0), (30.0, 0, 4.0), (30.0, 1, 5.0)]
    baz = con.execute(f"SELECT x, baz FROM read_zarr('{store}', group_path := '/a/b/c/') ORDER BY baz").fetchall()
    assert baz == [(-1.0, 0.0), (-2.0, 1.0), (-3.0, 2.0)]
    # a group below the root: the listing narrows to it and its descendants
    assert {r["group_path"] for r in tables(con, store, group_path="a/b")} == {"/a/b", "/a/b/c"}
    # the root group has no tables of its own
    with pytest.raises(zarrsql.SelectionError, match="group_path"):
        zarrsql.read_zarr(str(store), connection=con)


@FORMATS
def test_misaligned_group_has_no_named_tables(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "misaligned.zarr"
    root = group(store, fmt)
    arr(root, "r", ["x"], (4,))                         # x has length 4 at the root (no coordinate)
    arr(root, "lat", ["lat"], (2,))                     # a coordinate of length 2
    ok = subgroup(root, "ok")
    arr(ok, "s", ["x"], (4,))
    bad = subgroup(root, "bad")
    arr(bad, "s", ["x"], (5,))                          # x has length 5 here
    bad_coord = subgroup(root, "bad_coord")
    arr(bad_coord, "s", ["lat"], (3,))                  # lat has length 3 here, 2 in its coordinate
    rows = {r["group_path"]: r for r in tables(con, store)}
    assert rows["/"]["table_name"] == "x"
    assert rows["/ok"]["table_name"] == "x"
    assert rows["/bad"]["table_name"] is None and rows["/bad"]["shape"] == [5]
    assert rows["/bad_coord"]["table_name"] is None
    with pytest.raises(zarrsql.SelectionError, match="misaligned") as info:
        zarrsql.read_zarr(str(store), connection=con, group_path="bad")
    assert "array_path" in str(info.value)
    with pytest.raises(zarrsql.SelectionError):
        zarrsql.read_zarr(str(store), connection=con, group_path="bad_coord")
    # a single array of a misaligned group still reads
    got = con.execute(f"SELECT * FROM read_zarr('{store}', array_path := 'bad/s')").fetchall()
    assert sorted(got) == [(i, float(i)) for i in range(5)]


# --------------------------------------------------------------------------------------
# dimension names: partial and missing
# --------------------------------------------------------------------------------------


def test_partially_named_array_uses_dim_position_for_the_null_entry(tmp_path: Path,
                                                                     con: zarrsql.Connection) -> None:
    store = tmp_path / "partial.zarr"
    g = group(store, 3)
    arr(g, "x", ["x"], (4,), values=np.array([1.0, 2.0, 3.0, 4.0]))
    arr(g, "part", ["x", None], (4, 5))
    arr(g, "part2", ["x", None], (4, 5))
    assert zarr_dims(store, "part") == ["x", None]
    meta = metadata(con, store)
    assert meta["part"]["array_path_dims"] == ["x", "dim_1"]
    assert meta["part"]["role"] == "data"
    # in a table read the null entry is dim_1: the two arrays share a table (field guide)
    assert table_keys(tables(con, store)) == {("/", "x_dim_1", ("x", "dim_1"), (4, 5), ("part", "part2"), ("x",))}
    assert columns(con, store, table_name="x_dim_1") == ["x", "dim_1", "part", "part2"]
    # read alone, the array uses the names read_zarr_metadata lists as its array_path_dims
    assert columns(con, store, array_path="part") == [*meta["part"]["array_path_dims"], "part"]


def test_group_of_unnamed_arrays_points_to_array_path(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "unnamed.zarr"
    g = group(store, 3)
    arr(g, "p", None, (2, 3))
    arr(g, "q", None, (2, 3))
    assert tables(con, store) == []
    with pytest.raises(zarrsql.SelectionError) as info:
        zarrsql.read_zarr(str(store), connection=con)
    assert "'p'" in str(info.value) and "array_path :=" in str(info.value)
    # read alone: positions, or names given with dims :=
    assert columns(con, store, array_path="p") == ["dim_0", "dim_1", "p"]
    assert columns(con, store, array_path="q", dims=["row", "col"]) == ["row", "col", "q"]


# --------------------------------------------------------------------------------------
# consolidated metadata and walking the tree give the same listing
# --------------------------------------------------------------------------------------


def rich_store(path: Path, fmt: int) -> Path:
    root = group(path, fmt, attrs={"coordinates": "gaux", "title": "rich"})
    arr(root, "x", ["x"], (4,), attrs={"bounds": "x_bnds", "units": "m"})
    arr(root, "x_bnds", ["x", "nv"], (4, 2))
    arr(root, "gaux", ["x"], (4,))
    arr(root, "temp", ["x", "y"], (4, 3), dtype="f4", attrs={"_FillValue": -1.0})
    arr(root, "count", ["x", "y"], (4, 3), dtype="i2")
    arr(root, "other", ["y", "x"], (3, 4))
    arr(root, "k", [], (), values=np.array(1.5))
    arr(root, "cplx", ["x"], (4,), dtype="c8")
    arr(root, "unnamed", None, (6,))
    sim = subgroup(root, "sim", attrs={"kind": "simulation"})
    fine = subgroup(sim, "fine")
    arr(fine, "y", ["y"], (3,))
    arr(fine, "foo", ["x", "y"], (4, 3))
    coarse = subgroup(sim, "coarse")
    arr(coarse, "bar", ["x"], (2,))                     # misaligned with the root's x
    if fmt == 3:
        arr(fine, "part", ["x", None], (4, 2))
    return path


@FORMATS
def test_consolidated_and_walked_metadata_list_the_same(fmt: int, tmp_path: Path,
                                                        con: zarrsql.Connection) -> None:
    walked = rich_store(tmp_path / "walked.zarr", fmt)
    cons = rich_store(tmp_path / "consolidated.zarr", fmt)
    consolidate(cons)
    # the writer really consolidated one and not the other
    if fmt == 3:
        assert "consolidated_metadata" in json.loads((cons / "zarr.json").read_text())
        assert json.loads((walked / "zarr.json").read_text()).get("consolidated_metadata") is None
    else:
        assert (cons / ".zmetadata").exists() and not (walked / ".zmetadata").exists()

    with zarrsql.trace() as t_walk:
        meta_w = metadata(con, walked)
    with zarrsql.trace() as t_cons:
        meta_c = metadata(con, cons)
    assert meta_w == meta_c
    assert len(meta_w) == 12 + (fmt == 3)
    # consolidated metadata is read in a few requests, not one per node
    assert t_cons.requests <= 5 < t_walk.requests, (t_cons, t_walk)

    assert tables(con, walked) == tables(con, cons)
    for g in ("sim", "sim/fine", "sim/coarse"):
        assert tables(con, walked, group_path=g) == tables(con, cons, group_path=g)
        assert metadata(con, walked, group_path=g) == metadata(con, cons, group_path=g)
    expected = {
        ("/", "x_y", ("x", "y"), (4, 3), ("count", "temp"), ("x",)),
        ("/", "y_x", ("y", "x"), (3, 4), ("other",), ("x",)),
        ("/", "x", ("x",), (4,), ("cplx",), ("x",)),
        ("/sim/fine", "x_y", ("x", "y"), (4, 3), ("sim/fine/foo",), ("x", "sim/fine/y")),
        ("/sim/coarse", None, ("x",), (2,), ("sim/coarse/bar",), ()),
    }
    if fmt == 3:
        expected.add(("/sim/fine", "x_dim_1", ("x", "dim_1"), (4, 2), ("sim/fine/part",), ("x",)))
    def without_unread_coords(keys: set[tuple]) -> set[tuple]:
        # an unnamed table's coordinate columns are not asserted: it cannot be read as a table
        return {k if k[1] is not None else k[:5] for k in keys}

    assert without_unread_coords(table_keys(tables(con, cons))) == without_unread_coords(expected)
    # both read the same rows
    for store in (walked, cons):
        got = con.execute(f"SELECT count(*), sum(foo) FROM read_zarr('{store}', group_path := 'sim/fine', "
                          "table_name := 'x_y')").fetchall()
        assert got == [(12, float(sum(range(12))))]


@FORMATS
def test_xarray_written_store_lists_xarrays_variables(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    """A store xarray wrote (v2: with `.zmetadata`) lists xarray's data variables and
    coordinates; the listing equals that of the same store with its consolidated metadata
    removed."""
    ds = xr.Dataset(
        {"air": (("time", "lat", "lon"), np.zeros((3, 2, 4), dtype="f4")),
         "sfc": (("lat", "lon"), np.ones((2, 4))),
         "lat_bnds": (("lat", "nv"), np.zeros((2, 2)))},
        coords={"time": pd.date_range("2021-01-01", periods=3), "lat": [10.0, 20.0], "lon": [0.0, 1.0, 2.0, 3.0],
                "station_name": (("lat", "lon"), np.array([["a", "b", "c", "d"], ["e", "f", "g", "h"]]))},
    )
    ds["lat"].attrs["bounds"] = "lat_bnds"
    path = tmp_path / "xr.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=fmt, mode="w", consolidated=True)
    if fmt == 2:
        assert (path / ".zmetadata").exists()
    meta = metadata(con, path)
    roles = {name: m["role"] for name, m in meta.items()}
    assert roles == {"air": "data", "sfc": "data", "lat_bnds": "bounds", "time": "coord", "lat": "coord",
                     "lon": "coord", "station_name": "aux_coord"}
    assert table_keys(tables(con, path)) == {
        ("/", "time_lat_lon", ("time", "lat", "lon"), (3, 2, 4), ("air",), ("time", "lat", "lon")),
        ("/", "lat_lon", ("lat", "lon"), (2, 4), ("sfc",), ("lat", "lon")),
    }
    for name, m in meta.items():
        assert m["dims"] == list(ds[name].dims), name
        assert m["shape"] == list(ds[name].shape), name
    # the same store walked, without its consolidated metadata
    if fmt == 2:
        (path / ".zmetadata").unlink()
    else:
        doc = json.loads((path / "zarr.json").read_text())
        doc.pop("consolidated_metadata", None)
        (path / "zarr.json").write_text(json.dumps(doc))
    assert metadata(con, path) == meta
