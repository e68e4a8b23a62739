"""Selective reads of AnnData's sparse X by cell (CSR) and by gene (CSC), with anndata as oracle.

The stores are written by anndata with small `data`/`indices` chunks, and the scan's work
units are made small, so that selected cells and genes straddle chunk boundaries and unit
boundaries: every stored entry of a selected row must come back exactly once. The expected
entries come from the matrix anndata reads back (`anndata.read_zarr`), sliced by scipy.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import zarr

import anndata as ad
import zarrsql
from zarrsql.scan import sparse as sparse_scan

N_OBS, N_VAR = 120, 70
CHUNK = 64  # entries per chunk of data/indices: a row holds about 20, so many rows straddle two


def _matrix() -> sp.csr_matrix:
    rng = np.random.default_rng(3)
    dense = np.where(rng.random((N_OBS, N_VAR)) < 0.3, rng.integers(1, 9, (N_OBS, N_VAR)), 0).astype(np.float32)
    dense[[5, 40, 41, 119], :] = 0  # cells with nothing stored, one of them the last
    dense[:, [0, 33, 69]] = 0  # genes with nothing stored, among them the first and the last
    return sp.csr_matrix(dense)


def _write(path: Path, matrix: sp.spmatrix) -> Path:
    """An AnnData store of `matrix` (its own format) with small chunks of data and indices."""
    obs = pd.DataFrame(index=[f"c{i:03d}" for i in range(N_OBS)])
    var = pd.DataFrame(index=[f"g{j:02d}" for j in range(N_VAR)])
    with warnings.catch_warnings(), ad.settings.override(zarr_write_format=3):
        warnings.simplefilter("ignore")  # anndata's notices about future defaults
        group = zarr.open_group(path, mode="w", zarr_format=3)
        # every array in chunks of CHUNK: the names too, so that they have edge chunks
        ad.io.write_elem(group, "/", ad.AnnData(X=matrix, obs=obs, var=var), dataset_kwargs={"chunks": (CHUNK,)})
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("selective")
    m = _matrix()
    return {"csr": _write(root / "csr.zarr", m), "csc": _write(root / "csc.zarr", m.tocsc())}


@pytest.fixture(params=[None, 50, 7], ids=["default-units", "units-50", "units-7"])
def units(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work units of the default size, or of a few chunks' entries (spans end inside rows)."""
    if request.param is not None:
        monkeypatch.setattr(sparse_scan, "ENTRIES_PER_UNIT", request.param)


def _oracle(path: Path, obs: list[str] | None = None, var: list[str] | None = None) -> Counter:
    """(obs, var, X) of every stored entry of the given cells/genes, from anndata + scipy."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = ad.read_zarr(path)
    x = sp.csr_matrix(adata.X)
    rows = np.flatnonzero(adata.obs_names.isin(obs)) if obs is not None else np.arange(x.shape[0])
    cols = np.flatnonzero(adata.var_names.isin(var)) if var is not None else np.arange(x.shape[1])
    sub = x[rows][:, cols].tocoo()
    names_o, names_v = np.asarray(adata.obs_names)[rows], np.asarray(adata.var_names)[cols]
    return Counter(zip(names_o[sub.row], names_v[sub.col], sub.data.astype(float), strict=True))


def _rows(path: Path, where: str) -> Counter:
    sql = f"SELECT obs, var, X FROM read_zarr('{path}', table_name := 'obs_var') WHERE {where}"
    return Counter((o, v, float(x)) for o, v, x in zarrsql.connect().sql(sql).fetchall())


def _in(names: list[str | None]) -> str:
    return ", ".join("NULL" if n is None else f"'{n}'" for n in names)


CELLS = ["c118", "c003", "c040", "c064", "c005", "c000", "c077", "c064", "c063"]  # unsorted, a duplicate
GENES = ["g68", "g01", "g33", "g34", "g12", "g01", "g35", "g00"]


@pytest.mark.usefixtures("units")
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_cells_in_a_list(stores: dict[str, Path], fmt: str) -> None:
    """Cells by name, some empty, the last one among them, in no order and one twice."""
    got = _rows(stores[fmt], f"obs IN ({_in(CELLS)})")
    assert got == _oracle(stores[fmt], obs=CELLS)
    assert sum(got.values()) > 0


@pytest.mark.usefixtures("units")
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_genes_in_a_list(stores: dict[str, Path], fmt: str) -> None:
    got = _rows(stores[fmt], f"var IN ({_in(GENES)})")
    assert got == _oracle(stores[fmt], var=GENES)
    assert sum(got.values()) > 0


@pytest.mark.usefixtures("units")
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_absent_names_and_null_select_nothing_more(stores: dict[str, Path], fmt: str) -> None:
    """Names not in the index, and NULL (never equal to anything), add no rows."""
    names = ["nope", "c010", None, "C010", "c010 ", "c099"]
    assert _rows(stores[fmt], f"obs IN ({_in(names)})") == _oracle(stores[fmt], obs=["c010", "c099"])
    assert _rows(stores[fmt], f"var IN ({_in(['g7', None, 'g07'])})") == _oracle(stores[fmt], var=["g07"])
    assert _rows(stores[fmt], f"obs IN ({_in(['nobody', None])})") == Counter()


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_not_in_with_null_keeps_nothing(stores: dict[str, Path], fmt: str) -> None:
    """`x NOT IN (a, NULL)` is never true in SQL; without the NULL it keeps the rest."""
    assert _rows(stores[fmt], f"obs NOT IN ({_in(['c001', None])})") == Counter()
    everyone = [f"c{i:03d}" for i in range(N_OBS) if i not in (1, 2)]
    assert _rows(stores[fmt], "obs NOT IN ('c001', 'c002')") == _oracle(stores[fmt], obs=everyone)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_an_empty_list_selects_nothing(stores: dict[str, Path], fmt: str) -> None:
    if duckdb.__version__.startswith("1."):  # DuckDB 1.x has no empty IN list in its grammar
        with pytest.raises(duckdb.ParserException):
            _rows(stores[fmt], "obs IN ()")
        return
    assert _rows(stores[fmt], "obs IN ()") == Counter()
    assert _rows(stores[fmt], "var IN ()") == Counter()


@pytest.mark.usefixtures("units")
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_cells_and_genes_together(stores: dict[str, Path], fmt: str) -> None:
    """One axis prunes the units, the other is applied to each entry."""
    got = _rows(stores[fmt], f"obs IN ({_in(CELLS)}) AND var IN ({_in(GENES)})")
    assert got == _oracle(stores[fmt], obs=CELLS, var=GENES)
    assert sum(got.values()) > 0
    either = _rows(stores[fmt], f"obs IN ({_in(CELLS)}) OR var IN ({_in(GENES)})")
    expected = _oracle(stores[fmt], obs=CELLS) | _oracle(stores[fmt], var=GENES)  # no entry counted twice
    assert either == expected


@pytest.mark.usefixtures("units")
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_counts_and_sums_of_selected_cells(stores: dict[str, Path], fmt: str) -> None:
    """count(*) comes from the pointers alone, clipped to each unit: it must still be exact."""
    oracle = _oracle(stores[fmt], obs=CELLS)
    src = f"read_zarr('{stores[fmt]}', table_name := 'obs_var')"
    con = zarrsql.connect()
    n, total = con.sql(f"SELECT count(*), sum(X) FROM {src} WHERE obs IN ({_in(CELLS)})").fetchall()[0]
    assert n == sum(oracle.values())
    assert total == pytest.approx(sum(x * k for (_, _, x), k in oracle.items()))
    assert con.sql(f"SELECT count(*) FROM {src}").fetchall()[0][0] == _matrix().nnz


@pytest.mark.usefixtures("units")
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_whole_matrix_per_gene(stores: dict[str, Path], fmt: str) -> None:
    """The full aggregate: every entry once, whatever the spans cut through."""
    m = _matrix()
    src = f"read_zarr('{stores[fmt]}', table_name := 'obs_var')"
    got = dict(zarrsql.connect().sql(f"SELECT var, sum(X) FROM {src} GROUP BY var").fetchall())
    sums = np.asarray(m.sum(axis=0)).ravel()
    stored = np.asarray((m != 0).sum(axis=0)).ravel()
    assert got == pytest.approx({f"g{j:02d}": float(sums[j]) for j in range(N_VAR) if stored[j]})


def test_units_never_share_a_chunk(stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A full scan decodes each chunk of data and indices once (plus indptr and the names)."""
    monkeypatch.setattr(sparse_scan, "ENTRIES_PER_UNIT", 150)
    group = zarr.open_group(stores["csr"], mode="r")
    per_array = group["X/data"].nchunks
    src = f"read_zarr('{stores['csr']}', table_name := 'obs_var')"
    con = zarrsql.connect()
    with zarrsql.trace() as t:
        con.sql(f"SELECT obs, var, X FROM {src}").fetchall()
    names = group["obs/_index"].nchunks + group["var/_index"].nchunks
    assert t.chunks_decoded <= 2 * per_array + group["X/indptr"].nchunks + names
    assert t.work_units_read > 1


# ----------------------------------------------------------------------------- ranges of a chunk
@pytest.mark.parametrize(
    ("zarr_format", "dtype", "prefix"),
    [(2, "int32", True), (2, "float32", True), (2, ">i4", False), (3, "int32", True), (3, "int64", True)],
)
def test_ranges_read_match_zarr(tmp_path: Path, zarr_format: int, dtype: str, prefix: bool) -> None:
    """Slices of `indices`/`data` ending inside a chunk (decompressed only that far when the
    chunk is a bare zstd frame of little-endian values) equal zarr-python's reading."""
    import numcodecs

    from zarrsql.decode.sparse import _gather, _plain_zstd
    from zarrsql.metadata.tree import read_tree
    from zarrsql.store.local import LocalStore

    values = np.random.default_rng(1).integers(-1000, 1000, 1000).astype(dtype)
    compressor = zarr.codecs.ZstdCodec() if zarr_format == 3 else numcodecs.Zstd(level=1)
    group = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=zarr_format)
    array = group.create_array("a", shape=values.shape, chunks=(96,), dtype=values.dtype, compressors=[compressor])
    array[:] = values
    expected_back = array[:]
    store = LocalStore(str(tmp_path / "g.zarr"))
    meta = read_tree(store).arrays["a"]
    assert (_plain_zstd(meta) is not None) == prefix
    rng = np.random.default_rng(2)
    for _ in range(30):
        starts = np.sort(rng.integers(0, 1000, 6))
        ends = np.minimum(starts + rng.integers(0, 150, 6), 1000)
        got = _gather(store, meta, starts, ends)
        expected = np.concatenate([expected_back[a:b] for a, b in zip(starts, ends, strict=True)])
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == expected.dtype.newbyteorder("=")


def test_a_truncated_chunk_is_refused(tmp_path: Path) -> None:
    """A chunk cut short fails with a DecodeError naming it, even when only its start is needed."""
    from zarrsql.decode.sparse import _gather
    from zarrsql.errors import DecodeError
    from zarrsql.metadata.tree import read_tree
    from zarrsql.store.local import LocalStore

    group = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=3)
    array = group.create_array("a", shape=(300,), chunks=(100,), dtype="float32")
    array[:] = np.arange(300, dtype="float32")
    chunk = tmp_path / "g.zarr" / "a" / "c" / "1"
    chunk.write_bytes(chunk.read_bytes()[:-20])
    store = LocalStore(str(tmp_path / "g.zarr"))
    meta = read_tree(store).arrays["a"]
    np.testing.assert_array_equal(_gather(store, meta, np.array([0]), np.array([50])), np.arange(50))
    with pytest.raises(DecodeError, match="c/1"):
        _gather(store, meta, np.array([100]), np.array([199]))


def test_name_lists_match_by_equality() -> None:
    """The hashed IN list agrees with plain equality over names, None and numpy strings."""
    from zarrsql.plan.predicate import InSet, leaf_truth

    rng = np.random.default_rng(5)
    pool = [f"n{i}" for i in range(40)]
    values = np.array([None if k % 7 == 0 else pool[k % 40] for k in rng.integers(0, 400, 500)], dtype=object)
    values[3] = np.str_("n5")
    nulls = np.array([v is None for v in values])
    wanted = ("n5", "n11", "absent", "n5")
    truth, null = leaf_truth(InSet("obs", wanted), values, nulls)
    expected = np.array([v is not None and any(v == w for w in wanted) for v in values])
    np.testing.assert_array_equal(truth, expected)
    np.testing.assert_array_equal(null, nulls)
    assert truth[3]
