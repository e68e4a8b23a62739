"""A table's axis columns: coordinates loaded and decoded once per tree, derived columns,
and the presentations a read asks for (longitude range, cell bounds).

Everything here works on whole 1-D axes (a coordinate's values, a bounds variable's pairs),
never on chunks of data: the results are cached with the node tree where they depend only
on the store's metadata and the decode options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from zarrsql.decode.chunks import decode_chunk, fast_path, read_region
from zarrsql.decode.columns import DecodeOptions, column_codec
from zarrsql.errors import MetadataError, UnsupportedError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree
from zarrsql.plan.units import DimValues
from zarrsql.store import Store
from zarrsql.tables.model import Derived


def _coord_chunks(array: ArrayMeta) -> list[str]:
    return [array.chunk_key((i,)) for i in range(-(-array.shape[0] // array.chunks[0]) if array.shape[0] else 0)]


def prefetch_coords(
    tree: NodeTree, store: Store, arrays: Sequence[ArrayMeta], options: DecodeOptions
) -> dict[str, bytes | None]:
    """Every chunk of the coordinates not yet decoded, fetched together (one round of
    concurrent requests on a remote store), with their tokens for revalidation."""
    todo = [a for a in arrays if ("coord", a.path, options) not in tree.derived and fast_path(a)]
    keys = [k for a in todo for k in _coord_chunks(a)]
    if not keys:
        return {}
    raws = store.get_many(keys)
    # A coordinate rewritten in place (chunks only) must not be served from the cache: its
    # chunk keys join the documents the cached tree is revalidated against.
    for k, token in zip(keys, store.token_many(keys), strict=True):
        tree.validators[k] = token
    return dict(zip(keys, raws, strict=True))


def load_coord(
    tree: NodeTree, store: Store, array: ArrayMeta, options: DecodeOptions, fetched: dict[str, bytes | None]
) -> tuple[DimValues, str]:
    key = ("coord", array.path, options)
    hit = tree.derived.get(key)
    if hit is None:
        keys = _coord_chunks(array)
        if keys and all(k in fetched for k in keys):
            raw = np.concatenate([decode_chunk(array, fetched[k], k, store.url) for k in keys])[: array.shape[0]]
        else:
            raw = read_region(store, array, ((0, array.shape[0]),))
            for k, token in zip(keys, store.token_many(keys), strict=True):
                tree.validators[k] = token
        codec = column_codec(array, options, is_coord=True, coord_values=raw)
        values, nulls = codec.decode(raw)
        hit = (DimValues(array.name, np.ascontiguousarray(values), nulls), codec.logical)
        tree.derived[key] = hit
    return cast("tuple[DimValues, str]", hit)  # what this function stored under `key`


def derived_values(d: Derived, n: int) -> tuple[DimValues, str]:
    """A derived column's values along its axis and their logical type: labels (NULL where
    a label is missing) or `position * scale + offset`."""
    if d.labels is not None:
        values = np.array([label or "" for label in d.labels], dtype=object)
        missing = np.array([label is None for label in d.labels], dtype=bool)
        return DimValues(d.name, values, missing if missing.any() else None), "string"
    positions = np.arange(n, dtype=np.float64)
    return DimValues(d.name, positions * d.scale + d.offset, None), "float64"


#: CF spellings of longitude units (CF conventions, section 4.2), compared lower-cased.
LONGITUDE_UNITS = frozenset({"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"})


def is_longitude(array: ArrayMeta) -> bool:
    """A longitude coordinate by CF: `standard_name` longitude or units in degrees east."""
    units = array.attrs.get("units")
    return array.attrs.get("standard_name") == "longitude" or (
        isinstance(units, str) and units.strip().lower() in LONGITUDE_UNITS
    )


def wrap_longitude(values: np.ndarray, setting: int) -> np.ndarray:
    """Longitudes moved into [-180, 180) (`setting` 180) or [0, 360) (360), keeping the type.

    NaN stays NaN (a NULL coordinate is masked apart). `np.mod` of a tiny negative number can
    round up to the divisor itself, so values at the top end are folded once more."""
    if values.dtype.kind not in "iuf":
        return values
    low = -180 if setting == 180 else 0
    out = np.mod(values - low, 360) + low
    with np.errstate(invalid="ignore"):
        out = np.where(out >= low + 360, out - 360, out)
    return out.astype(values.dtype, copy=False)


def bounds_array(tree: NodeTree, coord: ArrayMeta) -> ArrayMeta | None:
    """The CF bounds variable a coordinate names (`bounds` attribute, same group), with the
    coordinate's `units` and `calendar` where it has none (CF 7.1: bounds inherit them)."""

    name = coord.attrs.get("bounds")
    if not isinstance(name, str) or not name:
        return None
    parent = coord.path.rpartition("/")[0]
    path = f"{parent}/{name}" if parent else name
    found = tree.arrays.get(path) if path in tree.arrays else None
    if not isinstance(found, ArrayMeta):
        raise MetadataError(
            f"coordinate '{coord.path}' names the bounds variable '{name}', which is not a readable array of "
            "its group; fix the store's `bounds` attribute or read without cell_bounds := true"
        )
    if found.shape != (coord.shape[0], 2):
        raise MetadataError(
            f"the bounds variable '{path}' of coordinate '{coord.path}' has shape {list(found.shape)}, "
            f"expected [{coord.shape[0]}, 2] (one lower and one upper bound per value)"
        )
    inherited = {k: coord.attrs[k] for k in ("units", "calendar") if k in coord.attrs and k not in found.attrs}
    return replace(found, attrs={**found.attrs, **inherited}) if inherited else found


def load_bounds(
    tree: NodeTree, store: Store, array: ArrayMeta, options: DecodeOptions
) -> tuple[DimValues, DimValues, str]:
    """A bounds variable's lower and upper columns, decoded as its coordinate is (cached)."""
    key = ("bounds", array.path, options)
    hit = tree.derived.get(key)
    if hit is None:
        n = array.shape[0]
        raw = read_region(store, array, ((0, n), (0, 2)))
        for k in {
            array.chunk_key((i, j)) for i in range(-(-n // array.chunks[0])) for j in range(-(-2 // array.chunks[1]))
        }:
            tree.validators.setdefault(k, store.token_many([k])[0])
        codec = column_codec(array, options, is_coord=True, coord_values=raw.reshape(-1))
        values, nulls = codec.decode(raw.reshape(-1))
        values = np.asarray(values).reshape(n, 2)
        nulls = None if nulls is None else np.asarray(nulls).reshape(n, 2)
        lower = DimValues("lower", np.ascontiguousarray(values[:, 0]), None if nulls is None else nulls[:, 0].copy())
        upper = DimValues("upper", np.ascontiguousarray(values[:, 1]), None if nulls is None else nulls[:, 1].copy())
        hit = (lower, upper, codec.logical)
        tree.derived[key] = hit
    return cast("tuple[DimValues, DimValues, str]", hit)


#: The most cells of an auxiliary coordinate a scan holds decoded (it is read whole, once).
MAX_AUX_CELLS = 2**27


def load_aux(tree: NodeTree, store: Store, array: ArrayMeta, options: DecodeOptions) -> tuple[np.ndarray, Any, str]:
    """An auxiliary coordinate read whole and decoded, in the array's own axis order:
    (values, nulls or None, logical type), cached with the tree like a coordinate."""
    key = ("aux", array.path, options)
    hit = tree.derived.get(key)
    if hit is None:
        cells = int(np.prod(array.shape, dtype=np.int64))
        if cells > MAX_AUX_CELLS:
            raise UnsupportedError(
                f"the auxiliary coordinate '{array.path}' has {cells} cells, more than the {MAX_AUX_CELLS} a scan "
                "holds decoded; read its table with the data variables only (array_path := ...)"
            )
        raw = read_region(store, array, tuple((0, n) for n in array.shape))
        grid = tuple(-(-n // c) for n, c in zip(array.shape, array.chunks, strict=True))
        keys = [array.chunk_key(idx) for idx in np.ndindex(*grid)]
        for k, token in zip(keys, store.token_many(keys), strict=True):
            tree.validators[k] = token
        flat = np.asarray(raw).reshape(-1)
        codec = column_codec(array, options, is_coord=True, coord_values=flat)
        values, nulls = codec.decode(flat)
        values = np.asarray(values).reshape(array.shape)
        nulls = None if nulls is None else np.asarray(nulls).reshape(array.shape)
        hit = (values, nulls, codec.logical)
        tree.derived[key] = hit
    return cast("tuple[np.ndarray, Any, str]", hit)
