"""Points matched to cells: the nearest (or the equal) coordinate value along one axis.

`match(values, nulls, targets, method=, tolerance=, kept=)` returns, for each target, the
position of the matching coordinate value, or -1 where no cell matches (a NULL coordinate
never matches, nor one outside `kept`, the positions `bounds :=` keeps (`kept_positions`);
with a tolerance, a cell farther than it does not either, so a far point gets no cell rather
than a wrong one). Axes may be ascending, descending, uneven or unordered: the values are
sorted once. Ties between two equally near cells go to the larger coordinate value, as
pandas' (and so xarray's) `method="nearest"` does on an ascending or a descending index.

Distances are measured as xarray measures them. Numeric targets on a float axis are first
rounded to the axis' own float type (a float32 axis holds 0.1 as the float32 nearest to it),
as xarray and `bounds :=` do, so that 0.1 equals the stored 0.1; the distances are then
differences in that type, as pandas subtracts them, so two cells whose float32 distances are
equal are a tie even where float64 would tell them apart. Integer targets on an integer axis
(ids, and times and durations as ticks) are compared exactly, however large: a 64-bit id
beyond 2^53 is no float. An axis that repeats a value has no single nearest cell:
`repeated_value` finds that, for the caller to refuse.
"""

from __future__ import annotations

import math

import numpy as np

from zarrsql.plan.positions import Positions
from zarrsql.plan.predicate import Predicate, columns_of, conjoin, conjuncts, evaluate, leaf_truth
from zarrsql.plan.units import DimValues

METHODS = ("nearest", "exact")
#: Distances between 64-bit integers are held as uint64: every gap inside one integer type fits.
_WIDEST_GAP = 2**64 - 1


def match(
    values: np.ndarray | Positions,
    nulls: np.ndarray | None,
    targets: np.ndarray,
    *,
    method: str = "nearest",
    tolerance: float | int | None = None,
    kept: np.ndarray | None = None,
) -> np.ndarray:
    """Positions into `values` (int64, -1 for no match) for each of `targets`."""
    if isinstance(values, Positions):
        found = _match_positions(len(values), targets, method, tolerance) if kept is None else None
        if found is not None:
            return found
        values = np.asarray(values)  # within the positions `bounds :=` keeps: as any axis
    valid = _valid(values, nulls, kept)
    if values.dtype.kind == "f" and (
        targets.dtype.kind in "iu" or (targets.dtype.kind == "f" and targets.dtype.itemsize > values.dtype.itemsize)
    ):
        with np.errstate(over="ignore"):  # beyond the axis type's range: +-inf, still the farthest
            targets = targets.astype(values.dtype)
    if values.dtype.kind in "OUS" or targets.dtype.kind in "OUS":
        if method != "exact" and tolerance is not None:
            raise ValueError("a tolerance needs a numeric or time axis")
        return _exact_labels(values, valid, targets)
    candidates = np.flatnonzero(valid)
    out = np.full(len(targets), -1, dtype=np.int64)
    if len(candidates) == 0 or len(targets) == 0:
        return out
    keys = values[candidates]
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    if ordered.dtype.kind in "iu" and targets.dtype.kind in "iu":
        chosen, ok = _nearest_integers(ordered, targets, method, tolerance)
    else:
        chosen, ok = _nearest_numbers(ordered, targets, method, tolerance)
    out[ok] = candidates[order[chosen[ok]]]
    return out


def _match_positions(n: int, targets: np.ndarray, method: str, tolerance: float | int | None) -> np.ndarray | None:
    """`match` on a positional axis (positions 0 .. n-1) by arithmetic, never holding it: the
    nearest position is the target rounded into range, ties going to the larger position as
    on any axis; distances as `_nearest_integers` (exact) and `_nearest_numbers` (float64)
    reckon them. None for targets that are no numbers (matched as on any axis)."""
    out = np.full(len(targets), -1, dtype=np.int64)
    if n == 0 or len(targets) == 0:
        return out
    if targets.dtype.kind in "iu":  # exact, in Python integers: a target may lie far outside int64
        given = [int(t) for t in targets.tolist()]
        chosen = np.array([min(max(t, 0), n - 1) for t in given], dtype=np.int64)
        gaps = [abs(int(c) - t) for c, t in zip(chosen.tolist(), given, strict=True)]
        if method == "exact":
            ok = np.array([g == 0 for g in gaps], dtype=bool)
        else:
            ok = np.array([tolerance is None or g <= tolerance for g in gaps], dtype=bool)
    elif targets.dtype.kind == "f":
        t = targets.astype(np.float64)
        with np.errstate(invalid="ignore"):
            low = np.clip(np.floor(t), 0, n - 1)
            high = np.clip(low + 1, 0, n - 1)
            d_low, d_high = np.abs(low - t), np.abs(high - t)
            take_high = d_high <= d_low
            distance = np.where(take_high, d_high, d_low)
        chosen = np.where(take_high, high, low)
        if method == "exact":
            ok = distance == 0
        else:
            ok = np.ones(len(t), dtype=bool) if tolerance is None else distance <= tolerance
        ok &= ~np.isnan(t)
        chosen = np.where(ok, chosen, 0).astype(np.int64)
    else:
        return None
    out[ok] = chosen[ok]
    return out


def _nearest_numbers(
    ordered: np.ndarray, targets: np.ndarray, method: str, tolerance: float | int | None
) -> tuple[np.ndarray, np.ndarray]:
    """(position in `ordered`, whether it matches) of each target on a float axis, or of float
    targets on an integer one. Distances are differences in the axis' float type when the
    targets have it (a float32 axis: pandas subtracts float32 from float32), else in float64
    (an integer axis, as pandas finds a float64 target's distance to an integer index); a
    tolerance is compared in float64, as pandas compares it."""
    pos = np.searchsorted(ordered, targets, side="left")
    right = np.minimum(pos, len(ordered) - 1)
    left = np.maximum(pos - 1, 0)
    wide = ordered.dtype if ordered.dtype == targets.dtype else np.dtype(np.float64)
    t = targets.astype(wide)
    d_right = np.abs(ordered[right].astype(wide) - t)
    d_left = np.abs(ordered[left].astype(wide) - t)
    chosen = np.where((pos < len(ordered)) & ((pos == 0) | (d_right <= d_left)), right, left)
    distance = np.where(chosen == right, d_right, d_left).astype(np.float64)
    if method == "exact":
        ok = distance == 0
    else:
        ok = np.ones(len(targets), dtype=bool) if tolerance is None else distance <= tolerance
    if targets.dtype.kind == "f":
        ok &= ~np.isnan(targets)
    return chosen, ok


def _nearest_integers(
    ordered: np.ndarray, targets: np.ndarray, method: str, tolerance: float | int | None
) -> tuple[np.ndarray, np.ndarray]:
    """(position in `ordered`, whether it matches) of integer targets on an integer axis,
    exactly for any int64 or uint64 values: a target is searched in the axis' own type (one
    beyond that type's range at its end), the distances are unsigned 64-bit differences, and
    a target beyond the range has its distance reckoned in Python integers."""
    axis, given = np.iinfo(ordered.dtype), np.iinfo(targets.dtype)
    no = np.zeros(len(targets), dtype=bool)
    below = targets < axis.min if axis.min > given.min else no
    above = targets > axis.max if axis.max < given.max else no
    outside = below | above
    placed = np.where(outside, 0, targets).astype(ordered.dtype)
    placed[below] = axis.min
    placed[above] = axis.max
    pos = np.searchsorted(ordered, placed, side="left")
    right = np.minimum(pos, len(ordered) - 1)
    left = np.maximum(pos - 1, 0)
    d_right = _gap(ordered[right], placed)
    d_left = _gap(ordered[left], placed)
    chosen = np.where((pos < len(ordered)) & ((pos == 0) | (d_right <= d_left)), right, left)
    distance = np.where(chosen == right, d_right, d_left)
    if method == "exact":
        return chosen, (distance == 0) & ~outside
    if tolerance is None or tolerance >= _WIDEST_GAP:
        return chosen, np.ones(len(targets), dtype=bool)
    ok = distance <= np.uint64(math.floor(tolerance))  # whole gaps: d <= t exactly when d <= floor(t)
    for i in np.flatnonzero(outside):
        ok[i] = abs(int(ordered[chosen[i]]) - int(targets[i])) <= tolerance
    return chosen, ok


def _gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| of two arrays of one integer type, as uint64: exact, since every such gap is
    below 2^64 and uint64 subtraction wraps modulo 2^64."""
    high, low = np.maximum(a, b), np.minimum(a, b)
    return high.astype(np.uint64) - low.astype(np.uint64)  # type: ignore[no-any-return]


def kept_positions(predicate: Predicate | None, dim: DimValues) -> np.ndarray | None:
    """Where along `dim` the conjuncts of `predicate` that name `dim` alone hold (None: the
    whole axis). With `bounds :=` (the table's base predicate) a point matches among those
    positions only, as xarray's `.sel` does on the dataset subset by the same bounds."""
    if predicate is None:
        return None
    own = conjoin(c for c in conjuncts(predicate) if columns_of(c) == {dim.name})
    if own is None:
        return None
    holds, _ = evaluate(own, lambda leaf: leaf_truth(leaf, np.asarray(dim.values), dim.nulls))
    return holds


def repeated_value(
    values: np.ndarray | Positions, nulls: np.ndarray | None, kept: np.ndarray | None = None
) -> object | None:
    """A coordinate value that occurs more than once along the axis (NULLs and positions
    outside `kept` aside), or None. Positions never repeat."""
    if isinstance(values, Positions):
        return None
    kept_values = values[_valid(values, nulls, kept)]
    if kept_values.dtype.kind in "OUS":
        seen: set[object] = set()
        for value in kept_values.tolist():
            if value in seen:
                return value
            seen.add(value)
        return None
    ordered = np.sort(kept_values, kind="stable")
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    return ordered[same[0]].item() if len(same) else None


def _valid(values: np.ndarray, nulls: np.ndarray | None, kept: np.ndarray | None = None) -> np.ndarray:
    valid = np.ones(len(values), dtype=bool) if nulls is None else ~np.asarray(nulls, dtype=bool)
    if values.dtype.kind == "f":
        valid &= ~np.isnan(values)
    if kept is not None:
        valid &= np.asarray(kept, dtype=bool)
    return valid


def _exact_labels(values: np.ndarray, valid: np.ndarray, targets: np.ndarray) -> np.ndarray:
    first: dict[object, int] = {}
    for i in np.flatnonzero(valid)[::-1]:
        first[values[i]] = int(i)
    return np.array([first.get(t, -1) for t in targets.tolist()], dtype=np.int64)
