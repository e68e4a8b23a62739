"""HDF5 datasets kerchunk describes in ways that read wrong in place (hunts of session 27):

- a dataset whose values lie outside the file — external raw storage or a virtual dataset
  (VDS) — has no chunk references, so it read as its fill value (0.0, or NULL) with no error;
  it is now listed as unsupported, naming why, and the file's other datasets still read;
- an empty dataset is contiguous with a shape of 0, and kerchunk gives it chunks of 0, which
  Zarr forbids: an `.h5ad` of 0 cells could not be read at all (dense X) or lost its `obs`
  table (CSR), and an all-NaN categorical column (no categories) was left out of `obs`.

Oracles: h5py for the values, anndata's `read_h5ad` for the AnnData files.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import anndata as ad
import zarrsql


@pytest.fixture
def outside_values(tmp_path: Path) -> Path:
    """One file holding a plain dataset, one over external raw storage and one virtual."""
    np.arange(16, dtype="<f8").tofile(tmp_path / "raw.bin")
    with h5py.File(tmp_path / "source.h5", "w") as f:
        f.create_dataset("v", data=np.arange(10.0) + 1000)
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("plain", data=np.arange(5.0) * 3)
        f.create_dataset("external", shape=(16,), dtype="<f8", external=[(str(tmp_path / "raw.bin"), 0, 128)])
        layout = h5py.VirtualLayout(shape=(10,), dtype="f8")
        layout[:] = h5py.VirtualSource(str(tmp_path / "source.h5"), "v", shape=(10,))
        f.create_virtual_dataset("virtual", layout, fillvalue=-1)
    return path


@pytest.mark.parametrize("name", ["external", "virtual"])
def test_a_dataset_stored_outside_the_file_is_refused_not_read_as_fill(outside_values: Path, name: str) -> None:
    with h5py.File(outside_values) as f:
        assert f[name][...].min() >= 0  # the oracle: real values, none of them the fill
    con = zarrsql.connect()
    roles = dict(con.sql(f"SELECT name, role FROM read_zarr_metadata('{outside_values}')").fetchall())
    assert roles[name] == "unsupported"
    with pytest.raises(zarrsql.ZarrSQLError, match="outside the file"):
        con.sql(f"SELECT * FROM read_zarr('{outside_values}', array_path := '{name}')").fetchall()


def test_the_files_other_datasets_still_read(outside_values: Path) -> None:
    with h5py.File(outside_values) as f:
        expected = f["plain"][...].tolist()
    con = zarrsql.connect()
    got = con.sql(f"SELECT * FROM read_zarr('{outside_values}', array_path := 'plain') ORDER BY 1").fetchall()
    assert [row[-1] for row in got] == expected


def _write_h5ad(adata: ad.AnnData, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path)
    return path


@pytest.mark.parametrize("matrix", ["dense", "csr"])
def test_an_h5ad_of_no_cells_reads_as_anndata_reads_it(tmp_path: Path, matrix: str) -> None:
    var = pd.DataFrame({"symbol": [f"g{i}" for i in range(5)]}, index=[f"v{i}" for i in range(5)])
    obs = pd.DataFrame({"kind": pd.Categorical([], categories=["a", "b"])}, index=pd.Index([], dtype=str))
    x = np.zeros((0, 5), dtype=np.float32) if matrix == "dense" else sp.csr_matrix((0, 5), dtype=np.float32)
    path = _write_h5ad(ad.AnnData(X=x, obs=obs, var=var), tmp_path / "empty.h5ad")
    back = ad.read_h5ad(path)
    con = zarrsql.connect()

    def count(table: str) -> int:
        return con.sql(f"SELECT count(*) FROM read_zarr('{path}', table_name := '{table}')").fetchall()[0][0]

    assert count("obs") == back.n_obs == 0
    assert count("var") == back.n_vars == 5
    assert count("obs_var") == 0
    got = con.sql(f"SELECT var, symbol FROM read_zarr('{path}', table_name := 'var') ORDER BY var").fetchall()
    assert got == list(back.var["symbol"].items())


def test_a_categorical_without_categories_is_kept_in_an_h5ad(tmp_path: Path) -> None:
    obs = pd.DataFrame({"c": pd.Categorical([np.nan] * 3), "k": [1, 2, 3]}, index=["a", "b", "c"])
    adata = ad.AnnData(X=np.ones((3, 2), dtype=np.float32), obs=obs, var=pd.DataFrame(index=["x", "y"]))
    path = _write_h5ad(adata, tmp_path / "a.h5ad")
    back = ad.read_h5ad(path)
    assert list(back.obs.columns) == ["c", "k"]
    assert back.obs["c"].isna().all()
    con = zarrsql.connect()
    rel = con.sql(f"SELECT * FROM read_zarr('{path}', table_name := 'obs') ORDER BY obs")
    assert rel.columns == ["obs", "c", "k"]
    assert rel.fetchall() == [(name, None, int(k)) for name, k in back.obs["k"].items()]
