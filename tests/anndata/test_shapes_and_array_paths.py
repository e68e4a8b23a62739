"""AnnData matrices whose shape disagrees with their axes, and single matrices read by array_path.

- A matrix (`X`, a dense or sparse layer, `raw/X`, an `obsp` entry) whose shape is not the
  (n_obs, n_var) obs and var give, or an `obsm` array whose rows are not obs's: anndata
  refuses the store. zarrsql lists the table without a name and reading it raises a
  `DecodeError` naming the matrix, its shape and the expected one (the matrix was left out
  of `obs_var` without a word: the table read the other layers' rows, and `X` was "not found").
- `array_path :=` on a dense matrix labels its axes with the cell and gene names, as on a
  sparse one (a dense `X` gave BIGINT positions, so a join to `obs` by name paired the wrong
  cells), and its column is `value` when the path has a '/' (a sparse layer gave its name).

Expected values come from anndata's own read of the store (before it was damaged).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import zarrsql
from anndata_fixtures import _writer


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def fmt(request: pytest.FixtureRequest) -> int:
    return request.param


def _write(adata, path: Path, fmt: int) -> str:
    with _writer(fmt):
        adata.write_zarr(str(path))
    return str(path)


def _read(path: str):
    import anndata as ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_zarr(path)


def _rows(matrix, rows: list, cols: list) -> list[tuple]:
    """(row label, column label, value) per cell of a dense matrix, per stored entry of a
    sparse one: what an `array_path :=` read of it gives."""
    if sp.issparse(matrix):
        coo = matrix.tocoo()
        return sorted((rows[i], cols[j], float(v)) for i, j, v in zip(coo.row, coo.col, coo.data, strict=True))
    dense = np.asarray(matrix)
    return sorted((rows[i], cols[j], float(dense[i, j])) for i in range(dense.shape[0]) for j in range(dense.shape[1]))


# ----------------------------------------------------------------------------- shapes
def _store_to_damage(tmp_path: Path, fmt: int) -> str:
    """3 cells × 4 genes: sparse X, a dense and a sparse layer, obsm, obsp, and raw with 5 genes."""
    import anndata as ad

    rng = np.random.default_rng(7)
    full = ad.AnnData(
        X=sp.random(3, 5, density=0.5, format="csr", random_state=1, dtype=np.float32),
        obs=pd.DataFrame(index=["c0", "c1", "c2"]),
        var=pd.DataFrame(index=["g0", "g1", "g2", "g3", "g4"]),
    )
    full.raw = full
    adata = full[:, :4].copy()
    adata.layers["D"] = rng.random((3, 4))
    adata.layers["S"] = sp.random(3, 4, density=0.5, format="csr", random_state=2)
    adata.obsm["E"] = rng.random((3, 2))
    adata.obsp["conn"] = rng.random((3, 3))
    return _write(adata, tmp_path / "a.zarr", fmt)


def _replace(group: zarr.Group, key: str, data: np.ndarray) -> None:
    """Rewrite array `key` with `data` (another shape), keeping its attributes."""
    attrs = dict(group[key].attrs)
    parent, _, name = key.rpartition("/")
    del group[key]
    group[parent].create_array(name, data=data).attrs.update(attrs)


def _set_shape(key: str, shape: list[int]) -> Callable[[zarr.Group], None]:
    return lambda g: g[key].attrs.__setitem__("shape", shape)


#: damage → (edit, group, table, the problem's text: element, its shape, the expected shape)
DAMAGE: dict[str, tuple[Callable[[zarr.Group], None], str, str, str]] = {
    "sparse X declares 3 genes": (
        _set_shape("X", [3, 3]),
        "",
        "obs_var",
        "matrix '/X' has shape [3, 3], not the [3, 4]",
    ),
    "dense layer of 3 genes": (
        lambda g: _replace(g, "layers/D", np.zeros((3, 3))),
        "",
        "obs_var",
        "matrix '/layers/D' has shape [3, 3], not the [3, 4]",
    ),
    "sparse layer declares 5 genes": (
        _set_shape("layers/S", [3, 5]),
        "",
        "obs_var",
        "matrix '/layers/S' has shape [3, 5], not the [3, 4]",
    ),
    "sparse X without indices": (
        lambda g: g["X"].__delitem__("indices"),
        "",
        "obs_var",
        "matrix '/X' has no 'indices'",
    ),
    "raw/X declares 6 genes": (
        _set_shape("raw/X", [3, 6]),
        "raw",
        "obs_var",
        "matrix '/raw/X' has shape [3, 6], not the [3, 5]",
    ),
    "obsp entry of 2 columns": (
        lambda g: _replace(g, "obsp/conn", np.zeros((3, 2))),
        "",
        "obs_obs_2",
        "matrix '/obsp/conn' has shape [3, 2], not the [3, 3]",
    ),
    "obsm array of 4 rows": (
        lambda g: _replace(g, "obsm/E", np.zeros((4, 2))),
        "",
        "obs_E_component",
        "array '/obsm/E' has shape [4, 2] but obs has 3 rows",
    ),
}


def _damage(path: str, edit: Callable[[zarr.Group], None]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edit(zarr.open_group(path, mode="r+", use_consolidated=False))
        zarr.consolidate_metadata(path)


def _source(path: str, group: str, table: str) -> str:
    return f"read_zarr('{path}', group_path := '{group or '/'}', table_name := '{table}')"


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_matrix_whose_shape_disagrees_with_its_axes_is_refused_by_name(tmp_path, fmt: int, damage: str) -> None:
    edit, group, table, named = DAMAGE[damage]
    path = _store_to_damage(tmp_path, fmt)
    intact = _read(path)
    _damage(path, edit)
    with pytest.raises((ValueError, KeyError)):  # the oracle: anndata refuses the store
        _read(path)
    con = zarrsql.connect()
    listed = con.sql(
        f"SELECT table_name FROM read_zarr_tables('{path}') WHERE group_path = '/{group}' "
        f"AND array_to_string(dims, '_') = '{table}'"
    ).fetchall()
    assert listed == [(None,)]  # listed, without a name: it cannot be read
    with pytest.raises(zarrsql.DecodeError, match=re.escape(named)) as refused:
        con.sql(f"SELECT * FROM {_source(path, group, table)}").fetchall()
    assert "rewrite" in str(refused.value)
    # the other tables of the store still read, by name
    rows = con.sql(f"SELECT obs FROM {_source(path, '', 'obs')} ORDER BY obs").fetchall()
    assert rows == [(n,) for n in sorted(intact.obs_names)]


def test_the_other_matrices_of_a_refused_table_read_alone(tmp_path, fmt: int) -> None:
    edit, _, _, _ = DAMAGE["sparse X declares 3 genes"]
    path = _store_to_damage(tmp_path, fmt)
    intact = _read(path)
    _damage(path, edit)
    con = zarrsql.connect()
    with pytest.raises(zarrsql.DecodeError, match="array_path := 'layers/[DS]'"):
        con.sql(f"SELECT sum(X) FROM {_source(path, '', 'obs_var')}").fetchall()
    obs, var = list(intact.obs_names), list(intact.var_names)
    for layer in ("D", "S"):
        got = con.sql(f"SELECT * FROM read_zarr('{path}', array_path := 'layers/{layer}')").fetchall()
        assert sorted(got) == _rows(intact.layers[layer], obs, var)


# ----------------------------------------------------------------------------- array_path
def _store_to_read(tmp_path: Path, fmt: int, kind: str) -> str:
    """4 cells named like numbers, in descending order (as after subsetting), 3 genes; `kind`
    is the format of X, raw/X and varp (dense or CSR); a dense and a sparse layer either way."""
    import anndata as ad

    rng = np.random.default_rng(3)

    def matrix(values: np.ndarray):
        return sp.csr_matrix(values) if kind == "csr" else values

    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    x[x % 3 == 0] = 0  # some zeros: a sparse matrix stores fewer entries
    full = ad.AnnData(X=matrix(x), obs=pd.DataFrame(index=["3", "2", "1", "0"]), var=pd.DataFrame(index=list("vwxyz")))
    full.raw = full
    adata = full[:, :3].copy()
    adata.layers["dense"] = rng.random((4, 3))
    adata.layers["counts"] = sp.csr_matrix(rng.integers(0, 2, (4, 3)).astype(np.int32))
    adata.obsm["X_pca"] = rng.random((4, 2))
    adata.varm["PCs"] = rng.random((3, 2))
    adata.obsp["conn"] = rng.random((4, 4))
    adata.varp["corr"] = matrix(rng.integers(0, 2, (3, 3)).astype(np.float64))
    return _write(adata, tmp_path / f"{kind}.zarr", fmt)


#: array path → (the axes its rows carry, its matrix in the anndata object)
ELEMENTS: dict[str, tuple[tuple[str, str], Callable]] = {
    "X": (("obs", "var"), lambda a: a.X),
    "layers/dense": (("obs", "var"), lambda a: a.layers["dense"]),
    "layers/counts": (("obs", "var"), lambda a: a.layers["counts"]),
    "obsm/X_pca": (("obs", "X_pca_component"), lambda a: a.obsm["X_pca"]),
    "varm/PCs": (("var", "PCs_component"), lambda a: a.varm["PCs"]),
    "obsp/conn": (("obs", "obs_2"), lambda a: a.obsp["conn"]),
    "varp/corr": (("var", "var_2"), lambda a: a.varp["corr"]),
    "raw/X": (("obs", "var"), lambda a: a.raw.X),
}


def _labels(adata, path: str, axis: str, n: int) -> list:
    if axis.endswith("_component"):
        return list(range(n))  # a positional dimension: 0 … k-1
    if axis.startswith("var") and path.startswith("raw/"):
        return list(adata.raw.var_names)
    return list(adata.obs_names if axis.startswith("obs") else adata.var_names)


@pytest.mark.parametrize("kind", ["dense", "csr"])
@pytest.mark.parametrize("element", list(ELEMENTS))
def test_array_path_labels_a_matrix_by_name_as_its_table_does(tmp_path, fmt: int, kind: str, element: str) -> None:
    path = _store_to_read(tmp_path, fmt, kind)
    adata = _read(path)
    axes, pick = ELEMENTS[element]
    matrix = pick(adata)
    rows = _labels(adata, element, axes[0], matrix.shape[0])
    cols = _labels(adata, element, axes[1], matrix.shape[1])
    rel = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{path}', array_path := '{element}')")
    # the user guide: the column is named after the path, `value` when the path has a '/'
    assert rel.columns == [*axes, "value" if "/" in element else element]
    name_types = ["BIGINT" if a.endswith("_component") else "VARCHAR" for a in axes]
    assert [str(t) for t in rel.types[:2]] == name_types
    assert sorted(rel.fetchall()) == _rows(matrix, rows, cols)


@pytest.mark.parametrize("kind", ["dense", "csr"])
def test_a_matrix_read_alone_joins_to_obs_by_name(tmp_path, fmt: int, kind: str) -> None:
    path = _store_to_read(tmp_path, fmt, kind)
    adata = _read(path)
    got = (
        zarrsql.connect()
        .sql(
            f"SELECT x.var, x.X FROM read_zarr('{path}', array_path := 'X') x "
            f"JOIN read_zarr('{path}', table_name := 'obs') o ON o.obs = x.obs WHERE o.obs = '0' ORDER BY x.var"
        )
        .fetchall()
    )
    cell = adata["0"].X
    want = _rows(cell, ["0"], list(adata.var_names))
    assert got == [(v, x) for _, v, x in want]
