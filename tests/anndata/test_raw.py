"""AnnData's `raw` (the matrix scanpy keeps before filtering genes: `adata.raw = adata`) read
as tables of group `raw`, compared with `adata.raw.X` and `adata.raw.var` read back by anndata.

raw shares the observations of its AnnData object but has its own variables, so `raw/X` is
read over the parent's obs index and raw/var's index.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import anndata as ad
import zarrsql

N_OBS, N_VAR = 30, 12


def _adata(x_kind: str) -> ad.AnnData:
    """An object whose raw keeps all 12 genes while X keeps the highly variable ones."""
    rng = np.random.default_rng(11)
    dense = rng.poisson(0.7, (N_OBS, N_VAR)).astype(np.float32)
    x = sp.csr_matrix(dense) if x_kind == "csr" else dense
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(rng.choice(["B", "T", "NK"], N_OBS)), "n_counts": dense.sum(axis=1)},
        index=[f"CELL{i:03d}" for i in range(N_OBS)],
    )
    var = pd.DataFrame(
        {"gene_symbol": [f"SYM{i}" for i in range(N_VAR)], "highly_variable": rng.random(N_VAR) > 0.4},
        index=[f"GENE{i:02d}" for i in range(N_VAR)],
    )
    adata = ad.AnnData(X=x, obs=obs, var=var)
    adata.varm["PCs"] = rng.normal(size=(N_VAR, 3))
    adata.raw = adata
    return adata[:, adata.var["highly_variable"].to_numpy()].copy()


@pytest.fixture(scope="module", params=[(2, "dense"), (3, "dense"), (2, "csr"), (3, "csr")], ids=str)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    fmt, kind = request.param
    path = tmp_path_factory.mktemp("raw") / f"raw_{kind}_v{fmt}.zarr"
    with warnings.catch_warnings(), ad.settings.override(zarr_write_format=fmt):
        warnings.simplefilter("ignore")
        _adata(kind).write_zarr(path)
    return str(path)


def _read_back(path: str) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_zarr(path)


def _dense(x: object) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)  # type: ignore[union-attr]


def test_raw_tables_are_listed(store: str) -> None:
    adata = _read_back(store)
    assert adata.raw is not None
    assert adata.raw.n_vars > adata.n_vars
    with zarrsql.connect() as con:
        rows = con.sql(
            f"SELECT table_name, dims, shape, data_vars, coord_vars FROM read_zarr_tables('{store}') "
            "WHERE group_path = '/raw' ORDER BY table_name"
        ).fetchall()
    by_name = {r[0]: r[1:] for r in rows}
    assert set(by_name) == {"obs_var", "var", "var_PCs_component"}
    assert by_name["obs_var"] == (
        ["obs", "var"],
        [adata.n_obs, adata.raw.n_vars],
        ["raw/X"],
        ["obs/_index", "raw/var/_index"],
    )
    assert by_name["var"][:2] == (["var"], [adata.raw.n_vars])
    assert set(by_name["var"][2]) == {f"raw/var/{c}" for c in adata.raw.var.columns}
    assert by_name["var_PCs_component"][1] == list(adata.raw.varm["PCs"].shape)


def test_raw_x_reads_over_the_parent_obs_and_raw_var(store: str) -> None:
    adata = _read_back(store)
    x = _dense(adata.raw.X)
    obs, var = list(adata.obs_names), list(adata.raw.var_names)
    with zarrsql.connect() as con:
        got = con.sql(
            f"SELECT obs, var, X FROM read_zarr('{store}', group_path := 'raw', table_name := 'obs_var')"
        ).fetchall()
    if sp.issparse(adata.raw.X):  # one row per stored entry
        coo = sp.coo_matrix(adata.raw.X)
        expected = sorted((obs[i], var[j], float(v)) for i, j, v in zip(coo.row, coo.col, coo.data, strict=True))
    else:  # one row per cell
        expected = sorted((obs[i], var[j], float(x[i, j])) for i in range(len(obs)) for j in range(len(var)))
    assert sorted((o, v, float(value)) for o, v, value in got) == expected


def test_raw_x_filters_by_gene_the_main_x_lacks(store: str) -> None:
    adata = _read_back(store)
    dropped = [g for g in adata.raw.var_names if g not in set(adata.var_names)]
    gene = dropped[0]
    column = _dense(adata.raw.X)[:, list(adata.raw.var_names).index(gene)]
    with zarrsql.connect() as con:
        got = con.sql(
            f"SELECT sum(X) FROM read_zarr('{store}', group_path := 'raw', table_name := 'obs_var') "
            f"WHERE var = '{gene}'"
        ).fetchall()
        main = con.sql(f"SELECT count(*) FROM read_zarr('{store}', table_name := 'obs_var') WHERE var = '{gene}'")
        assert main.fetchall() == [(0,)]
    assert got[0][0] == pytest.approx(float(column.sum()))


def test_raw_var_reads_like_adata_raw_var(store: str) -> None:
    adata = _read_back(store)
    with zarrsql.connect() as con:
        df = con.sql(f"SELECT * FROM read_zarr('{store}', group_path := 'raw', table_name := 'var') ORDER BY var").df()
    want = adata.raw.var.sort_index()
    assert list(df["var"]) == list(want.index)
    assert list(df["gene_symbol"]) == list(want["gene_symbol"])
    assert list(df["highly_variable"]) == list(want["highly_variable"])


def test_raw_x_by_array_path_and_its_listed_axes(store: str) -> None:
    adata = _read_back(store)
    with zarrsql.connect() as con:
        value = "sum(COLUMNS(* EXCLUDE (obs, var)))"  # dense: `value`; sparse: `X`
        got = con.sql(f"SELECT count(*), {value} FROM read_zarr('{store}', array_path := 'raw/X')").fetchall()
        meta = dict(con.sql(f"SELECT name, array_path_dims FROM read_zarr_metadata('{store}')").fetchall())
    x = adata.raw.X
    rows = x.nnz if sp.issparse(x) else x.size
    assert got[0][0] == rows
    assert got[0][1] == pytest.approx(float(_dense(x).sum()))
    assert meta["raw/var/_index"] == ["var"]
    if not sp.issparse(x):
        assert meta["raw/X"] == ["obs", "var"]


def test_raw_tables_mount_in_the_raw_schema(store: str) -> None:
    adata = _read_back(store)
    with zarrsql.connect() as con:
        zarrsql.mount(con, store, "pbmc")
        got = con.sql("SELECT count(*) FROM pbmc.raw.var").fetchall()
    assert got == [(adata.raw.n_vars,)]


def test_an_anndata_object_without_raw_has_no_raw_tables(tmp_path: Path) -> None:
    adata = _adata("dense")
    del adata.raw
    path = tmp_path / "noraw.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_zarr(path)
    with zarrsql.connect() as con:
        groups = {r[0] for r in con.sql(f"SELECT group_path FROM read_zarr_tables('{path}')").fetchall()}
    assert groups == {"/"}
