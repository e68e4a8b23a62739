"""Work units over the chunk grid, pruned by a predicate on dimension columns.

A work unit is one cell of the table's chunk grid (edge cells clipped to the shape), listed
in row-major order. With a predicate, each unit also carries which of its rows to produce:
- a separable predicate (an AND of parts that each name one dimension) becomes kept indices
  per dimension; a unit is planned only if every dimension keeps an index inside it, and
  its rows are the product of those indices;
- any other predicate is evaluated per unit as a boolean mask over the unit's cells; units
  whose mask is empty are dropped.
Both are exact: a planned unit produces exactly the rows where the predicate is true.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from zarrsql.plan.predicate import And, Leaf, Predicate, columns_of, conjuncts, evaluate, leaf_truth


@dataclass(frozen=True, slots=True)
class DimValues:
    """A dimension's decoded coordinate values (positions for a positional dimension)."""

    name: str
    values: np.ndarray
    nulls: np.ndarray | None


@dataclass(frozen=True, slots=True)
class WorkUnit:
    """One chunk-grid cell: `region` is (start, stop) per dimension.

    `select` is None (every row), a tuple of per-dimension index arrays relative to the
    region start (None for all of that dimension), or a boolean mask of the region's shape.
    """

    index: tuple[int, ...]
    region: tuple[tuple[int, int], ...]
    select: None | tuple[np.ndarray | None, ...] | np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in self.region)

    def num_rows(self) -> int:
        if self.select is None:
            return int(np.prod(self.shape, dtype=np.int64))
        if isinstance(self.select, np.ndarray):
            return int(self.select.sum())
        n = 1
        for s, (a, b) in zip(self.select, self.region, strict=True):
            n *= (b - a) if s is None else len(s)
        return n


@dataclass(frozen=True)
class ScanPlan:
    """The work units of one scan, lazily listed, and how many the full grid has.

    `columns` maps every column a predicate may name to (axis, its values along that axis):
    the dimensions themselves and any derived coordinate of an axis. `only`, when set, keeps
    just the units with those grid indices (pruning decided outside, e.g. by Arrow).
    """

    shape: tuple[int, ...]
    grid: tuple[int, ...]
    units_total: int
    kept: tuple[np.ndarray | None, ...] | None
    predicate: Predicate | None
    dims: tuple[DimValues, ...]
    columns: dict[str, tuple[int, DimValues]]
    only: frozenset[tuple[int, ...]] | None = None

    def units(self) -> Iterator[WorkUnit]:
        if self.only is not None:
            yield from (u for u in replace(self, only=None).units() if u.index in self.only)
            return
        if self.predicate is not None and self.kept is None:
            yield from _masked_units(self)
            return
        per_dim = [
            _chunks_kept(n, g, None if self.kept is None else self.kept[k])
            for k, (n, g) in enumerate(zip(self.shape, self.grid, strict=True))
        ]
        for index in itertools.product(*per_dim):
            region = _region(index, self.shape, self.grid)
            yield WorkUnit(index, region, _separable_select(self.kept, region))

    def rows(self) -> int:
        if self.predicate is None:
            return int(np.prod(self.shape, dtype=np.int64))
        if self.kept is not None:
            return int(
                np.prod(
                    [n if k is None else len(k) for n, k in zip(self.shape, self.kept, strict=True)], dtype=np.int64
                )
            )
        return sum(u.num_rows() for u in self.units())


def _region(index: tuple[int, ...], shape: tuple[int, ...], grid: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple((i * g, min((i + 1) * g, n)) for i, g, n in zip(index, grid, shape, strict=True))


def _n_chunks(n: int, g: int) -> int:
    return -(-n // g) if n else 0


def _chunks_kept(n: int, g: int, kept: np.ndarray | None) -> list[int]:
    if kept is None:
        return list(range(_n_chunks(n, g)))
    return sorted(set((kept // g).tolist()))


def _separable_select(
    kept: tuple[np.ndarray | None, ...] | None, region: tuple[tuple[int, int], ...]
) -> tuple[np.ndarray | None, ...] | None:
    if kept is None:
        return None
    out: list[np.ndarray | None] = []
    for k, (a, b) in zip(kept, region, strict=True):
        if k is None:
            out.append(None)
            continue
        lo, hi = np.searchsorted(k, [a, b])
        sub = k[lo:hi] - a
        out.append(None if len(sub) == b - a else sub)
    return None if all(s is None for s in out) else tuple(out)


def _separable(
    predicate: Predicate, ndim: int, columns: dict[str, tuple[int, DimValues]]
) -> tuple[np.ndarray | None, ...] | None:
    """Kept indices per dimension when `predicate` is an AND of parts that each read one axis."""
    parts: dict[int, list[Predicate]] = {}
    for c in conjuncts(predicate):
        axes = {columns[name][0] for name in columns_of(c)}
        if len(axes) != 1:
            return None
        parts.setdefault(axes.pop(), []).append(c)
    kept: list[np.ndarray | None] = [None] * ndim
    for k, ps in parts.items():
        p = ps[0] if len(ps) == 1 else And(tuple(ps))
        t, _ = evaluate(p, lambda leaf: leaf_truth(leaf, columns[leaf.column][1].values, columns[leaf.column][1].nulls))
        kept[k] = np.flatnonzero(t)
    return tuple(kept)


def _masked_units(plan: ScanPlan) -> Iterator[WorkUnit]:
    ndim = len(plan.dims)
    assert plan.predicate is not None
    for index in itertools.product(*[range(_n_chunks(n, g)) for n, g in zip(plan.shape, plan.grid, strict=True)]):
        region = _region(index, plan.shape, plan.grid)

        def leaf(p: Leaf, region: tuple[tuple[int, int], ...] = region) -> tuple[np.ndarray, np.ndarray]:
            k, d = plan.columns[p.column]
            a, b = region[k]
            nulls = None if d.nulls is None else d.nulls[a:b]
            t, n = leaf_truth(p, d.values[a:b], nulls)
            shape = [1] * ndim
            shape[k] = b - a
            return t.reshape(shape), n.reshape(shape)

        t, _ = evaluate(plan.predicate, leaf)
        mask = np.broadcast_to(t, tuple(b - a for a, b in region))
        if not mask.any():
            continue
        yield WorkUnit(index, region, None if mask.all() else np.ascontiguousarray(mask))


def plan_scan(
    shape: tuple[int, ...],
    grid: tuple[int, ...],
    dims: Sequence[DimValues],
    predicate: Predicate | None,
    *,
    aliases: Sequence[tuple[int, DimValues]] = (),
) -> ScanPlan:
    """Plan the scan of a table of `shape` on a chunk `grid`, keeping rows where `predicate`
    holds; `aliases` are derived coordinates (axis, values) a predicate may also name."""
    total = int(np.prod([_n_chunks(n, g) for n, g in zip(shape, grid, strict=True)], dtype=np.int64))
    columns = {d.name: (k, d) for k, d in enumerate(dims)}
    columns.update({d.name: (k, d) for k, d in aliases})
    kept = _separable(predicate, len(dims), columns) if predicate is not None else None
    return ScanPlan(shape, grid, total, kept, predicate, tuple(dims), columns)
