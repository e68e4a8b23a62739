"""AnnData, MuData and SpatialData-like Zarr stores written by the real `anndata` package.

Tests of the AnnData layer (issue 5) read these stores with zarrsql and compare every table
with what `anndata.read_zarr` (turned into pandas) says the store holds, so the stores must
come from the writer single-cell users run, not from hand-made layouts. Only three things
are made here by other means, each because no writer produces it:

- the SpatialData-like store: a Zarr group whose `tables/table` is written with
  `anndata.io.write_elem` (SpatialData itself is not a dependency: reading its tables needs
  nothing SpatialData-specific), beside a Parquet file as SpatialData keeps points;
- the awkward-array element (the `awkward` package is not installed): a group with the
  `awkward-array` encoding attributes and its `node<i>-<kind>` arrays, made with zarr-python;
- the corrupt copies: a written store, then one array edited with zarr-python (and the
  consolidated metadata rewritten, so that no reader sees the old shape).

The MuData store is written by `mudata` when it is installed; otherwise by anndata alone in
MuData's layout (`mod/<name>` AnnData groups, root `obs`/`var` frames and the `MuData`
encoding attributes), which is what `mudata.MuData.write_zarr` produces for these elements.

Every store exists in Zarr format 2 and 3 (`anndata.settings.zarr_write_format`), under
`<root>/v2/<name>` and `<root>/v3/<name>`, except the two large ones of `V3_ONLY`.
`write_stores(root)` writes them all (about 10 s on two idle cores); `python
tests/anndata_fixtures.py OUT_DIR` does the same from the command line (the docs guide runs
its queries on stores written this way).

Values are deterministic (one seeded generator per store). The sizes are small on purpose:
the oracles expand dense tables cell by cell in pandas.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = [
    "CORRUPT",
    "FORMATS",
    "GENES",
    "STORES",
    "write_stores",
]

FORMATS = (2, 3)

#: gene symbols of the `var` index (25 genes); the last one is never expressed in the
#: sparse stores, so a mean over cells must add its zeros back
GENES = [
    "CD3E",
    "CD3D",
    "IL7R",
    "CCR7",
    "MS4A1",
    "CD79A",
    "CD79B",
    "NKG7",
    "GNLY",
    "GZMB",
    "LYZ",
    "CD14",
    "S100A8",
    "FCGR3A",
    "MS4A7",
    "PPBP",
    "PF4",
    "HBB",
    "MKI67",
    "TOP2A",
    "ACTB",
    "GAPDH",
    "MALAT1",
    "RPL13",
    "XIST",
]
CELL_TYPES = ["B", "Mono", "NK", "T"]
N_OBS = 60
N_VAR = len(GENES)


@contextmanager
def _writer(fmt: int) -> Iterator[None]:
    """anndata's settings for one format; writer warnings silenced (pytest makes them errors)."""
    import anndata as ad

    with warnings.catch_warnings(), ad.settings.override(zarr_write_format=fmt, allow_write_nullable_strings=True):
        warnings.simplefilter("ignore")
        yield


# --------------------------------------------------------------------------------------
# frames and matrices
# --------------------------------------------------------------------------------------


def cell_names(n: int, prefix: str = "CELL") -> list[str]:
    return [f"{prefix}{i:03d}-1" for i in range(n)]


def _covering(rng: np.random.Generator, n: int, values: list) -> list:
    """`n` random picks from `values` in which every value occurs (anndata drops unused
    categories, which would make the expected ENUM depend on the draw)."""
    picks = list(values) + list(rng.choice(np.array(values, dtype=object), n - len(values)))
    return [picks[i] for i in rng.permutation(n)]


def obs_frame(
    rng: np.random.Generator, names: list[str], *, index_name: str | None = "barcode", every_kind: bool = True
) -> pd.DataFrame:
    """One column of every kind AnnData encodes differently.

    cell_type: categorical of strings with two missing values (code -1); leiden: categorical
    of digit strings (clusters as scanpy writes them); sample: categorical of integers; dose:
    categorical of floats;
    n_genes int64; total_counts float32; pct_mito float64; is_doublet bool; n_umis nullable
    integer; passed_qc nullable boolean; donor plain strings; note nullable strings.
    With `every_kind=False` only cell_type, leiden and n_genes (stores about matrices:
    fewer arrays write faster, and zarr-python's cost is per array).
    """
    n = len(names)
    cell_type = pd.Categorical(_covering(rng, n, CELL_TYPES), categories=CELL_TYPES)
    cell_type[[3, 17 % n]] = np.nan  # code -1: reads as NULL
    n_umis = pd.array(rng.integers(500, 5000, n), dtype="Int64")
    n_umis[[1, 8, 30 % n]] = pd.NA
    passed = pd.array(rng.random(n) > 0.3, dtype="boolean")
    passed[[2, 9]] = pd.NA
    note = pd.array(_covering(rng, n, ["ok", "low quality", "doublet?"]), dtype="string")
    note[[0, 5, 6]] = pd.NA
    frame = pd.DataFrame(
        {
            "cell_type": cell_type,
            "leiden": pd.Categorical(_covering(rng, n, ["0", "1", "2", "3"]), categories=["0", "1", "2", "3"]),
            "sample": pd.Categorical(_covering(rng, n, [101, 102, 103])),
            "dose": pd.Categorical(_covering(rng, n, [0.5, 1.0, 2.0])),
            "n_genes": rng.integers(100, 3000, n).astype(np.int64),
            "total_counts": rng.uniform(500, 20000, n).astype(np.float32),
            "pct_mito": rng.uniform(0, 12, n),
            "is_doublet": rng.random(n) < 0.1,
            "n_umis": n_umis,
            "passed_qc": passed,
            "donor": _covering(rng, n, ["D1", "D2", "D3"]),
            "note": note,
        },
        index=pd.Index(names, name=index_name),
    )
    return frame if every_kind else frame[["cell_type", "leiden", "n_genes"]]


def var_frame(rng: np.random.Generator, genes: list[str]) -> pd.DataFrame:
    m = len(genes)
    return pd.DataFrame(
        {
            "gene_ids": [f"ENSG{i:011d}" for i in range(m)],
            "feature_types": pd.Categorical(["Gene Expression"] * m),
            "highly_variable": np.arange(m) % 3 == 0,
            "means": rng.uniform(0, 3, m),
            "n_cells": rng.integers(0, 60, m).astype(np.int32),
        },
        index=pd.Index(genes),
    )


def _pattern(rng: np.random.Generator, n: int, m: int, density: float) -> np.ndarray:
    """A boolean stored-entry pattern with an empty first row and an empty last column."""
    mask = rng.random((n, m)) < density
    mask[0, :] = False
    mask[:, -1] = False
    return mask


def sparse_pair(rng: np.random.Generator, n: int, m: int, fmt: str) -> tuple[sp.spmatrix, sp.spmatrix]:
    """`X` (float32) and `counts` (int32) whose stored positions overlap but differ.

    Each drops a different fifth of a common pattern, so the union of their stored
    positions has entries only X stores and entries only counts stores; X also stores one
    explicit zero (a stored entry, so it is a row of the table).
    """
    base = _pattern(rng, n, m, 0.3)
    in_x = base & (rng.random((n, m)) > 0.2)
    in_counts = base & (rng.random((n, m)) > 0.2)
    counts = np.where(in_counts, rng.integers(1, 30, (n, m)), 0).astype(np.int32)
    x = np.where(in_x, np.log1p(rng.integers(1, 30, (n, m))), 0).astype(np.float32)
    xs = sp.csr_matrix(x)
    free = np.argwhere(~base)  # positions nobody stores, outside the empty first row and last column
    r, c = free[(free[:, 0] > 0) & (free[:, 1] < m - 1)][5]
    xs = sp.csr_matrix(
        (np.append(xs.data, np.float32(0)), (np.append(xs.tocoo().row, r), np.append(xs.tocoo().col, c))), shape=(n, m)
    )
    xs.sort_indices()
    assert xs.nnz == int(in_x.sum()) + 1  # the explicit zero stays stored
    cs = sp.csr_matrix(counts)
    if fmt == "csc":
        return xs.tocsc(), cs.tocsc()
    return xs, cs


def neighbour_graphs(rng: np.random.Generator, n: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """obsp `connectivities` (float32) and `distances` (float64), CSR like scanpy's, whose
    patterns differ (k=4 neighbours vs k=3 of other cells, symmetrised)."""

    def knn(k: int, dtype: type) -> sp.csr_matrix:
        rows = np.repeat(np.arange(n), k)
        cols = (rows + rng.integers(1, n, rows.size)) % n
        vals = rng.uniform(0.1, 1.0, rows.size).astype(dtype)
        g = sp.csr_matrix((vals, (rows, cols)), shape=(n, n), dtype=dtype)
        g.sum_duplicates()
        g.sort_indices()
        return g

    return knn(4, np.float32), knn(3, np.float64)


def anndata_full(rng: np.random.Generator):  # noqa: ANN201 - anndata is imported lazily
    """Dense X with a dense layer, and every element AnnData has.

    obsm X_pca (60×5 float64), X_umap (60×2 float32) and a data frame `qc_df`; varm PCs;
    obsp connectivities and distances (CSR, different patterns); varp gene_corr (dense);
    uns with arrays (strings, floats, scalars, nested dicts) and a data frame.
    """
    import anndata as ad

    names = cell_names(N_OBS)
    x = np.where(rng.random((N_OBS, N_VAR)) < 0.4, rng.gamma(2.0, 1.0, (N_OBS, N_VAR)), 0).astype(np.float32)
    a = ad.AnnData(X=x, obs=obs_frame(rng, names), var=var_frame(rng, GENES))
    a.layers["scaled"] = (x - x.mean(axis=0)).astype(np.float64)
    a.obsm["X_pca"] = rng.normal(size=(N_OBS, 5))
    a.obsm["X_umap"] = rng.normal(size=(N_OBS, 2)).astype(np.float32)
    a.obsm["qc_df"] = pd.DataFrame(
        {"score": rng.random(N_OBS), "flag": pd.Categorical(_covering(rng, N_OBS, ["a", "b"]))}, index=a.obs_names
    )
    a.varm["PCs"] = rng.normal(size=(N_VAR, 5))
    a.obsp["connectivities"], a.obsp["distances"] = neighbour_graphs(rng, N_OBS)
    a.varp["gene_corr"] = np.corrcoef(rng.normal(size=(N_VAR, 8)))
    a.uns["leiden_colors"] = np.array(["#1f77b4", "#ff7f0e", "#279e68", "#d62728"])
    a.uns["pca"] = {"variance": rng.uniform(1, 5, 5), "variance_ratio": rng.uniform(0, 0.2, 5)}
    a.uns["neighbors"] = {"params": {"n_neighbors": 15, "method": "umap"}}
    a.uns["rank_genes"] = pd.DataFrame({"names": GENES[:4], "scores": rng.normal(size=4)})
    return a


def anndata_sparse(rng: np.random.Generator, x_fmt: str, layer: str, *, every_kind: bool = False):  # noqa: ANN201
    """Sparse X with one layer: `counts` of format `layer` ('csr' or 'csc') or `dense`."""
    import anndata as ad

    x, counts = sparse_pair(rng, N_OBS, N_VAR, x_fmt)
    obs = obs_frame(rng, cell_names(N_OBS), every_kind=every_kind)
    a = ad.AnnData(X=x, obs=obs, var=var_frame(rng, GENES))
    if layer == "dense":
        a.layers["dense"] = counts.toarray().astype(np.float64)
    else:
        a.layers["counts"] = counts.tocsr() if layer == "csr" else counts.tocsc()
    return a


def anndata_duplicates(rng: np.random.Generator):  # noqa: ANN201
    """CSR X whose obs names repeat (three names twice, one three times)."""
    import anndata as ad

    names = cell_names(20)
    for i, j in [(4, 2), (9, 2), (15, 11), (16, 2)]:
        names[i] = names[j]
    x, _ = sparse_pair(rng, 20, N_VAR, "csr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "obs_names are not unique"
        return ad.AnnData(X=x, obs=obs_frame(rng, names, every_kind=False), var=var_frame(rng, GENES))


def anndata_pushdown(rng: np.random.Generator, kind: str):  # noqa: ANN201
    """Long along the compressed axis, so a scan has many row (or column) ranges to skip.

    csr: 20,000 cells × 500 genes; csc: 500 cells × 20,000 genes (both 0.5%, 50k entries);
    wide: 2,000 × 2,000 CSR at 5% (about 100 entries a row, written in chunks of 50,000
    entries: many rows share a chunk, as with anndata's default chunking of real data);
    dense: 2,000 × 100 (30% nonzero). Names `C00000`…, `G00000`…; values 0.1 … 10.0.
    """
    import anndata as ad

    n, m, density = {
        "csr": (20000, 500, 0.005),
        "csc": (500, 20000, 0.005),
        "wide": (2000, 2000, 0.05),
        "dense": (2000, 100, 0.3),
    }[kind]
    x = sp.random(n, m, density=density, format="csr", dtype=np.float32, random_state=rng)
    x.data[:] = np.maximum(np.round(x.data * 10, 1), 0.1)
    obs = pd.DataFrame({"n_genes": np.diff(x.indptr).astype(np.int64)}, index=[f"C{i:05d}" for i in range(n)])
    var = pd.DataFrame(index=[f"G{j:05d}" for j in range(m)])
    matrix = {"csr": x, "wide": x, "csc": x.tocsc(), "dense": x.toarray()}[kind]
    return ad.AnnData(X=matrix, obs=obs, var=var)


def anndata_many_units(rng: np.random.Generator, kind: str):  # noqa: ANN201
    """12 million stored entries, 100 per row (CSR: 120,000 cells × 1,000 genes) or per
    column (CSC: 1,000 cells × 120,000 genes), so that a scan plans many work units.

    Built directly (a random pattern of this size would take seconds): row i stores the
    columns (7·i + 10·j) mod 1,000 for j < 100; values 1 … 9. Written with anndata's default
    chunking; about 10 MB on disk.
    """
    import anndata as ad

    n, k, m = 120_000, 100, 1_000
    cols = np.sort((np.arange(n)[:, None] * 7 + np.arange(k)[None, :] * 10) % m, axis=1).astype(np.int32)
    values = rng.integers(1, 10, n * k).astype(np.float32)
    x = sp.csr_matrix((values, cols.ravel(), np.arange(0, n * k + 1, k, dtype=np.int64)), shape=(n, m))
    cells, genes = [f"C{i:06d}" for i in range(n)], [f"G{j:06d}" for j in range(m)]
    if kind == "csc":  # the transpose: 1,000 cells × 120,000 genes, 100 entries per gene
        x = x.T.tocsc()
        cells, genes = [f"C{i:06d}" for i in range(m)], [f"G{j:06d}" for j in range(n)]
    return ad.AnnData(X=x, obs=pd.DataFrame(index=cells), var=pd.DataFrame(index=genes))


# --------------------------------------------------------------------------------------
# writers
# --------------------------------------------------------------------------------------


def _consolidate(path: Path) -> None:
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))


def write_anndata(path: Path, adata, fmt: int, *, x_chunks: int | None = None) -> Path:  # noqa: ANN001
    """`AnnData.write_zarr` (strings kept as strings, not turned into categoricals).

    `x_chunks` rewrites a sparse X with `data`/`indices`/`indptr` chunked by that many
    elements (write_zarr only chunks a dense X), so a scan has many chunks to skip.
    """
    import zarr

    import anndata as ad

    with _writer(fmt):
        if x_chunks is not None and not sp.issparse(adata.X):
            adata.write_zarr(str(path), chunks=(x_chunks, adata.n_vars), convert_strings_to_categoricals=False)
            return path
        adata.write_zarr(str(path), convert_strings_to_categoricals=False)
        if x_chunks is not None:
            group = zarr.open_group(str(path), mode="r+", use_consolidated=False)
            del group["X"]
            ad.io.write_elem(group, "X", adata.X, dataset_kwargs={"chunks": (x_chunks,)})
    _consolidate(path)
    return path


def write_mudata(path: Path, rng: np.random.Generator, fmt: int) -> Path:
    """Two modalities whose cells overlap: `rna` (CSR, cells 0-39) and `prot` (dense, cells
    10-59, the 8 proteins named after genes). Root frames: global obs column `batch` over all
    60 cells, global var column `feature_kind` over the 25 + 8 features."""
    import anndata as ad

    names = cell_names(N_OBS)
    x, _ = sparse_pair(rng, 40, N_VAR, "csr")
    rna = ad.AnnData(X=x, obs=obs_frame(rng, names[:40], index_name=None, every_kind=False), var=var_frame(rng, GENES))
    proteins = ["CD3", "CD4", "CD8", "CD16", "CD19", "CD45RA", "CD56", "HLA-DR"]  # none is a gene name
    prot = ad.AnnData(
        X=rng.gamma(2.0, 50.0, (50, len(proteins))).astype(np.float32),
        obs=pd.DataFrame({"isotype_ctrl": rng.uniform(0, 5, 50)}, index=names[10:]),
        var=pd.DataFrame({"clone": [f"clone{i}" for i in range(len(proteins))]}, index=proteins),
    )
    global_obs = pd.DataFrame(
        {
            "batch": pd.Categorical(_covering(rng, N_OBS, ["b1", "b2"])),
            "n_modalities": np.where((np.arange(N_OBS) >= 10) & (np.arange(N_OBS) < 40), 2, 1),
        },
        index=names,
    )
    global_var = pd.DataFrame({"feature_kind": ["gene"] * N_VAR + ["protein"] * len(proteins)}, index=GENES + proteins)
    try:
        import mudata
    except ImportError:
        return _write_mudata_layout(path, {"rna": rna, "prot": prot}, global_obs, global_var, fmt)
    with _writer(fmt):
        m = mudata.MuData({"rna": rna, "prot": prot})
        m.obs = global_obs.loc[m.obs_names]
        m.var = global_var.loc[m.var_names]
        m.write_zarr(str(path))
    _consolidate(path)
    return path


def _write_mudata_layout(path: Path, mods: dict, global_obs: pd.DataFrame, global_var: pd.DataFrame, fmt: int) -> Path:
    """MuData's layout without mudata: `mod/<name>` AnnData groups and root obs/var frames."""
    import zarr

    import anndata as ad

    with _writer(fmt):
        root = zarr.open_group(str(path), mode="w", zarr_format=fmt)
        root.attrs.update({"encoding-type": "MuData", "encoding-version": "0.1.0", "axis": 0})
        for name, adata in mods.items():
            ad.io.write_elem(root, f"mod/{name}", adata)
        root["mod"].attrs["mod-order"] = list(mods)
        ad.io.write_elem(root, "obs", global_obs)
        ad.io.write_elem(root, "var", global_var)
    _consolidate(path)
    return path


def write_spatialdata(path: Path, rng: np.random.Generator, fmt: int) -> Path:
    """SpatialData-like: root attrs `spatialdata_attrs`, the table at `tables/table` (CSR X),
    points as Parquet under `points/transcripts/points.parquet` (not Zarr: ignored)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zarr

    import anndata as ad

    a = anndata_sparse(rng, "csr", "csr", every_kind=True)
    a.obs["region"] = pd.Categorical(["cells"] * a.n_obs)
    a.obs["instance_id"] = np.arange(a.n_obs, dtype=np.int64)
    a.uns["spatialdata_attrs"] = {"region": "cells", "region_key": "region", "instance_key": "instance_id"}
    with _writer(fmt):
        root = zarr.open_group(str(path), mode="w", zarr_format=fmt)
        root.attrs["spatialdata_attrs"] = {"version": "0.2"}
        ad.io.write_elem(root, "tables/table", a)
    parquet = path / "points" / "transcripts" / "points.parquet"
    parquet.mkdir(parents=True)
    pq.write_table(pa.table({"x": rng.random(10), "y": rng.random(10), "gene": GENES[:10]}), parquet / "part.0.parquet")
    _consolidate(path)
    return path


def write_nested(path: Path, rng: np.random.Generator, fmt: int) -> Path:
    """An AnnData group neither at the root nor under tables/ or mod/: `experiments/run1`,
    whose CSR X stores nothing at all (12 cells × 3 genes, no entries)."""
    import zarr

    import anndata as ad

    n = 12
    a = ad.AnnData(
        X=sp.csr_matrix((n, 3), dtype=np.float32),
        obs=obs_frame(rng, cell_names(n), every_kind=False),
        var=var_frame(rng, GENES[:3]),
    )
    with _writer(fmt):
        root = zarr.open_group(str(path), mode="w", zarr_format=fmt)
        root.attrs["description"] = "an AnnData group nested two levels down"
        ad.io.write_elem(root, "experiments/run1", a)
    _consolidate(path)
    return path


def write_awkward(path: Path, rng: np.random.Generator, fmt: int) -> Path:
    """A small AnnData whose obsm holds an awkward array (ragged lists per cell).

    anndata writes awkward arrays only with the `awkward` package; this one is the same
    layout made with zarr-python: a group with the `awkward-array` encoding, its `form`
    (JSON) and `length`, and one array per buffer (`node0-offsets`, `node1-data`).
    """
    import zarr

    import anndata as ad

    n = 12
    a = ad.AnnData(
        X=rng.random((n, 4)).astype(np.float32),
        obs=obs_frame(rng, cell_names(n), every_kind=False),
        var=var_frame(rng, GENES[:4]),
    )
    write_anndata(path, a, fmt)
    lengths = rng.integers(0, 4, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    form = {
        "class": "ListOffsetArray",
        "offsets": "i64",
        "form_key": "node0",
        "content": {"class": "NumpyArray", "primitive": "float64", "form_key": "node1"},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(path), mode="r+", use_consolidated=False)
        group = root.require_group("obsm").create_group("ragged")
        group.attrs.update(
            {"encoding-type": "awkward-array", "encoding-version": "0.1.0", "form": json.dumps(form), "length": n}
        )
        group.create_array("node0-offsets", data=offsets)
        group.create_array("node1-data", data=rng.random(int(offsets[-1])))
    _consolidate(path)
    return path


# --------------------------------------------------------------------------------------
# corrupt copies
# --------------------------------------------------------------------------------------


def _replace_array(path: Path, key: str, data: np.ndarray) -> None:
    """Rewrite array `key` of the store at `path` with `data` (any length), keeping its attrs."""
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(path), mode="r+", use_consolidated=False)
        old = group[key]
        attrs = dict(old.attrs)
        parent, _, name = key.rpartition("/")
        del group[key]
        group[parent].create_array(name, data=data).attrs.update(attrs)


def _edit_array(path: Path, key: str, edit: Callable[[np.ndarray], None]) -> None:
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.open_array(str(path / key), mode="r+")
        values = arr[...]
        edit(values)
        arr[...] = values


def _indptr_not_monotonic(v: np.ndarray) -> None:
    i = int(np.argmax(np.diff(v) > 0)) + 1  # the end of the first non-empty row
    v[i] = v[i + 1] + 1 if v[i + 1] + 1 <= v[-1] else v[i - 1] - 1
    assert (np.diff(v) < 0).any()


def _indptr_past_the_data(v: np.ndarray) -> None:
    v[-1] += 5  # still non-decreasing, but past the end of indices/data


def _index_out_of_range(v: np.ndarray) -> None:
    v[7] = 25 + 3  # the sparse fixtures have 25 genes: valid column indices are 0 … 24


def _codes_too_high(v: np.ndarray) -> None:
    v[5] = 4  # cell_type has 4 categories: valid codes are -1 … 3


def _codes_too_low(v: np.ndarray) -> None:
    v[5] = -2


#: corrupt copy name → (what it breaks, the element a clear error must name, table to read).
#: The issue lists indptr, codes and masks; the indptr/indices/data disagreements after them
#: are the same kind of fault (a row or a name read from the wrong place) and get the same rule.
CORRUPT: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "indptr_not_monotonic": (lambda p: _edit_array(p, "X/indptr", _indptr_not_monotonic), "X", "obs_var"),
    "indptr_too_short": (lambda p: _replace_array(p, "X/indptr", _read(p, "X/indptr")[:-1]), "X", "obs_var"),
    "indptr_too_long": (
        lambda p: _replace_array(p, "X/indptr", np.append(_read(p, "X/indptr"), _read(p, "X/indptr")[-1])),
        "X",
        "obs_var",
    ),
    "layer_indptr_too_short": (
        lambda p: _replace_array(p, "layers/counts/indptr", _read(p, "layers/counts/indptr")[:-2]),
        "layers/counts",
        "obs_var",
    ),
    "indptr_past_the_data": (lambda p: _edit_array(p, "X/indptr", _indptr_past_the_data), "X", "obs_var"),
    "indices_out_of_range": (lambda p: _edit_array(p, "X/indices", _index_out_of_range), "X", "obs_var"),
    "data_shorter_than_indices": (lambda p: _replace_array(p, "X/data", _read(p, "X/data")[:-3]), "X", "obs_var"),
    "codes_too_high": (lambda p: _edit_array(p, "obs/cell_type/codes", _codes_too_high), "obs/cell_type", "obs"),
    "codes_too_low": (lambda p: _edit_array(p, "obs/cell_type/codes", _codes_too_low), "obs/cell_type", "obs"),
    "mask_too_short": (
        lambda p: _replace_array(p, "obs/n_umis/mask", _read(p, "obs/n_umis/mask")[:-1]),
        "obs/n_umis",
        "obs",
    ),
    "mask_too_long": (
        lambda p: _replace_array(p, "obs/passed_qc/mask", np.append(_read(p, "obs/passed_qc/mask"), False)),
        "obs/passed_qc",
        "obs",
    ),
}


def _read(path: Path, key: str) -> np.ndarray:
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_array(str(path / key), mode="r")[...]


# --------------------------------------------------------------------------------------
# the set of stores
# --------------------------------------------------------------------------------------


def _sparse_store(
    x_fmt: str, layer: str, *, every_kind: bool = False
) -> Callable[[Path, np.random.Generator, int], Path]:
    return lambda p, rng, fmt: write_anndata(p, anndata_sparse(rng, x_fmt, layer, every_kind=every_kind), fmt)


#: store name → writer(path, rng, fmt)
STORES: dict[str, Callable[[Path, np.random.Generator, int], Path]] = {
    "full.zarr": lambda p, rng, fmt: write_anndata(p, anndata_full(rng), fmt),
    "csr.zarr": _sparse_store("csr", "csr", every_kind=True),
    "csc.zarr": _sparse_store("csc", "csc"),
    "csr_dense_layer.zarr": _sparse_store("csr", "dense"),
    "mixed.zarr": _sparse_store("csr", "csc"),
    "duplicates.zarr": lambda p, rng, fmt: write_anndata(p, anndata_duplicates(rng), fmt),
    "mudata.zarr": write_mudata,
    "spatialdata.zarr": write_spatialdata,
    "awkward.zarr": write_awkward,
    "nested.zarr": write_nested,
    "pushdown_csr.zarr": lambda p, rng, fmt: write_anndata(p, anndata_pushdown(rng, "csr"), fmt, x_chunks=1000),
    "pushdown_csc.zarr": lambda p, rng, fmt: write_anndata(p, anndata_pushdown(rng, "csc"), fmt, x_chunks=1000),
    "pushdown_wide.zarr": lambda p, rng, fmt: write_anndata(p, anndata_pushdown(rng, "wide"), fmt, x_chunks=50_000),
    "pushdown_many_units_csr.zarr": lambda p, rng, fmt: write_anndata(p, anndata_many_units(rng, "csr"), fmt),
    "pushdown_many_units_csc.zarr": lambda p, rng, fmt: write_anndata(p, anndata_many_units(rng, "csc"), fmt),
    "pushdown_dense.zarr": lambda p, rng, fmt: write_anndata(p, anndata_pushdown(rng, "dense"), fmt, x_chunks=100),
}


#: stores written in Zarr v3 only: 12 million entries each cost a second or two to write,
#: and what they test (planning many work units) does not depend on the format
V3_ONLY = {"pushdown_many_units_csr.zarr", "pushdown_many_units_csc.zarr"}


def write_store(root: Path, fmt: int, name: str) -> Path:
    """One store of `STORES` in one Zarr format, under `root/v<fmt>/`."""
    path = root / f"v{fmt}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    seed = sum(name.encode())  # one generator per store: adding a store changes no other
    return STORES[name](path, np.random.default_rng(seed), fmt)


def write_corrupt_copies(root: Path, fmt: int) -> dict[str, Path]:
    """The `CORRUPT` copies of `v<fmt>/csr.zarr`, under `root/v<fmt>/corrupt/`."""
    out = {}
    for name, (corrupt, _element, _table) in CORRUPT.items():
        path = root / f"v{fmt}" / "corrupt" / f"{name}.zarr"
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(root / f"v{fmt}" / "csr.zarr", path)
        corrupt(path)
        _consolidate(path)
        out[f"v{fmt}/corrupt/{name}.zarr"] = path
    return out


def write_stores(root: Path, *, processes: int = 2) -> dict[str, Path]:
    """Write every store (both formats) and the corrupt copies under `root`.

    Returns `{"v3/csr.zarr": path, ..., "v3/corrupt/codes_too_high.zarr": path, ...}`.
    zarr-python spends a millisecond or so per call on its event loop, hundreds of calls per
    store, so the stores are written by `processes` fresh processes side by side (spawned:
    forking a process whose zarr event loop runs can hang); `processes=0` writes them here.
    """
    tasks = [(fmt, name) for name in STORES for fmt in FORMATS if fmt == 3 or name not in V3_ONLY]
    if processes:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(processes, mp_context=context) as pool:
            paths = list(pool.map(write_store, [root] * len(tasks), *zip(*tasks, strict=True)))
    else:
        paths = [write_store(root, fmt, name) for fmt, name in tasks]
    out = {f"v{fmt}/{name}": path for (fmt, name), path in zip(tasks, paths, strict=True)}
    for fmt in FORMATS:
        out |= write_corrupt_copies(root, fmt)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "anndata_stores")
    if target.exists():
        shutil.rmtree(target)
    for key in write_stores(target):
        print(target / key)
