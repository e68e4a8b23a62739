"""Listings and table selection: what a misaligned group lists as coordinates, `dims :=` on
tables whose dimension lists join to one name, v3 arrays named by `_ARRAY_DIMENSIONS`, and
what `read_zarr_metadata`'s `dims` and `array_path_dims` hold for every array.

Stores are written by xarray, zarr-python and anndata; expectations come from them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xarray as xr
import zarr

import zarrsql

FORMATS = pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])


@pytest.fixture
def con() -> zarrsql.Connection:
    with zarrsql.connect() as c:
        yield c


def _tables(con: zarrsql.Connection, store: Path) -> dict[str, dict]:
    rel = con.sql(f"SELECT * FROM read_zarr_tables('{store}')")
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    return {r["group_path"]: r for r in rows}


def _write(ds: xr.Dataset, store: Path, fmt: int, **kwargs: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(store, zarr_format=fmt, consolidated=False, **kwargs)


# --------------------------------------------------------------------------------------
# 1. a misaligned group lists no coordinate it cannot bind
# --------------------------------------------------------------------------------------


@FORMATS
def test_misaligned_group_lists_no_ancestor_coordinate(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "tree.zarr"
    _write(xr.Dataset({"r": ("x", np.arange(5.0))}, coords={"x": np.arange(5) * 2.0}), store, fmt)
    _write(xr.Dataset({"baz": ("x", np.arange(7.0))}), store, fmt, group="mis", mode="a")  # x: 7, no x array
    _write(xr.Dataset({"foo": ("x", np.arange(5.0) + 1)}), store, fmt, group="fine", mode="a")
    root = zarr.open_group(str(store), mode="r")
    assert "x" not in root["mis"]  # the premise: the only x coordinate is the root's, of another length
    assert root["x"].shape[0] != root["mis/baz"].shape[0]
    rows = _tables(con, store)
    assert rows["/mis"]["table_name"] is None
    assert rows["/mis"]["coord_vars"] == []
    assert rows["/fine"]["coord_vars"] == ["x"]  # an aligned group still inherits it
    # the misaligned array still reads alone, positionally
    got = con.sql(f"SELECT * FROM read_zarr('{store}', array_path := 'mis/baz') ORDER BY x").fetchall()
    assert got == [(i, float(v)) for i, v in enumerate(root["mis/baz"][...])]


@FORMATS
def test_misaligned_fixture_lists_no_coordinate(
    fmt: int,
    fixture_path,
    con: zarrsql.Connection,  # noqa: ANN001
) -> None:
    store = Path(fixture_path("datatree.zarr" if fmt == 3 else "v2/datatree.zarr"))
    group = zarr.open_group(str(store), mode="r")["misaligned"]
    root = zarr.open_group(str(store), mode="r")
    assert group["x"].shape != root["x"].shape  # the premise: misaligned with the root's x
    # its tables cannot be read, so they bind no coordinate, not even the group's own x
    assert _tables(con, store)["/misaligned"]["coord_vars"] == []


# --------------------------------------------------------------------------------------
# 7. two dimension lists that join to one name
# --------------------------------------------------------------------------------------


@FORMATS
def test_tables_whose_dims_join_to_one_name_read_by_dims(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "joined.zarr"
    rng = np.random.default_rng(7)
    ds = xr.Dataset(
        {"p": (("a_b", "c"), rng.normal(size=(2, 3))), "q": (("a", "b_c"), rng.normal(size=(4, 2)))},
        coords={"a_b": [10, 20], "c": [1.0, 2.0, 3.0], "a": list("wxyz"), "b_c": [5, 6]},
    )
    _write(ds, store, fmt)
    rows = con.sql(f"SELECT table_name, dims FROM read_zarr_tables('{store}') ORDER BY dims").fetchall()
    assert rows == [(None, ["a", "b_c"]), (None, ["a_b", "c"])]  # one joined name a_b_c: both unnamed
    for var, dims in (("p", ["a_b", "c"]), ("q", ["a", "b_c"])):
        got = con.sql(f"SELECT * FROM read_zarr('{store}', dims := {dims}) ORDER BY ALL").df()
        want = ds[var].to_dataframe().reset_index().sort_values(dims).reset_index(drop=True)
        assert list(got.columns) == [*dims, var]
        got = got.sort_values(dims).reset_index(drop=True)
        for col in [*dims, var]:
            assert list(got[col]) == list(want[col]), col
    with pytest.raises(zarrsql.SelectionError) as info:
        con.sql(f"SELECT * FROM read_zarr('{store}', table_name := 'a_b_c')")
    assert "another shape" not in str(info.value)
    assert "dims :=" in str(info.value)


# --------------------------------------------------------------------------------------
# 5. v3 arrays named by the _ARRAY_DIMENSIONS attribute
# --------------------------------------------------------------------------------------


def _v3_store(path: Path, temp_attrs: dict, **temp_kwargs: object) -> zarr.Group:
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    g.create_array("time", shape=(4,), dtype="int64", attributes={"_ARRAY_DIMENSIONS": ["time"]})[:] = [0, 6, 12, 18]
    g.create_array("x", shape=(3,), dtype="float64", attributes={"_ARRAY_DIMENSIONS": ["x"]})[:] = [0.5, 1.5, 2.5]
    temp = g.create_array("temp", shape=(4, 3), dtype="float32", attributes=temp_attrs, **temp_kwargs)
    temp[:] = np.arange(12, dtype="float32").reshape(4, 3) / 4
    return g


def test_v3_array_dimensions_attribute_names_the_axes(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "converted.zarr"
    g = _v3_store(store, {"_ARRAY_DIMENSIONS": ["time", "x"], "units": "K"})
    assert g["temp"].metadata.dimension_names is None  # the premise: no dimension_names
    got = con.sql(f"SELECT time, x, temp FROM read_zarr('{store}') ORDER BY time, x").fetchall()
    t, x, v = g["time"][...], g["x"][...], g["temp"][...]
    assert got == [(int(t[i]), float(x[j]), float(v[i, j])) for i in range(4) for j in range(3)]
    meta = {
        r[0]: r[1:]
        for r in con.sql(f"SELECT name, dims, array_path_dims FROM read_zarr_metadata('{store}')").fetchall()
    }
    assert meta["temp"] == (["time", "x"], ["time", "x"])


def test_dimension_names_win_over_the_attribute(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "both.zarr"
    g = _v3_store(store, {"_ARRAY_DIMENSIONS": ["a", "b"]}, dimension_names=["time", "x"])
    assert g["temp"].metadata.dimension_names == ("time", "x")
    assert con.sql(f"SELECT table_name FROM read_zarr_tables('{store}')").fetchall() == [("time_x",)]


@pytest.mark.parametrize("bad", [["time"], ["time", 3], "time x", ["time", ""]])
def test_a_malformed_attribute_leaves_the_array_unnamed_and_says_why(
    bad: object, tmp_path: Path, con: zarrsql.Connection
) -> None:
    store = tmp_path / "bad.zarr"
    g = zarr.open_group(str(store), mode="w", zarr_format=3)
    g.create_array("temp", shape=(4, 3), dtype="float32", attributes={"_ARRAY_DIMENSIONS": bad})[:] = 1.0
    meta = con.sql(f"SELECT dims, array_path_dims FROM read_zarr_metadata('{store}')").fetchall()
    assert meta == [([], ["dim_0", "dim_1"])]
    with pytest.raises(zarrsql.SelectionError) as info:
        con.sql(f"SELECT * FROM read_zarr('{store}')")
    text = str(info.value)
    assert "_ARRAY_DIMENSIONS" in text
    assert "array_path := 'temp'" in text
    assert con.sql(f"SELECT count(*) FROM read_zarr('{store}', array_path := 'temp')").fetchall() == [(12,)]


# --------------------------------------------------------------------------------------
# 6. dims (declared) and array_path_dims (what an array_path read uses), for every array
# --------------------------------------------------------------------------------------


def _anndata_store(path: Path, fmt: int) -> Path:
    import anndata as ad

    rng = np.random.default_rng(3)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["B", "T"], 6)),
            "score": pd.array([1, None, 3, 4, None, 6], dtype="Int64"),
        },
        index=[f"c{i}" for i in range(6)],
    )
    var = pd.DataFrame({"gene_symbol": pd.Categorical(["A", "B", "C", "D"])}, index=[f"g{i}" for i in range(4)])
    adata = ad.AnnData(X=rng.normal(size=(6, 4)).astype("float32"), obs=obs, var=var)
    adata.layers["counts"] = sp.csr_matrix(rng.poisson(0.5, (6, 4)).astype("float32"))
    with warnings.catch_warnings(), ad.settings.override(zarr_write_format=fmt):
        warnings.simplefilter("ignore")
        adata.write_zarr(path)
    return path


def _declared(store: Path, name: str) -> list[str]:
    """The dimension names an array's own metadata declares, read with zarr-python."""
    a = zarr.open_array(str(store / name), mode="r")
    if a.metadata.zarr_format == 3:
        names = a.metadata.dimension_names
        return list(names) if names is not None else []
    return list(a.attrs.get("_ARRAY_DIMENSIONS") or [])


def _read_axes(con: zarrsql.Connection, store: Path, name: str, ndim: int) -> list[str]:
    return zarrsql.read_zarr(str(store), connection=con, array_path=name).columns[:ndim]


def _check_every_array(con: zarrsql.Connection, store: Path) -> dict[str, tuple[list, list]]:
    rel = con.sql(f"SELECT name, dims, array_path_dims, shape, role FROM read_zarr_metadata('{store}')")
    out = {}
    for name, dims, path_dims, shape, role in rel.fetchall():
        assert dims == _declared(store, name), name
        if role not in ("unsupported", "scalar"):
            assert path_dims == _read_axes(con, store, name, len(shape)), name
        out[name] = (dims, path_dims)
    return out


@FORMATS
def test_anndata_metadata_dims_are_declared_and_array_path_dims_are_read(
    fmt: int, tmp_path: Path, con: zarrsql.Connection
) -> None:
    store = _anndata_store(tmp_path / "a.zarr", fmt)
    meta = _check_every_array(con, store)
    # AnnData declares no names; its layout gives them to array_path reads
    assert all(dims == [] for dims, _ in meta.values())
    assert meta["X"][1] == ["obs", "var"]
    assert meta["obs/_index"][1] == ["obs"]
    assert meta["obs/cell_type/codes"][1] == ["obs"]
    assert meta["obs/cell_type/categories"][1] == ["dim_0"]
    assert meta["layers/counts/data"][1] == ["dim_0"]


@FORMATS
def test_xarray_and_ome_metadata_dims(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    from ome_zarr import writer as ome_writer
    from ome_zarr.format import FormatV04, FormatV05

    store = tmp_path / "x.zarr"
    _write(xr.Dataset({"t": (("y", "x"), np.ones((2, 3)))}, coords={"x": [1, 2, 3]}), store, fmt)
    _check_every_array(con, store)
    image = tmp_path / "img.ome.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(image), mode="w", zarr_format=fmt)
        ome_writer.write_image(
            np.zeros((2, 8, 8), "uint8"),
            root,
            axes="cyx",
            scale_factors=(2,),
            fmt=FormatV04() if fmt == 2 else FormatV05(),
        )
    meta = _check_every_array(con, image)
    assert all(path_dims == ["c", "y", "x"] for _, path_dims in meta.values())
    attrs = json.loads(con.sql(f"SELECT attrs FROM read_zarr_metadata('{image}') LIMIT 1").fetchall()[0][0])
    assert isinstance(attrs, dict)
