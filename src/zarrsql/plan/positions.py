"""Positions along an axis, held as runs: what `np.arange(n)` holds, without holding it.

A positional dimension (an array with no coordinate for it) has its positions for values.
Held as an int64 array they cost 8 bytes per position: 3 GB for an axis of 4 * 10^8 cells
that a `count(*)` never reads, and an axis of 10^12 never written could not be opened at
all. `Positions` stands for a sorted set of distinct positions as runs `[start, stop)`: the
whole axis is one run, a `WHERE` on it a few. It answers what the scan asks of an axis by
arithmetic, in the size of the answer: its length, the position at a rank, a slice or an
index array (a work unit's piece, a real numpy array), `searchsorted`, `min`/`max`, and the
chunks it touches. `positions_where` evaluates a predicate over a positional axis the same way,
as runs, with SQL's three values.

Anything else (a numpy function or operator over the whole axis) gets the positions as one
array, only for an axis of at most `MAX_POSITIONS_HELD`; beyond that it is refused with an
`UnsupportedError` naming the dimension, never left to fail allocating. A caller that can do
without the whole axis asks `holdable` first and declines its shortcut instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, overload

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from zarrsql.errors import UnsupportedError
from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Or, Predicate, evaluate

#: The most positions handed out as one int64 array (256 MB): an axis this long is held by a
#: consumer that needs it whole (an engine evaluating an arbitrary condition over it), one
#: longer is not, and its consumers decline that shortcut. Real coordinates of this length are
#: held anyway; positions are only ever held for such a consumer.
MAX_POSITIONS_HELD = 1 << 25
#: Kept positions at most this many are handed to a plan as a plain array (a point, a few
#: ranges of a small axis): every consumer of a plan takes those as always.
SMALL_POSITIONS = 1 << 16

_EMPTY = np.zeros(0, dtype=np.int64)


class Positions(NDArrayOperatorsMixin):
    """Sorted, distinct int64 positions as runs `[starts[i], stops[i])` (see the module
    docstring); immutable. `label` names the dimension in a refusal."""

    __slots__ = ("_ends", "_starts", "_stops", "label")

    dtype = np.dtype(np.int64)
    ndim = 1

    def __init__(self, starts: np.ndarray, stops: np.ndarray, label: str = "") -> None:
        """Runs given sorted, non-empty, disjoint and not touching (`from_runs` makes them so)."""
        self._starts = starts
        self._stops = stops
        self._ends = np.cumsum(stops - starts)
        self.label = label

    @classmethod
    def whole(cls, n: int, label: str = "") -> Positions:
        """The positions 0 .. n-1 of an axis of length `n`."""
        if n <= 0:
            return cls(_EMPTY, _EMPTY, label)
        return cls(np.array([0], dtype=np.int64), np.array([n], dtype=np.int64), label)

    @classmethod
    def from_runs(cls, starts: np.ndarray, stops: np.ndarray, label: str = "") -> Positions:
        """Runs sorted by start and disjoint, possibly empty or touching: merged."""
        starts, stops = np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64)
        keep = stops > starts
        starts, stops = starts[keep], stops[keep]
        if len(starts) > 1:
            joined = starts[1:] <= stops[:-1]
            if joined.any():
                first = np.concatenate([[True], ~joined])
                starts = starts[first]
                stops = np.maximum.reduceat(stops, np.flatnonzero(first))
        return cls(starts, stops, label)

    @classmethod
    def from_sorted(cls, values: np.ndarray, label: str = "") -> Positions:
        """Sorted, distinct positions listed one by one, as their runs of consecutive values."""
        values = np.asarray(values, dtype=np.int64).reshape(-1)
        if not len(values):
            return cls(_EMPTY, _EMPTY, label)
        breaks = np.flatnonzero(np.diff(values) != 1) + 1
        starts = values[np.concatenate([[0], breaks])]
        stops = values[np.concatenate([breaks, [len(values)]]) - 1] + 1
        return cls(starts, stops, label)

    # -- what an array of the positions would say -----------------------------------------

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def size(self) -> int:
        return len(self)

    @property
    def shape(self) -> tuple[int]:
        return (len(self),)

    @property
    def runs(self) -> list[tuple[int, int]]:
        """The runs as (start, stop) pairs."""
        return list(zip(self._starts.tolist(), self._stops.tolist(), strict=True))

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The runs as two int64 arrays, their starts and their stops (held, not copied: read only)."""
        return self._starts, self._stops

    @property
    def holdable(self) -> bool:
        """Whether the positions may be handed out as one array (`MAX_POSITIONS_HELD`)."""
        return len(self) <= MAX_POSITIONS_HELD

    def min(self) -> np.int64:
        if not len(self):
            raise ValueError("zero-size array to reduction operation minimum which has no identity")
        return np.int64(self._starts[0])

    def max(self) -> np.int64:
        if not len(self):
            raise ValueError("zero-size array to reduction operation maximum which has no identity")
        return np.int64(self._stops[-1] - 1)

    def _at(self, ranks: np.ndarray) -> np.ndarray:
        """The positions at `ranks` (in range, int64)."""
        if len(self._starts) == 1:
            return ranks + self._starts[0]
        run = np.searchsorted(self._ends, ranks, side="right")
        before = np.where(run > 0, self._ends[np.maximum(run - 1, 0)], 0)
        return self._starts[run] + (ranks - before)

    @overload
    def __getitem__(self, key: int | np.integer[Any]) -> np.int64: ...
    @overload
    def __getitem__(self, key: slice | np.ndarray | list[int]) -> np.ndarray: ...
    def __getitem__(self, key: Any) -> Any:
        """The position at a rank, or a real array of those at a slice or an index array."""
        n = len(self)
        if isinstance(key, (int, np.integer)):
            rank = int(key) + n if key < 0 else int(key)
            if not 0 <= rank < n:
                raise IndexError(f"index {int(key)} is out of bounds for axis 0 with size {n}")
            return np.int64(self._at(np.array([rank], dtype=np.int64))[0])
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if len(self._starts) == 1:  # one pass: a work unit's piece of a whole axis
                first = int(self._starts[0])
                return np.arange(first + start, first + stop, step, dtype=np.int64)
            return self._at(np.arange(start, stop, step, dtype=np.int64))
        index = np.asarray(key)
        if index.dtype == bool:
            if index.shape != (n,):
                raise IndexError(f"a boolean index of shape {index.shape} does not match {n} positions")
            return self._at(np.flatnonzero(index).astype(np.int64))
        if index.dtype.kind not in "iu":
            raise IndexError("positions are indexed by an integer, a slice or an array of integers")
        ranks = index.astype(np.int64).reshape(-1)
        ranks = np.where(ranks < 0, ranks + n, ranks)
        if len(ranks) and (ranks.min() < 0 or ranks.max() >= n):
            raise IndexError(f"an index is out of bounds for axis 0 with size {n}")
        return self._at(ranks).reshape(index.shape)

    def searchsorted(self, v: Any, side: str = "left", sorter: Any = None) -> Any:
        """As `np.searchsorted` over the positions (`sorter` must be None: they are sorted)."""
        if sorter is not None:
            raise ValueError("positions are sorted: searchsorted takes no sorter")
        values = np.asarray(v)
        if values.dtype.kind == "f":  # ranks of a number between integers; NaN sorts last
            wide = np.where(np.isnan(values), np.inf, values)
            edge = np.ceil(wide) if side == "left" else np.floor(wide) + 1
            limits = np.clip(edge, -(2.0**62), 2.0**62).astype(np.int64)
        else:
            limits = values.astype(np.int64) + (0 if side == "left" else 1)
        out = self._below(limits.reshape(-1)).reshape(values.shape)
        return out[()] if out.ndim == 0 else out

    def _below(self, limits: np.ndarray) -> np.ndarray:
        """How many positions are below each of `limits`."""
        if not len(self._starts):
            return np.zeros(len(limits), dtype=np.intp)
        run = np.searchsorted(self._starts, limits, side="left") - 1  # the last run starting below
        last = np.maximum(run, 0)
        over = np.maximum(self._stops[last] - limits, 0)  # that run's positions at or above
        return np.where(run >= 0, self._ends[last] - over, 0).astype(np.intp)

    def chunks(self, g: int) -> np.ndarray:
        """The sorted indices of the chunks of `g` positions that hold a position."""
        if not len(self._starts):
            return _EMPTY
        first, last = self._starts // g, (self._stops - 1) // g
        if len(first) == 1:
            return np.arange(first[0], last[0] + 1, dtype=np.int64)
        # runs are sorted, so the chunk indices are too: repeats only where runs share a chunk
        ids = np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in zip(first, last, strict=True)])
        keep = np.concatenate([[True], ids[1:] != ids[:-1]])
        return ids[keep]

    def chunk_runs(self, g: int) -> Positions:
        """The indices of the chunks of `g` positions that hold a position, as runs: what
        `chunks(g)` lists, in the size of the runs however many chunks they span."""
        return Positions.from_runs(self._starts // g, (self._stops - 1) // g + 1, self.label)

    def compact(self) -> Positions | np.ndarray:
        """A small set as the plain array a plan has always taken, else itself."""
        return np.asarray(self) if len(self) <= SMALL_POSITIONS else self

    # -- the whole axis as one array, for what needs it (bounded) -------------------------

    def held(self) -> np.ndarray:
        """Every position as one int64 array; refused beyond `MAX_POSITIONS_HELD`."""
        if not self.holdable:
            named = f"positional dimension '{self.label}'" if self.label else "a positional dimension"
            column = self.label or "<dimension>"
            raise UnsupportedError(
                f"{named} has {len(self)} positions here, more than the {MAX_POSITIONS_HELD} a scan holds as "
                f"one array, which this use of them needs; read fewer of them (WHERE {column} BETWEEN a AND b)"
            )
        if len(self._starts) == 1:
            return np.arange(self._starts[0], self._stops[0], dtype=np.int64)
        return self._at(np.arange(len(self), dtype=np.int64))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        held = self.held()
        return held if dtype is None else held.astype(dtype)

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """Operators and ufuncs over the held positions (the mixin routes `==`, `//`... here)."""
        args = [np.asarray(x) if isinstance(x, Positions) else x for x in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return self.held().astype(dtype)

    def tolist(self) -> list[int]:
        return self.held().tolist()  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[np.int64]:
        return iter(self.held())

    def __repr__(self) -> str:
        shown = ", ".join(f"[{a}, {b})" for a, b in self.runs[:4]) + (", ..." if len(self._starts) > 4 else "")
        return f"Positions({len(self)} in {shown or 'no runs'})"


# -- a predicate over a positional axis, as runs ---------------------------------------------


class _Runs:
    """A set of positions of [0, n) as runs, with SQL's boolean algebra (`~`, `&`, `|`) so
    that `predicate.evaluate` combines them as it combines boolean arrays."""

    __slots__ = ("n", "starts", "stops")

    def __init__(self, n: int, starts: np.ndarray, stops: np.ndarray) -> None:
        self.n, self.starts, self.stops = n, starts, stops

    @classmethod
    def span(cls, n: int, lo: float, hi: float) -> _Runs:
        """The positions in [lo, hi) (clipped to the axis)."""
        a, b = max(0, min(n, lo)), max(0, min(n, hi))
        if b <= a:
            return cls(n, _EMPTY, _EMPTY)
        return cls(n, np.array([a], dtype=np.int64), np.array([b], dtype=np.int64))

    def _combine(self, other: _Runs, op: Any) -> _Runs:
        cuts = np.concatenate([[0, self.n], self.starts, self.stops, other.starts, other.stops])
        cuts = np.sort(cuts)
        cuts = cuts[np.concatenate([[True], cuts[1:] != cuts[:-1]])]
        lo, hi = cuts[:-1], cuts[1:]
        keep = op(self._covers(lo), other._covers(lo))
        edges = np.diff(np.concatenate([[False], keep, [False]]).astype(np.int8))
        return _Runs(self.n, lo[edges[:-1] == 1], hi[edges[1:] == -1])

    def _covers(self, at: np.ndarray) -> np.ndarray:
        run = np.searchsorted(self.starts, at, side="right") - 1
        return (run >= 0) & (at < self.stops[np.maximum(run, 0)]) if len(self.starts) else np.zeros(len(at), bool)

    def __invert__(self) -> _Runs:
        return self._combine(self, lambda a, _: ~a)

    def __and__(self, other: _Runs) -> _Runs:
        return self._combine(other, np.logical_and)

    def __or__(self, other: _Runs) -> _Runs:
        return self._combine(other, np.logical_or)


class _NotArithmetic(Exception):
    """A leaf `positions_where` cannot evaluate by arithmetic (its caller falls back)."""


def _integral(value: Any) -> float | int:
    """A constant as a number positions compare with exactly; refused otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise _NotArithmetic(value)
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            raise _NotArithmetic(value)
        return float(value)
    return int(value)


def _compare(n: int, op: str, v: float | int) -> _Runs:
    """The positions p of [0, n) where `p op v`."""
    if op == "=":
        whole = isinstance(v, int) or (math.isfinite(v) and float(v).is_integer())
        return _Runs.span(n, int(v), int(v) + 1) if whole else _Runs.span(n, 0, 0)
    if op == "!=":
        return ~_compare(n, "=", v)
    below = {"<": math.ceil(v), "<=": math.floor(v) + 1} if math.isfinite(v) else {"<": v, "<=": v}
    if op in below:
        return _Runs.span(n, -1, below[op])
    above = {">": math.floor(v) + 1, ">=": math.ceil(v)} if math.isfinite(v) else {">": v, ">=": v}
    if op in above:
        return _Runs.span(n, above[op], n)
    raise _NotArithmetic(op)


def _leaf(n: int, leaf: Any) -> tuple[_Runs, _Runs]:
    """(true, null) of one leaf over positions 0 .. n-1 (which are never NULL)."""
    none, every = _Runs.span(n, 0, 0), _Runs.span(n, 0, n)
    if isinstance(leaf, IsNull):
        return (every if leaf.negated else none), none
    if isinstance(leaf, Cmp):
        if leaf.value is None:
            return none, every
        return _compare(n, leaf.op, _integral(leaf.value)), none
    if isinstance(leaf, InSet):
        known = [_integral(v) for v in leaf.values if v is not None]
        points = sorted({int(v) for v in known if float(v).is_integer() and 0 <= v < n})
        at = np.array(points, dtype=np.int64)
        true = _Runs(n, at, at + 1) if len(at) else none
        return (true, ~true) if len(known) < len(leaf.values) else (true, none)
    raise _NotArithmetic(leaf)


def positions_where(predicate: Predicate, n: int, label: str = "") -> Positions | None:
    """Where `predicate`, whose leaves all name one positional axis of length `n`, is true:
    as runs, by arithmetic (a range, a list of positions and their NOT, AND and OR, combined
    with SQL's three values as `evaluate` combines arrays); None for a leaf that is no
    comparison of the positions with a number."""

    def leaf(p: Any) -> Any:
        return _leaf(n, p)

    if not isinstance(predicate, (Cmp, InSet, IsNull, And, Or, Not)):
        return None
    try:
        true, _ = evaluate(predicate, leaf)
    except _NotArithmetic:
        return None
    assert isinstance(true, _Runs)
    return Positions.from_runs(true.starts, true.stops, label)
