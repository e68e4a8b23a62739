"""The seam between conventions and decoding: conventions return records, decode reads them.

Stores come from the real writers (anndata, and the table-convention stores of
tests/table_convention/stores.py written with zarr-python); expected values come from
anndata / pandas and from numpy on the raw arrays, never from zarrsql.
"""

from __future__ import annotations

import dataclasses
import json
import typing
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from tests import anndata_fixtures as af
from tests.table_convention.stores import write_stores

import anndata as ad
from zarrsql.conventions import CONVENTIONS, records
from zarrsql.conventions.model import ProblemKind
from zarrsql.decode.columns import DecodeOptions
from zarrsql.decode.registry import DECODERS, codec_for
from zarrsql.errors import ZarrSQLError, ZarrSQLWarning
from zarrsql.metadata.tree import cached_tree
from zarrsql.plan.units import WorkUnit
from zarrsql.store import open_store
from zarrsql.tables.analyze import analyze_group
from zarrsql.tables.select import Selection, select_table


@pytest.fixture(scope="module")
def table_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_stores(tmp_path_factory.mktemp("records_tables"))


@pytest.fixture(scope="module")
def adata_path(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ad.AnnData]:
    adata = af.anndata_sparse(np.random.default_rng(7), "csr", "csr", every_kind=True)
    path = tmp_path_factory.mktemp("records_anndata") / "a.zarr"
    return af.write_anndata(path, adata, 3), adata


def _encoded(path: Path) -> list[records.EncodedVariable]:
    tree = cached_tree(open_store(str(path)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZarrSQLWarning)  # opaque columns are left out, and say so
        tables = [t for group in sorted(tree.groups) for t in analyze_group(tree, group).tables]
    return [v for t in tables for v in t.data_vars if isinstance(v, records.EncodedVariable)]


def _callables(value: object) -> list[str]:
    """Names of callables anywhere inside a record (its fields, recursively)."""
    if callable(value) and not isinstance(value, type):
        return [repr(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [c for f in dataclasses.fields(value) for c in _callables(getattr(value, f.name))]
    if isinstance(value, dict):
        return [c for v in value.values() for c in _callables(v)]
    if isinstance(value, list | tuple):
        return [c for v in value for c in _callables(v)]
    return []


def test_every_encoding_record_is_frozen_with_slots_and_has_a_decoder() -> None:
    kinds = set(typing.get_args(records.Encoding))
    assert len(kinds) == 10
    assert set(DECODERS) == kinds
    for kind in kinds:
        assert kind.__dataclass_params__.frozen, kind  # type: ignore[attr-defined]
        assert "__slots__" in vars(kind), kind
    assert records.EncodedVariable.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_conventions_return_only_data(
    table_stores: dict[str, Path], adata_path: tuple[Path, ad.AnnData], tmp_path: Path
) -> None:
    """Every encoded column of real stores is a record: no function anywhere inside it, and
    its attributes are JSON (no reader or matrix handed through them)."""
    from tests.virtual.h5col_files import write_obs  # an H5Col table (its list column)

    write_obs(tmp_path / "obs.h5")
    chars = zarr.open_group(tmp_path / "chars.zarr", mode="w", zarr_format=2)  # a CF character array
    chars.create_array("name", shape=(2, 3), dtype="S1", fill_value=None).attrs["_ARRAY_DIMENSIONS"] = ["n", "strlen"]
    stores = [*table_stores.values(), adata_path[0], tmp_path / "obs.h5", tmp_path / "chars.zarr"]
    found = [v for p in stores for v in _encoded(p)]
    assert {type(v.encoding) for v in found} == set(typing.get_args(records.Encoding))
    for v in found:
        assert _callables(v) == [], v.path
        json.dumps(dict(v.attrs))


def test_a_categorical_record_decodes_to_what_anndata_reads(adata_path: tuple[Path, ad.AnnData]) -> None:
    path, adata = adata_path
    store = open_store(str(path))
    (var,) = [v for v in _encoded(path) if v.path == "obs/cell_type"]
    assert isinstance(var.encoding, records.Categorical)
    assert var.encoding.codes.path == "obs/cell_type/codes"
    n = adata.n_obs
    codec = codec_for(var, store, DecodeOptions())
    codes, nulls = codec.read(store, WorkUnit((0,), ((0, n),), None))
    expected = adata.obs["cell_type"]
    assert list(codec.logical.categories) == list(expected.cat.categories)  # type: ignore[union-attr]
    assert nulls is not None
    assert nulls.tolist() == expected.isna().tolist()
    assert codes[~nulls].tolist() == expected.cat.codes.to_numpy()[~nulls].tolist()


def test_a_sparse_read_takes_its_layout_from_the_record(adata_path: tuple[Path, ad.AnnData]) -> None:
    path, adata = adata_path
    tree = cached_tree(open_store(str(path)))
    rt = select_table(tree, Selection(array_path="X"))
    assert rt.layout == "csr"
    (column,) = rt.data
    assert isinstance(column.array, records.EncodedVariable)
    assert isinstance(column.array.encoding, records.SparseMatrix)
    assert column.array.encoding.shape == adata.X.shape


def test_an_encoding_without_a_decoder_is_refused_by_name(adata_path: tuple[Path, ad.AnnData]) -> None:
    path, _ = adata_path
    (var,) = [v for v in _encoded(path) if v.path == "obs/cell_type"]
    alien = dataclasses.replace(var, encoding=object())  # type: ignore[arg-type]
    with pytest.raises(ZarrSQLError, match="obs/cell_type.*no decoder"):
        codec_for(alien, open_store(str(path)), DecodeOptions())


def test_conventions_are_asked_in_their_stated_order(tmp_path: Path) -> None:
    """The table convention outranks OME-Zarr: a registered table group that also carries
    `multiscales` is one table; CF comes last and claims every group."""
    assert [name for name, _ in CONVENTIONS] == ["table", "h5col", "ome", "anndata", "cf"]
    root = zarr.open_group(str(tmp_path / "both.zarr"), mode="w", zarr_format=3)
    g = root.create_group("t")
    values = np.arange(6, dtype="int32")
    g.create_array("v", data=values, chunks=(6,), dimension_names=["row"])
    g.attrs.update(
        {
            "zarr_conventions": [{"name": "table"}],
            "table:columns": [{"name": "v", "node": "v"}],
            "multiscales": [{"axes": [{"name": "row"}], "datasets": [{"path": "v"}]}],
        }
    )
    tree = cached_tree(open_store(str(tmp_path / "both.zarr")))
    (table,) = analyze_group(tree, "t").tables
    assert table.name == "t"
    assert table.column_names == ("v",)
    assert analyze_group(tree, "t").levels == ()  # not read as an image
    assert [t.name for t in analyze_group(tree, "").tables] == []


def test_a_table_problem_has_a_kind(tmp_path: Path) -> None:
    """Code decides by `problem_kind`, not by the problem's words: a case-only name clash
    stays readable by dims :=, a shape clash and a misaligned group do not."""
    root = zarr.open_group(str(tmp_path / "p.zarr"), mode="w", zarr_format=3)
    root.create_array("a", data=np.zeros(3), dimension_names=["X"])
    root.create_array("b", data=np.ones(4), dimension_names=["x"])
    clash = root.create_group("clash")
    clash.create_array("c", data=np.zeros(2), dimension_names=["y"])
    clash.create_array("d", data=np.zeros(5), dimension_names=["y"])
    child = root.create_group("child")
    child.create_array("e", data=np.zeros(7), dimension_names=["x"])
    tree = cached_tree(open_store(str(tmp_path / "p.zarr")))
    kinds = {t.dims: t.problem_kind for t in analyze_group(tree, "").tables}
    assert kinds == {("X",): ProblemKind.NAME_CLASH, ("x",): ProblemKind.NAME_CLASH}
    assert all(t.name_clash for t in analyze_group(tree, "").tables)
    rt = select_table(tree, Selection(dims=("x",)))
    assert rt.data[0].array.path == "b"
    assert {t.problem_kind for t in analyze_group(tree, "clash").tables} == {ProblemKind.SHAPE_CLASH}
    assert {t.problem_kind for t in analyze_group(tree, "child").tables} == {ProblemKind.MISALIGNED}
