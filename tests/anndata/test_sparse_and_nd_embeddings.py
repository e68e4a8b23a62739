"""Sparse and more-than-2-D `obsm`/`varm` entries, against anndata + scipy/numpy.

anndata keeps a sparse embedding (CITE-seq protein counts, a kNN indicator) as a CSR or CSC
group in `obsm`/`varm`, and accepts an `obsm` array of shape (n_obs, k, l). zarrsql listed
neither: the sparse group gave no table (and `array_path := 'obsm/<key>'` said "is a group"),
the 3-D array was left out without a word. Following docs/anndata.md, a sparse entry is the
table `obs_<key>_component` (`var_<key>_component`) with its dense twin's columns and one row
per stored entry, as for X; a 3-D array is the table `obs_<key>_component` with a second
positional axis `<key>_component_2`.

Expected values come from the store read back by `anndata.read_zarr` (scipy's stored
entries, numpy's cells), and expected column types from DuckDB over a pandas copy of them.
Values are compared exactly: both sides widen the stored float32/float64 to a Python float.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import anndata as ad
import zarrsql
from anndata_fixtures import _writer

N_OBS, N_VAR = 8, 5
OBS = [f"cell{i}" for i in range(N_OBS)]
VAR = [f"gene{i}" for i in range(N_VAR)]

#: (element, key) of every sparse entry of the store; its axis is the element's first three letters.
SPARSE = [("obsm", "prot_csr"), ("obsm", "prot_csc"), ("varm", "load_csr"), ("varm", "load_csc")]


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def fmt(request: pytest.FixtureRequest) -> int:
    return request.param


def _write(tmp_path: Path, fmt: int) -> str:
    """8 cells × 5 genes: CSR and CSC obsm and varm entries, a dense twin of the obsm ones,
    a 3-D obsm array, and raw (whose varm holds the same sparse entries)."""
    rng = np.random.default_rng(11)
    prot = sp.random(N_OBS, 4, density=0.4, format="csr", random_state=3, dtype=np.float32)
    load = sp.random(N_VAR, 3, density=0.5, format="csr", random_state=4, dtype=np.float64)
    a = ad.AnnData(
        X=rng.random((N_OBS, N_VAR)).astype(np.float32),
        obs=pd.DataFrame({"batch": ["a", "b"] * (N_OBS // 2)}, index=OBS),
        var=pd.DataFrame(index=VAR),
    )
    a.obsm["prot_csr"], a.obsm["prot_csc"], a.obsm["prot_dense"] = prot, prot.tocsc(), prot.toarray()
    a.varm["load_csr"], a.varm["load_csc"] = load, load.tocsc()
    a.obsm["cube"] = np.arange(N_OBS * 2 * 3, dtype=np.float64).reshape(N_OBS, 2, 3)
    a.raw = a
    path = tmp_path / "a.zarr"
    with _writer(fmt):
        a.write_zarr(str(path))
    return str(path)


def _read(path: str) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_zarr(path)


def _entries(matrix: sp.spmatrix, names: list[str]) -> list[tuple]:
    """(row name, component, value) per stored entry: what the sparse table holds."""
    coo = matrix.tocoo()
    return sorted((names[i], int(j), float(v)) for i, j, v in zip(coo.row, coo.col, coo.data, strict=True))


def _element(adata: ad.AnnData, element: str, key: str) -> tuple[sp.spmatrix, list[str]]:
    return getattr(adata, element)[key], list(adata.obs_names if element == "obsm" else adata.var_names)


def _source(path: str, table: str, group: str = "/") -> str:
    return f"read_zarr('{path}', group_path := '{group}', table_name := '{table}')"


# ----------------------------------------------------------------------------- sparse
@pytest.mark.parametrize(("element", "key"), SPARSE)
def test_a_sparse_entry_is_listed_as_its_component_table(tmp_path: Path, fmt: int, element: str, key: str) -> None:
    path = _write(tmp_path, fmt)
    matrix, _ = _element(_read(path), element, key)
    assert sp.issparse(matrix)  # the oracle keeps it sparse
    axis = element[:3]
    listed = (
        zarrsql.connect()
        .sql(f"SELECT table_name, dims, shape, data_vars FROM read_zarr_tables('{path}') WHERE group_path = '/'")
        .fetchall()
    )
    expected = (f"{axis}_{key}_component", [axis, f"{key}_component"], list(matrix.shape), [f"{element}/{key}"])
    assert expected in listed


@pytest.mark.parametrize(("element", "key"), SPARSE)
def test_a_sparse_entry_has_one_row_per_stored_entry(tmp_path: Path, fmt: int, element: str, key: str) -> None:
    path = _write(tmp_path, fmt)
    matrix, names = _element(_read(path), element, key)
    table = f"{element[:3]}_{key}_component"
    rows = zarrsql.connect().sql(f"SELECT * FROM {_source(path, table)}").fetchall()
    assert len(rows) == matrix.nnz
    assert sorted(rows) == _entries(matrix, names)


@pytest.mark.parametrize(("element", "key"), SPARSE)
def test_a_sparse_entry_has_its_dense_twins_columns(tmp_path: Path, fmt: int, element: str, key: str) -> None:
    """The axis names (VARCHAR), the component (BIGINT) and the values in the matrix's dtype:
    the columns DuckDB gives a pandas copy of the dense twin's rows."""
    path = _write(tmp_path, fmt)
    matrix, names = _element(_read(path), element, key)
    axis = element[:3]
    dense = matrix.toarray()
    twin = pd.DataFrame(
        {
            axis: np.repeat(np.array(names, dtype=object), dense.shape[1]),
            f"{key}_component": np.tile(np.arange(dense.shape[1], dtype=np.int64), dense.shape[0]),
            key: dense.reshape(-1),
        }
    )
    plain = duckdb.connect()
    plain.register("twin", twin)
    expected = plain.sql("DESCRIBE SELECT * FROM twin").fetchall()
    got = zarrsql.connect().sql(f"DESCRIBE SELECT * FROM {_source(path, f'{axis}_{key}_component')}").fetchall()
    assert [r[:2] for r in got] == [r[:2] for r in expected]


@pytest.mark.parametrize("key", ["prot_csr", "prot_csc"])
def test_a_where_on_obs_selects_the_named_cells_entries(tmp_path: Path, fmt: int, key: str) -> None:
    path = _write(tmp_path, fmt)
    adata = _read(path)
    matrix = adata.obsm[key]
    con = zarrsql.connect()
    for picked in (["cell1", "cell4"], ["cell6"], [name for name in OBS if name >= "cell5"]):
        listed = ", ".join(f"'{n}'" for n in picked)
        got = con.sql(f"SELECT * FROM {_source(path, f'obs_{key}_component')} WHERE obs IN ({listed})").fetchall()
        expected = [e for e in _entries(matrix, OBS) if e[0] in picked]
        assert sorted(got) == expected
    # a WHERE on an obs column, through a join by name
    batch = adata.obs["batch"]
    got = con.sql(
        f"SELECT e.* FROM {_source(path, f'obs_{key}_component')} e JOIN {_source(path, 'obs')} o USING (obs) "
        "WHERE o.batch = 'b'"
    ).fetchall()
    assert sorted(got) == [e for e in _entries(matrix, OBS) if batch[e[0]] == "b"]


@pytest.mark.parametrize(("element", "key"), SPARSE)
def test_array_path_reads_a_sparse_entry_alone(tmp_path: Path, fmt: int, element: str, key: str) -> None:
    path = _write(tmp_path, fmt)
    matrix, names = _element(_read(path), element, key)
    con = zarrsql.connect()
    got = con.sql(f"SELECT * FROM read_zarr('{path}', array_path := '{element}/{key}')").fetchall()
    assert sorted(got) == _entries(matrix, names)


@pytest.mark.parametrize("key", ["load_csr", "load_csc"])
def test_a_sparse_raw_varm_entry_is_a_table_of_group_raw(tmp_path: Path, fmt: int, key: str) -> None:
    path = _write(tmp_path, fmt)
    raw = _read(path).raw
    matrix = raw.varm[key]
    rows = zarrsql.connect().sql(f"SELECT * FROM {_source(path, f'var_{key}_component', 'raw')}").fetchall()
    assert sorted(rows) == _entries(matrix, list(raw.var_names))


def test_a_sparse_entry_whose_rows_disagree_with_obs_is_refused_by_name(tmp_path: Path, fmt: int) -> None:
    path = _write(tmp_path, fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.open_group(path, mode="r+", use_consolidated=False)["obsm/prot_csr"].attrs["shape"] = [N_OBS - 1, 4]
        zarr.consolidate_metadata(path)
    with pytest.raises((ValueError, KeyError)):  # the oracle: anndata refuses the store
        _read(path)
    con = zarrsql.connect()
    listed = con.sql(
        f"SELECT table_name FROM read_zarr_tables('{path}') WHERE 'obsm/prot_csr' IN data_vars "
        "OR array_to_string(dims, '_') = 'obs_prot_csr_component'"
    ).fetchall()
    assert listed == [(None,)]  # listed, without a name: it cannot be read
    named = f"matrix '/obsm/prot_csr' has shape [{N_OBS - 1}, 4], not the [{N_OBS}, 4]"
    with pytest.raises(zarrsql.DecodeError, match=re.escape(named)):
        con.sql(f"SELECT * FROM {_source(path, 'obs_prot_csr_component')}").fetchall()
    # the other sparse entry still reads
    rows = con.sql(f"SELECT count(*) FROM {_source(path, 'obs_prot_csc_component')}").fetchall()
    assert rows == [(_read_intact_nnz(path),)]


def _read_intact_nnz(path: str) -> int:
    """The stored entries of obsm/prot_csc, from its own arrays (anndata refuses the damaged store)."""
    group = zarr.open_group(path, mode="r")
    return int(np.asarray(group["obsm/prot_csc/indptr"])[-1])


# ----------------------------------------------------------------------------- 3-D
def _cells(array: np.ndarray, names: list[str]) -> list[tuple]:
    """(obs name, component, component_2, value) per cell of a 3-D array."""
    return sorted(
        (names[i], j, k, float(array[i, j, k]))
        for i in range(array.shape[0])
        for j in range(array.shape[1])
        for k in range(array.shape[2])
    )


def test_a_3d_obsm_array_is_a_table_with_a_second_component_axis(tmp_path: Path, fmt: int) -> None:
    path = _write(tmp_path, fmt)
    cube = np.asarray(_read(path).obsm["cube"])
    assert cube.ndim == 3  # the oracle keeps its three axes
    con = zarrsql.connect()
    listed = con.sql(
        f"SELECT table_name, dims, shape FROM read_zarr_tables('{path}') WHERE 'obsm/cube' IN data_vars"
    ).fetchall()
    assert listed == [("obs_cube_component", ["obs", "cube_component", "cube_component_2"], list(cube.shape))]
    rows = con.sql(f"SELECT * FROM {_source(path, 'obs_cube_component')}").fetchall()
    assert sorted(rows) == _cells(cube, OBS)
    picked = con.sql(
        f"SELECT * FROM {_source(path, 'obs_cube_component')} WHERE obs IN ('cell2', 'cell7') AND cube_component = 1"
    ).fetchall()
    assert sorted(picked) == [c for c in _cells(cube, OBS) if c[0] in ("cell2", "cell7") and c[1] == 1]


def test_array_path_names_a_3d_obsm_arrays_axes_like_its_table(tmp_path: Path, fmt: int) -> None:
    path = _write(tmp_path, fmt)
    cube = np.asarray(_read(path).obsm["cube"])
    rel = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{path}', array_path := 'obsm/cube')")
    assert rel.columns == ["obs", "cube_component", "cube_component_2", "value"]
    assert sorted(rel.fetchall()) == _cells(cube, OBS)
