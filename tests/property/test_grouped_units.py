"""Grouped work units (`ScanPlan.grouped_units`) against the ungrouped ones, on random grids.

For random shapes, chunk grids, kept coordinate values per axis and grouping targets, the
grouped units' rows, put back in order by `ungrouped_order`, are exactly the ungrouped
units' rows in their order; every chunk a grouped unit spans holds a kept cell; and the
merged counts add up to the kept units. The kept cells themselves are checked against a
numpy brute force of the predicate.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrsql.plan.predicate import And, InSet
from zarrsql.plan.units import DimValues, WorkUnit, plan_scan, ungrouped_order


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], list[list[int] | None], int]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 11)) for _ in range(ndim))
    grid = tuple(draw(st.integers(1, n + 1)) for n in shape)
    kept = [draw(st.none() | st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True)) for n in shape]
    cells = draw(st.integers(1, 400))
    most = draw(st.none() | st.integers(1, 30))
    return shape, tuple(min(g, n) for g, n in zip(grid, shape, strict=True)), kept, cells, most


def cells_of(unit: WorkUnit) -> np.ndarray:
    """The unit's selected cells as (rows, ndim) absolute coordinates, row-major over its
    region (the order the reader's batch has before any reorder)."""
    axes = []
    for k, (a, b) in enumerate(unit.region):
        sel = None if unit.select is None else unit.select[k]
        axes.append(np.arange(a, b) if sel is None else a + np.asarray(sel))
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_grouped_units_give_the_ungrouped_rows_in_their_order(case) -> None:
    shape, grid, kept, cells, most = case
    dims = [DimValues(f"d{k}", np.arange(n), None) for k, n in enumerate(shape)]
    parts = [InSet(f"d{k}", tuple(v)) for k, v in enumerate(kept) if v is not None]
    predicate = None if not parts else (parts[0] if len(parts) == 1 else And(tuple(parts)))
    plan = plan_scan(shape, grid, dims, predicate)

    plain = [cells_of(u) for u in plan.units()]
    want = np.concatenate(plain) if plain else np.zeros((0, len(shape)), dtype=np.int64)
    got_parts, merged = [], 0
    for unit in plan.grouped_units(cells, max_chunks=most):
        rows = cells_of(unit)
        assert len(rows) == unit.num_rows()
        reorder = ungrouped_order(unit, grid)
        if reorder is not None:
            np.testing.assert_array_equal(reorder.apply(rows), rows[reorder.order])
            rows = reorder.apply(rows)
        got_parts.append(rows)
        merged += unit.merged
        # every chunk the unit spans holds a selected cell: nothing is read for nothing
        touched = {tuple(c // g for c, g in zip(row, grid, strict=True)) for row in rows.tolist()}
        firsts = [a // g for (a, _), g in zip(unit.region, grid, strict=True)]
        lasts = [(b - 1) // g for (_, b), g in zip(unit.region, grid, strict=True)]
        assert len(touched) == int(np.prod([hi - lo + 1 for lo, hi in zip(firsts, lasts, strict=True)]))
        assert unit.merged == len(touched)
        assert most is None or unit.merged <= max(1, most)
    got = np.concatenate(got_parts) if got_parts else np.zeros((0, len(shape)), dtype=np.int64)
    np.testing.assert_array_equal(got, want)
    assert merged == plan.units_kept()

    # the kept cells are the predicate's, by brute force
    mask = np.ones(shape, dtype=bool)
    for k, v in enumerate(kept):
        if v is not None:
            keep = np.isin(np.arange(shape[k]), v)
            mask &= keep.reshape([-1 if j == k else 1 for j in range(len(shape))])
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, np.argwhere(mask).tolist()))
