"""An AnnData `.h5ad` over HTTP reads in place by its name, as `.h5` and `.nc` URLs do (a
remote file is told by its name; a local one by its signature): it was read as a Zarr folder
and refused for having no zarr.json. The oracle is anndata's reading of the same file."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp


def _write(path: Path) -> pd.DataFrame:
    import anndata as ad

    obs = pd.DataFrame({"cell_type": pd.Categorical(["a", "b", "a", None])}, index=["w", "x", "y", "z"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.AnnData(X=sp.csr_matrix(np.eye(4, dtype="float32")), obs=obs).write_h5ad(path)
        return ad.read_h5ad(path).obs


def test_an_h5ad_url_reads_in_place_with_anndata_s_tables(con, http, served_root: Path) -> None:
    folder = served_root / "h5ad"
    folder.mkdir(exist_ok=True)
    obs = _write(folder / "pbmc.h5ad")
    url = http.url("h5ad/pbmc.h5ad")
    rows = con.execute(f"SELECT obs, cell_type::VARCHAR FROM read_zarr('{url}', table_name := 'obs')").fetchall()
    expected = [(i, None if pd.isna(v) else v) for i, v in obs["cell_type"].items()]
    assert Counter(rows) == Counter(expected)
    total = con.execute(f"SELECT sum(X) FROM read_zarr('{url}', table_name := 'obs_var')").fetchall()
    assert total == [(4.0,)]
