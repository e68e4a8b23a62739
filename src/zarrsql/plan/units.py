"""Work units over the chunk grid, pruned by a predicate on dimension columns.

A work unit is one cell of the table's chunk grid (edge cells clipped to the shape), listed
in row-major order. With a predicate, each unit also carries which of its rows to produce:
- a separable predicate (an AND of parts that each name one dimension) becomes kept indices
  per dimension; a unit is planned only if every dimension keeps an index inside it, and
  its rows are the product of those indices;
- any other predicate is evaluated per unit as a boolean mask over the unit's cells; units
  whose mask is empty are dropped.
Both are exact: a planned unit produces exactly the rows where the predicate is true.

Small chunks make small units, and every unit costs the reader a fixed amount (a batch, a
hand-off between threads, the engine's work per batch). `ScanPlan.grouped_units` merges runs
of adjacent kept chunks into one unit of up to `GROUP_CELLS` cells, for the plans whose units
are a product of kept chunks per axis (no predicate, or a separable one); a merged unit spans
only kept chunks, so it reads no chunk the ungrouped units would not, and its selection is
computed from the same kept indices, so its rows are exactly theirs. Its rows come out in
row-major order of its region; `ungrouped_order` gives the permutation that puts them back
in the order the ungrouped units would have produced them (chunk by chunk), so that
grouping changes no query's row order.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np

from zarrsql.plan.classes import MAX_COMBINATIONS, AxisClasses, axes_for, contract, truth_table
from zarrsql.plan.positions import MAX_POSITIONS_HELD, Positions, positions_where
from zarrsql.plan.predicate import Leaf, Or, Predicate, columns_of, conjoin, conjuncts, evaluate, leaf_truth

#: The positions an axis keeps (sorted), as an array or as runs (`Positions`); None: all.
Kept = np.ndarray | Positions | None


class DimValues:
    """A dimension's decoded coordinate values (positions for a positional dimension).

    Made with its values, or with `DimValues.deferred(name, load)`: then `load()` gives
    (values, nulls) the first time either is asked for. That is how a remote table's
    coordinates are held (scan/coords.py): a plan without a predicate on them and a scan
    that outputs none of them never ask, so the query never waits for them. `load` must be
    safe to call from several threads and give the same answer each time (a memo).

    A positional dimension's values are `Positions` (plan/positions.py): the positions as
    runs, never held whole unless a consumer needs them so (`positional`). Slicing and
    indexing them gives real arrays, as slicing coordinate values does; a consumer of the
    whole axis asks `Positions.holdable` first, or declines.
    """

    __slots__ = ("_load", "_nulls", "_values", "name")

    def __init__(self, name: str, values: np.ndarray | Positions, nulls: np.ndarray | None) -> None:
        self.name = name
        self._values: np.ndarray | Positions | None = values
        self._nulls = nulls
        self._load: Callable[[], tuple[np.ndarray, np.ndarray | None]] | None = None

    @classmethod
    def deferred(cls, name: str, load: Callable[[], tuple[np.ndarray, np.ndarray | None]]) -> DimValues:
        """Values read by `load()` when first used."""
        dv = cls.__new__(cls)
        dv.name, dv._values, dv._nulls, dv._load = name, None, None, load
        return dv

    @classmethod
    def positions(cls, name: str, n: int) -> DimValues:
        """The values of a positional dimension of length `n`: its positions, as runs."""
        return cls(name, Positions.whole(n, name), None)

    @property
    def values(self) -> np.ndarray | Positions:
        if self._load is not None:
            self._resolve()
        assert self._values is not None, "set by the constructor or by the load"
        return self._values

    @property
    def positional(self) -> bool:
        """Whether the values are a positional dimension's `Positions`."""
        return self._load is None and isinstance(self._values, Positions)

    @property
    def nulls(self) -> np.ndarray | None:
        if self._load is not None:
            self._resolve()
        return self._nulls

    @property
    def loaded(self) -> bool:
        """Whether the values are in memory (always, unless made `deferred` and not yet used)."""
        return self._load is None

    def _resolve(self) -> None:
        load = self._load
        if load is None:  # another thread got here first
            return
        values, nulls = load()
        # values before the flag: a thread that sees the load gone also sees the values
        self._values, self._nulls = values, nulls
        self._load = None

    def __repr__(self) -> str:
        shown = "deferred" if self._load is not None else f"{len(self.values)} values"
        return f"DimValues({self.name!r}, {shown})"


@dataclass(frozen=True, slots=True)
class WorkUnit:
    """One chunk-grid cell: `region` is (start, stop) per dimension.

    `select` is None (every row), a tuple of per-dimension index arrays relative to the
    region start (None for all of that dimension), or a boolean mask of the region's shape.
    """

    index: tuple[int, ...]
    region: tuple[tuple[int, int], ...]
    select: None | tuple[np.ndarray | None, ...] | np.ndarray
    #: How many chunk-grid cells the unit covers (more than 1 for a grouped unit; its `index`
    #: is then its first cell's), so that counts of units read stay counts of grid cells.
    #: 0 for the rest of a unit the reader split to hand out a small first batch
    #: (`scan.reader.head_and_rest`): its cell was counted with the head.
    merged: int = 1
    #: True for the head of such a split: its chunks' decoding is kept for the rest, which
    #: goes on from where the head stopped (`decode.chunks.read_head`).
    head: bool = False

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

    Nothing here is proportional to the number of work units except listing them: the units
    kept and the rows kept are counted with arithmetic over the chunk grid (`units_kept`,
    `rows`), and `units()` walks only the kept units, so a scan that stops early (a LIMIT)
    costs what it reads, however large the grid.
    """

    shape: tuple[int, ...]
    grid: tuple[int, ...]
    units_total: int
    kept: tuple[Kept, ...] | None
    predicate: Predicate | None
    dims: tuple[DimValues, ...]
    columns: dict[str, tuple[int, DimValues]]
    only: frozenset[tuple[int, ...]] | None = None

    def units(self) -> Iterator[WorkUnit]:
        if self.only is not None:
            yield from (u for u in replace(self, only=None).units() if u.index in self.only)
            return
        if self.predicate is not None and self.kept is None:
            if self._boxes is not None:
                yield from _box_units(self, self._boxes)
                return
            masked = self._masked
            yield from _masked_units(self) if masked is None else masked.units(self)
            return
        for index in itertools.product(*[c.tolist() for c in self._chunk_lists()]):
            region = _region(index, self.shape, self.grid)
            yield WorkUnit(index, region, _separable_select(self.kept, region))

    def grouped_units(self, cells: int | None = None, *, max_chunks: int | None = None) -> Iterator[WorkUnit]:
        """The rows of `units()`, with runs of adjacent small chunks merged into units of up to
        `cells` cells (`GROUP_CELLS` by default; see the module docstring) and at most
        `max_chunks` grid cells (a remote store's requests in flight: a `LIMIT` met by the first
        unit then still costs one round trip). Plans whose units are not a product of kept
        chunks per axis (a masked predicate, `only`) list `units()`."""
        if self.only is not None or (self.predicate is not None and self.kept is None):
            yield from self.units()
            return
        target = GROUP_CELLS if cells is None else cells
        pieces = _group_pieces(self.shape, self.grid, self._chunk_lists(), target, max_chunks)
        for i, combo in enumerate(itertools.product(*pieces)):
            if i == 0:  # the first group chunk by chunk: a LIMIT met early reads one chunk
                for index in itertools.product(*[range(a, b + 1) for a, b in combo]):
                    region = _region(index, self.shape, self.grid)
                    yield WorkUnit(index, region, _separable_select(self.kept, region))
                continue
            region = tuple(
                (a * g, min((b + 1) * g, n)) for (a, b), g, n in zip(combo, self.grid, self.shape, strict=True)
            )
            merged = 1
            for a, b in combo:
                merged *= b - a + 1
            yield WorkUnit(tuple(a for a, _ in combo), region, _separable_select(self.kept, region), merged)

    def units_kept(self) -> int:
        """How many units `units()` lists, without listing them (except under `only`)."""
        if self.only is not None:
            return sum(1 for _ in self.units())
        if self.predicate is not None and self.kept is None:
            if self._boxes is not None:
                return len(_box_index(self, self._boxes))
            masked = self._masked
            return sum(1 for _ in _masked_units(self)) if masked is None else masked.units_kept()
        return int(np.prod([len(c) for c in self._chunk_lists()], dtype=object))

    def rows(self) -> int:
        """Rows the plan produces, counted by arithmetic (see `plan/classes.py`)."""
        if self.only is not None:
            return sum(u.num_rows() for u in self.units())
        if self.predicate is None and self.kept is None:
            return int(np.prod(self.shape, dtype=object))
        if self.kept is not None:
            return int(
                np.prod([n if k is None else len(k) for n, k in zip(self.shape, self.kept, strict=True)], dtype=object)
            )
        if self._boxes is not None:
            return _box_rows(self, self._boxes)
        masked = self._masked
        if masked is None:
            return sum(u.num_rows() for u in _masked_units(self))
        return contract(masked.table, [a.sizes for a in masked.axes])

    def _chunk_lists(self) -> list[np.ndarray]:
        return [
            _chunks_kept(n, g, None if self.kept is None else self.kept[k])
            for k, (n, g) in enumerate(zip(self.shape, self.grid, strict=True))
        ]

    @functools.cached_property
    def _boxes(self) -> list[tuple[Kept, ...]] | None:
        """An OR of separable parts (the cells of a list of points, `(lat = a AND lon = b) OR
        ...`), beside any conditions on one axis each, as one box of kept indices per part;
        None for any other predicate."""
        assert self.predicate is not None
        multi = [c for c in conjuncts(self.predicate) if len({self.columns[n][0] for n in columns_of(c)}) > 1]
        if len(multi) != 1 or not isinstance(multi[0], Or):
            return None
        parts = _disjuncts(multi[0])
        if len(parts) > MAX_BOXES:
            return None
        single = [c for c in conjuncts(self.predicate) if c is not multi[0]]
        boxes = []
        for child in parts:
            part = conjoin([child, *single])
            assert part is not None
            box = _separable(part, len(self.dims), self.columns)
            if box is None:
                return None
            boxes.append(box)
        return boxes

    @functools.cached_property
    def _masked(self) -> _MaskedPlan | None:
        """The truth classes of a predicate that is not separable (None: too many classes)."""
        assert self.predicate is not None
        cols = self.columns
        if any(not _holdable(cols[name][1]) for name in columns_of(self.predicate)):
            return None  # classes would hold a class per position: each unit is tested on its own
        axes = axes_for(
            self.predicate,
            len(self.shape),
            lambda leaf: cols[leaf.column][0],
            lambda leaf: leaf_truth(leaf, np.asarray(cols[leaf.column][1].values), cols[leaf.column][1].nulls),
            self.shape,
        )
        table = truth_table(self.predicate, axes)
        if table is None:
            return None
        return _MaskedPlan.build(axes, table, self.shape, self.grid)


@dataclass(frozen=True)
class _MaskedPlan:
    """A masked predicate over the chunk grid: chunks grouped by the set of truth classes
    they hold (`chunk_class[k][i]`), and per combination of chunk classes whether a unit
    keeps none of its cells (0), some (1) or all (2) — `decision`."""

    axes: list[AxisClasses]
    table: np.ndarray
    chunk_class: list[np.ndarray]
    chunk_counts: list[np.ndarray]
    decision: np.ndarray

    @staticmethod
    def build(
        axes: list[AxisClasses], table: np.ndarray, shape: tuple[int, ...], grid: tuple[int, ...]
    ) -> _MaskedPlan | None:
        chunk_class, members = [], []
        for a, n, g in zip(axes, shape, grid, strict=True):
            ids, member = _chunk_classes(a, n, g)
            chunk_class.append(ids)
            members.append(member)
        if int(np.prod([len(m) for m in members], dtype=np.float64)) > MAX_COMBINATIONS:
            return None
        true_count = contract_each(table.astype(np.int64), members)
        present = contract_each(np.ones(table.shape, dtype=np.int64), members)
        decision = np.where(true_count == 0, 0, np.where(true_count == present, 2, 1)).astype(np.int8)
        counts = [
            np.bincount(ids, minlength=len(m)).astype(np.int64) for ids, m in zip(chunk_class, members, strict=True)
        ]
        return _MaskedPlan(axes, table, chunk_class, counts, decision)

    def units_kept(self) -> int:
        return contract((self.decision > 0), self.chunk_counts)

    def units(self, plan: ScanPlan) -> Iterator[WorkUnit]:
        memo: dict[tuple[int, ...], np.ndarray] = {}
        yield from self._walk(plan, (), (), memo)

    def _walk(
        self, plan: ScanPlan, index: tuple[int, ...], classes: tuple[int, ...], memo: dict[tuple[int, ...], np.ndarray]
    ) -> Iterator[WorkUnit]:
        k = len(index)
        if k == len(plan.shape):
            region = _region(index, plan.shape, plan.grid)
            if self.decision[classes] == 2:
                yield WorkUnit(index, region, None)
                return
            picks = np.ix_(*[a.inverse[lo:hi] for a, (lo, hi) in zip(self.axes, region, strict=True)])  # type: ignore[index]
            yield WorkUnit(index, region, np.ascontiguousarray(self.table[picks]))
            return
        chunks = memo.get(classes)
        if chunks is None:
            sub = self.decision[classes].reshape(self.decision.shape[k], -1)
            allowed = np.flatnonzero((sub > 0).any(axis=1))
            chunks = memo[classes] = np.flatnonzero(np.isin(self.chunk_class[k], allowed))
        ids = self.chunk_class[k]
        for i in chunks.tolist():
            yield from self._walk(plan, (*index, i), (*classes, int(ids[i])), memo)


def contract_each(table: np.ndarray, members: Sequence[np.ndarray]) -> np.ndarray:
    """`table` (over truth classes) summed into chunk classes: `members[k]` is (chunk
    classes, truth classes) of axis k, 1 where a chunk class holds a truth class."""
    acc = table
    for k, m in enumerate(members):
        acc = np.moveaxis(np.tensordot(acc, m.astype(np.int64).T, axes=([k], [0])), -1, k)
    return acc


def _chunk_classes(a: AxisClasses, n: int, g: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunks of one axis grouped by the set of truth classes they hold: each chunk's
    group, and a (groups, truth classes) membership matrix."""
    n_chunks = _n_chunks(n, g)
    n_classes = len(a.sizes)
    if n_classes == 1 or a.inverse is None:
        return np.zeros(n_chunks, dtype=np.int64), np.ones((1, n_classes), dtype=bool)
    starts = np.arange(0, n, g)
    if n_classes <= 62:  # a chunk's set of classes as one bit mask, for every chunk at once
        masks = np.bitwise_or.reduceat(np.left_shift(np.int64(1), a.inverse.astype(np.int64)), starts)
        keys, signature = np.unique(masks, return_inverse=True)
        sets = [tuple(c for c in range(n_classes) if (int(m) >> c) & 1) for m in keys.tolist()]
        groups = {key: gid for gid, key in enumerate(sets)}
        signature = signature.reshape(-1).astype(np.int64)
    else:
        signature = np.zeros(n_chunks, dtype=np.int64)
        groups = {}
        for i, lo in enumerate(starts.tolist()):
            key = tuple(sorted_unique(a.inverse[lo : lo + g]).tolist())
            signature[i] = groups.setdefault(key, len(groups))
    member = np.zeros((len(groups), n_classes), dtype=bool)
    for key, gid in groups.items():
        member[gid, list(key)] = True
    return signature, member


def _region(index: tuple[int, ...], shape: tuple[int, ...], grid: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple((i * g, min((i + 1) * g, n)) for i, g, n in zip(index, grid, shape, strict=True))


def _n_chunks(n: int, g: int) -> int:
    return -(-n // g) if n else 0


def _chunks_kept(n: int, g: int, kept: np.ndarray | Positions | None) -> np.ndarray:
    if kept is None:
        return np.arange(_n_chunks(n, g))
    if isinstance(kept, Positions):
        return kept.chunks(g)
    return sorted_unique(kept // g)


def _holdable(dv: DimValues) -> bool:
    """Whether a whole axis of `dv`'s values may be held to evaluate a predicate over it: any
    coordinate (held already), positions up to `MAX_POSITIONS_HELD` (plan/positions.py)."""
    return not dv.positional or len(dv.values) <= MAX_POSITIONS_HELD


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` of a 1-D integer array, without it: NumPy 2's `unique` imports
    `numpy.ma` on its first call (20 ms and 5 MB, inside a query's planning)."""
    ordered = np.sort(np.asarray(values).reshape(-1))
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


#: The cells a grouped unit aims at (`ScanPlan.grouped_units`): about 1 MB per float32 column,
#: enough to make the per-unit costs small beside decoding, small enough that the reader's
#: window of units in flight stays a few MB per column; chunks this large are never merged.
GROUP_CELLS = 1 << 18


def _runs(chunks: np.ndarray) -> list[tuple[int, int]]:
    """Sorted chunk indices as (first, last) runs of consecutive indices."""
    if len(chunks) == 0:
        return []
    breaks = np.flatnonzero(np.diff(chunks) != 1) + 1
    firsts = chunks[np.concatenate([[0], breaks])].tolist()
    lasts = chunks[np.concatenate([breaks, [len(chunks)]]) - 1].tolist()
    return list(zip(firsts, lasts, strict=True))


def _split(run: tuple[int, int], per: int) -> list[tuple[int, int]]:
    """A run of chunks cut into the fewest pieces of at most `per` chunks, of near-equal length."""
    first, last = run
    count = last - first + 1
    parts = -(-count // per)
    bounds = [first + (count * i) // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(parts)]


def _group_pieces(
    shape: tuple[int, ...], grid: tuple[int, ...], lists: list[np.ndarray], cells: int, max_chunks: int | None
) -> list[list[tuple[int, int]]]:
    """Per axis, the (first, last) chunk runs grouped units span. From the last axis back, an
    axis's kept chunks are merged while a unit stays within `cells` (and `max_chunks`); an
    axis is merged only while every faster axis is one run merged whole, so each unit is a
    box of kept chunks."""
    pieces = [[(c, c) for c in kept.tolist()] for kept in lists]
    extent = [min(g, n) for g, n in zip(grid, shape, strict=True)]
    merged = 1  # grid cells per unit so far
    for k in reversed(range(len(shape))):
        other = 1
        for j, e in enumerate(extent):
            if j != k:
                other *= e
        per = cells // max(1, other * grid[k])
        if max_chunks is not None:
            per = min(per, max_chunks // merged)
        if per <= 1:
            break
        runs = _runs(lists[k])
        pieces[k] = [p for run in runs for p in _split(run, per)]
        if len(pieces[k]) != 1:
            break
        (first, last), g = pieces[k][0], grid[k]
        extent[k] = min((last + 1) * g, shape[k]) - first * g
        merged *= last - first + 1
    return pieces


@dataclass(frozen=True)
class Reorder:
    """How a grouped unit's rows (row-major over its region, as selected) are put in the
    order the ungrouped units would give them: chunk by chunk in row-major order of the chunk
    grid, each chunk's rows row-major. `apply` reorders an array along its first axis; `order`
    is the same permutation as an index array (for values numpy cannot hold in one array).

    When every chunk along each axis holds the same number of rows (all but an array edge),
    the reorder is a reshape of the rows into (chunks, rows per chunk) per axis and one
    transposed copy, several times cheaper than gathering by index."""

    lengths: tuple[int, ...]
    bounds: tuple[tuple[int, ...], ...]
    blocks: tuple[int, ...] | None  # rows per chunk along each axis when regular, else None

    def apply(self, values: np.ndarray) -> np.ndarray:
        if self.blocks is None:
            return np.take(values, self.order, axis=0)
        trailing = values.shape[1:]
        ndim = len(self.lengths)
        split: list[int] = []
        for n, b in zip(self.lengths, self.blocks, strict=True):
            split += [n // b, b]
        axes = [2 * k for k in range(ndim)] + [2 * k + 1 for k in range(ndim)]
        axes += list(range(2 * ndim, 2 * ndim + len(trailing)))
        moved = values.reshape(*split, *trailing).transpose(axes)
        return np.ascontiguousarray(moved).reshape(-1, *trailing)

    @functools.cached_property
    def order(self) -> np.ndarray:
        ranks = np.arange(int(np.prod(self.lengths, dtype=np.int64)), dtype=np.int64).reshape(self.lengths)
        axes = [[slice(a, b) for a, b in itertools.pairwise(bs)] for bs in self.bounds]
        parts = [ranks[block].reshape(-1) for block in itertools.product(*axes)]
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return out.astype(np.int32) if len(out) < 2**31 else out


def _reorder(bounds: list[list[int]]) -> Reorder:
    lengths = tuple(b[-1] for b in bounds)
    sizes = [[b - a for a, b in itertools.pairwise(bs)] for bs in bounds]
    regular = all(len(set(s)) <= 1 for s in sizes)
    blocks = tuple(s[0] if s else 1 for s in sizes) if regular else None
    return Reorder(lengths, tuple(tuple(b) for b in bounds), blocks)


#: Recent reorders of whole regions, by (region shape, grid): a full scan has a handful of
#: distinct unit shapes (the inner units and those at the edges).
_REORDERS: dict[tuple[tuple[int, ...], tuple[int, ...]], Reorder] = {}
_REORDERS_KEPT = 8


def ungrouped_order(unit: WorkUnit, grid: tuple[int, ...]) -> Reorder | None:
    """How to put a unit's rows in the order of the ungrouped units (see `Reorder`); None
    when that is the order they have (a unit of one chunk).

    A grouped unit starts on a chunk boundary, so along each axis the rows it selects fall
    into the chunks it spans at known ranks. Only units planned by `grouped_units` (whole
    regions or per-axis index selections) are handled."""
    if unit.merged <= 1:  # one chunk, or a part of one
        return None
    shape = unit.shape
    if unit.select is None:
        key = (shape, grid)
        hit = _REORDERS.get(key)
        if hit is None:
            hit = _reorder([list(range(0, n, g)) + [n] for n, g in zip(shape, grid, strict=True)])
            if len(_REORDERS) >= _REORDERS_KEPT:
                _REORDERS.clear()
            _REORDERS[key] = hit
        return hit
    assert not isinstance(unit.select, np.ndarray), "grouped units select per axis"
    bounds = []
    for s, n, g in zip(unit.select, shape, grid, strict=True):
        edges = np.arange(0, n + g, g).clip(max=n)
        bounds.append(sorted(set(edges.tolist() if s is None else np.searchsorted(s, edges).tolist())))
    return _reorder(bounds)


class InUngroupedOrder(NamedTuple):
    """A column's (values, nulls) for a grouped unit, already in the order `ungrouped_order`
    gives (chunk by chunk): the reader hands it on without reordering it. A producer that
    can write its values in that order directly (a plain array's chunks decoded into their
    places; a coordinate column reordered once and kept) saves a copy of the column."""

    values: Any
    nulls: Any


def _separable_select(
    kept: tuple[Kept, ...] | None, region: tuple[tuple[int, int], ...]
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


def _separable(predicate: Predicate, ndim: int, columns: dict[str, tuple[int, DimValues]]) -> tuple[Kept, ...] | None:
    """Kept indices per dimension when `predicate` is an AND of parts that each read one axis."""
    parts: dict[int, list[Predicate]] = {}
    for c in conjuncts(predicate):
        axes = {columns[name][0] for name in columns_of(c)}
        if len(axes) != 1:
            return None
        parts.setdefault(axes.pop(), []).append(c)
    kept: list[Kept] = [None] * ndim
    for k, ps in parts.items():
        p = conjoin(ps)
        assert p is not None  # every axis listed has at least one part
        on_axis = _kept_along(p, [columns[name][1] for name in columns_of(p)])
        if on_axis is None:
            return None
        kept[k] = on_axis
    return tuple(kept)


def _kept_along(p: Predicate, named: list[DimValues]) -> np.ndarray | Positions | None:
    """The positions of one axis where `p` (naming the columns `named` of that axis) holds:
    by arithmetic over a positional dimension alone (`positions_where`, as runs however long
    the axis), else evaluated over the columns' values; None when that would hold a positional
    axis too long for it (the plan then tests each unit on its own)."""
    if len(named) == 1 and named[0].positional:
        runs = positions_where(p, len(named[0].values), named[0].name)
        if runs is not None:
            return runs.compact()
    if not all(_holdable(dv) for dv in named):
        return None
    by_name = {dv.name: dv for dv in named}
    t, _ = evaluate(
        p, lambda leaf: leaf_truth(leaf, np.asarray(by_name[leaf.column].values), by_name[leaf.column].nulls)
    )
    return np.flatnonzero(t)


#: The most OR-ed parts planned box by box (a join's keys, sampled points: `MAX_KEYS` 1,000).
MAX_BOXES = 4096


def _disjuncts(p: Predicate) -> list[Predicate]:
    """The operands of a top-level OR, flattened (DuckDB nests them two by two)."""
    if isinstance(p, Or):
        return [q for c in p.children for q in _disjuncts(c)]
    return [p]


def _box_index(plan: ScanPlan, boxes: list[tuple[Kept, ...]]) -> dict[tuple[int, ...], list[int]]:
    """The units any box touches, with the boxes touching each (only the boxes' own chunks
    are visited: a point list costs its points, not the grid)."""
    touched: dict[tuple[int, ...], list[int]] = {}
    for b, box in enumerate(boxes):
        lists = [_chunks_kept(n, g, k).tolist() for n, g, k in zip(plan.shape, plan.grid, box, strict=True)]
        for index in itertools.product(*lists):
            touched.setdefault(index, []).append(b)
    return touched


def _box_units(plan: ScanPlan, boxes: list[tuple[Kept, ...]]) -> Iterator[WorkUnit]:
    """The units of a union of boxes, in row-major order, each masked to its boxes' cells."""
    touched = _box_index(plan, boxes)
    for index in sorted(touched):
        region = _region(index, plan.shape, plan.grid)
        if len(touched[index]) == 1:  # one box: per-axis indices, cheaper to expand than a mask
            yield WorkUnit(index, region, _separable_select(boxes[touched[index][0]], region))
            continue
        mask = _box_mask(boxes, touched[index], region)
        if mask.any():
            yield WorkUnit(index, region, None if mask.all() else mask)


def _box_mask(boxes: list[tuple[Kept, ...]], which: list[int], region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The cells of `region` that any of the boxes numbered `which` holds."""
    mask = np.zeros(tuple(b - a for a, b in region), dtype=bool)
    for b in which:
        sel = _separable_select(boxes[b], region)
        if sel is None:
            mask[...] = True
            break
        mask[np.ix_(*[np.arange(n) if s is None else s for s, n in zip(sel, mask.shape, strict=True)])] = True
    return mask


def _box_rows(plan: ScanPlan, boxes: list[tuple[Kept, ...]]) -> int:
    """The cells of a union of boxes, by arithmetic: every box's own count, less what the
    boxes sharing a unit count more than once there. Only shared units are visited (a
    corner where `x < 10 OR y < 10` meet), not the 10^5 units along each box, which
    `sum(u.num_rows() for u in units())` visited one by one (15 s on 10^10 units)."""

    def inside(box: tuple[Kept, ...], region: tuple[tuple[int, int], ...]) -> int:
        n = 1
        for k, (a, b) in zip(box, region, strict=True):
            n *= (b - a) if k is None else int(np.searchsorted(k, b) - np.searchsorted(k, a))
        return n

    whole = tuple((0, n) for n in plan.shape)
    total = sum(inside(box, whole) for box in boxes)
    for index, which in _box_index(plan, boxes).items():
        if len(which) > 1:
            region = _region(index, plan.shape, plan.grid)
            total -= sum(inside(boxes[b], region) for b in which) - int(_box_mask(boxes, which, region).sum())
    return total


def _masked_units(plan: ScanPlan) -> Iterator[WorkUnit]:
    """Every unit tested on its own: the path for predicates with too many truth classes."""
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


def plan_positions(
    shape: tuple[int, ...], grid: tuple[int, ...], dims: Sequence[DimValues], kept: Sequence[Kept]
) -> ScanPlan:
    """The plan of the cells whose position along each axis `k` is in `kept[k]` (sorted
    positions; None keeps the whole axis): the plan of a separable predicate, for a caller
    that has already worked out which positions each axis keeps."""
    total = int(np.prod([_n_chunks(n, g) for n, g in zip(shape, grid, strict=True)], dtype=np.int64))
    chosen = (
        None
        if all(k is None for k in kept)
        else tuple(k if k is None or isinstance(k, Positions) else np.asarray(k) for k in kept)
    )
    return ScanPlan(shape, grid, total, chosen, None, tuple(dims), {d.name: (k, d) for k, d in enumerate(dims)})
