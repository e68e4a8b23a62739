"""Points matched to cells: the nearest (or the equal) coordinate value along one axis.

`match(values, nulls, targets, method=, tolerance=)` returns, for each target, the position
of the matching coordinate value, or -1 where no cell matches (a NULL coordinate never
matches; with a tolerance, a cell farther than it does not either, so a far point gets no
cell rather than a wrong one). Axes may be ascending, descending, uneven or unordered: the
values are sorted once. Ties between two equally near cells go to the larger coordinate
value, as pandas' (and so xarray's) `method="nearest"` does on an ascending index. Float
targets are first rounded to the axis' own float type (a float32 axis holds 0.1 as the float32
nearest to it), as xarray and `bounds :=` do, so that 0.1 equals the stored 0.1. An axis that
repeats a value has no single nearest cell: `repeated_value` finds that, for the caller to refuse.
"""

from __future__ import annotations

import numpy as np

METHODS = ("nearest", "exact")


def match(
    values: np.ndarray,
    nulls: np.ndarray | None,
    targets: np.ndarray,
    *,
    method: str = "nearest",
    tolerance: float | int | None = None,
) -> np.ndarray:
    """Positions into `values` (int64, -1 for no match) for each of `targets`."""
    valid = _valid(values, nulls)
    if values.dtype.kind == "f" and targets.dtype.kind == "f" and targets.dtype.itemsize > values.dtype.itemsize:
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
    pos = np.searchsorted(ordered, targets, side="left")
    right = np.clip(pos, 0, len(ordered) - 1)
    left = np.clip(pos - 1, 0, len(ordered) - 1)
    wide = np.float64 if ordered.dtype.kind == "f" or targets.dtype.kind == "f" else np.int64
    t = targets.astype(wide)
    d_right = np.abs(ordered[right].astype(wide) - t)
    d_left = np.abs(ordered[left].astype(wide) - t)
    chosen = np.where((pos < len(ordered)) & ((pos == 0) | (d_right <= d_left)), right, left)
    distance = np.where(chosen == right, d_right, d_left)
    if method == "exact":
        ok = distance == 0
    else:
        ok = np.ones(len(targets), dtype=bool) if tolerance is None else distance <= tolerance
    if targets.dtype.kind == "f":
        ok &= ~np.isnan(targets)
    out[ok] = candidates[order[chosen[ok]]]
    return out


def repeated_value(values: np.ndarray, nulls: np.ndarray | None) -> object | None:
    """A coordinate value that occurs more than once along the axis (NULLs aside), or None."""
    kept = values[_valid(values, nulls)]
    if kept.dtype.kind in "OUS":
        seen: set[object] = set()
        for value in kept.tolist():
            if value in seen:
                return value
            seen.add(value)
        return None
    ordered = np.sort(kept, kind="stable")
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    return ordered[same[0]].item() if len(same) else None


def _valid(values: np.ndarray, nulls: np.ndarray | None) -> np.ndarray:
    valid = np.ones(len(values), dtype=bool) if nulls is None else ~np.asarray(nulls, dtype=bool)
    if values.dtype.kind == "f":
        valid &= ~np.isnan(values)
    return valid


def _exact_labels(values: np.ndarray, valid: np.ndarray, targets: np.ndarray) -> np.ndarray:
    first: dict[object, int] = {}
    for i in np.flatnonzero(valid)[::-1]:
        first[values[i]] = int(i)
    return np.array([first.get(t, -1) for t in targets.tolist()], dtype=np.int64)
