"""Well-known binary (WKB) geometries → the table convention's arrays (coords and offsets).

A batch of WKB values (DuckDB's GEOMETRY exports as GeoArrow WKB) is parsed into one
`GeometryBlock`: its kind (point, linestring or polygon), its axes (x, y and z/m when present)
and the flat arrays the convention stores — `coords` (vertices × D), `ring_offsets` (polygons)
and `geom_offsets` (N+1, relative to this block). ISO WKB (type + 1000/2000/3000) and EWKB
(Z/M/SRID flags) are read, in either byte order. Multi-geometries, collections and NULL rows
have no encoding in the convention's v1: they are refused with the row and the fix.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from zarrsql.errors import UnwritableColumnError

KINDS = {1: "point", 2: "linestring", 3: "polygon"}
_OTHERS = {4: "MULTIPOINT", 5: "MULTILINESTRING", 6: "MULTIPOLYGON", 7: "GEOMETRYCOLLECTION"}
_EWKB_Z, _EWKB_M, _EWKB_SRID = 0x80000000, 0x40000000, 0x20000000


@dataclass(frozen=True)
class GeometryBlock:
    """The geometries of a block of rows, flattened (offsets start at 0)."""

    kind: str
    axes: tuple[str, ...]
    coords: np.ndarray  # (vertices, D) float64
    ring_offsets: np.ndarray | None  # (rings + 1,) int64, polygons only
    geom_offsets: np.ndarray  # (rows + 1,) int64 into rings (polygons) or vertices


def refuse(column: str, row: int, what: str) -> UnwritableColumnError:
    return UnwritableColumnError(
        f"geometry column '{column}', row {row}: {what}; the Zarr table convention stores one "
        "geometry type per column (POINT, LINESTRING or POLYGON, not multi-geometries), with no "
        "NULL rows: filter or convert the column in SQL (e.g. WHERE col IS NOT NULL, ST_Dump)"
    )


def _header(data: bytes, pos: int) -> tuple[str, int, int, tuple[str, ...], int]:
    """(byte order, kind code, flags, axes, position after the header)."""
    order = "<" if data[pos] == 1 else ">"
    (code,) = struct.unpack_from(f"{order}I", data, pos + 1)
    pos += 5
    z, m = bool(code & _EWKB_Z), bool(code & _EWKB_M)
    if code & _EWKB_SRID:
        pos += 4
    code &= 0x0FFFFFFF
    z, m = z or (code // 1000) in (1, 3), m or (code // 1000) in (2, 3)
    axes = ("x", "y") + (("z",) if z else ()) + (("m",) if m else ())
    return order, code % 1000, 0, axes, pos


def _points(data: bytes, order: str, pos: int, count: int, width: int) -> tuple[np.ndarray, int]:
    size = count * width * 8
    values = np.frombuffer(data, dtype=f"{order}f8", count=count * width, offset=pos).reshape(count, width)
    return values, pos + size


def _one(data: bytes, column: str, row: int) -> tuple[str, tuple[str, ...], list[np.ndarray]]:
    """A geometry as (kind, axes, rings): a point has one ring of one vertex."""
    try:
        order, code, _, axes, pos = _header(data, 0)
        if code not in KINDS:
            what = _OTHERS.get(code, f"of WKB type {code}")
            raise refuse(column, row, f"the geometry is a {what}, not a POINT, LINESTRING or POLYGON")
        width = len(axes)
        if code == 1:
            values, _ = _points(data, order, pos, 1, width)
            return "point", axes, [values]
        if code == 2:
            (n,) = struct.unpack_from(f"{order}I", data, pos)
            values, _ = _points(data, order, pos + 4, n, width)
            return "linestring", axes, [values]
        (rings,) = struct.unpack_from(f"{order}I", data, pos)
        pos += 4
        out = []
        for _ in range(rings):
            (n,) = struct.unpack_from(f"{order}I", data, pos)
            values, pos = _points(data, order, pos + 4, n, width)
            out.append(values)
        return "polygon", axes, out
    except (struct.error, ValueError, IndexError) as err:
        raise refuse(column, row, f"the value is not valid WKB ({err})") from err


def parse_wkb(column: str, values: list[bytes | None], first_row: int) -> GeometryBlock:
    """One block of WKB values, which must all be of one kind and one set of axes."""
    if not values:
        raise ValueError("parse_wkb needs at least one value")
    kind: str | None = None
    axes: tuple[str, ...] = ()
    rings: list[np.ndarray] = []
    per_row: list[int] = []
    for i, value in enumerate(values):
        if value is None:
            raise refuse(column, first_row + i, "the geometry is NULL")
        k, a, parts = _one(value, column, first_row + i)
        if kind is None:
            kind, axes = k, a
        elif (k, a) != (kind, axes):
            raise refuse(column, first_row + i, f"a {k.upper()} {''.join(a)} after {kind.upper()} {''.join(axes)}")
        rings.extend(parts)
        per_row.append(len(parts))
    assert kind is not None
    return _block(kind, axes, rings, per_row)


def _offsets(counts: list[int] | np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _block(kind: str, axes: tuple[str, ...], rings: list[np.ndarray], per_row: list[int]) -> GeometryBlock:
    width = len(axes)
    coords = np.concatenate(rings).astype(np.float64) if rings else np.zeros((0, width))
    vertex_offsets = _offsets([len(r) for r in rings])
    if kind == "polygon":
        return GeometryBlock(kind, axes, coords, vertex_offsets, _offsets(per_row))
    return GeometryBlock(kind, axes, coords, None, vertex_offsets)
