"""Geometry columns of the Zarr table convention: point, linestring and polygon.

A point column is a plain (N, D) array; a linestring column a `coords` (M, D) array with
`geom_offsets` (N+1) saying which vertices belong to each row; a polygon column adds
`ring_offsets` between the two (rows → rings → vertices; a row's first ring is its exterior,
the others its holes). The axes attribute names the D coordinates (x, y, z, m in any order);
columns come out in the canonical order x, y, [z], [m], as GeoArrow and WKB want them.

Each codec reads one work unit's rows. Offsets are not row-aligned (N+1 long), so a unit
reads `geom_offsets[r0:r1+1]`, then only the span of rings and vertices its (selected) rows
cover. Offsets that decrease or point past the array they index are refused with the
column's name and the rule, never turned into plausible rows.

With `DecodeOptions.geometry == "wkb"` each row becomes ISO well-known binary (little
endian; type 1/2/3 for point/linestring/polygon, +1000 with z, +2000 with m, +3000 with
both), written here with numpy so that no geometry library is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.conventions.records import GEOMETRY_AXES
from zarrsql.decode.cells import Cells
from zarrsql.decode.chunks import read_region
from zarrsql.decode.columns import ColumnCodec
from zarrsql.decode.encodings import read_cells
from zarrsql.decode.logical import WKB, LineString, Logical, Point, Polygon
from zarrsql.errors import DecodeError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import Store

AXES = GEOMETRY_AXES
_WKB_TYPES = {"point": 1, "linestring": 2, "polygon": 3}


def canonical_axes(axes: tuple[str, ...]) -> tuple[str, ...]:
    """The axes in GeoArrow/WKB order (x, y, then z and m when present)."""
    return tuple(a for a in AXES if a in axes)


def wkb_type(kind: str, axes: tuple[str, ...]) -> int:
    """The ISO WKB geometry type code of `kind` with these coordinate axes."""
    return _WKB_TYPES[kind] + (1000 if "z" in axes else 0) + (2000 if "m" in axes else 0)


# ----------------------------------------------------------------------------- WKB
def _u32(values: np.ndarray) -> np.ndarray:
    """Each value as its 4 little-endian bytes: an (n, 4) uint8 array."""
    return np.ascontiguousarray(values, dtype="<u4").view(np.uint8).reshape(-1, 4)


def _assemble(total: int, headers: list[tuple[np.ndarray, np.ndarray]], coords: np.ndarray) -> np.ndarray:
    """A buffer of `total` bytes: each header block (start positions, (n, width) bytes) at its
    positions, and the coordinates' float64 bytes filling every other byte in order."""
    out = np.zeros(total, dtype=np.uint8)
    is_header = np.zeros(total, dtype=bool)
    for starts, block in headers:
        where = starts[:, None] + np.arange(block.shape[1])
        out[where] = block
        is_header[where] = True
    out[~is_header] = np.ascontiguousarray(coords, dtype="<f8").view(np.uint8).reshape(-1)
    return out


def _split(buffer: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The buffer cut at `starts` into one bytes object per row."""
    raw = buffer.tobytes()
    ends = [*starts[1:].tolist(), len(raw)]
    out = np.empty(len(starts), dtype=object)
    out[:] = [raw[a:b] for a, b in zip(starts.tolist(), ends, strict=True)]
    return out


def _row_header(n: int, code: int, counts: np.ndarray | None) -> np.ndarray:
    """Per row: byte order 1 (little endian), the type code, and a count when given."""
    parts = [np.ones((n, 1), np.uint8), np.repeat(_u32(np.array([code])), n, axis=0)]
    if counts is not None:
        parts.append(_u32(counts))
    return np.concatenate(parts, axis=1)


def wkb_points(coords: np.ndarray, code: int) -> np.ndarray:
    """One WKB point per row of `coords` (n, D), an object array of bytes."""
    n, d = coords.shape
    starts = np.arange(n, dtype=np.int64) * (5 + 8 * d)
    buffer = _assemble(n * (5 + 8 * d), [(starts, _row_header(n, code, None))], coords)
    return _split(buffer, starts)


def wkb_linestrings(offsets: np.ndarray, coords: np.ndarray, code: int) -> np.ndarray:
    """One WKB linestring per row; row i's vertices are coords[offsets[i]:offsets[i+1]]
    (offsets start at 0)."""
    n, d = len(offsets) - 1, coords.shape[1]
    starts = 9 * np.arange(n, dtype=np.int64) + 8 * d * offsets[:-1]
    total = 9 * n + 8 * d * len(coords)
    buffer = _assemble(total, [(starts, _row_header(n, code, np.diff(offsets)))], coords)
    return _split(buffer, starts)


def wkb_polygons(geom: np.ndarray, rings: np.ndarray, coords: np.ndarray, code: int) -> np.ndarray:
    """One WKB polygon per row: row i's rings are geom[i]:geom[i+1], ring j's vertices are
    coords[rings[j]:rings[j+1]] (both offset arrays start at 0)."""
    n, r, d = len(geom) - 1, len(rings) - 1, coords.shape[1]
    ring_row = np.repeat(np.arange(n, dtype=np.int64), np.diff(geom))
    row_starts = 9 * np.arange(n, dtype=np.int64) + 4 * geom[:-1] + 8 * d * rings[geom[:-1]]
    ring_starts = 9 * (ring_row + 1) + 4 * np.arange(r, dtype=np.int64) + 8 * d * rings[:-1]
    total = 9 * n + 4 * r + 8 * d * len(coords)
    headers = [(row_starts, _row_header(n, code, np.diff(geom))), (ring_starts, _u32(np.diff(rings)))]
    return _split(_assemble(total, headers, coords), row_starts)


# ----------------------------------------------------------------------------- offsets
def unit_rows(unit: Cells) -> np.ndarray | None:
    """The unit's selected rows relative to its region start, or None for all of them."""
    sel = unit.select
    if sel is None:
        return None
    if isinstance(sel, np.ndarray):
        return np.flatnonzero(sel)
    return sel[0]


def _gather(offsets: np.ndarray, picked: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | slice]:
    """For elements `picked` of an offsets array (all when None): their new offsets (from 0)
    and which children they keep (a slice when they are contiguous)."""
    if picked is None:
        return offsets - offsets[0], slice(int(offsets[0]), int(offsets[-1]))
    starts, stops = offsets[picked], offsets[picked + 1]
    lengths = stops - starts
    new = np.zeros(len(picked) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    children = np.repeat(starts - new[:-1], lengths) + np.arange(new[-1], dtype=np.int64)
    return new, children


@dataclass(frozen=True)
class _Where:
    """How to name a column in an error: its name and its group's path."""

    column: str
    path: str
    kind: str

    def broken(self, what: str, rule: str) -> DecodeError:
        return DecodeError(
            f"{self.kind} column '{self.column}' (group '/{self.path}'): {what}; the table convention "
            f"requires {rule}: rewrite the column"
        )


def _check_offsets(where: _Where, name: str, values: np.ndarray, start: int, limit: int, target: str) -> None:
    """`values` (offsets[start:...], in their stored integer dtype) must not decrease and must
    stay within [0, limit]. Neighbours are compared, not subtracted: a difference of unsigned
    offsets wraps instead of going negative, and a uint64 offset past 2**63 must be named as
    stored, not as the negative int64 it would become."""
    if len(values) == 0:
        return
    falls = values[1:] < values[:-1]
    if falls.any():
        i = int(np.flatnonzero(falls)[0])
        raise where.broken(
            f"{name}[{start + i}] = {int(values[i])} is followed by {int(values[i + 1])}",
            f"{name} to be non-decreasing",
        )
    low, high = int(values.min()), int(values.max())
    if low < 0 or high > limit:
        i = int(np.flatnonzero((values < 0) | (values > limit))[0])
        raise where.broken(
            f"{name}[{start + i}] = {int(values[i])} overruns {target}, which has {limit} entries",
            f"every {name} value to lie within {target}",
        )


# ----------------------------------------------------------------------------- codecs
@dataclass(frozen=True)
class PointCodec:
    """A point column: an (N, D) array decoded by its `ColumnCodec` (sentinels, NaN); a row
    whose every coordinate is missing is NULL."""

    array: ArrayMeta
    values: ColumnCodec
    order: tuple[int, ...]
    logical: Logical
    code: int | None

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        values, nulls = self.values.decode(read_cells(store, self.array, unit))
        coords = np.asarray(values, dtype=np.float64)[:, list(self.order)]
        rows = None if nulls is None else np.asarray(nulls.all(axis=1))  # asarray: for the type only
        rows = rows if rows is not None and rows.any() else None
        if self.code is not None:
            out = wkb_points(coords, self.code)
            if rows is not None:
                out[rows] = None
            return out, rows
        return coords, rows


@dataclass(frozen=True)
class RaggedCodec:
    """A linestring (rings None) or polygon column (see the module docstring)."""

    where: _Where
    coords: ArrayMeta
    geom_offsets: ArrayMeta
    ring_offsets: ArrayMeta | None
    order: tuple[int, ...]
    logical: Logical
    code: int | None

    def _offsets(self, store: Store, array: ArrayMeta, lo: int, hi: int, limit: int, target: str) -> np.ndarray:
        stored = read_region(store, array, ((lo, hi),))
        _check_offsets(self.where, array.name, stored, lo, limit, target)
        return stored.astype(np.int64)  # each within [0, limit] now: exact as int64

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        r0, r1 = unit.region[0]
        n_coords = self.coords.shape[0]
        rings = self.ring_offsets
        limit = n_coords if rings is None else rings.shape[0] - 1
        geom = self._offsets(store, self.geom_offsets, r0, r1 + 1, limit, "coords" if rings is None else "ring_offsets")
        geom_out, picked = _gather(geom, unit_rows(unit))
        ring_out = None
        if rings is not None and _span(picked)[1] > _span(picked)[0]:
            lo, hi = _span(picked)
            ring_part = self._offsets(store, rings, lo, hi + 1, n_coords, "coords")
            ring_out, picked = _gather(ring_part, None if isinstance(picked, slice) else picked - lo)
        elif rings is not None:  # no ring at all: nothing to read
            ring_out, picked = np.zeros(1, dtype=np.int64), slice(0, 0)
        lo, hi = _span(picked)
        block = read_region(store, self.coords, ((lo, hi), (0, self.coords.shape[1])))
        coords = np.asarray(block, dtype=np.float64)[_relative(picked, lo)][:, list(self.order)]
        if self.code is not None:
            if ring_out is None:
                return wkb_linestrings(geom_out, coords, self.code), None
            return wkb_polygons(geom_out, ring_out, coords, self.code), None
        return ((geom_out, coords) if ring_out is None else (geom_out, ring_out, coords)), None


def _span(picked: np.ndarray | slice) -> tuple[int, int]:
    if isinstance(picked, slice):
        return picked.start, picked.stop
    if len(picked) == 0:
        return 0, 0
    return int(picked.min()), int(picked.max()) + 1


def _relative(picked: np.ndarray | slice, lo: int) -> np.ndarray | slice:
    """Indices (or a slice) of a block read from position `lo`."""
    if isinstance(picked, slice):
        return slice(picked.start - lo, picked.stop - lo)
    return picked - lo


def point_codec(array: ArrayMeta, values: ColumnCodec, axes: tuple[str, ...], geometry: str) -> PointCodec:
    """The codec of a point column whose last axis holds `axes` (validated by the caller)."""
    canon = canonical_axes(axes)
    order = tuple(axes.index(a) for a in canon)
    if geometry == "wkb":
        return PointCodec(array, values, order, WKB, wkb_type("point", canon))
    return PointCodec(array, values, order, Point(canon), None)


def ragged_codec(
    column: str,
    path: str,
    coords: ArrayMeta,
    geom_offsets: ArrayMeta,
    ring_offsets: ArrayMeta | None,
    axes: tuple[str, ...],
    geometry: str,
) -> RaggedCodec:
    """The codec of a linestring (`ring_offsets` None) or polygon column."""
    kind = "linestring" if ring_offsets is None else "polygon"
    canon = canonical_axes(axes)
    order = tuple(axes.index(a) for a in canon)
    where = _Where(column, path, kind)
    if geometry == "wkb":
        return RaggedCodec(where, coords, geom_offsets, ring_offsets, order, WKB, wkb_type(kind, canon))
    logical: Logical = LineString(canon) if ring_offsets is None else Polygon(canon)
    return RaggedCodec(where, coords, geom_offsets, ring_offsets, order, logical, None)
