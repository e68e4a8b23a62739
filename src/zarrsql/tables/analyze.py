"""Which rules read a group: the first convention that claims it (xarray/CF claims all).

`zarrsql.conventions.CONVENTIONS` states the order. Results are cached on the (revalidated)
node tree.
"""

from __future__ import annotations

from zarrsql.conventions import analyze
from zarrsql.conventions.model import GroupInfo
from zarrsql.metadata.tree import NodeTree


def analyze_group(tree: NodeTree, path: str) -> GroupInfo:
    """Roles and tables of the group at `path`."""
    key = ("group", path)
    hit = tree.derived.get(key)
    if isinstance(hit, GroupInfo):
        return hit
    info = analyze(tree, path)
    tree.derived[key] = info
    return info
