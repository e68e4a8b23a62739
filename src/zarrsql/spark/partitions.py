"""Work units grouped into Spark input partitions, and a partition's units rebuilt on an executor.

A partition names its work units by ordinal: for a dense table the unit's position in the
row-major order of the whole chunk grid, for a sparse table its block number. Consecutive
ordinals are stored as (start, stop) runs, so a partition of a full scan is one pair of
integers whatever its size, and the driver never holds a `WorkUnit` per chunk: the kept
ordinals come from arithmetic over the plan's kept indices per dimension (a separable
predicate, or none), and only a predicate that is not separable lists the plan's units.

On the executor the table is planned again from the same request and predicate (cheap:
coordinates and metadata only) and each ordinal becomes its unit: its region, and the rows
the plan keeps in it, computed the way `plan.units` computes them. An ordinal means that unit
only on the version of the table it was planned on, so a partition also carries `planned_on`
(a digest of that version) and the executor refuses a table that is not the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.decode.logical import Labels
from zarrsql.expand.columns import Column
from zarrsql.plan.positions import Positions
from zarrsql.plan.predicate import Leaf, evaluate, leaf_truth
from zarrsql.plan.units import ScanPlan, WorkUnit, sorted_unique
from zarrsql.scan.contract import Plan, TableScan
from zarrsql.scan.sparse import ENTRIES_PER_UNIT, SparsePlan
from zarrsql.scan.validity import baseline

Runs = tuple[tuple[int, int], ...]
_SCALAR_BYTES = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "float32": 4}


def column_bytes(col: Column) -> int:
    """Decoded bytes per row of a column, roughly (8 for wide scalars, 16 for the rest)."""
    logical = col.logical
    if isinstance(logical, str):
        return _SCALAR_BYTES.get(logical, 8 if logical != "string" else 16)
    return 16


def unit_bytes(scan: TableScan, columns: Sequence[Column]) -> int:
    """Decoded bytes of one full work unit of `columns`: the size a partition target divides."""
    row = max(1, sum(column_bytes(c) for c in columns))
    if not scan.rows_are_cells:  # a sparse table: units of about ENTRIES_PER_UNIT entries
        return ENTRIES_PER_UNIT * row
    return int(np.prod(scan.table.chunk_grid, dtype=np.int64)) * row


def planned_on(scan: TableScan) -> str:
    """A digest of the version of the table a plan's ordinals refer to: the store (an Icechunk
    store's `cache_key` names its snapshot), the tokens of the table's metadata documents, of
    its coordinates' chunks on a local store, its shape, chunk grid and columns.

    The same on the driver and on every executor while the table is unchanged, whatever else
    their processes read before: `TableScan.fingerprint()` is not, since it holds the tokens
    of every coordinate chunk the process has decoded, and a remote table decodes its
    coordinates at their first read. So a remote table is compared by its documents (each a
    request to check) and not by its coordinates' chunks, which a local table decodes when it
    is opened (a `stat` each). Call it after `scan.plan(...)`."""
    base = baseline(scan)
    version = {
        "store": str(getattr(scan.store, "cache_key", scan.store.url)),
        "documents": sorted((k, t or "") for k, t in base.documents),
        "coordinates": [] if base.remote else sorted((k, t or "") for k, t in base.coordinates),
        "shape": list(scan.table.shape),
        "grid": list(scan.table.chunk_grid),
        # a string coordinate's labels are its values (the tokens above), not its type
        "columns": [(c.name, "labels" if isinstance(c.logical, Labels) else repr(c.logical)) for c in scan.columns],
    }
    return hashlib.sha1(json.dumps(version, default=str).encode()).hexdigest()


def _n_chunks(n: int, g: int) -> int:
    return -(-n // g) if n else 0


def grid_counts(plan: ScanPlan) -> tuple[int, ...]:
    return tuple(_n_chunks(n, g) for n, g in zip(plan.shape, plan.grid, strict=True))


def _ordinal(plan: Plan, unit: Any, counts: tuple[int, ...] | None) -> int:
    return int(unit.index) if counts is None else int(np.ravel_multi_index(unit.index, counts))


def _listed_counts(plan: Plan) -> tuple[int, ...] | None:
    """The chunk-grid counts a listed plan's unit indices ravel over (None: sparse blocks)."""
    if isinstance(plan, SparsePlan):
        return None
    base = getattr(plan, "base", None)  # a plan masked by cells (auxiliary coordinates)
    return grid_counts(base) if isinstance(base, ScanPlan) else None


def kept_ordinals(plan: Plan) -> Positions:
    """The ordinals of the units a plan keeps, ascending, as runs (`plan.positions.Positions`):
    a full scan is one run, and a separable predicate's runs come from its kept chunks per
    dimension by arithmetic, never one ordinal (or one position) at a time, so a positional
    axis of 10^9 cells plans as quickly as one of ten. Only plans whose units must be listed
    (a predicate that is not separable, sparse blocks) list them."""
    if not isinstance(plan, ScanPlan):  # listed: sparse blocks, or units masked by their cells
        counts = _listed_counts(plan)
        return Positions.from_sorted(np.fromiter((_ordinal(plan, u, counts) for u in plan.units()), dtype=np.int64))
    counts = grid_counts(plan)
    if plan.predicate is None:
        return Positions.whole(int(np.prod(counts, dtype=np.int64)))
    if plan.kept is not None:
        axes = [_chunk_runs(c, g, k) for c, g, k in zip(counts, plan.grid, plan.kept, strict=True)]
        return _raveled(axes, counts)
    ordinals = np.fromiter((np.ravel_multi_index(u.index, counts) for u in plan.units()), dtype=np.int64)
    return Positions.from_sorted(ordinals)


def _chunk_runs(count: int, g: int, kept: Any) -> Positions:
    """The chunks of one dimension holding a kept index, as runs: all `count` of them (None),
    those of a positional dimension's kept runs by arithmetic, or those of kept indices."""
    if kept is None:
        return Positions.whole(count)
    if isinstance(kept, Positions):
        return kept.chunk_runs(g)
    return Positions.from_sorted(sorted_unique(np.asarray(kept) // g))


def _raveled(axes: list[Positions], counts: tuple[int, ...]) -> Positions:
    """The row-major ordinals of the grid cells whose index along each dimension is in that
    dimension's chunk runs, as runs. A dimension kept whole scales the runs of the ones before
    it; any other repeats its runs once per ordinal kept before it (that many runs there are)."""
    starts, stops = np.array([0], dtype=np.int64), np.array([1], dtype=np.int64)
    for runs, count in zip(axes, counts, strict=True):
        if not len(runs):
            return Positions.whole(0)
        first, last = runs.bounds
        if len(first) == 1 and first[0] == 0 and last[0] == count:
            starts, stops = starts * count, stops * count
            continue
        before = Positions.from_runs(starts, stops)[:]  # each starts runs of its own: fewer than them
        starts = (before[:, None] * count + first[None, :]).reshape(-1)
        stops = (before[:, None] * count + last[None, :]).reshape(-1)
    return Positions.from_runs(starts, stops)


def group(ordinals: np.ndarray | Positions, per_partition: int) -> list[Runs]:
    """Consecutive groups of `per_partition` kept units, each as its runs: one pass over the
    runs and the partitions (a million units in a few thousand runs is quick)."""
    kept = ordinals if isinstance(ordinals, Positions) else Positions.from_sorted(ordinals)
    step = max(1, per_partition)
    out: list[Runs] = []
    current: list[tuple[int, int]] = []
    room = step
    for start, stop in kept.runs:
        while start < stop:
            take = min(room, stop - start)
            current.append((start, start + take))
            start += take
            room -= take
            if room == 0:
                out.append(tuple(current))
                current, room = [], step
    if current:
        out.append(tuple(current))
    return out


@dataclass(frozen=True)
class PartitionPlan:
    """The part of a scan plan one partition reads: what `scan.reader` needs of a plan."""

    plan: Any
    runs: Runs

    @property
    def units_total(self) -> int:
        return int(self.plan.units_total)

    def units(self) -> Iterator[Any]:
        if not isinstance(self.plan, ScanPlan):
            wanted = {i for a, b in self.runs for i in range(a, b)}
            counts = _listed_counts(self.plan)
            yield from (u for u in self.plan.units() if _ordinal(self.plan, u, counts) in wanted)
            return
        counts = grid_counts(self.plan)
        for a, b in self.runs:
            for ordinal in range(a, b):
                unit = unit_at(self.plan, tuple(int(i) for i in np.unravel_index(ordinal, counts)))
                if unit is not None:
                    yield unit


def unit_at(plan: ScanPlan, index: tuple[int, ...]) -> WorkUnit | None:
    """The unit of the chunk-grid cell `index` with the rows `plan` keeps in it (None: none)."""
    region = tuple((i * g, min((i + 1) * g, n)) for i, g, n in zip(index, plan.grid, plan.shape, strict=True))
    if plan.predicate is None:
        return WorkUnit(index, region, None)
    if plan.kept is not None:
        picks: list[np.ndarray | None] = []
        for kept, (a, b) in zip(plan.kept, region, strict=True):
            if kept is None:
                picks.append(None)
                continue
            lo, hi = np.searchsorted(kept, [a, b])
            if hi == lo:
                return None
            picks.append(None if hi - lo == b - a else kept[lo:hi] - a)
        return WorkUnit(index, region, None if all(p is None for p in picks) else tuple(picks))
    mask = _mask(plan, region)
    if not mask.any():
        return None
    return WorkUnit(index, region, None if mask.all() else np.ascontiguousarray(mask))


def _mask(plan: ScanPlan, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Where the plan's predicate holds over one region's cells (three-valued, exact)."""
    ndim = len(region)

    def leaf(p: Leaf) -> tuple[np.ndarray, np.ndarray]:
        k, d = plan.columns[p.column]
        a, b = region[k]
        t, n = leaf_truth(p, d.values[a:b], None if d.nulls is None else d.nulls[a:b])
        shape = [1] * ndim
        shape[k] = b - a
        return t.reshape(shape), n.reshape(shape)

    assert plan.predicate is not None
    t, _ = evaluate(plan.predicate, leaf)
    return np.broadcast_to(t, tuple(b - a for a, b in region))
