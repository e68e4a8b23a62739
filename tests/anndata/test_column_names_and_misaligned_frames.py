"""AnnData stores whose names or frames other tests do not cover, checked against anndata.

- a frame column named like its axis (`obs["obs"]`), and layers named `X` or `obs`: each
  keeps its own values (a clash gets `_1`, as DuckDB names a duplicate column);
- a categorical without categories (a subset of zero cells) reads as VARCHAR;
- a frame column whose rows disagree with the index refuses the frame's table, naming the
  column, where anndata refuses the store (it was left out of the table without a word).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import zarrsql
from anndata_fixtures import _writer


def _write(adata, path, fmt: int) -> str:
    with _writer(fmt):
        adata.write_zarr(str(path))
    return str(path)


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def fmt(request: pytest.FixtureRequest) -> int:
    return request.param


def test_a_frame_column_named_like_its_axis_keeps_its_values(tmp_path, fmt: int) -> None:
    import anndata as ad

    obs = pd.DataFrame({"obs": ["a", "b", "c"]}, index=["c0", "c1", "c2"])
    var = pd.DataFrame({"var": ["p", "q"]}, index=["g0", "g1"])
    x = np.arange(6, dtype="float32").reshape(3, 2)
    path = _write(ad.AnnData(X=x, obs=obs, var=var), tmp_path / "a.zarr", fmt)
    back = ad.read_zarr(path)
    con = zarrsql.connect()
    for axis, frame, names in (("obs", back.obs, back.obs_names), ("var", back.var, back.var_names)):
        rel = con.sql(f"SELECT * FROM read_zarr('{path}', table_name := '{axis}') ORDER BY 1")
        assert rel.columns == [axis, f"{axis}_1"]
        assert rel.fetchall() == list(zip(names, frame[axis], strict=True))
    joined = con.sql(
        f"SELECT count(*), sum(x.X) FROM read_zarr('{path}', table_name := 'obs_var') x "
        f"JOIN read_zarr('{path}', table_name := 'obs') o USING (obs)"
    ).fetchall()
    assert joined == [(x.size, float(x.sum()))]


@pytest.mark.parametrize("layer", ["X", "obs", "x"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
def test_a_layer_named_like_another_column_keeps_both(tmp_path, fmt: int, layer: str, sparse: bool) -> None:
    import anndata as ad

    x = np.array([[0.0, 1.0], [2.0, 0.0], [3.0, 4.0]], dtype="float32")
    other = np.array([[7.0, 0.0], [0.0, 8.0], [9.0, 5.0]], dtype="float32")
    adata = ad.AnnData(
        X=sp.csr_matrix(x) if sparse else x,
        obs=pd.DataFrame(index=["c0", "c1", "c2"]),
        var=pd.DataFrame(index=["g0", "g1"]),
    )
    adata.layers[layer] = sp.csr_matrix(other) if sparse else other
    path = _write(adata, tmp_path / "a.zarr", fmt)
    back = ad.read_zarr(path)
    want_x = back.X.toarray() if sparse else back.X
    want_layer = back.layers[layer].toarray() if sparse else back.layers[layer]
    con = zarrsql.connect()
    listed = con.sql(f"SELECT data_vars FROM read_zarr_tables('{path}') WHERE table_name = 'obs_var'").fetchall()
    assert listed == [(["X", f"layers/{layer}"],)]
    rel = con.sql(f"SELECT * FROM read_zarr('{path}', table_name := 'obs_var')")
    names = rel.columns
    assert names[:3] == ["obs", "var", "X"] and len(names) == 4 and names[3].lower().startswith(layer.lower())
    got_x, got_layer = np.zeros_like(want_x), np.zeros_like(want_layer)
    for o, v, xv, lv in rel.fetchall():
        i, j = list(back.obs_names).index(o), list(back.var_names).index(v)
        got_x[i, j], got_layer[i, j] = xv or 0.0, lv or 0.0
    np.testing.assert_array_equal(got_x, want_x)
    np.testing.assert_array_equal(got_layer, want_layer)


def test_a_categorical_without_categories_reads_as_text(tmp_path, fmt: int) -> None:
    import anndata as ad

    full = ad.AnnData(
        X=np.ones((4, 2), dtype="float32"),
        obs=pd.DataFrame({"cell_type": pd.Categorical(["T", "B", "T", "NK"])}, index=["c0", "c1", "c2", "c3"]),
    )
    empty = full[full.obs.cell_type == "Mono"].copy()  # anndata keeps no unused category
    path = _write(empty, tmp_path / "a.zarr", fmt)
    back = ad.read_zarr(path)
    assert back.n_obs == 0 and len(back.obs.cell_type.cat.categories) == 0
    rel = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{path}', table_name := 'obs')")
    assert rel.columns == ["obs", "cell_type"] and rel.fetchall() == []
    assert str(rel.types[1]) == "VARCHAR"


@pytest.mark.parametrize("corruption", ["short codes", "short column", "missing node"])
def test_a_column_misaligned_with_its_index_refuses_the_frame(tmp_path, fmt: int, corruption: str) -> None:
    import anndata as ad

    obs = pd.DataFrame({"cell_type": pd.Categorical(list("abab")), "score": np.arange(4.0)}, index=list("wxyz"))
    path = _write(ad.AnnData(X=np.ones((4, 2), dtype="float32"), obs=obs), tmp_path / "a.zarr", fmt)
    group = zarr.open_group(path, mode="a", use_consolidated=False)
    if corruption == "short codes":
        del group["obs/cell_type/codes"]
        group["obs/cell_type"].create_array("codes", shape=(3,), dtype="int8")[:] = [0, 1, 0]
        named = "/obs/cell_type"
    elif corruption == "short column":
        del group["obs/score"]
        group["obs"].create_array("score", shape=(3,), dtype="float64")[:] = [1.0, 2.0, 3.0]
        named = "/obs/score"
    else:
        group["obs"].attrs["column-order"] = [*group["obs"].attrs["column-order"], "gone"]
        named = "/obs/gone"
    zarr.consolidate_metadata(path)
    with warnings.catch_warnings(), pytest.raises((ValueError, KeyError)):  # the oracle: anndata refuses it
        warnings.simplefilter("ignore")
        ad.read_zarr(path)
    con = zarrsql.connect()
    with pytest.raises(zarrsql.ZarrSQLError, match=f"'{named}'"):
        con.sql(f"SELECT * FROM read_zarr('{path}', table_name := 'obs')").fetchall()
    # the other tables of the store still read
    assert con.sql(f"SELECT count(*) FROM read_zarr('{path}', table_name := 'var')").fetchall() == [(2,)]
