"""The part of a work unit a decoder needs: its region and the cells it keeps.

Decoders read by `Cells`, a protocol that `plan.units.WorkUnit` satisfies, so that `decode/`
depends on no planning code: planning decides which cells, decoding reads them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

Selection = None | tuple[np.ndarray | None, ...] | np.ndarray


class Cells(Protocol):
    """`region` is (start, stop) per dimension; `select` is None (every cell), per-dimension
    index arrays relative to the region start (None for all of that dimension), or a boolean
    mask of the region's shape."""

    @property
    def region(self) -> tuple[tuple[int, int], ...]: ...

    @property
    def select(self) -> Selection: ...


def select_cells(block: np.ndarray, unit: Cells) -> np.ndarray:
    """The unit's selected cells of a block shaped like its region, flattened in row-major
    order; axes beyond the table's dimensions (a fixed multi-valued column's) are kept."""
    sel = unit.select
    trailing = block.shape[len(unit.region) :]
    if sel is None:
        return block.reshape((-1, *trailing))
    if isinstance(sel, np.ndarray):
        return block[sel]
    for k, idx in enumerate(sel):
        if idx is not None:
            block = np.take(block, idx, axis=k)
    return block.reshape((-1, *trailing))


def needed_region(unit: Cells) -> tuple[tuple[int, int], ...]:
    """The unit's region, cut after the last index along its first axis that the selection
    keeps. `select_cells` takes the kept cells by index from the region's start, so the rows
    past that index are never looked at and a decoder need not produce them: an hour selected
    out of a day's chunk reads as a region of the hours up to it (see `chunks._read_leading`)."""
    region, sel = unit.region, unit.select
    if not isinstance(sel, tuple) or not region or sel[0] is None or not len(sel[0]):
        return region
    start, stop = region[0]
    last = start + int(np.max(sel[0])) + 1
    return region if last >= stop else ((start, last), *region[1:])
