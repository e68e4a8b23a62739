"""The first cells of a table in the order of one data column, found while its chunks decode.

Why: for `SELECT * ... ORDER BY t2m DESC LIMIT 10` an engine's Top-N operator takes every row
of every column. A Parquet reader skips row groups by their min/max statistics, and reads the
other columns of the few rows kept afterwards; Zarr keeps no statistics, so zarrsql decoded
all of `t2m`, `u10` and `v10` for ten rows. Here one column is read, each unit reduced with
numpy on the thread that decoded it, and the cells found name the few chunks where the
statement then reads every column (`engine/topn_values.py`).

The answer is a set of cells `S` among which the first `rows` of the order lie, as SQL
allows them: every cell that sorts strictly before the `rows`-th value, and enough of the
cells equal to it (all of them when `all_ties`: further ORDER BY keys decide among them).
Any set of cells containing `S` then has the same first rows, ties aside, so the engine may
sort a superset of `S` (the product of its positions per axis) with the statement's own
ORDER BY and LIMIT.

The order is SQL's as DuckDB applies it: NaN above every number and all NaNs equal; NULL
(a masked cell) first or last as the statement asks; -0.0 equal to 0.0 (numpy agrees). Cells
fall into three buckets, taken in the statement's order (ascending: numbers, NaN, NULL with
NULLs last), and the numbers bucket keeps only its best `rows` (and their ties). A running
threshold, the best `rows`-th number found so far, lets a unit skip every cell that cannot
make it: after the first few units, a unit costs one comparison per cell. Nothing here
imports an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zarrsql import counters
from zarrsql.expand.columns import Column
from zarrsql.plan.units import plan_positions
from zarrsql.scan.aggregate import read_block, unit_positions
from zarrsql.scan.contract import TableScan

#: Logical types whose values numpy orders as SQL does.
ORDERABLE = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"})


@dataclass(frozen=True)
class Wanted:
    """The first `rows` cells by data column `column` (see the module docstring)."""

    column: Column
    descending: bool
    nulls_first: bool
    rows: int
    all_ties: bool


class _Threshold:
    """The `rows`-th best number found so far, set on the caller's thread and read by the
    decoding threads: a thread that reads an older value only keeps more cells than it needs."""

    value: Any = None


@dataclass
class _Bucket:
    """Cells of one kind (NULL, NaN): how many there are, and the first `limit` found, as flat
    cell indexes in plan order."""

    limit: int
    count: int = 0
    cells: list[np.ndarray] = field(default_factory=list)
    held: int = 0

    def add(self, count: int, cells: np.ndarray) -> None:
        self.count += count
        if self.held < self.limit and len(cells):
            cells = cells[: self.limit - self.held]
            self.cells.append(cells)
            self.held += len(cells)

    def all_cells(self) -> np.ndarray:
        return np.concatenate(self.cells) if self.cells else np.zeros(0, dtype=np.int64)


def column_keys(table: TableScan, column: Column, where: Where | None = None) -> list[str] | None:
    """Every store key that reading data column `column` (at the cells `where` keeps) fetches,
    once each; None when the column cannot say ahead (a convention's encoded column)."""
    keys: list[str] = []
    for unit in _whole(table, where).units():
        more = table.unit_keys(unit, [column])
        if more is None:
            return None
        keys.extend(more)
    return list(dict.fromkeys(keys))


def _whole(table: TableScan, where: Where | None = None) -> Any:
    shape = table.table.shape
    kept = where.kept() if where is not None else [None] * len(shape)
    return plan_positions(shape, table.table.chunk_grid, table.dims, kept)


@dataclass(frozen=True)
class Where:
    """The cells a statement's WHERE keeps, as truth classes (`plan/classes.py`): `classes[k]`
    is the class of each position along axis `k` (None: the axis has one class), and
    `truth[c0, c1, ...]` whether the WHERE is true on a cell of those classes (NULL and false
    both drop it). The engine that parsed the WHERE works both out; here they only select."""

    classes: tuple[np.ndarray | None, ...]
    truth: np.ndarray

    def kept(self) -> list[np.ndarray | None]:
        """Per axis, the positions with a cell the WHERE keeps (None: every position), which
        the plan is cut to: a unit with none of them is never read."""
        out: list[np.ndarray | None] = []
        for k, classes in enumerate(self.classes):
            others = tuple(j for j in range(self.truth.ndim) if j != k)
            live = np.asarray(self.truth.any(axis=others) if others else self.truth, dtype=bool)
            if classes is None:
                out.append(None if live.all() else np.zeros(0, dtype=np.int64))
            else:
                out.append(None if live[classes].all() else np.flatnonzero(live[classes]))
        return out

    def mask(self, positions: list[np.ndarray]) -> np.ndarray:
        """Whether the WHERE keeps each cell of a block spanning `positions` per axis."""
        index = tuple(
            np.zeros(len(p), dtype=np.intp) if c is None else c[p] for c, p in zip(self.classes, positions, strict=True)
        )
        return self.truth[np.ix_(*index)]


def first_cells(
    table: TableScan,
    wanted: Wanted,
    max_cells: int,
    on_error: Callable[[Any], None] | None = None,
    where: Where | None = None,
) -> np.ndarray | None:
    """The flat (row-major) indexes of a set of cells holding the first `wanted.rows` rows of the
    order among the cells `where` keeps (all: None), as the module docstring says; None when
    that set would exceed `max_cells` (ties)."""
    from zarrsql.scan.reader import map_units  # pyarrow's reader, loaded with the first scan

    column = wanted.column
    if column.data is None or column.logical not in ORDERABLE:
        raise ValueError(f"column {column.name!r} is not a numeric data column")
    plan = _whole(table, where)
    limit = max_cells + 1 if wanted.all_ties else wanted.rows
    nulls, nans = _Bucket(limit), _Bucket(limit)
    best = _Best(wanted, limit)
    threshold = _Threshold()
    work = _UnitWork(table, wanted, limit, threshold, where)
    for part in map_units(table, plan, [column], work, on_error):
        nulls.add(*part.nulls)
        nans.add(*part.nans)
        best.add(*part.numbers)
        if best.edge is not None:
            threshold.value = best.edge
    numbers = best.result()
    order = [numbers, nans] if not wanted.descending else [nans, numbers]
    order = [nulls, *order] if wanted.nulls_first else [*order, nulls]
    return _taken(order, wanted, max_cells)


def _taken(order: list[Any], wanted: Wanted, max_cells: int) -> np.ndarray | None:
    """The cells of the buckets in order until `wanted.rows` are taken (see the module docstring)."""
    need, taken = wanted.rows, []
    for bucket in order:
        if need <= 0:
            break
        if isinstance(bucket, _Ranked):
            cells = bucket.first(need)
            if cells is None:
                return None
            taken.append(cells)
            need -= bucket.count
            continue
        if bucket.count <= need or not wanted.all_ties:
            taken.append(bucket.all_cells()[:need])  # held: at least `need` of them, or all
        elif bucket.count <= max_cells:
            taken.append(bucket.all_cells())  # every NULL (NaN) ties with every other
        else:
            return None
        need -= bucket.count
    out = np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)
    return out if len(out) <= max_cells else None


@dataclass(frozen=True)
class _Part:
    """One unit's share: (count, first cells) of its NULLs and NaNs, and its best numbers as
    (values, cells, count of numbers)."""

    nulls: tuple[int, np.ndarray]
    nans: tuple[int, np.ndarray]
    numbers: tuple[np.ndarray, np.ndarray, int]


class _UnitWork:
    """What the reader's threads run per unit: the column read, its cells sorted into buckets."""

    def __init__(
        self, table: TableScan, wanted: Wanted, limit: int, threshold: _Threshold, where: Where | None
    ) -> None:
        self.table = table
        self.where = where
        self.wanted = wanted
        self.limit = limit
        self.threshold = threshold
        self.floating = np.dtype(str(wanted.column.logical)).kind == "f"

    def __call__(self, unit: Any) -> _Part:
        positions, block = unit_positions(unit)
        values, masked = read_block(self.table, unit, self.wanted.column, block)
        values = values.ravel()
        masked = None if masked is None or not masked.any() else masked.ravel()
        counters.count(work_units_read=getattr(unit, "merged", 1), rows=len(values))
        dropped = None  # cells the WHERE does not keep: in no bucket
        if self.where is not None:
            kept = self.where.mask(positions).ravel()
            if not kept.all():
                dropped = ~kept
                masked = None if masked is None else masked & kept
        other = masked if dropped is None else (dropped if masked is None else masked | dropped)
        nulls = (0, _NONE) if masked is None else self._cells(masked, positions, block)
        nans = (0, _NONE)
        if self.floating:
            nan = np.isnan(values)
            if other is not None:
                nan &= ~other
            if nan.any():
                nans = self._cells(nan, positions, block)
                other = nan if other is None else (other | nan)
        return _Part(nulls, nans, self._numbers(values, other, positions, block))

    def _cells(self, where: np.ndarray, positions: list[np.ndarray], block: tuple[int, ...]) -> tuple[int, np.ndarray]:
        local = np.flatnonzero(where)
        return len(local), _global(local[: self.limit], positions, block, self.table.table.shape)

    def _numbers(
        self, values: np.ndarray, other: np.ndarray | None, positions: list[np.ndarray], block: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The unit's best numbers (and their ties) with their cells, and how many numbers it has."""
        count = len(values) - (0 if other is None else int(np.count_nonzero(other)))
        bound = self.threshold.value
        if bound is None:
            keep = np.ones(len(values), dtype=bool) if other is None else ~other
        else:
            keep = values >= bound if self.wanted.descending else values <= bound  # NaN: never
            if other is not None:
                keep &= ~other
        local = np.flatnonzero(keep)
        picked = values[local]
        held = _best_of(picked, self.wanted, self.limit)
        local, picked = local[held], picked[held]
        return picked, _global(local, positions, block, self.table.table.shape), count


_NONE = np.zeros(0, dtype=np.int64)


def _global(
    local: np.ndarray, positions: list[np.ndarray], block: tuple[int, ...], shape: tuple[int, ...]
) -> np.ndarray:
    """Flat indexes in the table of cells given as flat indexes in a unit's block."""
    if not len(local):
        return _NONE
    at = np.unravel_index(local, block)
    return np.ravel_multi_index(tuple(p[i] for p, i in zip(positions, at, strict=True)), shape).astype(np.int64)


def _best_of(values: np.ndarray, wanted: Wanted, tie_limit: int, rows: int | None = None) -> np.ndarray:
    """Where the best `rows` (default `wanted.rows`) of `values` (numbers, no NaN) are: every
    one better than the `rows`-th, then its ties, as many as make `rows`, or up to
    `tie_limit` of them when `wanted.all_ties`."""
    rows = wanted.rows if rows is None else rows
    if len(values) <= rows:
        return np.arange(len(values))
    if wanted.descending:
        edge = np.partition(values, len(values) - rows)[len(values) - rows]
        better = np.flatnonzero(values > edge)
    else:
        edge = np.partition(values, rows - 1)[rows - 1]
        better = np.flatnonzero(values < edge)
    ties = tie_limit if wanted.all_ties else rows - len(better)
    return np.concatenate([better, np.flatnonzero(values == edge)[:ties]])


class _Best:
    """The numbers bucket: the best `rows` numbers found so far (and their ties), with their
    cells, and `edge`, the `rows`-th of them once there are that many."""

    def __init__(self, wanted: Wanted, limit: int) -> None:
        self.wanted = wanted
        self.limit = limit
        self.values: list[np.ndarray] = []
        self.cells: list[np.ndarray] = []
        self.count = 0  # numbers in the table
        self.held = 0
        self.edge: Any = None

    def add(self, values: np.ndarray, cells: np.ndarray, count: int) -> None:
        self.count += count
        if not len(values):
            return
        self.values.append(values)
        self.cells.append(cells)
        self.held += len(values)
        if self.held > 2 * self.wanted.rows + 64:
            self._trim()

    def _trim(self) -> None:
        values, cells = np.concatenate(self.values), np.concatenate(self.cells)
        held = _best_of(values, self.wanted, self.limit)
        values, cells = values[held], cells[held]
        if len(values) >= self.wanted.rows:
            self.edge = values.max() if not self.wanted.descending else values.min()
        self.values, self.cells, self.held = [values], [cells], len(values)

    def result(self) -> _Ranked:
        if self.values:
            self._trim()
        values = self.values[0] if self.values else np.zeros(0)
        cells = self.cells[0] if self.cells else _NONE
        return _Ranked(values, cells, self.count, self.wanted, self.limit)


@dataclass(frozen=True)
class _Ranked:
    """The numbers bucket once every unit is read: the best numbers of the table (and ties)."""

    values: np.ndarray
    cells: np.ndarray
    count: int
    wanted: Wanted
    limit: int

    def first(self, need: int) -> np.ndarray | None:
        """The cells of the first `need` numbers, with their ties as `_best_of` keeps them;
        None if the bucket does not hold them (it always should)."""
        if need >= self.count:
            return self.cells if len(self.cells) == self.count else None
        return self.cells[_best_of(self.values, self.wanted, self.limit, rows=need)]
