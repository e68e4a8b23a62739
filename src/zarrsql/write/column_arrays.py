"""The arrays a table-layout writer makes, shared by every kind of column writer.

A column of the table convention is one or more Zarr arrays whose first axis is the row (or,
for a geometry's vertices and a large category list, another growing axis). Each starts empty
and grows by resizing before each block is written, so that the writers never hold more than
one block of rows. Moving an array down into a group (`move_node`) is how a plain column
becomes `nullable` on its first NULL.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Rows of coordinates per chunk of a geometry's `coords`, and of a long category list (not
#: row-aligned, chunked freely).
VERTEX_CHUNK = 65536


@dataclass
class Layout:
    """What every column writer of one table shares: the group, the row chunk, the format."""

    group: Any  # zarr.Group of the table
    chunk: int
    zarr_format: int
    row_dim: str
    appending: bool


def type_name(dtype: np.dtype) -> str:
    """The Zarr v3 name of a numpy dtype, for the column's `type` attribute."""
    if dtype.kind in "OUT":
        return "string"
    if dtype.kind == "M":
        return "numpy.datetime64"
    return str(dtype)


def _dims(layout: Layout, names: list[str]) -> dict[str, Any]:
    """dimension_names (v3) keyword, or {} (v2 names go in `_ARRAY_DIMENSIONS`)."""
    return {"dimension_names": names} if layout.zarr_format == 3 else {}


def _attrs(layout: Layout, attrs: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return attrs if layout.zarr_format == 3 else {**attrs, "_ARRAY_DIMENSIONS": names}


def create_array(
    layout: Layout,
    parent: Any,
    name: str,
    dtype: Any,
    trailing: tuple[int, ...],
    chunk: int,
    *,
    attrs: dict[str, Any],
    dims: list[str],
    fill: Any = None,
) -> Any:
    """An empty (0, ...) array growing along axis 0, zstd-compressed (zarr's default)."""
    # text: "" in Zarr v3, none in v2 as xarray writes it (xarray reads a v2 fill value "" as
    # `_FillValue`, so an empty string would come back as NaN)
    text = np.dtype(dtype).kind in "OU"
    fill_value = fill if fill is not None else ("" if text and layout.zarr_format == 3 else None)
    return parent.create_array(
        name,
        shape=(0, *trailing),
        chunks=(chunk, *trailing),
        dtype=str if np.dtype(dtype).kind in "OU" else dtype,
        fill_value=fill_value,
        attributes=_attrs(layout, attrs, dims),
        **_dims(layout, dims),
    )


def grow(array: Any, values: np.ndarray, start: int) -> None:
    """Write `values` at rows `start..` of `array`, growing it first when needed."""
    stop = start + len(values)
    if array.shape[0] < stop:
        array.resize((stop, *array.shape[1:]))
    if len(values):
        array[start:stop] = values


def move_node(group: Any, node: str, child: str) -> Any:
    """Move the array `node` of `group` to `node/child`, returning it opened there.

    On a local store the directory is renamed (instant); elsewhere its keys are copied and
    the originals deleted."""
    import zarr
    from zarr.core.sync import sync

    store = group.store
    prefix = f"{group.path}/{node}" if group.path else node
    root = getattr(store, "root", None)
    if isinstance(root, Path):
        here = root / prefix
        aside = here.with_name(f".{here.name}.zarrsql-move-{uuid.uuid4().hex}")
        os.rename(here, aside)
        here.mkdir()
        os.rename(aside, here / child)
    else:
        keys = sync(_keys(store, f"{prefix}/"))
        for key in keys:
            value = sync(store.get(key, zarr.core.buffer.default_buffer_prototype()))
            sync(store.set(f"{prefix}/{child}/{key[len(prefix) + 1 :]}", value))
        for key in keys:
            sync(store.delete(key))
    return zarr.open_array(store, path=f"{prefix}/{child}", mode="r+", zarr_format=group.metadata.zarr_format)


async def _keys(store: Any, prefix: str) -> list[str]:
    return [k async for k in store.list_prefix(prefix)]
