"""A work unit's selected cells of a region-shaped block (kept in `decode.cells`, which
decoders share; planning and row expansion import it from here)."""

from __future__ import annotations

from zarrsql.decode.cells import select_cells

__all__ = ["select_cells"]
