"""One work unit's rows: coordinate columns from 1-D values, data columns from chunk regions.

Rows are in row-major order of the unit (last dimension fastest). Coordinates are never
read per cell: a dimension's column is its selected values repeated (for faster dimensions)
and tiled (for slower ones), so producing it costs one `np.repeat`/`np.tile`.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np

from zarrsql.plan.positions import Positions
from zarrsql.plan.selection import select_cells  # noqa: F401  (re-exported)
from zarrsql.plan.units import WorkUnit


def selected_lengths(unit: WorkUnit) -> list[int]:
    sel = unit.select
    shape = unit.shape
    if sel is None or isinstance(sel, np.ndarray):
        return list(shape)
    return [n if s is None else len(s) for n, s in zip(shape, sel, strict=True)]


def dim_indices(unit: WorkUnit, k: int) -> np.ndarray | slice:
    """The absolute indices (or a slice) of dimension `k` that the unit selects."""
    a, b = unit.region[k]
    sel = unit.select
    if sel is None or isinstance(sel, np.ndarray) or (picked := sel[k]) is None:
        return slice(a, b)
    return picked + a


#: Positions of the cells of recent masks (see `_cells`), by the mask's id.
_CELLS: OrderedDict[int, tuple[weakref.ref[np.ndarray], tuple[np.ndarray, ...]]] = OrderedDict()
_CELLS_KEPT = 16
_cells_lock = threading.Lock()


def _cells(mask: np.ndarray) -> tuple[np.ndarray, ...]:
    """`np.nonzero(mask)`, computed once per mask: every coordinate column of a masked unit
    needs it, and on a large unit it costs more than decoding the unit's chunk. Kept by the
    mask's identity (checked through a weak reference, so a reused id never matches)."""
    with _cells_lock:
        hit = _CELLS.get(id(mask))
    if hit is not None and hit[0]() is mask:
        return hit[1]
    cells = np.nonzero(mask)
    with _cells_lock:
        _CELLS[id(mask)] = (weakref.ref(mask), cells)
        while len(_CELLS) > _CELLS_KEPT:
            _CELLS.popitem(last=False)
    return cells


def expand_dim(values: np.ndarray | Positions, unit: WorkUnit, k: int) -> np.ndarray:
    """Dimension `k`'s column for every row of the unit. `values` is the whole axis; only the
    unit's piece of it is taken (a positional dimension's `Positions` make just that piece)."""
    sel = unit.select
    if isinstance(sel, np.ndarray):
        a = unit.region[k][0]
        return values[_cells(sel)[k] + a]
    lengths = selected_lengths(unit)
    picked = values[dim_indices(unit, k)]
    inner = int(np.prod(lengths[k + 1 :], dtype=np.int64))
    outer = int(np.prod(lengths[:k], dtype=np.int64))
    out = np.repeat(picked, inner) if inner > 1 else picked
    return np.tile(out, outer) if outer > 1 else out
