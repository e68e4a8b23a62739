"""A work unit's selected cells of a region-shaped block, in row-major order."""

from __future__ import annotations

import numpy as np

from zarrsql.plan.units import WorkUnit


def select_cells(block: np.ndarray, unit: WorkUnit) -> np.ndarray:
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
