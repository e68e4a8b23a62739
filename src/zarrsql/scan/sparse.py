"""Tables of sparse matrices: one row per stored entry, in blocks of the compressed axis.

A CSR table's work units are blocks of rows (CSC: of columns) holding about
`ENTRIES_PER_UNIT` stored entries. Several matrices of one table give the union of their
stored positions, 0 for a matrix with nothing stored where another has. A pushed predicate
that keeps some positions of the compressed axis plans only the blocks holding them and
reads only those positions' slices of `indices`/`data`; every other predicate on the
dimensions is applied exactly to each entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.conventions.records import SparseMatrix
from zarrsql.decode.columns import column_codec
from zarrsql.decode.logical import Labels
from zarrsql.decode.sparse import entries, load_indptr
from zarrsql.expand.columns import Column
from zarrsql.plan.predicate import Predicate, columns_of, conjoin, conjuncts, evaluate, leaf_truth
from zarrsql.scan.table import OpenedTable

#: Stored entries per work unit: large enough to amortise a read, small enough for memory.
ENTRIES_PER_UNIT = 1 << 20


@dataclass(frozen=True)
class SparseUnit:
    """A block of compressed-axis positions: `positions` are the ones to read (sorted);
    `residual` is the part of the predicate applied to each entry."""

    index: int
    positions: np.ndarray
    residual: Predicate | None


@dataclass(frozen=True)
class SparsePlan:
    units_total: int
    blocks: list[np.ndarray]
    residual: Predicate | None
    exact_rows: int | None

    def units(self) -> Iterator[SparseUnit]:
        for i, block in enumerate(self.blocks):
            if len(block):
                yield SparseUnit(i, block, self.residual)

    def rows(self) -> int | None:
        return self.exact_rows


class SparseScan(OpenedTable):
    """A table whose rows are the stored entries of its sparse matrices."""

    rows_are_cells = False

    def _make_codecs(self) -> list[Any]:
        """Each matrix's `data` decoding, and its validated pointers (read once)."""
        self.matrices: list[SparseMatrix] = [dc.array.encoding for dc in self.table.data]  # type: ignore[union-attr,misc]
        self.axis = self.matrices[0].axis
        self.pointers = [load_indptr(self.store, m) for m in self.matrices]
        self.values = [column_codec(m.data, self.request.options) for m in self.matrices]
        return self.values

    @property
    def num_rows(self) -> int | None:
        return int(self.pointers[0][-1]) if len(self.pointers) == 1 else None

    def plan(self, predicate: Predicate | None = None) -> SparsePlan:
        combined = conjoin((self.base_predicate, predicate))
        counts = sum(np.diff(p) for p in self.pointers)
        assert isinstance(counts, np.ndarray), "a sparse table has at least one matrix"
        bounds = _blocks(counts)
        kept, residual = self._split(combined)
        blocks = [np.arange(a, b) for a, b in bounds]
        if kept is not None:
            blocks = [k[(k >= a) & (k < b)] for k, (a, b) in zip([kept] * len(bounds), bounds, strict=True)]
        exact = None
        if residual is None and len(self.pointers) == 1:
            exact = int(counts.sum()) if kept is None else int(counts[kept].sum())
        return SparsePlan(len(bounds), blocks, residual, exact)

    def _split(self, predicate: Predicate | None) -> tuple[np.ndarray | None, Predicate | None]:
        """Kept positions of the compressed axis (from its own conjuncts), and the rest."""
        if predicate is None:
            return None, None
        name = self.dims[self.axis].name
        mine = [c for c in conjuncts(predicate) if columns_of(c) == {name}]
        rest = [c for c in conjuncts(predicate) if columns_of(c) != {name}]
        kept = None
        if mine:
            dv = self.dims[self.axis]
            p = conjoin(mine)
            assert p is not None
            t, _ = evaluate(p, lambda leaf: leaf_truth(leaf, dv.values, dv.nulls))
            kept = np.flatnonzero(t)
        residual = conjoin(rest)
        return kept, residual

    def unit_keys(self, unit: Any, columns: Sequence[Column]) -> list[str] | None:
        """Entries are found through the index pointer first, so their keys are not known ahead."""
        return None

    def unit_columns(self, unit: Any, columns: Sequence[Column]) -> tuple[int, list[tuple[Any, Any]]]:
        if not columns and unit.residual is None and len(self.pointers) == 1:
            ptr = self.pointers[0]  # count(*): the pointers alone say how many entries there are
            return int((ptr[unit.positions + 1] - ptr[unit.positions]).sum()), []
        major, minor, values = self._union(unit.positions)
        rows, cols = (major, minor) if self.axis == 0 else (minor, major)
        residual = unit.residual
        if residual is not None:
            index = {self.dims[0].name: rows, self.dims[1].name: cols}
            t, _ = evaluate(
                residual,
                lambda leaf: leaf_truth(
                    leaf,
                    self._dim_values(leaf.column)[index[leaf.column]],
                    self._dim_nulls(leaf.column, index[leaf.column]),
                ),
            )
            rows, cols, values = rows[t], cols[t], [v[t] for v in values]
        parts = []
        for col in columns:
            if col.dim is not None:
                dv = self.dims[col.dim]
                idx = rows if col.dim == 0 else cols
                column = idx if isinstance(col.logical, Labels) else dv.values[idx]
                parts.append((column, None if dv.nulls is None else dv.nulls[idx]))
            else:
                parts.append(self.values[col.data].decode(values[col.data]))  # type: ignore[index]
        return len(rows), parts

    def _dim_values(self, name: str) -> np.ndarray:
        return next(d.values for d in self.dims if d.name == name)

    def _dim_nulls(self, name: str, idx: np.ndarray) -> np.ndarray | None:
        nulls = next(d.nulls for d in self.dims if d.name == name)
        return None if nulls is None else nulls[idx]

    def _union(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        got = [entries(self.store, m, p, positions) for m, p in zip(self.matrices, self.pointers, strict=True)]
        if len(got) == 1:
            major, minor, data = got[0]
            return major, minor, [data]
        other = self.table.shape[1 - self.axis]
        keys = [g[0] * other + g[1] for g in got]
        union = np.unique(np.concatenate(keys))
        out = []
        for (_, _, data), k in zip(got, keys, strict=True):
            full = np.zeros(len(union), dtype=data.dtype)
            full[np.searchsorted(union, k)] = data
            out.append(full)
        return union // other, union % other, out


def _blocks(counts: np.ndarray) -> list[tuple[int, int]]:
    """Split positions 0..n into consecutive blocks of about ENTRIES_PER_UNIT entries."""
    n = len(counts)
    if n == 0:
        return []
    cum = np.cumsum(counts)
    cuts = [0]
    target = ENTRIES_PER_UNIT
    while cuts[-1] < n:
        start_total = cum[cuts[-1] - 1] if cuts[-1] else 0
        nxt = int(np.searchsorted(cum, start_total + target, side="right"))
        cuts.append(max(nxt, cuts[-1] + 1) if nxt < n else n)
    return list(zip(cuts[:-1], cuts[1:], strict=True))
