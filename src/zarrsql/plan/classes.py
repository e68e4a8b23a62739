"""Truth classes: the positions of each axis grouped by what a predicate's leaves say there.

A predicate over dimension columns is a boolean combination of leaves, and each leaf reads
one axis. Along an axis, positions where every leaf of that axis has the same (true, null)
value are interchangeable: the predicate's value on a cell depends only on the class of each
of its coordinates. So the predicate is evaluated once per combination of classes (a handful,
however long the axes are), and the cells it keeps are counted as a sum of products of class
sizes, exactly and without visiting a cell. SQL's three values are kept: a leaf that is NULL
at a position is its own state there, distinct from false.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from zarrsql.plan.predicate import Leaf, Predicate, Truth, evaluate, leaves_of

#: Class combinations evaluated at most (the product of the class counts of every axis).
#: Beyond this, counting falls back to its caller's slower exact path.
MAX_COMBINATIONS = 1 << 20


@dataclass(frozen=True)
class AxisClasses:
    """One axis: its leaves, each class's (true, null) per leaf, and each class's size.

    `true` and `null` have shape (classes, leaves); `inverse`, when known, is the class of
    every position along the axis (None when the classes were counted elsewhere).
    """

    leaves: tuple[Leaf, ...]
    true: np.ndarray
    null: np.ndarray
    sizes: np.ndarray
    inverse: np.ndarray | None = None


def classify(leaves: Sequence[Leaf], truths: Sequence[Truth], n: int) -> AxisClasses:
    """Group the `n` positions of an axis by the (true, null) of its `leaves` there."""
    if not leaves or n == 0:
        empty = np.zeros((1, len(leaves)), dtype=bool)
        return AxisClasses(tuple(leaves), empty, empty, np.array([n], dtype=np.int64), np.zeros(n, dtype=np.int64))
    if len(leaves) <= 12:  # 3**12 states: one integer names a position's, counted in O(n)
        code = np.zeros(n, dtype=np.int64)
        for t, nl in truths:
            code = code * 3 + t.astype(np.int64) + 2 * nl.astype(np.int64)
        counts = np.bincount(code, minlength=3 ** len(leaves))
        uniq = np.flatnonzero(counts)
        lookup = np.zeros(len(counts), dtype=np.int64)
        lookup[uniq] = np.arange(len(uniq))
        inverse, sizes = lookup[code], counts[uniq]
        states = np.stack([(uniq // 3**j) % 3 for j in reversed(range(len(leaves)))], axis=1)
    else:
        stacked = np.stack([t.astype(np.int8) + 2 * nl.astype(np.int8) for t, nl in truths])
        cols, inverse, sizes = np.unique(stacked, axis=1, return_inverse=True, return_counts=True)
        states = cols.T
    return AxisClasses(tuple(leaves), states == 1, states == 2, sizes.astype(np.int64), inverse.reshape(-1))


def from_counts(leaves: Sequence[Leaf], states: Sequence[Sequence[bool | None]], sizes: Sequence[int]) -> AxisClasses:
    """Classes counted by someone else (an engine's GROUP BY): per class, each leaf's value
    (True, False or None for NULL) and how many positions have it."""
    true = np.array([[v is True for v in row] for row in states], dtype=bool).reshape(len(states), len(leaves))
    null = np.array([[v is None for v in row] for row in states], dtype=bool).reshape(len(states), len(leaves))
    return AxisClasses(tuple(leaves), true, null, np.asarray(sizes, dtype=np.int64))


def truth_table(predicate: Predicate, axes: Sequence[AxisClasses]) -> np.ndarray | None:
    """Whether `predicate` is true on each combination of classes (one axis per array axis);
    None when there are more than `MAX_COMBINATIONS` combinations."""
    shape = tuple(len(a.sizes) for a in axes)
    if int(np.prod(shape, dtype=np.float64)) > MAX_COMBINATIONS:
        return None
    where = {leaf: (k, j) for k, a in enumerate(axes) for j, leaf in enumerate(a.leaves)}

    def leaf(p: Leaf) -> Truth:
        k, j = where[p]
        view = [1] * len(axes)
        view[k] = shape[k]
        return axes[k].true[:, j].reshape(view), axes[k].null[:, j].reshape(view)

    t, _ = evaluate(predicate, leaf)
    return np.broadcast_to(t, shape)


def contract(table: np.ndarray, weights: Sequence[np.ndarray]) -> int:
    """sum over every combination of `table[c0, c1, ...] * w0[c0] * w1[c1] * ...`, exactly."""
    bound = 1
    for w in weights:
        bound *= int(w.sum()) if len(w) else 0
    dtype: type | np.dtype = np.int64 if bound < 2**62 else object
    acc = np.asarray(table).astype(dtype)
    for w in reversed(weights):
        acc = np.tensordot(acc, w.astype(dtype), axes=([acc.ndim - 1], [0]))
    return int(acc)


def count_true(predicate: Predicate, axes: Sequence[AxisClasses]) -> int | None:
    """Cells where `predicate` is true, or None when there are too many class combinations."""
    table = truth_table(predicate, axes)
    return None if table is None else contract(table, [a.sizes for a in axes])


def axes_for(
    predicate: Predicate,
    ndim: int,
    axis_of: Callable[[Leaf], int],
    truth: Callable[[Leaf], Truth],
    shape: Sequence[int],
) -> list[AxisClasses]:
    """The classes of every axis of a table of `shape`, from each leaf's truth along its axis."""
    per_axis: list[list[Leaf]] = [[] for _ in range(ndim)]
    for leaf in leaves_of(predicate):
        per_axis[axis_of(leaf)].append(leaf)
    return [classify(ls, [truth(leaf) for leaf in ls], shape[k]) for k, ls in enumerate(per_axis)]


def live_classes(predicate: Predicate | None, axes: Sequence[AxisClasses], axis: int) -> np.ndarray | None:
    """Per class of `axis`, whether some cell of that class satisfies `predicate` (None: every
    cell does); None when there are more than `MAX_COMBINATIONS` class combinations.

    A cell exists only where every axis' class has positions, so an empty class (an axis of
    length 0) keeps nothing alive. An aggregate that ignores how often a value occurs (min,
    max, count of distinct values) of a coordinate of `axis` then needs only these classes:
    its value over the kept cells is its value over the positions of the live classes."""
    shape = tuple(len(a.sizes) for a in axes)
    table = np.ones(shape, dtype=bool) if predicate is None else truth_table(predicate, axes)
    if table is None:
        return None
    for k, a in enumerate(axes):
        view = [1] * len(axes)
        view[k] = shape[k]
        table = table & (a.sizes > 0).reshape(view)
    others = tuple(k for k in range(len(axes)) if k != axis)
    return np.asarray(table.any(axis=others) if others else table, dtype=bool).reshape(shape[axis])
