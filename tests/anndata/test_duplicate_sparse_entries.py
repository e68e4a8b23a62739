"""Sparse matrices that store one cell twice (non-canonical CSR/CSC), against anndata + scipy.

scipy allows a compressed row (column) to hold an index twice, or its indices out of
order, and `AnnData.write_zarr` writes such a matrix unchanged. scipy's `toarray()` adds
the entries of a cell stored twice (a logical or for booleans). zarrsql follows
docs/anndata.md: where entries become cells (a sparse matrix read densely beside a dense
layer, and the union of several sparse matrices) they are added as scipy adds them; a table
of one sparse matrix keeps one row per stored entry, so its sums and counts are anndata's.

The expected values come from the store read back by `anndata.read_zarr`: `X.toarray()`,
`layer.toarray()` and the stored entries of `X.tocoo()`, summed with numpy.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import anndata as ad
import zarrsql
from zarrsql.engine import grouped
from zarrsql.plan import units as plan_units

#: The matrices' shape; "wide" makes the uncompressed axis longer than the 1,024 positions
#: of a sparse matrix's work-unit grid, so that a unit's region keeps part of each
#: compressed row's entries and drops the rest.
SHAPES = {"small": (40, 15), "wide": (12, 1100)}
DENSE_CHUNK = 512  # the dense layer's chunk length: below that grid's, so the grid stays 1,024


def _noncanonical(fmt: str, dtype: str, shape: tuple[int, int], seed: int) -> sp.csr_matrix | sp.csc_matrix:
    """A matrix whose compressed positions store some indices twice (next to each other or
    apart) and some indices out of order, built from its three arrays so scipy keeps them."""
    rng = np.random.default_rng(seed)
    n_major, n_minor = shape if fmt == "csr" else shape[::-1]
    indices, indptr = [], [0]
    for p in range(n_major):
        stored = np.flatnonzero(rng.random(n_minor) < 0.35)
        if p % 3 != 2 and len(stored):  # two thirds of the positions store an index or a few twice
            stored = np.concatenate([stored, rng.choice(stored, size=min(3, len(stored)), replace=False)])
            if p % 3 == 0:
                stored = np.sort(stored)  # each repeat next to its first: ascending, not strictly
        elif p % 2:
            rng.shuffle(stored)  # unique but out of order
        indices.append(stored)
        indptr.append(indptr[-1] + len(stored))
    nnz = indptr[-1]
    if dtype == "bool":
        data = rng.random(nnz) < 0.5  # False stored too: True then False is True, as scipy's
    elif dtype == "int32":
        data = rng.integers(-4, 9, nnz).astype(np.int32)
    else:  # quarters: every sum of a few is exact in float32, whatever the order of adding
        data = (rng.integers(-8, 30, nnz) / 4).astype(np.float32)
    parts = (data, np.concatenate(indices).astype(np.int32), np.array(indptr, dtype=np.int32))
    return (sp.csr_matrix if fmt == "csr" else sp.csc_matrix)(parts, shape=shape)


def _write(path: Path, zarr_format: int, fmt: str, dtype: str, layer: str, size: str) -> str:
    """An AnnData store of a non-canonical X and `layer`: none, a dense one (the table is
    read densely) or a second non-canonical sparse matrix (the table is their union)."""
    shape = SHAPES[size] if fmt == "csr" else SHAPES[size][::-1]
    obs = pd.DataFrame(index=[f"c{i:04d}" for i in range(shape[0])])
    var = pd.DataFrame(index=[f"g{j:04d}" for j in range(shape[1])])
    adata = ad.AnnData(X=_noncanonical(fmt, dtype, shape, 1), obs=obs, var=var)
    if layer == "sparse":
        adata.layers["L"] = _noncanonical(fmt, "int32", shape, 3)
    with warnings.catch_warnings(), ad.settings.override(zarr_write_format=zarr_format):
        warnings.simplefilter("ignore")  # anndata's notices about future defaults
        adata.write_zarr(path)
        if layer == "dense":  # in chunks of DENSE_CHUNK, which write_zarr does not give a layer
            dense = np.random.default_rng(2).integers(0, 5, shape).astype(np.float64)
            chunks = tuple(min(DENSE_CHUNK, n) for n in shape)
            group = zarr.open_group(path, mode="r+", zarr_format=zarr_format, use_consolidated=False)
            ad.io.write_elem(group["layers"], "L", dense, dataset_kwargs={"chunks": chunks})
            zarr.consolidate_metadata(path, zarr_format=zarr_format)  # anndata reads the consolidated copy
    return str(path)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    """`store(zarr_format, fmt, dtype, layer, size)`: the path of that store, written once."""
    root, written = tmp_path_factory.mktemp("duplicate_entries"), {}

    def get(zarr_format: int, fmt: str, dtype: str, layer: str, size: str = "small") -> str:
        key = (zarr_format, fmt, dtype, layer, size)
        if key not in written:
            written[key] = _write(root / f"{fmt}_{dtype}_{layer}_{size}_v{zarr_format}.zarr", *key)
        return written[key]

    return get


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


@pytest.fixture(params=[False, True], ids=["merged-units", "grid-units"])
def grid_units(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Work units of the default size (the whole table when it is small), or (True) one
    cell of the table's chunk grid each: on a wide table, part of every compressed row."""
    if request.param:
        monkeypatch.setattr(plan_units, "GROUP_CELLS", 1)
    return bool(request.param)


def _read_back(path: str) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_zarr(path)


def _last_kept_differs(adata: ad.AnnData) -> np.ndarray:
    """Where keeping the last entry of a cell stored twice (a plain assignment) gives
    another value than scipy's adding: the cells that tell the two apart."""
    coo = adata.X.tocoo()
    last_kept = np.zeros(adata.shape, dtype=adata.X.dtype)
    last_kept[coo.row, coo.col] = coo.data
    return last_kept != adata.X.toarray()


def _checked_x(adata: ad.AnnData) -> sp.coo_matrix:
    """X's stored entries, after checking that the store really holds a cell stored twice and
    that keeping the last of them would give other cells than scipy."""
    coo = adata.X.tocoo()
    assert len(set(zip(coo.row.tolist(), coo.col.tolist(), strict=True))) < coo.nnz, "no cell stored twice"
    assert _last_kept_differs(adata).any(), "the fixture cannot tell adding from keeping the last"
    return coo


def _cells(con: zarrsql.Connection, path: str, where: str = "true") -> dict[tuple[str, str], tuple]:
    """(obs, var) -> the other columns, checking no cell comes back twice."""
    rows = con.sql(f"SELECT * FROM read_zarr('{path}', table_name := 'obs_var') WHERE {where}").fetchall()
    out = {(r[0], r[1]): tuple(r[2:]) for r in rows}
    assert len(out) == len(rows), "a cell came back in two rows"
    return out


def _expected(adata: ad.AnnData, positions, *arrays: np.ndarray) -> dict[tuple[str, str], tuple]:
    """(obs, var) -> each array's value there, for (row, column) `positions`."""
    obs, var = list(adata.obs_names), list(adata.var_names)
    return {(obs[i], var[j]): tuple(a[i, j].item() for a in arrays) for i, j in positions}


def _one(con: zarrsql.Connection, sql: str) -> tuple:
    (row,) = con.sql(sql).fetchall()
    return tuple(row)


def _in(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize(("zarr_format", "size"), [(2, "small"), (3, "small"), (2, "wide"), (3, "wide")], ids=str)
def test_dense_read_adds_a_cell_stored_twice(
    store, con, grid_units: bool, zarr_format: int, size: str, fmt: str, dtype: str
) -> None:
    path = store(zarr_format, fmt, dtype, "dense", size)
    adata = _read_back(path)
    _checked_x(adata)
    with zarrsql.trace() as t:
        got = _cells(con, path)
    assert got == _expected(adata, np.ndindex(adata.shape), adata.X.toarray(), np.asarray(adata.layers["L"]))
    if grid_units and size == "wide":
        assert t.work_units_read == 2  # each unit reads part of every compressed row's entries


@pytest.mark.usefixtures("grid_units")
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("size", ["small", "wide"])
def test_dense_read_of_some_cells_adds_them_too(store, con, size: str, fmt: str, dtype: str) -> None:
    """Cells and genes selected by name, among them cells where adding shows."""
    path = store(3, fmt, dtype, "dense", size)
    adata = _read_back(path)
    telling = np.argwhere(_last_kept_differs(adata))[::3]
    assert len(telling)
    rows = sorted({0, adata.n_obs - 1, *telling[:, 0].tolist()})
    cols = sorted({1, adata.n_vars - 1, *telling[:, 1].tolist()})
    obs, var = list(adata.obs_names[rows]), list(adata.var_names[cols])
    got = _cells(con, path, f"obs IN ({_in(obs)}) AND var IN ({_in(var)})")
    positions = [(i, j) for i in rows for j in cols]
    assert got == _expected(adata, positions, adata.X.toarray(), np.asarray(adata.layers["L"]))


@pytest.mark.usefixtures("grid_units")
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_group_by_computed_by_the_scan_adds_them(store, con, monkeypatch, fmt: str, dtype: str) -> None:
    """GROUP BY obs / var computed inside the scan (engine/grouped.py) reads the dense cells."""
    monkeypatch.setattr(grouped, "MIN_ROWS", 0)  # the store is small: computed here anyway
    path = store(3, fmt, dtype, "dense", "wide")
    adata = _read_back(path)
    x = adata.X.toarray().astype(np.float64)
    for axis, names in ((0, adata.obs_names), (1, adata.var_names)):
        dim = ("obs", "var")[axis]
        sql = f"SELECT {dim}, sum(X), count(*) FROM read_zarr('{path}', table_name := 'obs_var') GROUP BY {dim}"
        with zarrsql.trace() as t:
            rows = con.sql(sql).fetchall()
        assert t.rows_aggregated == x.size  # the scan computed it
        sums = x.sum(axis=1 - axis)
        assert {r[0]: (float(r[1]), r[2]) for r in rows} == {
            n: (float(s), x.shape[1 - axis]) for n, s in zip(names, sums, strict=True)
        }


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("zarr_format", [2, 3], ids=["v2", "v3"])
def test_union_of_two_matrices_adds_each_ones_entries(store, con, zarr_format: int, fmt: str, dtype: str) -> None:
    """One row per position either matrix stores, each matrix's entries there added."""
    path = store(zarr_format, fmt, dtype, "sparse")
    adata = _read_back(path)
    coo_x, coo_l = _checked_x(adata), adata.layers["L"].tocoo()
    positions = set(zip(coo_x.row.tolist(), coo_x.col.tolist(), strict=True))
    positions |= set(zip(coo_l.row.tolist(), coo_l.col.tolist(), strict=True))
    x, layer = adata.X.toarray(), adata.layers["L"].toarray()
    assert _cells(con, path) == _expected(adata, positions, x, layer)
    if dtype != "bool":
        total = _one(con, f"SELECT sum(X), sum(L) FROM read_zarr('{path}', table_name := 'obs_var')")
        assert (float(total[0]), int(total[1])) == (float(x.sum(dtype=np.float64)), int(layer.sum()))


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("zarr_format", [2, 3], ids=["v2", "v3"])
def test_one_matrix_keeps_a_row_per_stored_entry(store, con, zarr_format: int, fmt: str, dtype: str) -> None:
    """The table of X alone: every stored entry a row (docs/anndata.md), so counts answered
    from the index pointer and sums over the rows agree with the rows and with anndata."""
    path = store(zarr_format, fmt, dtype, "none")
    adata = _read_back(path)
    coo = _checked_x(adata)
    table = f"read_zarr('{path}', table_name := 'obs_var')"
    obs, var = np.asarray(adata.obs_names), np.asarray(adata.var_names)
    expected = Counter(zip(obs[coo.row].tolist(), var[coo.col].tolist(), coo.data.tolist(), strict=True))
    assert Counter(con.sql(f"SELECT obs, var, X FROM {table}").fetchall()) == expected
    assert _one(con, f"SELECT count(*) FROM {table}") == (coo.nnz,)
    dim, positions, names = ("obs", coo.row, obs) if fmt == "csr" else ("var", coo.col, var)
    some = [0, 1, 2, 9]  # the compressed axis: answered from the index pointer
    in_list = _in([names[k] for k in some])
    wanted = int(np.isin(positions, some).sum())
    assert _one(con, f"SELECT count(*) FROM {table} WHERE {dim} IN ({in_list})") == (wanted,)
    per_name = dict(con.sql(f"SELECT {dim}, count(*) FROM {table} GROUP BY {dim}").fetchall())
    counts = np.bincount(positions, minlength=len(names))
    assert per_name == {n: int(c) for n, c in zip(names.tolist(), counts.tolist(), strict=True) if c}
    if dtype != "bool":
        assert _one(con, f"SELECT sum(X) FROM {table}") == (adata.X.toarray().sum(dtype=np.float64).item(),)
