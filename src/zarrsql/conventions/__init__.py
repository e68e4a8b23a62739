"""Conventions: the plug-ins that say what a group's arrays mean.

Each is one module with `analyze(tree, path) -> GroupInfo | None`, None when the group is
not its own. `CONVENTIONS` asks them in this order and the first answer wins: the table
convention (a group registers it explicitly), H5Col (an HDF5 group of `CLASS`
COLUMN_TABLE), OME-Zarr (a `multiscales` attribute), AnnData
(an `encoding-type` of anndata/mudata at or above the group), and last xarray/CF, which
reads every group. A convention returns records only (`model.GroupInfo`, `model.TableInfo`,
`records.*` for encoded columns); `zarrsql.decode.registry` turns them into readers.
Conventions never import each other, nor anything above them (`decode/`, `tables/`, ...).
"""

from __future__ import annotations

from collections.abc import Callable

from zarrsql.conventions import anndata, cf, h5col, ome, table
from zarrsql.conventions.model import GroupInfo
from zarrsql.metadata.tree import NodeTree

Analyze = Callable[[NodeTree, str], GroupInfo | None]

CONVENTIONS: tuple[tuple[str, Analyze], ...] = (
    ("table", table.analyze),
    ("h5col", h5col.analyze),
    ("ome", ome.analyze),
    ("anndata", anndata.analyze),
    ("cf", cf.analyze),
)
"""(name, analyze) of every convention, in the order they are asked to claim a group."""


def analyze(tree: NodeTree, path: str) -> GroupInfo:
    """The reading of the group at `path` by the first convention that claims it."""
    for _, claim in CONVENTIONS:
        info = claim(tree, path)
        if info is not None:
            return info
    raise AssertionError("the CF convention claims every group")  # pragma: no cover
