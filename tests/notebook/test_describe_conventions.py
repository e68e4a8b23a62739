"""`zarrsql.describe` on stores of the OME-Zarr and AnnData conventions, and its call.

- An OME-Zarr pyramid: each resolution level (a table without a name, and its array) gets
  its own advice, `level := i` or `array_path := '<path>'`, where i is the level's place in
  the image's `multiscales` datasets (ome-zarr's metadata), and that advice reads the level's
  cells (zarr's shape); the text and HTML views count the same tables.
- An AnnData store: the arrays an encoded column or matrix is made of (a categorical's codes
  and categories, a nullable integer's values and mask, a sparse matrix's data, indices and
  indptr) are read by their table, whose values anndata reads too; the groups shown are the
  schemas `zarrsql.mount` gives (the element groups `/obs`, `/layers`, ... are none).
- `describe(store, "group")` is refused with a ParameterError that says to pass
  `group_path` by keyword.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xarray as xr
import zarr
from ome_zarr import writer as ome_writer

import anndata as ad
import zarrsql


@pytest.fixture(scope="module")
def pyramid(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ome") / "img.ome.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(path), mode="w", zarr_format=2)
        data = np.arange(2 * 16 * 16, dtype="uint16").reshape(2, 16, 16)
        ome_writer.write_image(data, root, axes="cyx", storage_options={"chunks": (1, 8, 8)})
    return str(path)


@pytest.fixture(scope="module")
def annotated(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ad") / "cells.zarr"
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(["a", "b", "a", "c"]),
            "n": pd.array([1, None, 3, 4], dtype="Int32"),
        },
        index=[f"c{i}" for i in range(4)],
    )
    x = sp.csr_matrix(np.array([[0, 1, 0], [2, 0, 0], [0, 0, 3], [4, 0, 5]], dtype="f4"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.AnnData(X=x, obs=obs, var=pd.DataFrame(index=["g0", "g1", "g2"])).write_zarr(str(path))
    return str(path)


def _levels(path: str) -> list[str]:
    """The level paths, full resolution first, as ome-zarr wrote them."""
    attrs = zarr.open_group(path, mode="r").attrs.asdict()
    multiscales = attrs.get("multiscales") or attrs["ome"]["multiscales"]
    return [d["path"] for d in multiscales[0]["datasets"]]


def _advice(level: int, array_path: str) -> str:
    return f"level := {level} or array_path := '{array_path}'"


def test_each_pyramid_level_gets_its_own_advice(pyramid: str) -> None:
    levels = _levels(pyramid)
    d = zarrsql.describe(pyramid)
    shapes = {zarr.open_array(f"{pyramid}/{p}", mode="r").shape: (i, p) for i, p in enumerate(levels)}
    tables = d.table_list()
    assert sorted(t.shape for t in tables) == sorted(shapes)
    for t in tables:
        level, array_path = shapes[t.shape]
        assert t.name is None
        assert t.problem is not None
        assert _advice(level, array_path) in t.problem, t.problem
    unread = {a.path: a.reason for a in d.unread}
    assert set(unread) == set(levels)
    for level, array_path in enumerate(levels):
        assert _advice(level, array_path) in unread[array_path], unread[array_path]


def test_the_advice_reads_its_level(pyramid: str) -> None:
    con = zarrsql.connect()
    for level, array_path in enumerate(_levels(pyramid)):
        cells = int(np.prod(zarr.open_array(f"{pyramid}/{array_path}", mode="r").shape))
        sql = f"SELECT count(*) FROM read_zarr('{pyramid}', level := {level})"
        assert con.sql(sql).fetchall() == [(cells,)]


def test_text_and_html_count_the_same_tables(pyramid: str) -> None:
    d = zarrsql.describe(pyramid)
    listed = len(d.tables.fetchall())  # read_zarr_tables: one row per table, named or not
    assert listed == len(_levels(pyramid))
    assert f"{listed} table(s)" in repr(d).splitlines()[0]
    assert f"{listed} table(s)" in d._repr_html_()


def test_encoded_anndata_columns_are_read_by_their_table(annotated: str) -> None:
    d = zarrsql.describe(annotated)
    parts = {"obs/cell_type/codes", "obs/cell_type/categories", "obs/n/values", "obs/n/mask"}
    parts |= {"X/data", "X/indices", "X/indptr"}
    stored = {
        name
        for name, node in zarr.open_group(annotated, mode="r").members(max_depth=None)
        if isinstance(node, zarr.Array)
    }
    assert parts <= stored  # the encodings anndata wrote
    assert not parts & {a.path for a in d.unread}
    # ... and the tables that read them give anndata's values
    adata = ad.read_zarr(annotated)
    con = zarrsql.connect()
    obs = con.sql(f"SELECT obs, cell_type, n FROM read_zarr('{annotated}', table_name := 'obs') ORDER BY obs").df()
    expected = adata.obs.reset_index(names="obs").sort_values("obs")
    assert obs["cell_type"].astype(str).tolist() == expected["cell_type"].astype(str).tolist()
    assert obs["n"].astype("Int32").tolist() == expected["n"].tolist()
    cells = con.sql(f"SELECT sum(X) FROM read_zarr('{annotated}', table_name := 'obs_var')").fetchall()
    assert cells == [(pytest.approx(float(adata.X.sum())),)]


def test_anndata_groups_are_the_schemas_mount_gives(annotated: str) -> None:
    con = zarrsql.connect()
    mounted = zarrsql.mount(con, annotated, "cells").df()
    d = zarrsql.describe(annotated)
    assert sorted({g.schema for g in d.groups}) == sorted(set(mounted["schema_name"]))
    assert {t.name for t in d.table_list()} == set(mounted["table_name"])


def test_a_positional_group_is_refused_with_the_keyword_to_use(tmp_path: Path) -> None:
    store = str(tmp_path / "tree.zarr")
    xr.DataTree.from_dict({"/a": xr.Dataset({"w": (("k",), np.arange(3))})}).to_zarr(store)
    with pytest.raises(zarrsql.ParameterError, match=r"group_path.*keyword|keyword.*group_path"):
        zarrsql.describe(store, "a")
    d = zarrsql.describe(store, group_path="a")
    assert [g.path for g in d.groups] == ["/a"]
    assert [[c.name for c in t.columns] for t in d.table_list()] == [["k", "w"]]
