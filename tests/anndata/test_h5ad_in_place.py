"""AnnData HDF5 files (`.h5ad`, or the same file named `.h5`) read in place, with AnnData's
tables, exactly as anndata reads them.

Two defects are pinned here:
- an `.h5ad` was refused with "zarrsql reads Zarr only; convert it" although the same file
  read in place with `format := 'hdf5'`, or when named `.h5`: it is now detected by its HDF5
  signature like any other file;
- a frame (obs, var, raw/var) of exactly one column could not be read from HDF5: kerchunk
  writes the one-element `column-order` attribute `['ct']` as the string `'ct'`, whose letters
  were taken for column names ("column-order names '/obs/c', which does not exist").

The oracle is anndata itself (`read_h5ad` for the HDF5 forms, `read_zarr` for the Zarr ones),
for frames of 0, 1 and 2 columns, in the file read in place, through a saved kerchunk
reference set of it, and in the Zarr v2 and v3 forms for comparison.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import anndata as ad
import zarrsql
from cli_runner import run_cli

pytestmark = pytest.mark.timeout(180)

#: Each form of the same AnnData: (file name, extra read_zarr arguments).
FORMS = {
    "h5ad": ("cells.h5ad", ""),
    "h5ad-format-hdf5": ("cells.h5ad", ", format := 'hdf5'"),
    "h5": ("cells.h5", ""),
    "kerchunk-json": ("cells.refs.json", ""),
    "zarr-v2": ("cells_v2.zarr", ""),
    "zarr-v3": ("cells_v3.zarr", ""),
}
#: (obs columns, var columns) of the AnnData written in every form; raw/var has var's.
WIDTHS = [(0, 0), (1, 1), (2, 2), (1, 0), (0, 1), (1, 2)]


def _obs(n: int, width: int) -> pd.DataFrame:
    """`width` columns: a categorical with a missing value (code -1), then a float with NaN."""
    frame = pd.DataFrame(index=pd.Index([f"cell{i}" for i in range(n)]))
    if width >= 1:
        frame["cell_type"] = pd.Categorical(["T", "B", None, "NK", "T", "B"][:n], categories=["B", "NK", "T"])
    if width >= 2:
        frame["total_counts"] = np.array([10.5, np.nan, 3.0, 7.25, 1.0, 2.0][:n])
    return frame


def _var(m: int, width: int) -> pd.DataFrame:
    """`width` columns: an integer, then a bool (no missing values in either)."""
    frame = pd.DataFrame(index=pd.Index([f"gene{j}" for j in range(m)]))
    if width >= 1:
        frame["n_cells"] = np.arange(m, dtype=np.int64) * 3
    if width >= 2:
        frame["highly_variable"] = np.arange(m) % 2 == 0
    return frame


def _anndata(obs_width: int, var_width: int) -> ad.AnnData:
    n, m = 6, 4
    x = sp.csr_matrix(np.arange(n * m, dtype=np.float32).reshape(n, m) % 3)
    adata = ad.AnnData(X=x, obs=_obs(n, obs_width), var=_var(m, var_width))
    adata.raw = adata.copy()  # raw/var: a third frame of `var_width` columns
    return adata


def _write(folder: Path, adata: ad.AnnData) -> Path:
    """Every form of FORMS in `folder` (anndata writes the .h5ad and the Zarr stores; the
    .h5 is a copy; the reference set is kerchunk's scan of the .h5ad, saved as JSON)."""
    from kerchunk.hdf import SingleHdf5ToZarr

    folder.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(folder / "cells.h5ad")
        for fmt in (2, 3):
            with ad.settings.override(zarr_write_format=fmt):
                adata.write_zarr(folder / f"cells_v{fmt}.zarr")
        refs = SingleHdf5ToZarr(str(folder / "cells.h5ad")).translate()
    shutil.copyfile(folder / "cells.h5ad", folder / "cells.h5")
    (folder / "cells.refs.json").write_text(json.dumps(refs))
    return folder


def _oracle(path: Path) -> ad.AnnData:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if path.suffix == ".zarr":
            return ad.read_zarr(path)
        return ad.read_h5ad(path if path.suffix != ".json" else path.with_name("cells.h5ad"))


def _py(value: Any) -> Any:
    """A pandas cell as DuckDB returns it (missing → None)."""
    if value is None or value is pd.NA or (isinstance(value, float | np.floating) and np.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _frame_rows(frame: pd.DataFrame) -> Counter:
    columns = [list(frame.index)] + [list(frame[c]) for c in frame.columns]
    return Counter(tuple(_py(v) for v in row) for row in zip(*columns, strict=True))


@pytest.fixture(scope="module")
def con() -> Any:
    with zarrsql.connect() as c:
        yield c


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, int], Path]:
    """One folder of FORMS per (obs width, var width): 0, 1 and 2 columns on each axis."""
    root = tmp_path_factory.mktemp("h5ad_in_place")
    return {w: _write(root / f"obs{w[0]}_var{w[1]}", _anndata(*w)) for w in WIDTHS}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("widths", WIDTHS, ids=lambda w: f"obs{w[0]}var{w[1]}")
def test_frames_of_zero_one_and_two_columns_are_anndata_s(form: str, widths: tuple[int, int], written, con) -> None:
    name, extra = FORMS[form]
    path = written[widths] / name
    oracle = _oracle(path)
    frames = [("", "obs", oracle.obs), ("", "var", oracle.var), ("raw", "var", oracle.raw.var)]
    for group, axis, frame in frames:
        where = f", group_path := '{group}'" if group else ""
        cur = con.execute(f"SELECT * FROM read_zarr('{path}', table_name := '{axis}'{where}{extra})")
        names = [d[0] for d in cur.description]
        assert names == [axis, *frame.columns], (group, axis, names)
        assert Counter(cur.fetchall()) == _frame_rows(frame), (group, axis)


@pytest.mark.parametrize("form", list(FORMS))
def test_the_matrix_of_an_h5ad_is_anndata_s(form: str, written, con) -> None:
    """obs_var (sparse X: one row per stored entry) joined to a one-column obs, read in
    place without format :=, is anndata's X."""
    name, extra = FORMS[form]
    path = written[(1, 1)] / name
    oracle = _oracle(path)
    coo = oracle.X.tocoo()
    want = Counter(
        (oracle.obs_names[r], oracle.var_names[c], _py(oracle.obs["cell_type"].iloc[r]), float(v))
        for r, c, v in zip(coo.row, coo.col, coo.data, strict=True)
    )
    got = con.execute(
        f"SELECT m.obs, m.var, o.cell_type::VARCHAR, m.X FROM read_zarr('{path}', table_name := 'obs_var'{extra}) m "
        f"JOIN read_zarr('{path}', table_name := 'obs'{extra}) o USING (obs)"
    ).fetchall()
    assert Counter(got) == want


def test_an_h5ad_lists_anndata_s_tables_everywhere(written, con) -> None:
    """read_zarr_tables, zarrsql.describe, zarrsql.read_zarr and the command line all read
    the .h5ad as the AnnData it is, with no format given."""
    path = written[(1, 1)] / "cells.h5ad"
    tables = {r[0] for r in con.execute(f"SELECT table_name FROM read_zarr_tables('{path}')").fetchall()}
    assert {"obs", "var", "obs_var"} <= tables, tables
    shown = str(zarrsql.describe(str(path)))
    assert "AnnData" in shown, shown
    assert "cell_type" in shown, shown
    rows = zarrsql.read_zarr(str(path), table_name="obs", connection=con).fetchall()
    assert Counter(rows) == _frame_rows(_oracle(path).obs)

    out = run_cli("query", str(path), "SELECT obs, cell_type FROM obs ORDER BY obs", "--format", "csv")
    assert out.returncode == 0, out.stderr
    frame = _oracle(path).obs.sort_index()
    expected = ["obs,cell_type"] + [f"{i},{'' if pd.isna(v) else v}" for i, v in frame["cell_type"].items()]
    assert out.stdout.splitlines() == expected, out.stdout
    listed = run_cli("tables", str(path))
    assert listed.returncode == 0, listed.stderr
    assert "obs_var" in listed.stdout, listed.stdout


def test_format_zarr_on_an_h5ad_names_format_hdf5(written, con) -> None:
    path = written[(1, 1)] / "cells.h5ad"
    with pytest.raises(zarrsql.StoreNotFoundError) as info:
        con.execute(f"SELECT * FROM read_zarr('{path}', format := 'zarr')").fetchall()
    assert "format := 'hdf5'" in str(info.value), str(info.value)
    assert "reads Zarr only" not in str(info.value), str(info.value)


def test_an_empty_h5ad_is_not_called_hdf5_to_convert(tmp_path: Path, con) -> None:
    """A file of no bytes named .h5ad (a download that failed) has no signature: it is named
    as unreadable, not sent to a conversion that would fail too."""
    path = tmp_path / "empty.h5ad"
    path.write_bytes(b"")
    with pytest.raises(zarrsql.StoreNotFoundError) as info:
        con.execute(f"SELECT * FROM read_zarr('{path}')").fetchall()
    text = str(info.value)
    assert "empty" in text, text
    assert f"'{path}'" in text, text
    assert "convert" not in text, text


@pytest.mark.parametrize("order", [5, {"a": 1}, ["cell_type", 3]], ids=["number", "mapping", "not-text"])
def test_a_column_order_that_lists_no_names_is_a_clear_error(order: Any, tmp_path: Path, con) -> None:
    """A frame whose column-order is not a list of names (anndata cannot read it either) is
    refused naming column-order, as a DecodeError; the store's other tables still read."""
    import zarr

    path = tmp_path / "odd.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _anndata(1, 1).write_zarr(path)
        zarr.open_group(path, mode="r+", use_consolidated=False)["obs"].attrs["column-order"] = order
        zarr.consolidate_metadata(str(path))
    with pytest.raises(zarrsql.DecodeError) as info:
        con.execute(f"SELECT * FROM read_zarr('{path}', table_name := 'obs')").fetchall()
    assert "column-order" in str(info.value), str(info.value)
    assert con.execute(f"SELECT count(*) FROM read_zarr('{path}', table_name := 'var')").fetchall() == [(4,)]
