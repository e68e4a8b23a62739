"""bounds := refusals and the three-valued predicate evaluation, against brute force."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import zarrsql
from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Or, evaluate, leaf_truth
from zarrsql.plan.units import DimValues, plan_scan


def _store(tmp_path: Path, coord: np.ndarray) -> str:
    path = tmp_path / "big.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    g.create_array("x", shape=coord.shape, dtype=coord.dtype, dimension_names=["x"])[:] = coord
    g.create_array("v", shape=coord.shape, dtype="float64", dimension_names=["x"])[:] = np.arange(coord.size)
    return str(path)


def test_bounds_refuse_integers_beyond_2_53(tmp_path: Path) -> None:
    path = _store(tmp_path, np.array([0, 2**53, 2**53 + 1], dtype="int64"))
    with zarrsql.connect() as con:
        with pytest.raises(zarrsql.ParameterError, match="2\\^53"):
            con.sql(f"SELECT * FROM read_zarr('{path}', bounds := [['x', '0', '1']])")
        # WHERE has no such limit: it compares exactly
        assert con.sql(f"SELECT v FROM read_zarr('{path}') WHERE x = {2**53 + 1}").fetchall() == [(2.0,)]


def test_bounds_refuse_an_endpoint_beyond_2_53(tmp_path: Path) -> None:
    path = _store(tmp_path, np.array([0, 1, 2], dtype="int64"))
    with zarrsql.connect() as con, pytest.raises(zarrsql.ParameterError, match="2\\^53"):
        con.sql(f"SELECT * FROM read_zarr('{path}', bounds := [['x', '0', '{2**60}']])")


def test_where_on_raw_time_numbers(tmp_path: Path) -> None:
    path = tmp_path / "t.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    hours = np.arange(0, 240, 6, dtype="int64")
    g.create_array("time", shape=hours.shape, dtype="int64", dimension_names=["time"],
                   chunks=(8,), attributes={"units": "hours since 2000-01-01"})[:] = hours
    g.create_array("v", shape=hours.shape, dtype="float32", dimension_names=["time"], chunks=(8,))[:] = 1
    with zarrsql.connect() as con, zarrsql.trace() as t:
        # count(v), not count(*): a count of rows alone is answered without a scan
        n = con.sql(f"SELECT count(v) FROM read_zarr('{path}', decode_times := false) WHERE time >= 120 AND time < 150").fetchall()
    assert n == [(int(((hours >= 120) & (hours < 150)).sum()),)]
    if zarrsql.engine.source.HAS_SOURCES:
        assert t.work_units_read == len({int(i) // 8 for i in np.flatnonzero((hours >= 120) & (hours < 150))})


# --- the predicate evaluator against Python's own three-valued logic, cell by cell ---

VALUES = [-1.5, 0.0, 2.0, math.nan, None]


def _sql_value(op: str, a: float | None, b: float) -> bool | None:
    if a is None:
        return None
    if isinstance(a, float) and math.isnan(a):  # DuckDB: NaN = NaN, NaN above everything
        key_a, key_b = (1, 0.0), (1 if math.isnan(b) else 0, 0.0 if math.isnan(b) else b)
    else:
        key_a, key_b = (0, a), (1 if math.isnan(b) else 0, 0.0 if math.isnan(b) else b)
    return {"=": key_a == key_b, "!=": key_a != key_b, "<": key_a < key_b, "<=": key_a <= key_b,
            ">": key_a > key_b, ">=": key_a >= key_b}[op]


def _brute(p: object, row: dict) -> bool | None:
    if isinstance(p, Cmp):
        return _sql_value(p.op, row[p.column], p.value)
    if isinstance(p, IsNull):
        return (row[p.column] is not None) if p.negated else (row[p.column] is None)
    if isinstance(p, InSet):
        hits = [_sql_value("=", row[p.column], v) for v in p.values]
        return None if row[p.column] is None else any(hits)
    if isinstance(p, Not):
        v = _brute(p.child, row)
        return None if v is None else not v
    parts = [_brute(c, row) for c in p.children]  # type: ignore[attr-defined]
    if isinstance(p, And):
        return False if False in parts else (None if None in parts else True)
    return True if True in parts else (None if None in parts else False)


leaf = st.one_of(
    st.builds(Cmp, st.sampled_from(["a", "b"]), st.sampled_from(["=", "!=", "<", "<=", ">", ">="]),
              st.sampled_from([-1.5, 0.0, 1.0, 2.0, math.nan])),
    st.builds(lambda c, vs: InSet(c, tuple(vs)), st.sampled_from(["a", "b"]),
              st.lists(st.sampled_from([0.0, 2.0, math.nan]), min_size=1, max_size=3)),
    st.builds(IsNull, st.sampled_from(["a", "b"]), st.booleans()),
)
tree = st.recursive(leaf, lambda inner: st.one_of(
    st.builds(lambda xs: And(tuple(xs)), st.lists(inner, min_size=2, max_size=3)),
    st.builds(lambda xs: Or(tuple(xs)), st.lists(inner, min_size=2, max_size=3)),
    st.builds(Not, inner)), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(tree)
def test_three_valued_evaluation_matches_brute_force(p: object) -> None:
    cells = list(itertools.product(VALUES, VALUES))
    cols = {
        "a": np.array([0.0 if a is None else a for a, _ in cells]),
        "b": np.array([0.0 if b is None else b for _, b in cells]),
    }
    nulls = {"a": np.array([a is None for a, _ in cells]), "b": np.array([b is None for _, b in cells])}
    t, _ = evaluate(p, lambda lf: leaf_truth(lf, cols[lf.column], nulls[lf.column]))  # type: ignore[arg-type]
    expected = [_brute(p, {"a": a, "b": b}) is True for a, b in cells]
    assert t.tolist() == expected


@settings(max_examples=200, deadline=None)
@given(tree, st.integers(1, 3), st.integers(1, 3))
def test_planned_units_and_rows_are_exactly_the_matching_cells(p: object, ga: int, gb: int) -> None:
    """Every cell is planned exactly once when it matches, never when it does not."""
    a = np.array([v if v is not None else 0.0 for v in VALUES])
    b = np.array([v if v is not None else 0.0 for v in VALUES])
    dims = [DimValues("a", a, np.array([v is None for v in VALUES])),
            DimValues("b", b, np.array([v is None for v in VALUES]))]
    plan = plan_scan((len(a), len(b)), (ga, gb), dims, p)  # type: ignore[arg-type]
    produced: list[tuple[int, int]] = []
    for unit in plan.units():
        (a0, a1), (b0, b1) = unit.region
        grid = [(i, j) for i in range(a0, a1) for j in range(b0, b1)]
        if unit.select is None:
            produced += grid
        elif isinstance(unit.select, np.ndarray):
            produced += [g for g, keep in zip(grid, unit.select.reshape(-1)) if keep]
        else:
            ia = range(a1 - a0) if unit.select[0] is None else unit.select[0]
            ib = range(b1 - b0) if unit.select[1] is None else unit.select[1]
            produced += [(a0 + i, b0 + j) for i in ia for j in ib]
    expected = [(i, j) for i in range(len(a)) for j in range(len(b))
                if _brute(p, {"a": VALUES[i], "b": VALUES[j]}) is True]
    assert sorted(produced) == expected
    assert plan.rows() == len(expected)
