"""Tables of sparse matrices: one row per stored entry, in blocks of the compressed axis.

A table of one matrix has work units that are spans of its stored entries, whole chunks
of `data` holding about `ENTRIES_PER_UNIT` entries: a row (CSR; a column for CSC) that
straddles two spans is read in two parts, and no chunk is decoded by two units; a position
the matrix stores twice (a non-canonical matrix) is two rows, one per stored entry. Several
matrices of one table give the union of their stored positions, 0 for a matrix with nothing
stored where another has, and the sum of a matrix's entries where it stores a position
twice (as scipy's `toarray()`); their units are blocks of rows (columns) of about
`ENTRIES_PER_UNIT` entries. A pushed predicate that keeps some positions of the compressed
axis plans only the units holding them and reads only those positions' slices of
`indices`/`data`; every other predicate on the dimensions is applied exactly to each entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.conventions.records import SparseMatrix
from zarrsql.decode.columns import column_codec
from zarrsql.decode.logical import Labels
from zarrsql.decode.sparse import entries, load_indptr, put_entries
from zarrsql.expand.columns import Column
from zarrsql.plan.predicate import Leaf, Predicate, Truth, columns_of, conjoin, conjuncts, evaluate, leaf_truth
from zarrsql.plan.units import DimValues
from zarrsql.scan.table import OpenedTable

#: Stored entries per work unit: large enough to amortise a read, small enough for memory.
ENTRIES_PER_UNIT = 1 << 20


@dataclass(frozen=True)
class SparseUnit:
    """A block of compressed-axis positions: `positions` are the ones to read (sorted);
    `residual` is the part of the predicate applied to each entry; `span`, when set, the
    range of stored entries [lo, hi) the unit reads (their rows may continue outside it)."""

    index: int
    positions: np.ndarray
    residual: Predicate | None
    span: tuple[int, int] | None = None


@dataclass(frozen=True)
class SparsePlan:
    units_total: int
    blocks: list[np.ndarray]
    residual: Predicate | None
    exact_rows: int | None
    spans: list[tuple[int, int]] | None = None

    def units(self) -> Iterator[SparseUnit]:
        for i, block in enumerate(self.blocks):
            if len(block):
                yield SparseUnit(i, block, self.residual, None if self.spans is None else self.spans[i])

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
        self._truths: dict[Leaf, Truth] = {}  # `_axis_truth`'s, shared by the scan's threads
        return self.values

    @property
    def num_rows(self) -> int | None:
        return int(self.pointers[0][-1]) if len(self.pointers) == 1 else None

    def plan(self, predicate: Predicate | None = None) -> SparsePlan:
        combined = conjoin((self.base_predicate, predicate))
        counts = sum(np.diff(p) for p in self.pointers)
        assert isinstance(counts, np.ndarray), "a sparse table has at least one matrix"
        kept, residual = self._split(combined)
        exact = None
        if residual is None and len(self.pointers) == 1:
            exact = int(counts.sum()) if kept is None else int(counts[kept].sum())
        if len(self.pointers) == 1:
            spans = _spans(int(self.pointers[0][-1]), self.matrices[0].data.chunks[0])
            bounds = _span_positions(self.pointers[0], spans)
        else:
            spans, bounds = None, _blocks(counts)
        blocks = [np.arange(a, b) for a, b in bounds]
        if kept is not None:
            blocks = [kept[(kept >= a) & (kept < b)] for a, b in bounds]
        return SparsePlan(len(bounds), blocks, residual, exact, spans)

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
            t, _ = evaluate(p, lambda leaf: leaf_truth(leaf, _whole(dv), dv.nulls))
            kept = np.flatnonzero(t)
        residual = conjoin(rest)
        return kept, residual

    def unit_keys(self, unit: Any, columns: Sequence[Column]) -> list[str] | None:
        """Entries are found through the index pointer first, so their keys are not known ahead."""
        return None

    def unit_columns(self, unit: Any, columns: Sequence[Column]) -> tuple[int, list[tuple[Any, Any]]]:
        if not columns and unit.residual is None and len(self.pointers) == 1:
            ptr = self.pointers[0]  # count(*): the pointers alone say how many entries there are
            starts, ends = ptr[unit.positions], ptr[unit.positions + 1]
            if unit.span is not None:
                starts, ends = np.maximum(starts, unit.span[0]), np.minimum(ends, unit.span[1])
            return int(np.maximum(ends - starts, 0).sum()), []
        residual = unit.residual
        wanted = {c.dim for c in columns if c.dim is not None}
        if residual is not None:
            wanted |= {k for k, d in enumerate(self.dims) if d.name in columns_of(residual)}
        major, minor, values = self._union(unit, need_major=self.axis in wanted)
        n = len(minor)
        rows, cols = (major, minor) if self.axis == 0 else (minor, major)
        if residual is not None:
            # the positions of every axis the residual names were read (`wanted` above)
            index = {d.name: a for d, a in zip(self.dims, (rows, cols), strict=True) if a is not None}
            t, _ = evaluate(
                residual,
                lambda leaf: tuple(a[index[leaf.column]] for a in self._axis_truth(leaf)),
            )
            rows = None if rows is None else rows[t]
            cols = None if cols is None else cols[t]
            values, n = [v[t] for v in values], int(np.count_nonzero(t))
        parts = []
        for col in columns:
            if col.dim is not None:
                dv = self.dims[col.dim]
                idx = rows if col.dim == 0 else cols
                assert idx is not None, "the positions of an axis a column shows are read"
                column = idx if isinstance(col.logical, Labels) else dv.values[idx]
                parts.append((column, None if dv.nulls is None else dv.nulls[idx]))
            else:
                parts.append(self.values[col.data].decode(values[col.data]))  # type: ignore[index]
        return n, parts

    def _axis_truth(self, leaf: Leaf) -> Truth:
        """The leaf's (true, null) over every label of its axis, computed once per scan and
        gathered per entry by the caller: evaluated per stored entry instead, a condition on
        the other axis of a CSR matrix (`var = 'gene5'`) compared one label per entry, millions
        of Python string comparisons for a few thousand labels."""
        truths = self._truths
        try:
            hit = truths.get(leaf)
        except TypeError:  # a constant that does not hash: computed every time
            hit, truths = None, {}
        if hit is None:
            dim = next(d for d in self.dims if d.name == leaf.column)
            hit = truths[leaf] = leaf_truth(leaf, _whole(dim), dim.nulls)
        return hit

    def _union(self, unit: SparseUnit, *, need_major: bool) -> tuple[np.ndarray | None, np.ndarray, list[np.ndarray]]:
        if len(self.matrices) == 1:
            m, p = self.matrices[0], self.pointers[0]
            major, minor, data = entries(self.store, m, p, unit.positions, unit.span, major=need_major)
            return major, minor, [data]
        got = [entries(self.store, m, p, unit.positions) for m, p in zip(self.matrices, self.pointers, strict=True)]
        other = self.table.shape[1 - self.axis]
        keys = [g[0].astype(np.int64) * other + g[1] for g in got]  # type: ignore[union-attr]
        union = np.unique(np.concatenate(keys))
        out = []
        for (_, _, data), k in zip(got, keys, strict=True):
            full = np.zeros(len(union), dtype=data.dtype)
            put_entries(full, np.searchsorted(union, k), data, order=k)  # a position stored twice: added
            out.append(full)
        return union // other, union % other, out


def _spans(nnz: int, chunk: int) -> list[tuple[int, int]]:
    """Consecutive ranges of the stored entries 0..nnz, each of whole `data` chunks holding
    about ENTRIES_PER_UNIT entries (a chunk larger than that is a span of its own). A chunk
    over four times that is cut into spans of ENTRIES_PER_UNIT, which then share its decoding:
    one unit of a whole huge chunk would hold all its rows in one batch."""
    chunk = max(1, chunk)
    step = max(1, ENTRIES_PER_UNIT // chunk) * chunk
    if chunk > 4 * ENTRIES_PER_UNIT:
        step = ENTRIES_PER_UNIT
    return [(a, min(a + step, nnz)) for a in range(0, nnz, step)]


def _span_positions(ptr: np.ndarray, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """For each span, the compressed-axis positions [a, b) with entries stored inside it."""
    if not spans:
        return []
    lo = np.array([s[0] for s in spans], dtype=np.int64)
    hi = np.array([s[1] for s in spans], dtype=np.int64)
    first = np.searchsorted(ptr[1:], lo, side="right")  # first position ending after lo
    stop = np.searchsorted(ptr[:-1], hi, side="left")  # first position starting at or after hi
    return list(zip(first.tolist(), stop.tolist(), strict=True))


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


def _whole(dv: DimValues) -> np.ndarray:
    """An axis' values as one array, positions included: a sparse table holds a value per
    position of its axes anyway (the index pointer), so a positional axis costs no more."""
    values = dv.values
    return values if isinstance(values, np.ndarray) else np.arange(len(values), dtype=np.int64)
