"""Conventions that give groups their meaning beyond xarray/CF: each a function
`analyze(tree, path) -> GroupInfo | None` (None when the group is not theirs).

They never import each other; `tables.analyze` tries them in this order.
"""

from __future__ import annotations

from collections.abc import Callable

from zarrsql.conventions import anndata, ome, table

CONVENTIONS: list[Callable] = [table.analyze, ome.analyze, anndata.analyze]
