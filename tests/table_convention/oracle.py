"""Expected rows of table-convention tables, from zarr-python, numpy and pandas only.

`expected_rows(store, group)` reads the group's `table:columns` with zarr-python and applies
the convention's document directly, column by column, into Python values the way DuckDB
returns them (a NULL is None, NaN is NULL as `nan_as_null` makes it, a point a dict of its
axes in x, y, z, m order, a linestring a list of points, a polygon a list of rings, a fixed
multi-valued column a list). It never imports zarrsql.

`parse_wkb` reads ISO WKB with `struct`, so WKB output is checked where shapely is missing.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pandas as pd
import zarr

AXES = ("x", "y", "z", "m")


def _null(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _listify(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_listify(x) for x in v]
    return _null(v)


def _point_dicts(coords: np.ndarray, axes: list[str]) -> list[dict[str, float]]:
    order = [a for a in AXES if a in axes]
    return [{a: float(row[axes.index(a)]) for a in order} for row in coords]


def _plain(arr: Any) -> list[Any]:
    data = arr[...]
    attrs = dict(arr.attrs)
    if "categories" in attrs:
        cats = attrs["categories"]
        if data.dtype.kind in "iu":
            return [None if c < 0 else cats[c] for c in data.tolist()]
        return list(data.tolist())
    if attrs.get("encoding-type") == "point":
        axes = attrs["axes"]
        rows = _point_dicts(data.astype(np.float64), axes)
        return [None if np.isnan(data[i]).all() else r for i, r in enumerate(rows)]
    missing = attrs.get("missing_value")
    values = [_listify(v) for v in data.tolist()]
    if missing is not None and not (isinstance(missing, str) and missing.lower() == "nan"):
        values = [None if v == missing else v for v in values]
    return values


def _categorical(g: Any) -> list[Any]:
    codes = g["codes"][...]
    cats = g["categories"][...]
    series = pd.Series(pd.Categorical.from_codes(codes, categories=list(cats.tolist())))
    return [None if pd.isna(v) else v for v in series.astype(object).tolist()]


def _nullable(g: Any) -> list[Any]:
    values, mask = g["values"][...], g["mask"][...]
    return [None if m else _null(v) for v, m in zip(values.tolist(), mask.tolist(), strict=True)]


def linestrings(g: Any) -> list[np.ndarray]:
    """Each row's vertices (an (k, D) array in stored axis order)."""
    coords, offsets = g["coords"][...], g["geom_offsets"][...]
    return [coords[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def polygons(g: Any) -> list[list[np.ndarray]]:
    """Each row's rings (exterior first), each an (k, D) array in stored axis order."""
    coords, rings, geom = g["coords"][...], g["ring_offsets"][...], g["geom_offsets"][...]
    return [[coords[rings[j] : rings[j + 1]] for j in range(geom[i], geom[i + 1])] for i in range(len(geom) - 1)]


def column_values(g: Any, node: str) -> list[Any]:
    """One column's rows as DuckDB gives them back."""
    child = g[node]
    if isinstance(child, zarr.Array):
        return _plain(child)
    enc, axes = child.attrs["encoding-type"], child.attrs.get("axes")
    if enc == "categorical":
        return _categorical(child)
    if enc == "nullable":
        return _nullable(child)
    if enc == "linestring":
        return [_point_dicts(line, axes) for line in linestrings(child)]
    if enc == "polygon":
        return [[_point_dicts(r, axes) for r in rings] for rings in polygons(child)]
    raise AssertionError(f"no oracle for {enc}")


def expected_rows(store: str, group: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(column names, rows) of a table-convention group, in table:columns order."""
    g = zarr.open_group(store, path=group, mode="r")
    columns = g.attrs["table:columns"]
    names = [c["name"] for c in columns]
    values = [column_values(g, c["node"]) for c in columns]
    return names, list(zip(*values, strict=True))


def normalize(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """DuckDB's ARRAY values come back as tuples: make them lists, NaN None."""
    return [tuple(_listify(v) for v in row) for row in rows]


# ----------------------------------------------------------------------------- WKB
def parse_wkb(data: bytes) -> tuple[int, Any]:
    """(ISO type code, coordinates) of a little-endian WKB point, linestring or polygon:
    a tuple for a point, a list of tuples for a linestring, a list of those for a polygon."""
    assert data[0] == 1, "little endian"
    (code,) = struct.unpack_from("<I", data, 1)
    dims = 2 + (code // 1000 in (1, 2)) + 2 * (code // 1000 == 3)
    pos = 5

    def points(k: int) -> list[tuple[float, ...]]:
        nonlocal pos
        out = [struct.unpack_from(f"<{dims}d", data, pos + 8 * dims * i) for i in range(k)]
        pos += 8 * dims * k
        return out

    def count() -> int:
        nonlocal pos
        (k,) = struct.unpack_from("<I", data, pos)
        pos += 4
        return int(k)

    base = code % 1000
    if base == 1:
        value: Any = points(1)[0]
    elif base == 2:
        value = points(count())
    else:
        value = [points(count()) for _ in range(count())]
    assert pos == len(data), "no trailing bytes"
    return code, value
