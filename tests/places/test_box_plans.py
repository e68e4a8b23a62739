"""Plans of an OR of point-like parts (`(lat = a AND lon = b) OR ...`, the filter a join or a
sample pushes): planned box by box, they keep exactly the cells numpy's mask keeps, in the
same units and order as testing every unit on its own."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrsql.plan.predicate import And, Cmp, InSet, Or
from zarrsql.plan.units import DimValues, _masked_units, plan_scan


@settings(max_examples=60, deadline=None)
@given(
    ny=st.integers(1, 23),
    nx=st.integers(1, 19),
    gy=st.integers(1, 7),
    gx=st.integers(1, 7),
    points=st.lists(st.tuples(st.integers(0, 25), st.integers(0, 25)), min_size=1, max_size=12),
    extra=st.booleans(),
)
def test_point_lists_plan_the_cells_numpy_selects(ny, nx, gy, gx, points, extra) -> None:
    lat = np.linspace(80, -80, ny)  # descending
    lon = np.arange(nx) * 1.5
    dims = [DimValues("lat", lat, None), DimValues("lon", lon, None)]
    terms = [And((Cmp("lat", "=", float(np.linspace(80, -80, 26)[i])), Cmp("lon", "=", j * 1.5))) for i, j in points]
    predicate = Or(tuple(terms)) if len(terms) > 1 else terms[0]
    if extra:  # DuckDB also derives per-axis IN lists from such an OR
        predicate = And((predicate, InSet("lon", tuple(sorted({j * 1.5 for _, j in points})))))
    plan = plan_scan((ny, nx), (gy, gx), dims, predicate)
    if len(terms) > 1:
        assert plan._boxes is not None  # the box-by-box path, not the generic one
    expected = np.zeros((ny, nx), bool)
    for i, j in points:
        expected |= np.logical_and.outer(lat == np.linspace(80, -80, 26)[i], lon == j * 1.5)
    got = np.zeros((ny, nx), bool)
    units = list(plan.units())
    for u in units:
        (a, b), (c, d) = u.region
        if u.select is None or isinstance(u.select, np.ndarray):
            block = np.ones((b - a, d - c), bool) if u.select is None else u.select
        else:  # per-axis indices (a single point is separable)
            block = np.zeros((b - a, d - c), bool)
            rows, cols = (np.arange(n) if s is None else s for s, n in zip(u.select, (b - a, d - c), strict=True))
            block[np.ix_(rows, cols)] = True
        assert block.any()
        got[a:b, c:d] |= block
    np.testing.assert_array_equal(got, expected)
    generic = list(_masked_units(plan))
    assert [u.index for u in units] == [u.index for u in generic]
    assert plan.units_kept() == len(units)
    assert plan.rows() == int(expected.sum())
