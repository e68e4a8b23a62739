"""AnnData stores as SQL tables (issue 5), every table checked against anndata itself.

The oracle is the real `anndata` package: `anndata.read_zarr` (or `anndata.io.read_elem` on
a nested AnnData group or data frame) turned into pandas and scipy. A table must hold
exactly those rows (compared as multisets, so row order is free), with the column names
and DuckDB types the contract gives:

- `obs` / `var`: the frame's index as column `obs` / `var`, then the frame's columns in
  `column-order`; categorical → ENUM of string categories (else the categories' type),
  code -1 and nullable masks → NULL;
- `obs_var`: `X` then the layers; all sparse of one format → one row per stored entry of
  any of them (0 where a matrix stores nothing); any dense → one row per cell; CSR + CSC →
  listed without a name and readable one array at a time;
- `obs_<key>_component` (obsm), `var_<key>_component` (varm), `obs_obs_2` (obsp),
  `var_var_2` (varp).

The stores come from `tests/anndata_fixtures.py` (written by anndata, Zarr v2 and v3).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import anndata as ad
import zarrsql
from anndata_fixtures import CELL_TYPES, CORRUPT, GENES

pytestmark = pytest.mark.timeout(120)

#: WHERE pushdown needs DuckDB 2.x's scan hooks; on 1.5 the same queries must only be right
PUSHDOWN = int(duckdb.__version__.split(".")[0]) >= 2
needs_pushdown = pytest.mark.skipif(not PUSHDOWN, reason="WHERE pushdown needs DuckDB 2.x")


@pytest.fixture(scope="module")
def con() -> Iterable[zarrsql.Connection]:
    with zarrsql.connect() as c:
        yield c


# --------------------------------------------------------------------------------------
# SQL helpers
# --------------------------------------------------------------------------------------


def rz(path: str, table: str | None = None, *, group: str | None = None, array: str | None = None) -> str:
    """`read_zarr(...)` with the given selection, as SQL text."""
    args = [f"'{path}'"]
    if group is not None:
        args.append(f"group_path := '{group}'")
    if table is not None:
        args.append(f"table_name := '{table}'")
    if array is not None:
        args.append(f"array_path := '{array}'")
    return f"read_zarr({', '.join(args)})"


def fetch(con: zarrsql.Connection, sql: str) -> tuple[list[str], list[tuple]]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return names, cur.fetchall()


def column_types(con: zarrsql.Connection, source: str) -> dict[str, str]:
    """Column name → DuckDB type, in table order."""
    return {r[0]: r[1] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}


def tables_of(con: zarrsql.Connection, path: str, **params: str) -> list[dict[str, Any]]:
    extra = "".join(f", {k} := '{v}'" for k, v in params.items())
    cur = con.execute(f"SELECT * FROM read_zarr_tables('{path}'{extra})")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def enum(values: Sequence[str]) -> str:
    """DuckDB's spelling of an ENUM type in DESCRIBE."""
    return "ENUM(" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + ")"


# --------------------------------------------------------------------------------------
# oracle: anndata → python rows
# --------------------------------------------------------------------------------------


def py(value: Any) -> Any:
    """A pandas/numpy cell as the Python value DuckDB returns (missing → None)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float | np.floating) and np.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


def assert_same_rows(actual: Iterable[tuple], expected: Iterable[tuple]) -> None:
    """Equal as multisets: every row exactly as often on both sides."""
    got, want = Counter(actual), Counter(expected)
    if got != want:
        extra, missing = got - want, want - got
        pytest.fail(
            f"{sum(got.values())} rows vs {sum(want.values())} expected;\n"
            f"unexpected ({sum(extra.values())}): {list(extra.items())[:8]}\n"
            f"missing ({sum(missing.values())}): {list(missing.items())[:8]}"
        )


@functools.cache
def read_element(path: str, key: str | None = None) -> Any:
    """anndata's reading of the store (`key=None`) or of one element (a frame, an AnnData)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if key is None:
            return ad.read_zarr(path)
        return ad.io.read_elem(zarr.open_group(path, mode="r")[key])


def frame_rows(frame: pd.DataFrame) -> list[tuple]:
    """One tuple per frame row: the index, then the columns."""
    columns = [list(frame.index)] + [list(frame[c]) for c in frame.columns]
    return [tuple(py(v) for v in row) for row in zip(*columns, strict=True)]


def stored_entries(matrix: sp.spmatrix) -> dict[tuple[int, int], Any]:
    coo = matrix.tocoo()
    return {(int(r), int(c)): v for r, c, v in zip(coo.row, coo.col, coo.data, strict=True)}


def matrix_rows(rows: Sequence[str], cols: Sequence[str], matrices: Mapping[str, Any]) -> list[tuple]:
    """The rows of a table of 2-D matrices under the contract's rule.

    All sparse: the union of their stored positions, 0 where a matrix stores nothing.
    Any dense: every cell, sparse ones densified.
    """
    mats = list(matrices.values())
    if all(sp.issparse(m) for m in mats):
        entries = [stored_entries(m) for m in mats]
        positions = set().union(*entries)
        return [(rows[r], cols[c], *(py(e.get((r, c), 0)) for e in entries)) for r, c in positions]
    dense = [m.toarray() if sp.issparse(m) else np.asarray(m) for m in mats]
    n, k = dense[0].shape
    return [(rows[r], cols[c], *(py(d[r, c]) for d in dense)) for r in range(n) for c in range(k)]


@functools.cache
def x_rows(path: str) -> tuple[tuple, ...]:
    """The oracle rows of a store whose obs_var holds X only (the pushdown stores)."""
    adata = read_element(path)
    return tuple(matrix_rows(list(adata.obs_names), list(adata.var_names), {"X": adata.X}))


def melt_rows(rows: Sequence[str], array: np.ndarray) -> list[tuple]:
    """An obsm/varm entry (n, k) as (name, component, value) rows."""
    return [(rows[i], j, py(array[i, j])) for i in range(array.shape[0]) for j in range(array.shape[1])]


def layers_of(adata: ad.AnnData) -> dict[str, Any]:
    return {"X": adata.X, **{k: adata.layers[k] for k in adata.layers}}


# --------------------------------------------------------------------------------------
# obs and var frames
# --------------------------------------------------------------------------------------

#: (store, AnnData group) whose obs/var frames are checked; awkward.zarr's obsm holds an
#: awkward array, so its frames are read one element at a time
FRAME_CASES = [
    ("full.zarr", None),
    ("csr.zarr", None),
    ("csc.zarr", None),
    ("duplicates.zarr", None),
    ("awkward.zarr", None),
    ("spatialdata.zarr", "tables/table"),
    ("mudata.zarr", "mod/rna"),
    ("mudata.zarr", "mod/prot"),
    ("mudata.zarr", None),  # MuData's global frames at the root
]


@pytest.mark.parametrize("axis", ["obs", "var"])
@pytest.mark.parametrize(("store", "group"), FRAME_CASES)
def test_frame_table_is_the_anndata_frame(store: str, group: str | None, axis: str, fmt: int, stores, con) -> None:
    path = stores(store, fmt)
    frame = read_element(path, f"{group}/{axis}" if group else axis)
    names, rows = fetch(con, f"SELECT * FROM {rz(path, axis, group=group)}")
    assert names == [axis, *frame.columns]
    assert_same_rows(rows, frame_rows(frame))


OBS_TYPES = {
    "obs": "VARCHAR",
    "cell_type": enum(CELL_TYPES),
    "leiden": enum(["0", "1", "2", "3"]),
    "sample": "BIGINT",  # integer categories: the categories' own type
    "dose": "DOUBLE",  # float categories: likewise
    "n_genes": "BIGINT",
    "total_counts": "FLOAT",
    "pct_mito": "DOUBLE",
    "is_doublet": "BOOLEAN",
    "n_umis": "BIGINT",  # nullable-integer of int64 values
    "passed_qc": "BOOLEAN",  # nullable-boolean
    "donor": "VARCHAR",  # string-array
    "note": "VARCHAR",  # nullable-string-array
}
VAR_TYPES = {
    "var": "VARCHAR",
    "gene_ids": "VARCHAR",
    "feature_types": enum(["Gene Expression"]),
    "highly_variable": "BOOLEAN",
    "means": "DOUBLE",
    "n_cells": "INTEGER",
}


@pytest.mark.parametrize(("store", "group"), [("full.zarr", None), ("spatialdata.zarr", "tables/table")])
def test_obs_column_types(store: str, group: str | None, fmt: int, stores, con) -> None:
    types = column_types(con, rz(stores(store, fmt), "obs", group=group))
    extra = {"region": enum(["cells"]), "instance_id": "BIGINT"} if store == "spatialdata.zarr" else {}
    assert types == OBS_TYPES | extra


def test_var_column_types(fmt: int, stores, con) -> None:
    assert column_types(con, rz(stores("full.zarr", fmt), "var")) == VAR_TYPES


def test_missing_values_are_null_exactly_where_pandas_has_them(fmt: int, stores, con) -> None:
    """Code -1 of a categorical and the masks of nullable columns: NULL, nothing else."""
    path = stores("full.zarr", fmt)
    frame = read_element(path, "obs")
    cols = ["cell_type", "n_umis", "passed_qc", "note", "donor", "n_genes"]
    counts = con.execute(
        "SELECT " + ", ".join(f"count(*) FILTER (WHERE {c} IS NULL)" for c in cols) + f" FROM {rz(path, 'obs')}"
    ).fetchall()[0]
    assert dict(zip(cols, counts, strict=True)) == {c: int(frame[c].isna().sum()) for c in cols}
    assert counts[:4] == (2, 3, 2, 3)  # the fixture blanks 2, 3, 2 and 3 cells of these columns


def test_enum_column_filters_and_orders_by_category(fmt: int, stores, con) -> None:
    path = stores("full.zarr", fmt)
    frame = read_element(path, "obs")
    got = con.execute(f"SELECT cell_type, count(*) FROM {rz(path, 'obs')} GROUP BY 1 ORDER BY 1 NULLS LAST").fetchall()
    want = frame["cell_type"].value_counts(dropna=False, sort=False)
    assert got == [(py(k), int(v)) for k, v in want.items()]  # categories in their order, then NULL
    assert con.execute(f"SELECT count(*) FROM {rz(path, 'obs')} WHERE cell_type = 'NK'").fetchall() == [
        (int((frame["cell_type"] == "NK").sum()),)
    ]


def test_obs_and_var_names_select_an_entry(fmt: int, stores, con) -> None:
    """The frames' indexes are the coordinates: `WHERE obs = ... AND var = ...` works."""
    path = stores("csr.zarr", fmt)
    adata = read_element(path)
    r, c = next(iter(stored_entries(adata.X)))
    cell, gene = adata.obs_names[r], adata.var_names[c]
    got = con.execute(f"SELECT X FROM {rz(path, 'obs_var')} WHERE obs = '{cell}' AND var = '{gene}'").fetchall()
    assert got == [(py(adata.X[r, c]),)]


# --------------------------------------------------------------------------------------
# obs_var: X and layers
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("store", "group"),
    [
        ("full.zarr", None),  # dense X + dense layer: every cell
        ("csr.zarr", None),  # CSR X + CSR layer: union of stored entries
        ("csc.zarr", None),  # CSC X + CSC layer: union of stored entries
        ("csr_dense_layer.zarr", None),  # CSR X beside a dense layer: every cell
        ("duplicates.zarr", None),
        ("spatialdata.zarr", "tables/table"),
        ("mudata.zarr", "mod/rna"),  # CSR
        ("mudata.zarr", "mod/prot"),  # dense
    ],
)
def test_obs_var_is_x_and_layers(store: str, group: str | None, fmt: int, stores, con) -> None:
    path = stores(store, fmt)
    adata = read_element(path, group)
    matrices = layers_of(adata)
    names, rows = fetch(con, f"SELECT * FROM {rz(path, 'obs_var', group=group)}")
    assert names == ["obs", "var", *matrices]
    assert_same_rows(rows, matrix_rows(list(adata.obs_names), list(adata.var_names), matrices))


@pytest.mark.parametrize("store", ["csr.zarr", "csc.zarr"])
def test_sparse_table_rows_are_the_union_of_stored_positions(store: str, fmt: int, stores, con) -> None:
    """More rows than X stores and than counts stores; the explicit zero of X is a row."""
    path = stores(store, fmt)
    adata = read_element(path)
    x, counts = stored_entries(adata.X), stored_entries(adata.layers["counts"])
    (n,) = con.execute(f"SELECT count(*) FROM {rz(path, 'obs_var')}").fetchall()[0]
    assert n == len(set(x) | set(counts)) > max(len(x), len(counts))
    only_counts = con.execute(f"SELECT count(*) FROM {rz(path, 'obs_var')} WHERE X = 0 AND counts <> 0").fetchall()
    assert only_counts == [(len(set(counts) - set(x)),)]
    explicit_zero = [p for p, v in x.items() if v == 0 and p not in counts]
    assert len(explicit_zero) == 1  # the fixture stores one zero in X where counts has nothing
    r, c = explicit_zero[0]
    where = f"obs = '{adata.obs_names[r]}' AND var = '{adata.var_names[c]}'"
    got = con.execute(f"SELECT X, counts FROM {rz(path, 'obs_var')} WHERE {where}").fetchall()
    assert got == [(0.0, 0)]


def test_sparse_table_has_no_rows_for_unstored_cells(fmt: int, stores, con) -> None:
    """The first cell and the last gene store nothing in the sparse fixtures."""
    path = stores("csr.zarr", fmt)
    got = con.execute(
        f"SELECT count(*) FILTER (WHERE obs = 'CELL000-1'), count(*) FILTER (WHERE var = '{GENES[-1]}') "
        f"FROM {rz(path, 'obs_var')}"
    ).fetchall()
    assert got == [(0, 0)]


@pytest.mark.parametrize(
    ("store", "types"),
    [
        ("full.zarr", {"X": "FLOAT", "scaled": "DOUBLE"}),
        ("csr.zarr", {"X": "FLOAT", "counts": "INTEGER"}),
        ("csc.zarr", {"X": "FLOAT", "counts": "INTEGER"}),
        ("csr_dense_layer.zarr", {"X": "FLOAT", "dense": "DOUBLE"}),
    ],
)
def test_obs_var_column_types(store: str, types: dict[str, str], fmt: int, stores, con) -> None:
    assert column_types(con, rz(stores(store, fmt), "obs_var")) == {"obs": "VARCHAR", "var": "VARCHAR", **types}


def test_csr_and_csc_mixed_is_listed_without_a_name_and_read_one_array_at_a_time(fmt: int, stores, con) -> None:
    path = stores("mixed.zarr", fmt)
    adata = read_element(path)
    unnamed = [t for t in tables_of(con, path) if list(t["dims"]) == ["obs", "var"]]
    assert len(unnamed) == 1
    assert unnamed[0]["table_name"] is None
    for array, matrix in [("X", adata.X), ("layers/counts", adata.layers["counts"])]:
        names, rows = fetch(con, f"SELECT * FROM {rz(path, array=array)}")
        assert names[:2] == ["obs", "var"]
        assert len(names) == 3
        assert_same_rows(rows, matrix_rows(list(adata.obs_names), list(adata.var_names), {array: matrix}))
    with pytest.raises(zarrsql.ZarrSQLError):
        con.execute(f"SELECT * FROM {rz(path, 'obs_var')}").fetchall()


# --------------------------------------------------------------------------------------
# obsm, varm, obsp, varp
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("axis", "key", "dtype"),
    [("obs", "X_pca", "DOUBLE"), ("obs", "X_umap", "FLOAT"), ("var", "PCs", "DOUBLE")],
)
def test_embedding_is_a_long_table_over_its_components(axis: str, key: str, dtype: str, fmt: int, stores, con) -> None:
    path = stores("full.zarr", fmt)
    adata = read_element(path)
    array = (adata.obsm if axis == "obs" else adata.varm)[key]
    names = list(adata.obs_names if axis == "obs" else adata.var_names)
    source = rz(path, f"{axis}_{key}_component")
    assert column_types(con, source) == {axis: "VARCHAR", f"{key}_component": "BIGINT", key: dtype}
    assert_same_rows(con.execute(f"SELECT * FROM {source}").fetchall(), melt_rows(names, np.asarray(array)))


def test_obsp_is_the_union_of_stored_entries_over_obs_and_obs_2(fmt: int, stores, con) -> None:
    path = stores("full.zarr", fmt)
    adata = read_element(path)
    graphs = {k: adata.obsp[k] for k in ("connectivities", "distances")}
    source = rz(path, "obs_obs_2")
    assert column_types(con, source) == {
        "obs": "VARCHAR",
        "obs_2": "VARCHAR",
        "connectivities": "FLOAT",
        "distances": "DOUBLE",
    }
    expected = matrix_rows(list(adata.obs_names), list(adata.obs_names), graphs)
    assert len(expected) > max(g.nnz for g in graphs.values())  # the patterns differ
    assert_same_rows(con.execute(f"SELECT * FROM {source}").fetchall(), expected)


def test_obs_2_joins_back_to_obs(fmt: int, stores, con) -> None:
    """obs_2 holds obs names: the neighbours' annotations are one join away."""
    path = stores("full.zarr", fmt)
    adata = read_element(path)
    conn = adata.obsp["connectivities"].tocoo()
    same = sum(
        1 for r, c in zip(conn.row, conn.col, strict=True) if adata.obs["leiden"].iloc[r] == adata.obs["leiden"].iloc[c]
    )
    got = con.execute(
        f"SELECT count(*) FROM {rz(path, 'obs_obs_2')} g "
        f"JOIN {rz(path, 'obs')} a ON a.obs = g.obs JOIN {rz(path, 'obs')} b ON b.obs = g.obs_2 "
        "WHERE g.connectivities <> 0 AND a.leiden = b.leiden"
    ).fetchall()
    assert got == [(same,)]


def test_varp_dense_is_every_pair(fmt: int, stores, con) -> None:
    path = stores("full.zarr", fmt)
    adata = read_element(path)
    source = rz(path, "var_var_2")
    assert column_types(con, source) == {"var": "VARCHAR", "var_2": "VARCHAR", "gene_corr": "DOUBLE"}
    expected = matrix_rows(list(adata.var_names), list(adata.var_names), {"gene_corr": adata.varp["gene_corr"]})
    assert_same_rows(con.execute(f"SELECT * FROM {source}").fetchall(), expected)


# --------------------------------------------------------------------------------------
# listings: tables and metadata
# --------------------------------------------------------------------------------------


def listing(con: zarrsql.Connection, path: str) -> set[tuple[str, str | None, tuple[str, ...], tuple[int, ...]]]:
    return {(t["group_path"], t["table_name"], tuple(t["dims"]), tuple(t["shape"])) for t in tables_of(con, path)}


def anndata_tables(group: str, adata: ad.AnnData) -> set[tuple[str, str | None, tuple[str, ...], tuple[int, ...]]]:
    """The tables the contract gives an AnnData group (obs_var named: one sparse format)."""
    n, m = adata.shape
    out = {(group, "obs", ("obs",), (n,)), (group, "var", ("var",), (m,)), (group, "obs_var", ("obs", "var"), (n, m))}
    for axis, mapping in [("obs", adata.obsm), ("var", adata.varm)]:
        for key, value in mapping.items():
            if isinstance(value, np.ndarray):  # data frames in obsm are not tables
                out.add((group, f"{axis}_{key}_component", (axis, f"{key}_component"), value.shape))
    if len(adata.obsp):
        out.add((group, "obs_obs_2", ("obs", "obs_2"), (n, n)))
    if len(adata.varp):
        out.add((group, "var_var_2", ("var", "var_2"), (m, m)))
    return out


@pytest.mark.parametrize("store", ["full.zarr", "csr.zarr", "csc.zarr", "csr_dense_layer.zarr", "duplicates.zarr"])
def test_tables_of_an_anndata_store(store: str, fmt: int, stores, con) -> None:
    path = stores(store, fmt)
    assert listing(con, path) == anndata_tables("/", read_element(path))


def test_tables_of_the_full_store_by_name(fmt: int, stores, con) -> None:
    """The names the docs promise, and the paths of the elements that supply each table."""
    tables = {t["table_name"]: t for t in tables_of(con, stores("full.zarr", fmt))}
    assert set(tables) == {
        "obs",
        "var",
        "obs_var",
        "obs_X_pca_component",
        "obs_X_umap_component",
        "var_PCs_component",
        "obs_obs_2",
        "var_var_2",
    }
    assert list(tables["obs_var"]["data_vars"]) == ["X", "layers/scaled"]
    assert list(tables["obs_obs_2"]["data_vars"]) == ["obsp/connectivities", "obsp/distances"]
    assert all(t["group_path"] == "/" for t in tables.values())  # uns is not a table


def test_tables_of_a_mixed_store(fmt: int, stores, con) -> None:
    path = stores("mixed.zarr", fmt)
    want = anndata_tables("/", read_element(path))
    want = {t if t[1] != "obs_var" else (t[0], None, *t[2:]) for t in want}
    assert listing(con, path) == want


def test_tables_of_a_spatialdata_store(fmt: int, stores, con) -> None:
    """Only the AnnData table: the Parquet points are not Zarr."""
    path = stores("spatialdata.zarr", fmt)
    assert listing(con, path) == anndata_tables("/tables/table", read_element(path, "tables/table"))
    assert {t["group_path"] for t in tables_of(con, path, group_path="tables/table")} == {"/tables/table"}


def test_tables_of_a_mudata_store(fmt: int, stores, con) -> None:
    path = stores("mudata.zarr", fmt)
    got = listing(con, path)
    for mod in ("rna", "prot"):
        assert anndata_tables(f"/mod/{mod}", read_element(path, f"mod/{mod}")) <= got
        assert {t for t in got if t[0] == f"/mod/{mod}"} == anndata_tables(
            f"/mod/{mod}", read_element(path, f"mod/{mod}")
        )
    n, m = len(read_element(path, "obs")), len(read_element(path, "var"))
    assert {("/", "obs", ("obs",), (n,)), ("/", "var", ("var",), (m,))} <= got


def arrays_under(path: str, prefix: str) -> set[str]:
    """Paths (from the store root) of every Zarr array under `prefix`, by zarr-python."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(path, mode="r")[prefix]
        return {f"{prefix}/{name}" for name, node in group.members(max_depth=None) if isinstance(node, zarr.Array)}


def test_metadata_lists_every_uns_array_and_the_obsm_data_frame(fmt: int, stores, con) -> None:
    path = stores("full.zarr", fmt)
    names = {r[0] for r in con.execute(f"SELECT name FROM read_zarr_metadata('{path}')").fetchall()}
    uns = arrays_under(path, "uns")
    assert {"uns/leiden_colors", "uns/pca/variance", "uns/neighbors/params/n_neighbors", "uns/rank_genes/scores"} <= uns
    assert uns <= names
    frame = arrays_under(path, "obsm/qc_df")
    assert {"obsm/qc_df/score", "obsm/qc_df/flag/codes"} <= frame
    assert frame <= names


def test_awkward_array_is_listed_and_the_rest_reads(fmt: int, stores, con) -> None:
    path = stores("awkward.zarr", fmt)
    names = {r[0] for r in con.execute(f"SELECT name FROM read_zarr_metadata('{path}')").fetchall()}
    assert {"obsm/ragged/node0-offsets", "obsm/ragged/node1-data"} <= names
    got = {t["table_name"] for t in tables_of(con, path)}
    assert {"obs", "var", "obs_var"} <= got
    x = np.asarray(read_element(path, "X"))
    assert con.execute(f"SELECT count(*), sum(X) FROM {rz(path, 'obs_var')}").fetchall()[0][0] == x.size


def test_mount_names_the_anndata_tables(fmt: int, stores) -> None:
    path = stores("csr.zarr", fmt)
    adata = read_element(path)
    with zarrsql.connect() as c:
        zarrsql.mount(c, path, "pbmc")
        got = c.execute("SELECT (SELECT count(*) FROM pbmc.obs), (SELECT count(*) FROM pbmc.var)").fetchall()
    assert got == [(adata.n_obs, adata.n_vars)]


def test_anndata_group_anywhere_in_the_store(fmt: int, stores, con) -> None:
    path = stores("nested.zarr", fmt)
    adata = read_element(path, "experiments/run1")
    assert listing(con, path) == anndata_tables("/experiments/run1", adata)
    rows = con.execute(f"SELECT * FROM {rz(path, 'obs', group='experiments/run1')}").fetchall()
    assert_same_rows(rows, frame_rows(adata.obs))


def test_sparse_matrix_without_entries_is_an_empty_table(fmt: int, stores, con) -> None:
    path = stores("nested.zarr", fmt)
    assert read_element(path, "experiments/run1").X.nnz == 0
    source = rz(path, "obs_var", group="experiments/run1")
    assert con.execute(f"SELECT count(*) FROM {source}").fetchall() == [(0,)]
    assert column_types(con, source) == {"obs": "VARCHAR", "var": "VARCHAR", "X": "FLOAT"}


def test_dims_selects_the_same_tables(fmt: int, stores, con) -> None:
    path = stores("full.zarr", fmt)
    for table, dims in [
        ("obs_var", "['obs', 'var']"),
        ("obs_X_pca_component", "['obs', 'X_pca_component']"),
        ("obs_obs_2", "['obs', 'obs_2']"),
    ]:
        by_dims = con.execute(f"SELECT * FROM read_zarr('{path}', dims := {dims})").fetchall()
        assert_same_rows(by_dims, con.execute(f"SELECT * FROM {rz(path, table)}").fetchall())


# --------------------------------------------------------------------------------------
# WHERE pushdown
# --------------------------------------------------------------------------------------


def chunks_touched(path: str, positions: Iterable[int]) -> int:
    """Chunks a reader of these rows (CSR) or columns (CSC) of X needs at most: the chunks of
    the obs and var names (the coordinates), every `indptr` chunk, and each chunk of
    `indices` and of `data` holding one of their entries."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(path, mode="r")
        indptr, size = group["X/indptr"][...], group["X/data"].chunks[0]
        assert group["X/indices"].chunks[0] == size
        names = sum(group[f"{axis}/{group[axis].attrs['_index']}"].nchunks for axis in ("obs", "var"))
    touched = set()
    for p in positions:
        start, stop = int(indptr[p]), int(indptr[p + 1])
        if stop > start:
            touched |= set(range(start // size, (stop - 1) // size + 1))
    return names + group["X/indptr"].nchunks + 2 * len(touched)


def traced(con: zarrsql.Connection, sql: str) -> tuple[list[tuple], zarrsql.Trace]:
    with zarrsql.trace() as t:
        rows = con.execute(sql).fetchall()
    return rows, t


def selected_entries(path: str, axis: str, names: Iterable[str]) -> list[tuple]:
    """Oracle: the stored entries of X in the named rows (axis 'obs') or columns ('var')."""
    adata = read_element(path)
    index = adata.obs_names if axis == "obs" else adata.var_names
    positions = np.flatnonzero(index.isin(list(names)))
    sub = adata.X[positions] if axis == "obs" else adata.X[:, positions]
    if sp.issparse(sub):
        coo = sub.tocoo()
        r, c, v = coo.row, coo.col, coo.data
    else:  # dense: every cell of those rows, zeros included
        r, c = (i.ravel() for i in np.indices(sub.shape))
        v = np.asarray(sub).ravel()
    obs = adata.obs_names[positions] if axis == "obs" else adata.obs_names
    var = adata.var_names if axis == "obs" else adata.var_names[positions]
    return [(obs[a], var[b], py(val)) for a, b, val in zip(r, c, v, strict=True)]


def assert_reads_only(con: zarrsql.Connection, path: str, axis: str, where: str, *, sparse: bool) -> None:
    """The rows of `where` (names on `axis`) are exactly the oracle's, the only rows the scan
    produced, from few of many work units (and, sparse, few chunks)."""
    rows, t = traced(con, f"SELECT * FROM {rz(path, 'obs_var')} WHERE {where}")
    names = set(re.findall(r"'([^']+)'", where))
    expected = selected_entries(path, axis, names)
    assert expected
    assert_same_rows(rows, expected)
    assert t.rows == len(rows), f"the scan produced rows the filter drops: {t}"
    assert t.work_units_planned >= 10, t
    assert t.work_units_read * 5 <= t.work_units_planned, t
    if sparse:
        adata = read_element(path)
        index = adata.obs_names if axis == "obs" else adata.var_names
        assert t.chunks_decoded <= chunks_touched(path, np.flatnonzero(index.isin(list(names)))), t


@needs_pushdown
@pytest.mark.parametrize(
    ("store", "axis", "where"),
    [
        ("pushdown_many_units_csr.zarr", "obs", "obs IN ('C060000', 'C060001')"),
        ("pushdown_many_units_csr.zarr", "obs", "obs = 'C000007'"),
        ("pushdown_many_units_csc.zarr", "var", "var IN ('G060000', 'G060001')"),
        ("pushdown_many_units_csc.zarr", "var", "var = 'G000007'"),
    ],
)
def test_where_on_the_compressed_axis_reads_only_those_rows(store: str, axis: str, where: str, stores, con) -> None:
    """12 million entries in about 12 work units: the named rows (CSR) or columns (CSC) are
    read from one unit, decoding only the chunks that hold their entries."""
    assert_reads_only(con, stores(store, 3), axis, where, sparse=True)


@needs_pushdown
def test_where_on_obs_prunes_chunks_of_a_dense_x(fmt: int, stores, con) -> None:
    """Dense X of 2,000 cells in chunks of 100: two neighbouring cells read one chunk of 20."""
    assert_reads_only(con, stores("pushdown_dense.zarr", fmt), "obs", "obs IN ('C01200', 'C01201')", sparse=False)


ANY_WHERE = {
    # the other axis of a CSR matrix: nothing to prune by, rows still right
    "csr-var": ("pushdown_csr.zarr", "var IN ('G00003', 'G00100')", lambda o, v, x: v in ("G00003", "G00100")),
    "csr-range": ("pushdown_csr.zarr", "obs >= 'C00100' AND obs < 'C00110'", lambda o, v, x: "C00100" <= o < "C00110"),
    "csr-or": ("pushdown_csr.zarr", "obs IN ('C00005', 'nope') OR X > 9.5", lambda o, v, x: o == "C00005" or x > 9.5),
    "csc-obs": ("pushdown_csc.zarr", "obs = 'C00003'", lambda o, v, x: o == "C00003"),
    "dense-var": ("pushdown_dense.zarr", "var = 'G00042' AND X > 0", lambda o, v, x: v == "G00042" and x > 0),
}


@pytest.mark.parametrize("case", sorted(ANY_WHERE))
def test_any_where_gives_the_filtered_rows(case: str, fmt: int, stores, con) -> None:
    """Filters pushed or not, the rows are the oracle's rows that pass the filter."""
    store, where, keep = ANY_WHERE[case]
    path = stores(store, fmt)
    expected = [r for r in x_rows(path) if keep(*r)]
    assert expected
    assert_same_rows(con.execute(f"SELECT * FROM {rz(path, 'obs_var')} WHERE {where}").fetchall(), expected)


#: (store, axis, positions selected): names close together (CSR and CSC, a few entries a
#: row), and names 10,000 entries apart in 50,000-entry chunks (anndata-like chunking)
SHARED_CHUNKS = {
    "csr-near": ("pushdown_csr.zarr", "obs", sorted(np.random.default_rng(3).choice(2000, 300, replace=False))),
    "csc-near": ("pushdown_csc.zarr", "var", sorted(np.random.default_rng(3).choice(2000, 300, replace=False))),
    "csr-apart": ("pushdown_wide.zarr", "obs", list(range(0, 2000, 100))),
}


@needs_pushdown
@pytest.mark.parametrize("case", sorted(SHARED_CHUNKS))
def test_selected_rows_sharing_chunks_decode_each_chunk_once(case: str, fmt: int, stores, con) -> None:
    """Names whose entries share chunks of indices and data: each chunk is decoded once, not
    once per name, so a selective query never reads more than a full scan."""
    store, axis, positions = SHARED_CHUNKS[case]
    path = stores(store, fmt)
    adata = read_element(path)
    names = list(adata.obs_names if axis == "obs" else adata.var_names)
    picked = {names[p] for p in positions}
    source = rz(path, "obs_var")
    _, full = traced(con, f"SELECT * FROM {source}")
    rows, t = traced(con, f"SELECT * FROM {source} WHERE {axis} IN ({', '.join(repr(n) for n in sorted(picked))})")
    assert_same_rows(rows, [r for r in x_rows(path) if r[0 if axis == "obs" else 1] in picked])
    assert t.rows == len(rows)
    assert t.chunks_decoded <= chunks_touched(path, positions), f"selective {t} vs full {full}"
    assert t.bytes_read <= full.bytes_read, f"selective {t} vs full {full}"


@needs_pushdown
def test_where_on_a_name_that_is_not_there_reads_nothing(fmt: int, stores, con) -> None:
    rows, t = traced(con, f"SELECT * FROM {rz(stores('pushdown_csr.zarr', fmt), 'obs_var')} WHERE obs = 'nope'")
    assert rows == []
    assert t.work_units_read == 0
    assert t.rows == 0


def test_where_on_a_duplicated_name_reads_every_cell_of_that_name(fmt: int, stores, con) -> None:
    path = stores("duplicates.zarr", fmt)
    adata = read_element(path)
    name = "CELL002-1"  # the fixture gives four cells this name
    assert list(adata.obs_names).count(name) == 4
    rows, t = traced(con, f"SELECT * FROM {rz(path, 'obs_var')} WHERE obs = '{name}'")
    expected = [r for r in matrix_rows(list(adata.obs_names), list(adata.var_names), layers_of(adata)) if r[0] == name]
    assert_same_rows(rows, expected)
    if PUSHDOWN:
        assert t.rows == len(rows)


# --------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("corrupt", sorted(CORRUPT))
def test_corrupt_element_is_a_clear_error_naming_it(corrupt: str, fmt: int, stores, con) -> None:
    _edit, element, table = CORRUPT[corrupt]
    path = stores(f"corrupt/{corrupt}.zarr", fmt)
    with pytest.raises(zarrsql.ZarrSQLError) as info:
        con.execute(f"SELECT * FROM {rz(path, table)}").fetchall()
    message = str(info.value)
    assert re.search(rf"(^|[^\w]){re.escape(element)}([^\w]|$)", message), message


@pytest.mark.parametrize("corrupt", ["codes_too_high", "mask_too_short", "indptr_not_monotonic"])
def test_corrupt_element_fails_aggregates_too(corrupt: str, fmt: int, stores, con) -> None:
    """No wrong answer from a query that reads the element without returning it."""
    _edit, _element, table = CORRUPT[corrupt]
    column = {"codes_too_high": "cell_type", "mask_too_short": "n_umis", "indptr_not_monotonic": "X"}[corrupt]
    path = stores(f"corrupt/{corrupt}.zarr", fmt)
    with pytest.raises(zarrsql.ZarrSQLError):
        con.execute(f"SELECT count({column}), count(DISTINCT {column}) FROM {rz(path, table)}").fetchall()


@pytest.mark.parametrize("corrupt", ["codes_too_high", "indptr_too_short"])
def test_other_tables_of_a_corrupt_store_still_read(corrupt: str, fmt: int, stores, con) -> None:
    path = stores(f"corrupt/{corrupt}.zarr", fmt)
    frame = read_element(stores("csr.zarr", fmt), "var")  # the copy's var is untouched
    assert_same_rows(con.execute(f"SELECT * FROM {rz(path, 'var')}").fetchall(), frame_rows(frame))


# --------------------------------------------------------------------------------------
# duplicate obs names
# --------------------------------------------------------------------------------------


def test_duplicate_names_join_like_pandas_merge(fmt: int, stores, con) -> None:
    """A join on obs multiplies rows for repeated names: exactly what SQL means."""
    path = stores("duplicates.zarr", fmt)
    adata = read_element(path)
    obs = adata.obs[["cell_type"]].rename_axis("obs").reset_index()
    entries = pd.DataFrame(
        matrix_rows(list(adata.obs_names), list(adata.var_names), {"X": adata.X}), columns=["obs", "var", "X"]
    )
    merged = obs.merge(entries, on="obs")
    assert len(merged) > len(entries)  # repeated names multiply
    rows = con.execute(
        f"SELECT o.obs, o.cell_type, x.var, x.X FROM {rz(path, 'obs')} o "
        f"JOIN (SELECT obs, var, X FROM {rz(path, 'obs_var')}) x USING (obs)"
    ).fetchall()
    assert_same_rows(
        rows, [tuple(py(v) for v in r) for r in merged[["obs", "cell_type", "var", "X"]].itertuples(index=False)]
    )


def test_duplicate_names_keep_every_cell(fmt: int, stores, con) -> None:
    path = stores("duplicates.zarr", fmt)
    adata = read_element(path)
    got = con.execute(f"SELECT count(*), count(DISTINCT obs) FROM {rz(path, 'obs')}").fetchall()
    assert got == [(adata.n_obs, adata.obs_names.nunique())]
    assert adata.n_obs - adata.obs_names.nunique() == 4  # the fixture repeats 4 names


# --------------------------------------------------------------------------------------
# the queries of docs/anndata.md, against pandas
# --------------------------------------------------------------------------------------

DOCS_VIEWS = """
CREATE OR REPLACE VIEW obs AS SELECT * FROM read_zarr('{store}', table_name := 'obs');
CREATE OR REPLACE VIEW var AS SELECT * FROM read_zarr('{store}', table_name := 'var');
CREATE OR REPLACE VIEW obs_var AS SELECT * FROM read_zarr('{store}', table_name := 'obs_var');
"""

MEAN_PER_TYPE = """
SELECT o.cell_type, v.var, avg(COALESCE(x.X, 0)) AS mean_x
FROM obs o
CROSS JOIN var v
LEFT JOIN obs_var x ON x.obs = o.obs AND x.var = v.var
WHERE v.var IN ('CD3E', 'LYZ')
GROUP BY o.cell_type, v.var
ORDER BY o.cell_type, v.var
"""

MEAN_PER_TYPE_STORED_ONLY = """
SELECT o.cell_type, x.var, avg(x.X) AS mean_of_stored
FROM obs_var x JOIN obs o USING (obs)
WHERE x.var IN ('CD3E', 'LYZ')
GROUP BY o.cell_type, x.var
ORDER BY o.cell_type, x.var
"""

MEAN_PER_TYPE_BY_SUM = """
WITH sizes AS (SELECT cell_type, count(*) AS cells FROM obs GROUP BY cell_type)
SELECT o.cell_type, x.var, sum(x.X) / any_value(s.cells) AS mean_x
FROM obs_var x
JOIN obs o USING (obs)
JOIN sizes s ON s.cell_type IS NOT DISTINCT FROM o.cell_type
WHERE x.var IN ('CD3E', 'LYZ')
GROUP BY o.cell_type, x.var
ORDER BY o.cell_type, x.var
"""

TOP_GENES = """
WITH sizes AS (SELECT leiden, count(*) AS cells FROM obs GROUP BY leiden),
     sums AS (SELECT o.leiden, x.var, sum(x.X) AS total
              FROM obs_var x JOIN obs o USING (obs)
              GROUP BY o.leiden, x.var)
SELECT leiden, var, total / cells AS mean_x
FROM sums JOIN sizes USING (leiden)
QUALIFY row_number() OVER (PARTITION BY leiden ORDER BY total / cells DESC, var) <= 3
ORDER BY leiden, mean_x DESC
"""

QC_COUNTS = """
SELECT count(*) AS cells,
       count(*) FILTER (WHERE n_genes >= 500 AND pct_mito < 8 AND NOT is_doublet) AS kept,
       count(*) FILTER (WHERE passed_qc IS NULL) AS qc_unknown
FROM obs
"""

QC_FILTERED_TOTALS = """
SELECT x.var, sum(x.counts) AS total_counts
FROM obs_var x
WHERE x.obs IN (SELECT obs FROM obs WHERE n_genes >= 500 AND pct_mito < 8 AND NOT is_doublet)
GROUP BY x.var
ORDER BY total_counts DESC, x.var
LIMIT 5
"""

MUDATA_JOIN = """
SELECT count(*) AS cells,
       avg(COALESCE(r.X, 0)) AS mean_cd3e_rna,
       avg(p.X) AS mean_cd3_protein,
       corr(COALESCE(r.X, 0), p.X) AS r
FROM read_zarr('{store}', group_path := 'mod/prot', table_name := 'obs_var') p
JOIN read_zarr('{store}', group_path := 'mod/rna', table_name := 'obs') c USING (obs)
LEFT JOIN read_zarr('{store}', group_path := 'mod/rna', table_name := 'obs_var') r
       ON r.obs = p.obs AND r.var = 'CD3E'
WHERE p.var = 'CD3'
"""

MUDATA_GLOBAL = """
SELECT g.batch, count(*) AS cells, avg(p.X) AS mean_cd4_protein
FROM read_zarr('{store}', table_name := 'obs') g
JOIN read_zarr('{store}', group_path := 'mod/prot', table_name := 'obs_var') p USING (obs)
WHERE p.var = 'CD4'
GROUP BY g.batch
ORDER BY g.batch
"""

DUPLICATES = """
SELECT (SELECT count(*) FROM read_zarr('{store}', table_name := 'obs')) AS cells,
       (SELECT count(DISTINCT obs) FROM read_zarr('{store}', table_name := 'obs')) AS names,
       (SELECT count(*) FROM read_zarr('{store}', table_name := 'obs_var')) AS entries,
       (SELECT count(*) FROM read_zarr('{store}', table_name := 'obs_var') x
          JOIN read_zarr('{store}', table_name := 'obs') o USING (obs)) AS joined
"""


DOCS_GENES = ["CD3E", "LYZ"]  # the genes the mean queries of the docs keep


@pytest.fixture
def docs_con(stores, fmt: int) -> Iterable[tuple[zarrsql.Connection, ad.AnnData, pd.DataFrame]]:
    """A connection with the docs' views over csr.zarr, the AnnData and X as a dense frame."""
    path = stores("csr.zarr", fmt)
    adata = read_element(path)
    with zarrsql.connect() as c:
        for statement in DOCS_VIEWS.format(store=path).strip().splitlines():
            c.execute(statement)
        yield (
            c,
            adata,
            pd.DataFrame(adata.X.toarray().astype(np.float64), index=adata.obs_names, columns=adata.var_names),
        )


def _close(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[:-1] == w[:-1]
        assert g[-1] == pytest.approx(w[-1], rel=1e-9, abs=1e-12)


def _mean_by_type(adata: ad.AnnData, x: pd.DataFrame) -> list[tuple]:
    """pandas: mean of every gene over the cells of each type (NULL type last), zeros included."""
    means = x[DOCS_GENES].groupby(adata.obs["cell_type"], observed=True, dropna=False).mean()
    order = {c: i for i, c in enumerate(CELL_TYPES)}
    rows = [(py(t), g, py(v)) for t, row in means.iterrows() for g, v in row.items()]
    return sorted(rows, key=lambda r: (r[0] is None, order.get(r[0], 0), r[1]))


def test_docs_mean_per_cell_type_includes_the_zeros(docs_con) -> None:
    c, adata, x = docs_con
    got = c.execute(MEAN_PER_TYPE).fetchall()
    _close(got, _mean_by_type(adata, x))


def test_docs_mean_by_sum_over_cells_agrees_where_a_gene_is_stored(docs_con) -> None:
    c, adata, x = docs_con
    got = {(r[0], r[1]): r[2] for r in c.execute(MEAN_PER_TYPE_BY_SUM).fetchall()}
    want = {(r[0], r[1]): r[2] for r in _mean_by_type(adata, x)}
    assert set(got) <= set(want)
    for key, value in want.items():
        assert got.get(key, 0.0) == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_docs_mean_of_stored_entries_is_not_the_mean(docs_con) -> None:
    """The naive query averages the table's rows only (what the guide warns about): the
    positions X or the counts layer stores."""
    c, adata, x = docs_con
    stored = np.zeros(x.shape, dtype=bool)
    for r, col in set(stored_entries(adata.X)) | set(stored_entries(adata.layers["counts"])):
        stored[r, col] = True
    means = x.where(stored)[DOCS_GENES].groupby(adata.obs["cell_type"], observed=True, dropna=False).mean()
    want = {(py(t), g): v for t, row in means.iterrows() for g, v in row.items() if not np.isnan(v)}
    got = {(r[0], r[1]): r[2] for r in c.execute(MEAN_PER_TYPE_STORED_ONLY).fetchall()}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9), key
    full = {(r[0], r[1]): r[2] for r in _mean_by_type(adata, x)}
    assert any(got[k] > full[k] * 1.5 for k in got)  # leaving the zeros out inflates means


def test_docs_top_genes_per_cluster(docs_con) -> None:
    c, adata, x = docs_con
    means = x.groupby(adata.obs["leiden"], observed=True).mean()
    want = []
    for cluster in means.index:
        ranked = sorted((-means.loc[cluster, g], g) for g in means.columns if means.loc[cluster, g] != 0)
        want += [(cluster, g, -m) for m, g in ranked[:3]]
    _close(c.execute(TOP_GENES).fetchall(), want)


def test_docs_qc_filters(docs_con) -> None:
    c, adata, _x = docs_con
    obs = adata.obs
    kept = (obs["n_genes"] >= 500) & (obs["pct_mito"] < 8) & ~obs["is_doublet"]
    assert c.execute(QC_COUNTS).fetchall() == [(adata.n_obs, int(kept.sum()), int(obs["passed_qc"].isna().sum()))]
    counts = pd.DataFrame(adata.layers["counts"].toarray(), index=adata.obs_names, columns=adata.var_names)
    totals = counts[kept.to_numpy()].sum()
    want = sorted(((g, int(v)) for g, v in totals.items() if v > 0), key=lambda r: (-r[1], r[0]))[:5]
    assert c.execute(QC_FILTERED_TOTALS).fetchall() == want


def test_docs_join_two_modalities(stores, fmt: int, con) -> None:
    path = stores("mudata.zarr", fmt)
    rna, prot = read_element(path, "mod/rna"), read_element(path, "mod/prot")
    cells = [c for c in prot.obs_names if c in set(rna.obs_names)]
    r = rna[cells, "CD3E"].X.toarray().ravel().astype(np.float64)
    p = np.asarray(prot[cells, "CD3"].X).ravel().astype(np.float64)
    got = con.execute(MUDATA_JOIN.format(store=path)).fetchall()
    assert got[0][0] == len(cells) == 30  # prot holds cells 10-59, rna 0-39
    assert got[0][1:] == pytest.approx((r.mean(), p.mean(), np.corrcoef(r, p)[0, 1]), rel=1e-9)


def test_docs_global_obs_of_a_mudata_store(stores, fmt: int, con) -> None:
    path = stores("mudata.zarr", fmt)
    prot, glob = read_element(path, "mod/prot"), read_element(path, "obs")
    cd4 = pd.Series(np.asarray(prot[:, "CD4"].X).ravel().astype(np.float64), index=prot.obs_names)
    frame = pd.DataFrame({"batch": glob.loc[prot.obs_names, "batch"], "cd4": cd4})
    want = [(b, len(g), g["cd4"].mean()) for b, g in frame.groupby("batch", observed=True)]
    got = con.execute(MUDATA_GLOBAL.format(store=path)).fetchall()
    assert [r[:2] for r in got] == [r[:2] for r in want]
    assert [r[2] for r in got] == pytest.approx([r[2] for r in want], rel=1e-9)


def test_docs_duplicate_names_caveat(stores, fmt: int, con) -> None:
    path = stores("duplicates.zarr", fmt)
    adata = read_element(path)
    names = pd.Series(adata.obs_names)
    rows_per_name = names.value_counts()
    entries = [r for r, _c in stored_entries(adata.X)]
    joined = sum(int(rows_per_name[adata.obs_names[r]]) for r in entries)
    assert con.execute(DUPLICATES.format(store=path)).fetchall() == [
        (adata.n_obs, names.nunique(), len(entries), joined)
    ]


def test_docs_show_these_queries() -> None:
    """docs/anndata.md shows each query above word for word (whitespace aside)."""
    from pathlib import Path

    text = " ".join((Path(__file__).parents[2] / "docs" / "anndata.md").read_text().split())
    for query in [
        MEAN_PER_TYPE,
        MEAN_PER_TYPE_STORED_ONLY,
        MEAN_PER_TYPE_BY_SUM,
        TOP_GENES,
        QC_COUNTS,
        QC_FILTERED_TOTALS,
        MUDATA_JOIN,
        MUDATA_GLOBAL,
        DUPLICATES,
    ]:
        shown = " ".join(query.replace("{store}", "STORE").split())
        pattern = re.escape(shown).replace("STORE", "[^']+")
        assert re.search(pattern, text), shown[:120]
