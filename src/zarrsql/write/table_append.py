"""The existing table an append writes into: its columns, row count, row chunk and kinds.

Read with zarr-python from the store's committed state (its consolidated metadata when there
is one: `write.commit` has by then put every node document back in step with it). A store
that is not a table-convention group at its root is refused with what it is and the fix.
"""

from __future__ import annotations

from typing import Any

from zarrsql.conventions.table import registered
from zarrsql.errors import AppendSchemaError
from zarrsql.write.commit import StoreTarget

_GEOMETRY = ("point", "linestring", "polygon")


def stored_kind(node: Any) -> str:
    """ "scalar", "categorical", "fixed" or "geometry": how a stored column is encoded."""
    import zarr

    attrs = dict(node.attrs)
    encoding = attrs.get("encoding-type", "array")
    if encoding in _GEOMETRY:
        return "geometry"
    if encoding == "categorical" or "categories" in attrs:
        return "categorical"
    if isinstance(node, zarr.Group):
        return "scalar" if encoding == "nullable" else str(encoding)
    return "fixed" if node.ndim > 1 else "scalar"


def _rows(node: Any) -> tuple[int, int | None]:
    """(rows, row chunk or None when the column's arrays are not row-aligned)."""
    import zarr

    if not isinstance(node, zarr.Group):
        return node.shape[0], node.chunks[0]
    for child in ("values", "codes"):
        if child in node:
            array: Any = node[child]
            return array.shape[0], array.chunks[0]
    offsets: Any = node["geom_offsets"]
    return offsets.shape[0] - 1, None


def open_table(target: StoreTarget) -> tuple[Any, dict[str, tuple[str, Any]], int, int, str]:
    """(root group, name → (node, zarr node) in table order, rows, row chunk, row dimension)."""
    import zarr

    group = zarr.open_group(target.zarr_store, mode="r+", zarr_format=target.zarr_format)  # type: ignore[arg-type]
    attrs = dict(group.attrs)
    columns = attrs.get("table:columns")
    if not registered(attrs) or not isinstance(columns, list):
        raise AppendSchemaError(
            f"'{target.url}' is not a table-layout store (its root group does not register the "
            'Zarr table convention); append with layout="grid" to a grid, or write a new table'
        )
    stored: dict[str, tuple[str, Any]] = {}
    rows = chunk = None
    for entry in columns:
        node = group[entry["node"]]
        stored[entry["name"]] = (entry["node"], node)
        n, c = _rows(node)
        rows = n if rows is None else rows
        chunk = c if chunk is None else chunk
    index = attrs.get("table:index")
    return group, stored, rows or 0, chunk or 1, index if isinstance(index, str) else "row"
