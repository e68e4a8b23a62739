"""Counts answered by arithmetic equal DuckDB counting the cells; lazy plans equal brute force.

Random small grids (coordinates with NULLs, NaN, repeats, strings, positional dimensions,
ragged chunks) and random WHEREs over their dimensions. The oracle is a plain DuckDB
connection counting the same WHERE over every cell of the table, built with numpy from the
coordinate arrays as zarr-python reads them. The plan is checked against a brute force walk
of the whole chunk grid. Seeded, so a failure replays.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import zarr

import zarrsql
from tests.property.grids import KINDS, cell_columns, write_coordinates
from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Or, evaluate, leaf_truth
from zarrsql.plan.units import DimValues, plan_scan


def _write(path: Path, rng: random.Random) -> tuple[str, list[str], list[str], list[np.ndarray]]:
    """A random store: (path, dimension names, kinds, the cells' values per dimension)."""
    ndim = rng.randint(1, 3)
    names = ["a", "b", "c"][:ndim]
    shape = tuple(rng.randint(1, 7) for _ in range(ndim))
    chunks = tuple(rng.randint(1, 4) for _ in range(ndim))
    kinds = [rng.choice(KINDS) for _ in range(ndim)]
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("v", shape=shape, chunks=chunks, dtype="float32", dimension_names=names, fill_value=0.0)
    axes = write_coordinates(root, str(path), rng, names, kinds, shape)
    return str(path), names, kinds, axes


def _cells(names: list[str], axes: list[np.ndarray]) -> pa.Table:
    """Every cell's coordinates, row-major; a NaN coordinate is NULL as zarrsql reads it."""
    return pa.table(cell_columns(names, axes))


def _leaf(rng: random.Random, name: str, kind: str) -> str:
    if kind == "string":
        return rng.choice(
            [
                f"{name} = 'a'",
                f"{name} < 'b'",
                f"{name} IN ('a', 'c')",
                f"{name} LIKE 'a%'",
                f"{name} IS NULL",
                f"{name} <> 'ab'",
            ]
        )
    c = rng.choice([-1, 0, 1, 2, 3])
    return rng.choice(
        [
            f"{name} < {c}",
            f"{name} >= {c}",
            f"{name} = {c}",
            f"{name} <> {c}",
            f"{name} BETWEEN {c} AND {c + 2}",
            f"{name} IN ({c}, {c + 1.5})",
            f"{name} IS NULL",
            f"{name} IS NOT NULL",
            f"{name} % 2 = 0",
            f"abs({name}) > 1",
            f"NOT ({name} > {c})",
        ]
    )


def _where(rng: random.Random, names: list[str], kinds: list[str], depth: int = 0) -> str:
    if depth >= 2 or rng.random() < 0.35:
        k = rng.randrange(len(names))
        return _leaf(rng, names[k], kinds[k])
    if rng.random() < 0.2:
        return f"NOT ({_where(rng, names, kinds, depth + 1)})"
    op = rng.choice([" AND ", " OR "])
    return "(" + op.join(_where(rng, names, kinds, depth + 1) for _ in range(rng.randint(2, 3))) + ")"


@pytest.mark.parametrize("seed", range(6))
def test_answered_counts_equal_duckdb_over_every_cell(tmp_path, seed):
    rng = random.Random(seed)
    oracle = duckdb.connect()
    with zarrsql.connect() as con:
        for case in range(10):
            path, names, kinds, axes = _write(tmp_path / f"s{case}.zarr", rng)
            oracle.register("cells", _cells(names, axes))
            for _ in range(4):
                where = _where(rng, names, kinds)
                counted = rng.choice(["*", *names])
                sql = f"SELECT count({counted}) FROM read_zarr('{path}') WHERE {where}"
                expected = oracle.sql(f"SELECT count({counted}) FROM cells WHERE {where}").fetchall()
                with zarrsql.trace() as t:
                    got = con.sql(sql).fetchall()
                assert got == expected, (sql, kinds)
                assert t.scans == 0, f"not answered from the plan: {sql}"
            oracle.unregister("cells")


def test_answers_through_views_and_strings_equal_scans(tmp_path):
    """`FROM 'x.zarr'`, a mounted view and a user's view read the same count as a scan
    (a subquery in FROM is not a shape that is answered, so it scans)."""
    path, names, kinds, axes = _write(tmp_path / "v.zarr", random.Random(99))
    where = " OR ".join(f"{n} IS NOT NULL" for n in names)
    oracle = duckdb.connect()
    oracle.register("cells", _cells(names, axes))
    (expected,) = oracle.sql(f"SELECT count(*) FROM cells WHERE {where}").fetchall()
    with zarrsql.connect() as con:
        con.sql(f"CREATE VIEW mine AS SELECT * FROM read_zarr('{path}')")
        for source in (f"'{path}'", "mine"):
            with zarrsql.trace() as t:
                assert con.sql(f"SELECT count(*) FROM {source} WHERE {where}").fetchall() == [expected]
            assert t.scans == 0, source
        zarrsql.mount(con, path, "m")
        (table,) = [r[0] for r in con.sql("SELECT view_name FROM zarr_mounts('m')").fetchall()]
        with zarrsql.trace() as t:
            assert con.sql(
                f'SELECT count(*) FROM m."{table}" AS q WHERE {where.replace(names[0], "q." + names[0], 1)}'
            ).fetchall() == [expected]
        assert t.scans == 0
        with zarrsql.trace() as t:
            scanned = con.sql(f"SELECT count(*) FROM (SELECT * FROM read_zarr('{path}')) WHERE {where}").fetchall()
        assert scanned == [expected]
        assert t.scans == 1


def test_bounds_join_the_answered_count(tmp_path):
    """`bounds :=` restricts the rows of the scan; the answered count restricts them too."""
    path = str(tmp_path / "b.zarr")
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("v", shape=(6, 5), chunks=(4, 2), dtype="float32", dimension_names=["a", "b"])
    a = np.array([0.0, 1.0, np.nan, 2.0, 3.0, 1.5])
    root.create_array("a", data=a, dimension_names=["a"])
    oracle = duckdb.connect()
    oracle.register("cells", _cells(["a", "b"], [a, np.arange(5)]))
    sql = "SELECT count(*) FROM {t} WHERE (b < 3 OR a > 1.2)"
    expected = oracle.sql(sql.format(t="cells") + " AND a BETWEEN 1 AND 2.5").fetchall()
    with zarrsql.connect() as con, zarrsql.trace() as t:
        got = con.sql(sql.format(t=f"read_zarr('{path}', bounds := [['a', '1', '2.5']])")).fetchall()
    assert got == expected
    assert t.scans == 0


def test_shapes_that_are_not_answered_run_as_before(tmp_path):
    """Grouping, LIMIT, another aggregate, a data column, a view that filters: scanned, and right."""
    path, names, kinds, axes = _write(tmp_path / "n.zarr", random.Random(5))
    oracle = duckdb.connect()
    cells = _cells(names, axes).append_column("v", pa.array(np.zeros(int(np.prod([len(a) for a in axes])), "float32")))
    oracle.register("cells", cells)
    d = names[0]
    statements = [
        f"SELECT count(*) FROM {{t}} WHERE v = 0 AND {d} IS NOT NULL",
        "SELECT count(v) FROM {t}",
        f"SELECT arg_min({d}, {d}) FROM {{t}}",
        f"SELECT count(*) FROM {{t}} GROUP BY {d} ORDER BY 1",
        "SELECT count(*) FROM {t} LIMIT 1",
        f"SELECT count(*) FILTER (WHERE {d} IS NULL) FROM {{t}}",
        f"SELECT count(*) FROM {{t}} WHERE {d} IS NULL OR random() < 2",
    ]
    with zarrsql.connect() as con:
        con.sql(f"CREATE VIEW filtered AS SELECT * FROM read_zarr('{path}') WHERE {d} IS NOT NULL")
        (expected,) = oracle.sql(f"SELECT count(*) FROM cells WHERE {d} IS NOT NULL").fetchall()
        with zarrsql.trace() as t:
            assert con.sql("SELECT count(*) FROM filtered").fetchall() == [expected]
        assert t.scans == 1
        for sql in statements:
            with zarrsql.trace() as t:
                got = con.sql(sql.format(t=f"read_zarr('{path}')")).fetchall()
            assert got == oracle.sql(sql.format(t="cells")).fetchall(), sql
            assert t.scans == 1, sql


# -- the plan against brute force ---------------------------------------------------------------


def _predicate(rng: random.Random, names: list[str], depth: int = 0):
    if depth > 2 or rng.random() < 0.4:
        name, r = rng.choice(names), rng.random()
        if r < 0.6:
            return Cmp(name, rng.choice(["<", "<=", "=", "!=", ">", ">="]), float(rng.randint(-1, 6)))
        if r < 0.8:
            return InSet(name, (float(rng.randint(0, 5)), float(rng.randint(0, 5))))
        return IsNull(name, negated=rng.random() < 0.5)
    if rng.random() < 0.2:
        return Not(_predicate(rng, names, depth + 1))
    kind = And if rng.random() < 0.5 else Or
    return kind(tuple(_predicate(rng, names, depth + 1) for _ in range(rng.randint(2, 3))))


def _brute_force(shape, grid, dims, predicate):
    """Every unit of the grid in row-major order with its mask of kept cells."""
    ndim = len(shape)

    def leaf(p):
        k = [d.name for d in dims].index(p.column)
        t, n = leaf_truth(p, dims[k].values, dims[k].nulls)
        view = [1] * ndim
        view[k] = shape[k]
        return t.reshape(view), n.reshape(view)

    mask = np.broadcast_to(evaluate(predicate, leaf)[0], shape)
    units = []
    for index in itertools.product(*[range(-(-n // g)) for n, g in zip(shape, grid, strict=True)]):
        region = tuple((i * g, min((i + 1) * g, n)) for i, g, n in zip(index, grid, shape, strict=True))
        block = mask[tuple(slice(a, b) for a, b in region)]
        if block.any():
            units.append((index, region, block.tolist()))
    return units, int(mask.sum())


def _unit_mask(unit) -> list:
    full = np.zeros(unit.shape, dtype=bool)
    if unit.select is None:
        full[...] = True
    elif isinstance(unit.select, np.ndarray):
        full = unit.select
    else:
        picks = [np.arange(n) if s is None else s for s, n in zip(unit.select, unit.shape, strict=True)]
        full[np.ix_(*picks)] = True
    return full.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_lazy_plan_equals_brute_force_enumeration(seed):
    rng = random.Random(1000 + seed)
    for _ in range(100):
        ndim = rng.randint(1, 3)
        shape = tuple(rng.randint(0, 8) for _ in range(ndim))
        grid = tuple(rng.randint(1, 4) for _ in range(ndim))
        names = ["a", "b", "c"][:ndim]
        dims = []
        for name, n in zip(names, shape, strict=True):
            values = np.array([rng.choice([0.0, 1.0, 2.0, 3.0, 5.0, np.nan]) for _ in range(n)], dtype=float)
            nulls = np.array([rng.random() < 0.2 for _ in range(n)], dtype=bool) if rng.random() < 0.5 else None
            dims.append(DimValues(name, values, nulls))
        predicate = _predicate(rng, names)
        plan = plan_scan(shape, grid, dims, predicate)
        expected, rows = _brute_force(shape, grid, dims, predicate)
        got = [(u.index, u.region, _unit_mask(u)) for u in plan.units()]
        assert got == expected, predicate
        assert plan.rows() == rows, predicate
        assert plan.units_kept() == len(expected), predicate


def _box(rng: random.Random, names: list[str]):
    """One OR-ed part of a point list or a band: conditions on two or more axes, ANDed."""
    picked = rng.sample(names, rng.randint(2, len(names)))
    parts = []
    for name in picked:
        r = rng.random()
        if r < 0.5:
            parts.append(Cmp(name, "=", float(rng.choice([0, 1, 2, 3, 5]))))
        elif r < 0.8:
            parts.append(Cmp(name, rng.choice(["<", ">="]), float(rng.randint(0, 5))))
        else:
            parts.append(InSet(name, (float(rng.randint(0, 5)), float(rng.randint(0, 5)))))
    return And(tuple(parts))


@pytest.mark.parametrize("seed", range(3))
def test_union_of_boxes_counts_equal_brute_force(seed):
    """ORs of boxes (point lists, bands such as `x < 10 OR y < 10`) are counted by arithmetic
    over the units the boxes share (`plan.units._box_rows`): the count equals brute force
    and the sum over the plan's own units, also where boxes overlap inside one unit."""
    rng = random.Random(2000 + seed)
    checked = 0
    for _ in range(150):
        ndim = rng.randint(2, 3)
        shape = tuple(rng.randint(1, 9) for _ in range(ndim))
        grid = tuple(rng.randint(1, 4) for _ in range(ndim))
        names = ["a", "b", "c"][:ndim]
        dims = [
            DimValues(name, np.array([rng.choice([0.0, 1.0, 2.0, 3.0, 5.0]) for _ in range(n)]), None)
            for name, n in zip(names, shape, strict=True)
        ]
        boxes = [_box(rng, names) for _ in range(rng.randint(2, 6))]
        if rng.random() < 0.3:  # a band beside the boxes: every cell of an axis below a value
            boxes.append(And((Cmp(names[0], "<", 2.0), Cmp(names[1], ">=", 0.0))))
        predicate = Or(tuple(boxes))
        plan = plan_scan(shape, grid, dims, predicate)
        expected, rows = _brute_force(shape, grid, dims, predicate)
        if plan._boxes is None:
            continue
        checked += 1
        assert plan.rows() == rows == sum(u.num_rows() for u in plan.units()), predicate
        assert [(u.index, u.region, _unit_mask(u)) for u in plan.units()] == expected, predicate
    assert checked > 100  # the boxes path, not another, was what ran
