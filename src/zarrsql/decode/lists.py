"""Variable-length list columns: offsets into a flat array of values (H5Col's list columns).

A work unit of rows [r0, r1) reads offsets[r0 : r1 + 1] and only the values they span, so a
pruned scan reads a list column's values for the rows it keeps and no more. Offsets that
decrease or overrun the values are refused (`DecodeError`, naming the column and the rule),
never read as shorter lists. The values are decoded by the plain rules of their array (a
string values array gives lists of VARCHAR).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.conventions.records import OffsetList
from zarrsql.decode.cells import Cells
from zarrsql.decode.chunks import read_region
from zarrsql.decode.columns import ColumnCodec, DecodeOptions, column_codec
from zarrsql.decode.geometry import unit_rows
from zarrsql.decode.logical import List, Logical
from zarrsql.errors import DecodeError
from zarrsql.store import Store


def _gather(offsets: np.ndarray, picked: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | slice]:
    """New offsets (from 0) of the rows `picked` (all when None) and the values they keep."""
    if picked is None:
        return offsets - offsets[0], slice(int(offsets[0]), int(offsets[-1]))
    starts, stops = offsets[picked], offsets[picked + 1]
    lengths = stops - starts
    new = np.zeros(len(picked) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    return new, np.repeat(starts - new[:-1], lengths) + np.arange(new[-1], dtype=np.int64)


@dataclass(frozen=True)
class ListCodec:
    """One list column (see the module docstring)."""

    record: OffsetList
    values: ColumnCodec
    logical: Logical

    def _offsets(self, store: Store, r0: int, r1: int) -> np.ndarray:
        rec = self.record
        offsets = read_region(store, rec.offsets, ((r0, r1 + 1),)).astype(np.int64)
        limit = rec.values.shape[0]
        steps = np.diff(offsets)
        if len(offsets) and ((steps < 0).any() or offsets.min() < 0 or offsets.max() > limit):
            raise DecodeError(
                f"list column '{rec.column}': '/{rec.offsets.path}' rows {r0}..{r1} hold offsets that decrease "
                f"or fall outside the {limit} values of '/{rec.values.path}'; offsets must be non-decreasing "
                "and within the values: rewrite the column"
            )
        return offsets

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        r0, r1 = unit.region[0]
        new, keep = _gather(self._offsets(store, r0, r1), unit_rows(unit))
        if isinstance(keep, slice):
            lo, hi = keep.start, keep.stop
            rel: np.ndarray | slice = slice(0, hi - lo)
        else:
            lo, hi = (int(keep.min()), int(keep.max()) + 1) if len(keep) else (0, 0)
            rel = keep - lo
        raw = read_region(store, self.record.values, ((lo, hi),)) if hi > lo else np.zeros(0, self._dtype())
        values, nulls = self.values.decode(np.asarray(raw)[rel])
        return (new, values, nulls), None

    def _dtype(self) -> np.dtype:
        return self.record.values.dtype.numpy or np.dtype(object)


def list_codec(record: OffsetList, options: DecodeOptions) -> ListCodec:
    values = column_codec(record.values, options)
    if not isinstance(values.logical, str):
        raise DecodeError(f"list column '{record.column}': its values '/{record.values.path}' are not scalars")
    return ListCodec(record, values, List(values.logical))
