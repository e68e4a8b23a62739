"""Aggregates computed inside the scan, over groups that are products of groups per axis.

Why: for `SELECT latitude, avg(t2m) ... GROUP BY latitude` an engine receives one row per
cell (tens of millions of rows) and hashes each one into its group; on the ERA5-like store
DuckDB's hash aggregate alone costs more than decoding the chunks. When every group key is a
function of one axis' coordinates (latitude; `month(time)`), a group of cells is a product of
position sets, one per axis, so a unit's block of cells reduces with numpy along its axes (a
day's 24 hours summed is one `np.add.reduce` over the block) and the engine receives one row
per group.

`AxisGroups` says, per axis, which positions are kept (the query's WHERE on that axis) and
the group of each kept position; a `Reduction` says what to compute per group: the count,
sum, min or max of a data column, whose values may be multiplied by a float64 weight along
one axis (`sum(t2m * cos(radians(latitude)))`, an area weight). `reduce_groups` reads the
planned units on the reader's threads (`scan.reader.map_units`, remote fetches started
ahead), reduces each unit's block on the thread that decoded it, and folds the per-unit
results in plan order on the caller's thread, so a result never depends on thread timing.

Semantics are SQL's, as DuckDB applies them: NULLs are skipped and a group without a value
has a count of 0 (the engine makes its sum, min and max NULL); NaN is a value: it makes sum
and max NaN, and min skips it unless every value is NaN (DuckDB orders NaN above every
number). Sums of floats are taken in float64, of integers in int64 (the engine refuses
integer sums that could overflow it). Nothing here imports an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql import counters
from zarrsql.expand.columns import Column
from zarrsql.plan.units import plan_positions, sorted_unique
from zarrsql.scan.contract import TableScan

#: What a reduction computes per group.
KINDS = ("count", "sum", "min", "max")


@dataclass(frozen=True)
class AxisGroups:
    """One axis: `groups[p]` is the group of position `p`, -1 where the position is not kept
    (None: every position kept, all in one group); `size` is how many groups there are."""

    groups: np.ndarray | None
    size: int

    @staticmethod
    def whole() -> AxisGroups:
        return AxisGroups(None, 1)

    @property
    def kept(self) -> np.ndarray | None:
        """The kept positions, sorted (None: all)."""
        return None if self.groups is None else np.flatnonzero(self.groups >= 0)


@dataclass(frozen=True)
class Weight:
    """Float64 factors along one axis (one per position; `nulls` where the factor is NULL)."""

    axis: int
    values: np.ndarray
    nulls: np.ndarray | None


@dataclass(frozen=True)
class Reduction:
    """`kind` (see `KINDS`) of data column `column`, each value times `weight` when given."""

    kind: str
    column: Column
    weight: Weight | None = None


@dataclass(frozen=True)
class Reduced:
    """One reduction over the grid of groups (an axis' length there: its `size`): `values`
    (None for a count; meaningless where `counts` is 0) and the non-NULL values per group."""

    values: np.ndarray | None
    counts: np.ndarray


def reduce_groups(
    table: TableScan,
    axes: Sequence[AxisGroups],
    reductions: Sequence[Reduction],
    on_error: Callable[[Any], None] | None = None,
) -> list[Reduced]:
    """Every reduction over the groups of `axes` (see the module docstring)."""
    from zarrsql.scan.reader import map_units  # pyarrow's reader, loaded with the first scan

    if len(axes) != len(table.table.shape):
        raise ValueError(f"one AxisGroups per axis: {len(table.table.shape)} axes, {len(axes)} given")
    for r in reductions:
        if r.kind not in KINDS or r.column.data is None:
            raise ValueError(f"a reduction is one of {KINDS} of a data column, not {r!r}")
    shape = tuple(a.size for a in axes)
    columns = list(dict.fromkeys(r.column for r in reductions))
    folds = [_Fold(r, shape, table) for r in reductions]
    if columns:
        plan = plan_positions(table.table.shape, table.table.chunk_grid, table.dims, [a.kept for a in axes])
        work = _UnitWork(table, axes, reductions, columns)
        for partials in map_units(table, plan, columns, work, on_error):
            targets, parts = partials
            for fold, part in zip(folds, parts, strict=True):
                fold.add(targets, part)
    return [f.result() for f in folds]


class _UnitWork:
    """What the reader's threads run per unit: its columns read in the block's row-major
    order, each reduction's partial result over the groups the block touches."""

    def __init__(
        self, table: TableScan, axes: Sequence[AxisGroups], reductions: Sequence[Reduction], columns: list[Column]
    ) -> None:
        self.table = table
        self.axes = axes
        self.reductions = reductions
        self.columns = columns
        # nothing depends on where a cell lies: any order of a unit's values will do
        self.order_free = all(a.size == 1 for a in axes) and all(r.weight is None for r in reductions)

    def __call__(self, unit: Any) -> tuple[list[np.ndarray], list[tuple[np.ndarray | None, np.ndarray]]]:
        positions, block = unit_positions(unit)
        steps = [_Step.of(axis, pos) for axis, pos in zip(self.axes, positions, strict=True)]
        read = {col.name: self._read(unit, col, block) for col in self.columns}
        with np.errstate(all="ignore"):  # inf - inf is NaN, as in SQL: no warning
            parts = [_partial(r, *read[r.column.name], steps, positions) for r in self.reductions]
        cells = int(np.prod(block, dtype=np.int64))
        counters.count(work_units_read=getattr(unit, "merged", 1), rows=cells, rows_aggregated=cells)
        return [s.targets for s in steps], parts

    def _read(self, unit: Any, col: Column, block: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
        return read_block(self.table, unit, col, block, order_free=self.order_free)


def read_block(
    table: TableScan, unit: Any, col: Column, block: tuple[int, ...], *, order_free: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """A data column's values and nulls over a unit's block, shaped like it: in row-major
    order of the block, or in any order when `order_free` (then shaped `(cells, 1, ...)`)."""
    if getattr(unit, "merged", 1) > 1 and not order_free:
        # a grouped unit's rows in row-major order of its region (not the reader's chunk order)
        values, nulls = table.codecs[col.data].read(table.store, unit)  # type: ignore[index]
    else:
        _, parts = table.unit_columns(unit, [col])
        values, nulls = parts[0]
    values = np.asarray(values)
    if order_free:  # a flat block is as good as any
        block = (values.shape[0],) + (1,) * (len(block) - 1)
    return values.reshape(block), None if nulls is None else np.asarray(nulls).reshape(block)


def unit_positions(unit: Any) -> tuple[list[np.ndarray], tuple[int, ...]]:
    """The positions the unit's block covers along each axis, and the block's shape."""
    select = unit.select
    if isinstance(select, np.ndarray):  # plans from kept positions select per axis
        raise ValueError("a unit masked cell by cell cannot be reduced per axis")
    out = []
    for k, (a, b) in enumerate(unit.region):
        idx = None if select is None else select[k]
        out.append(np.arange(a, b, dtype=np.int64) if idx is None else a + np.asarray(idx, dtype=np.int64))
    return out, tuple(len(p) for p in out)


@dataclass(frozen=True)
class _Step:
    """How a block is reduced along one axis: `whole` (into one group: the axis is not
    grouped), `starts` of runs of positions in one group (None: every position is its own
    group's), and `targets`, the group of each result along the axis."""

    whole: bool
    starts: np.ndarray | None
    targets: np.ndarray

    @staticmethod
    def of(axis: AxisGroups, positions: np.ndarray) -> _Step:
        if axis.size == 1 or axis.groups is None:
            return _Step(True, None, np.zeros(1, dtype=np.int64))
        groups = axis.groups[positions]
        if len(groups) < 2:
            return _Step(False, None, groups)
        change = np.flatnonzero(groups[1:] != groups[:-1]) + 1
        if len(change) == len(groups) - 1:
            return _Step(False, None, groups)
        starts = np.concatenate([np.zeros(1, dtype=np.int64), change])
        return _Step(False, starts, groups[starts])


def _fold_axes(x: np.ndarray, ufunc: np.ufunc, steps: Sequence[_Step], dtype: Any = None) -> np.ndarray:
    """`x` reduced with `ufunc` along every axis as `steps` say (keeping each axis)."""
    for k, step in enumerate(steps):
        if step.whole:
            x = ufunc.reduce(x, axis=k, keepdims=True, dtype=dtype)
        elif step.starts is not None:
            x = ufunc.reduceat(x, step.starts, axis=k, dtype=dtype)
    return x


def _counts(nulls: np.ndarray | None, steps: Sequence[_Step], block: tuple[int, ...]) -> np.ndarray:
    """Non-NULL cells per group of the block: arithmetic when none is NULL."""
    if nulls is not None:
        return _fold_axes(~nulls, np.add, steps, dtype=np.int64)
    lengths = []
    for step, n in zip(steps, block, strict=True):
        if step.whole:
            lengths.append(np.array([n], dtype=np.int64))
        elif step.starts is None:
            lengths.append(np.ones(n, dtype=np.int64))
        else:
            lengths.append(np.diff(np.append(step.starts, n)))
    out = lengths[0]
    for more in lengths[1:]:
        out = np.multiply.outer(out, more)
    return out


def _partial(
    r: Reduction,
    values: np.ndarray,
    nulls: np.ndarray | None,
    steps: Sequence[_Step],
    positions: Sequence[np.ndarray],
) -> tuple[np.ndarray | None, np.ndarray]:
    """One reduction over one block: (values per group touched, non-NULL counts)."""
    if r.weight is not None:
        w = r.weight
        view = [1] * values.ndim
        view[w.axis] = -1
        factor = w.values[positions[w.axis]].reshape(view)
        values = values.astype(np.float64) * factor
        if w.nulls is not None:
            wn = w.nulls[positions[w.axis]].reshape(view)
            if wn.any():
                nulls = np.broadcast_to(wn, values.shape) if nulls is None else (nulls | wn)
    counts = _counts(nulls, steps, values.shape)
    if r.kind == "count":
        return None, counts
    floating = values.dtype.kind == "f"
    if r.kind == "sum":
        dtype = np.float64 if floating else np.int64
        filled = values if nulls is None else np.where(nulls, values.dtype.type(0), values)
        return _fold_axes(filled, np.add, steps, dtype=dtype), counts
    ufunc, fill = _extreme(r.kind, values.dtype)
    filled = values if nulls is None else np.where(nulls, fill, values)
    return _fold_axes(filled, ufunc, steps), counts


def _extreme(kind: str, dtype: np.dtype) -> tuple[np.ufunc, Any]:
    """The ufunc of min or max with SQL's NaN order, and the value a NULL is replaced by:
    for floats min is `fmin` (NaN only when both are) over NULLs as NaN, max is `maximum`
    (NaN wins) over NULLs as -inf; for integers, the type's far end."""
    if dtype.kind == "f":
        return (np.fmin, dtype.type(np.nan)) if kind == "min" else (np.maximum, dtype.type(-np.inf))
    info = np.iinfo(dtype)
    return (np.minimum, info.max) if kind == "min" else (np.maximum, info.min)


class _Fold:
    """One reduction's running result over the whole grid of groups (on the caller's thread)."""

    def __init__(self, r: Reduction, shape: tuple[int, ...], table: TableScan) -> None:
        self.kind = r.kind
        self.counts = np.zeros(shape, dtype=np.int64)
        self.values: np.ndarray | None = None
        if r.kind == "count":
            return
        dtype = _value_dtype(r, table)
        if r.kind == "sum":
            self.values = np.zeros(shape, dtype=np.float64 if dtype.kind == "f" else np.int64)
            self.ufunc: np.ufunc = np.add
        else:
            self.ufunc, fill = _extreme(r.kind, dtype)
            self.values = np.full(shape, fill, dtype=dtype)

    def add(self, targets: Sequence[np.ndarray], part: tuple[np.ndarray | None, np.ndarray]) -> None:
        with np.errstate(all="ignore"):
            self._add(targets, part)

    def _add(self, targets: Sequence[np.ndarray], part: tuple[np.ndarray | None, np.ndarray]) -> None:
        values, counts = part
        index = np.ix_(*targets)
        distinct = all(len(t) < 2 or len(sorted_unique(t)) == len(t) for t in targets)
        if distinct:
            self.counts[index] += counts
            if self.values is not None:
                self.values[index] = self.ufunc(self.values[index], values)
            return
        np.add.at(self.counts, index, counts)
        if self.values is not None:
            self.ufunc.at(self.values, index, values)

    def result(self) -> Reduced:
        return Reduced(self.values, self.counts)


def _value_dtype(r: Reduction, table: TableScan) -> np.dtype:
    """The dtype a reduction's values have once read (float64 when weighted)."""
    if r.weight is not None:
        return np.dtype(np.float64)
    logical = r.column.logical
    if logical in ("timestamp_us", "duration_us"):
        return np.dtype(np.int64)
    if not isinstance(logical, str) or logical not in _NUMERIC:
        raise ValueError(f"column {r.column.name!r} of type {logical!r} is not reduced inside the scan")
    return np.dtype(logical)


_NUMERIC = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"})
