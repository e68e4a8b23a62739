"""NetCDF4 groups and dimension scales, read from the file itself and from a kerchunk
reference set of it: a dimension defined in a group is named by its last name in that group
and the groups below (kerchunk writes its scale's path), so its coordinate is a coordinate;
netCDF's stand-in for a dimension without a coordinate variable (`bnds`) is a dimension, not
an unsupported array; filter advice is given only for a dataset with a filter to blame.

Oracles: xarray's `open_dataset(group=...)` (h5netcdf) on the file, and `open_datatree` where
a group uses the coordinates of its ancestors (zarrsql's documented DataTree inheritance).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
h5netcdf = pytest.importorskip("h5netcdf")
pytest.importorskip("kerchunk")

import xarray as xr  # noqa: E402

import zarrsql  # noqa: E402
from tests.kerchunk_refs import kerchunk_refs  # noqa: E402

SOURCES = ["nc", "json"]


def _with_references(path: Path) -> dict[str, str]:
    """The file, and a kerchunk reference set of it, by kind."""
    refs = path.with_suffix(".json")
    refs.write_text(json.dumps(kerchunk_refs(path, inline_threshold=0)))
    return {"nc": str(path), "json": str(refs)}


@pytest.fixture(scope="module")
def own_dims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A root variable on `x`, and a group `grp/inner` with its own dimension `k`: a
    coordinate `k` (ascending, 40 values) and `w(k)` in chunks of 10."""
    path = tmp_path_factory.mktemp("groups") / "own.nc"
    xr.Dataset({"top": ("x", [1.0, 2.0])}).to_netcdf(path, engine="h5netcdf")
    inner = xr.Dataset({"w": ("k", np.linspace(-2.0, 5.0, 40))}, coords={"k": np.arange(0, 80, 2)})
    inner.to_netcdf(path, engine="h5netcdf", mode="a", group="grp/inner", encoding={"w": {"chunksizes": (10,)}})
    return _with_references(path)


@pytest.fixture(scope="module")
def scoped_dims(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Dimensions used below the group defining them: `x` (root, no coordinate variable),
    `k` and `bnds` (group `grp`, `k` with a coordinate), `m` (group `grp/inner`), used by
    `grp/inner` and `grp/inner/deeper`."""
    path = tmp_path_factory.mktemp("groups") / "scoped.nc"
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"x": 2}
        f.create_variable("top", ("x",), data=[1.0, 2.0])
        grp = f.create_group("grp")
        grp.dimensions = {"k": 3, "bnds": 2}
        grp.create_variable("k", ("k",), data=np.array([30, 10, 20]))
        grp.create_variable("kb", ("k", "bnds"), data=np.arange(6.0).reshape(3, 2))
        inner = grp.create_group("inner")
        inner.dimensions = {"m": 2}
        inner.create_variable("m", ("m",), data=np.array([5, 6]))
        inner.create_variable("w", ("k", "m"), data=np.arange(6.0).reshape(3, 2) - 2.5)
        inner.create_variable("u", ("x",), data=[7.0, 8.0])
        inner.create_group("deeper").create_variable("z", ("m", "k"), data=np.arange(6.0).reshape(2, 3))
    return _with_references(path)


def _tables(con: zarrsql.Connection, source: str, group: str) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """table name → (dims, data_vars, coord_vars) of the tables of `group` itself."""
    rows = con.execute(
        f"SELECT group_path, table_name, dims, data_vars, coord_vars FROM read_zarr_tables('{source}')"
    ).fetchall()
    return {t: (d, v, c) for g, t, d, v, c in rows if g == "/" + group}


def _rows(con: zarrsql.Connection, sql: str) -> tuple[list[str], list[tuple[object, ...]]]:
    cursor = con.execute(sql)
    return [c[0] for c in cursor.description], sorted(cursor.fetchall())


def _expected(ds: xr.Dataset, variable: str) -> tuple[list[str], list[tuple[object, ...]]]:
    frame = ds[variable].to_dataframe().reset_index()
    frame = frame[[*ds[variable].dims, variable]]
    return list(frame.columns), sorted(tuple(r) for r in frame.itertuples(index=False))


@pytest.mark.parametrize("kind", SOURCES)
def test_a_groups_own_dimension_has_its_last_name_and_its_coordinate(own_dims: dict[str, str], kind: str) -> None:
    ds = xr.open_dataset(own_dims["nc"], group="grp/inner", engine="h5netcdf")
    con = zarrsql.connect()
    tables = _tables(con, own_dims[kind], "grp/inner")
    assert list(tables) == ["_".join(ds.w.dims)]  # one table, named by its dimensions
    dims, data_vars, coord_vars = next(iter(tables.values()))
    assert dims == list(ds.w.dims)
    assert data_vars == [f"grp/inner/{v}" for v in ds.data_vars]
    assert coord_vars == [f"grp/inner/{c}" for c in ds.coords]
    got = _rows(con, f"SELECT * FROM read_zarr('{own_dims[kind]}', group_path := 'grp/inner')")
    assert got == _expected(ds, "w")


@pytest.mark.parametrize("kind", SOURCES)
def test_where_on_a_groups_coordinate_prunes_its_chunks(own_dims: dict[str, str], kind: str) -> None:
    frame = xr.open_dataset(own_dims["nc"], group="grp/inner", engine="h5netcdf").to_dataframe()
    con = zarrsql.connect()
    sql = f"SELECT count(*), sum(w) FROM read_zarr('{own_dims[kind]}', group_path := 'grp/inner') WHERE k < 20"
    with zarrsql.trace() as t:
        ((count, total),) = con.execute(sql).fetchall()
    expected = frame[frame.index < 20].w
    assert count == len(expected)
    assert total == pytest.approx(expected.sum())
    assert t.work_units_read < t.work_units_planned  # k < 20 lies in the first chunk of 10 values


@pytest.mark.parametrize("kind", SOURCES)
def test_the_root_group_keeps_its_names(own_dims: dict[str, str], kind: str) -> None:
    ds = xr.open_dataset(own_dims["nc"], engine="h5netcdf")
    con = zarrsql.connect()
    assert _tables(con, own_dims[kind], "") == {"x": (["x"], ["top"], [])}
    got = _rows(con, f"SELECT * FROM read_zarr('{own_dims[kind]}', table_name := 'x')")
    assert got == _expected(ds, "top")


@pytest.mark.parametrize("kind", SOURCES)
@pytest.mark.parametrize(
    ("group", "variable"), [("grp", "kb"), ("grp/inner", "w"), ("grp/inner", "u"), ("grp/inner/deeper", "z")]
)
def test_dimensions_of_ancestor_groups_have_their_last_names(
    scoped_dims: dict[str, str], kind: str, group: str, variable: str
) -> None:
    ds = xr.open_datatree(scoped_dims["nc"], engine="h5netcdf")[group].to_dataset()
    con = zarrsql.connect()
    tables = {t: d for t, (d, v, _) in _tables(con, scoped_dims[kind], group).items() if f"{group}/{variable}" in v}
    assert list(tables.values()) == [list(ds[variable].dims)]
    (table,) = tables
    sql = f"SELECT * FROM read_zarr('{scoped_dims[kind]}', group_path := '{group}', table_name := '{table}')"
    columns, rows = _rows(con, sql)
    assert (columns, rows) == _expected(ds, variable)


@pytest.mark.parametrize("kind", SOURCES)
def test_a_dimension_without_a_coordinate_variable_is_no_array(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "bounds.nc"
    bounds = np.array([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]])
    xr.Dataset({"time_bnds": (("time", "bnds"), bounds)}, coords={"time": [0, 1, 2]}).to_netcdf(path, engine="h5netcdf")
    source = _with_references(path)[kind]
    ds = xr.open_dataset(path, engine="h5netcdf")
    con = zarrsql.connect()
    listed = dict(con.execute(f"SELECT name, role FROM read_zarr_metadata('{source}')").fetchall())
    assert listed == {**dict.fromkeys(ds.coords, "coord"), **dict.fromkeys(ds.data_vars, "data")}
    got = _rows(con, f"SELECT * FROM read_zarr('{source}', table_name := 'time_bnds')")
    assert got == _expected(ds, "time_bnds")


@pytest.mark.parametrize("kind", SOURCES)
def test_a_groups_dimension_without_a_coordinate_variable_is_no_array(scoped_dims: dict[str, str], kind: str) -> None:
    tree = xr.open_datatree(scoped_dims["nc"], engine="h5netcdf")
    variables = {
        f"{node.path.strip('/')}/{name}".lstrip("/")
        for node in tree.subtree
        for name in node.to_dataset(inherit=False).variables
    }
    con = zarrsql.connect()
    rows = con.execute(f"SELECT name, role FROM read_zarr_metadata('{scoped_dims[kind]}')").fetchall()
    assert {name for name, _ in rows} == variables  # neither 'grp/bnds' nor 'x'
    assert "unsupported" not in {role for _, role in rows}


def test_an_unwritten_coordinate_variable_reads_as_xarray_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "unwritten.nc"
    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"t": 3}
        f.create_variable("t", ("t",), dtype="f8")  # a coordinate variable never written
        f.create_variable("v", ("t",), data=[1.0, 2.0, 3.0])
    ds = xr.open_dataset(path, engine="h5netcdf")
    con = zarrsql.connect()
    listed = dict(con.execute(f"SELECT name, role FROM read_zarr_metadata('{path}')").fetchall())
    assert listed == {"t": "coord", "v": "data"}
    assert _rows(con, f"SELECT * FROM read_zarr('{path}')") == _expected(ds, "v")


def test_filter_advice_only_for_a_dataset_with_a_filter_to_blame(tmp_path: Path) -> None:
    """A gzip dataset one of whose chunks HDF5 stored with the filter skipped (its filter
    mask): kerchunk cannot describe it, but no filter lacks a codec, so no h5repack advice."""
    path = tmp_path / "masked.h5"
    with h5py.File(path, "w") as f:
        masked = f.create_dataset("masked", shape=(40000,), chunks=(20000,), dtype="f8", compression="gzip")
        masked[:20000] = np.arange(20000.0)
        masked.id.write_direct_chunk((20000,), np.arange(20000.0).tobytes(), filter_mask=1)
        f.create_dataset("packed", data=np.arange(20000.0), chunks=(1000,), compression="lzf")
    con = zarrsql.connect()
    rows = con.execute(f"SELECT name, role, attrs FROM read_zarr_metadata('{path}')").fetchall()
    errors = {name: json.loads(attrs)["error"] for name, role, attrs in rows if role == "unsupported"}
    assert set(errors) == {"masked", "packed"}
    assert "filter" not in errors["masked"]
    assert "h5repack" not in errors["masked"]
    assert "kerchunk could not describe" in errors["masked"]
    assert "HDF5 filter 'lzf'" in errors["packed"]
    assert "h5repack" in errors["packed"]
