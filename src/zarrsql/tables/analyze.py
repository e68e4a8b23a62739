"""Which rules read a group: a convention that claims it, else xarray/CF.

Conventions (OME-Zarr images, the table convention, AnnData) each offer `analyze(tree, path)`
returning a `GroupInfo` for groups they recognise and None otherwise; the first that claims a
group decides its tables. Results are cached on the (revalidated) node tree.
"""

from __future__ import annotations

from zarrsql.conventions import CONVENTIONS
from zarrsql.metadata.tree import NodeTree
from zarrsql.tables.build import GroupInfo, analyze_cf_group


def analyze_group(tree: NodeTree, path: str) -> GroupInfo:
    """Roles and tables of the group at `path`."""
    key = ("group", path)
    hit = tree.derived.get(key)
    if isinstance(hit, GroupInfo):
        return hit
    info = None
    for convention in CONVENTIONS:
        info = convention(tree, path)
        if info is not None:
            break
    if info is None:
        info = analyze_cf_group(tree, path)
    tree.derived[key] = info
    return info
