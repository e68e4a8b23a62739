"""GROUP BY computed inside the scan equals DuckDB aggregating every cell itself.

Random small grids (coordinates with NULLs, repeats, strings, positional dimensions, ragged
chunks, small chunks that the reader groups), a float variable with NaN (NULL) and an int
variable with a fill value (NULL), and random statements: group keys that are dimensions or
expressions of one dimension, aggregates of the variables (also times a factor of one axis)
and of coordinate expressions, conditions on one axis each, HAVING, ORDER BY, LIMIT. The
oracle is a plain DuckDB connection running the same statement over every cell of the table,
built with numpy from the arrays as zarr-python reads them. Seeded, so a failure replays.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import zarr

import zarrsql
from tests.property.grids import KINDS, cell_columns, write_coordinates
from zarrsql.engine import grouped


@pytest.fixture(autouse=True)
def _every_scan_qualifies(monkeypatch):
    """These grids are tiny: let every one of them be aggregated by the scan."""
    monkeypatch.setattr(grouped, "MIN_ROWS", 0)


def _write(path: Path, rng: random.Random) -> tuple[str, list[str], list[str], list[np.ndarray], dict]:
    """A random store: (path, dimension names, kinds, coordinates, {variable: (values, nulls)})."""
    ndim = rng.randint(1, 3)
    names = ["a", "b", "c"][:ndim]
    shape = tuple(rng.randint(1, 9) for _ in range(ndim))
    chunks = tuple(rng.randint(1, 4) for _ in range(ndim))
    kinds = [rng.choice(KINDS) for _ in range(ndim)]
    root = zarr.open_group(path, mode="w", zarr_format=3)
    np_rng = np.random.default_rng(rng.randint(0, 2**31))
    v = np_rng.choice([-2.5, -1.0, 0.0, 0.5, 1.25, 7.0, np.nan], size=shape).astype("float32")
    i = np_rng.choice([-3, 0, 2, 5, 11, -99], size=shape).astype("int32")
    root.create_array("v", shape=shape, chunks=chunks, dtype="float32", dimension_names=names, fill_value=np.nan)
    root["v"][...] = v
    root.create_array("i", shape=shape, chunks=chunks, dtype="int32", dimension_names=names, fill_value=-99)
    root["i"][...] = i
    axes = write_coordinates(root, str(path), rng, names, kinds, shape)
    group = zarr.open_group(path, mode="r")
    data = {"v": (group["v"][...], np.isnan(group["v"][...])), "i": (group["i"][...], group["i"][...] == -99)}
    return str(path), names, kinds, axes, data


def _cells(names: list[str], axes: list[np.ndarray], data: dict) -> pa.Table:
    """Every cell, row-major: its coordinates (a NaN coordinate is NULL) and variables."""
    cols = cell_columns(names, axes)
    for name, (values, nulls) in data.items():
        cols[name] = pa.array(values.reshape(-1), mask=nulls.reshape(-1))
    return pa.table(cols)


def _key(rng: random.Random, name: str, kind: str) -> str:
    if kind == "string":
        return rng.choice([name, f"upper({name})", f"length({name})", f"{name} < 'b'"])
    return rng.choice([name, name, f"{name} % 2", f"round({name} / 2)", f"{name} > 1", f"abs({name})"])


def _aggregate(rng: random.Random, names: list[str], kinds: list[str]) -> str:
    numeric = [n for n, k in zip(names, kinds, strict=True) if k != "string"]
    choices = [
        "count(*)",
        "count(v)",
        "sum(v)",
        "avg(v)",
        "min(v)",
        "max(v)",
        "count(i)",
        "sum(i)",
        "avg(i)",
        "min(i)",
        "max(i)",
        "mean(v)",
        "min(DISTINCT i)",
    ]
    if numeric:
        d = rng.choice(numeric)
        choices += [
            f"sum(v * cos({d}))",
            f"avg(cos({d}) * v)",
            f"max(i * CAST({d} AS DOUBLE))",
            f"sum(cos({d}))",
            f"min({d})",
            f"max({d} * 2)",
            f"avg({d})",
            f"count({d})",
        ]
    strings = [n for n, k in zip(names, kinds, strict=True) if k == "string"]
    if strings:
        choices += [f"min({strings[0]})", f"count({strings[0]})"]
    return rng.choice(choices)


def _leaf(rng: random.Random, name: str, kind: str) -> str:
    if kind == "string":
        return rng.choice([f"{name} = 'a'", f"{name} < 'b'", f"{name} IN ('a', 'c')", f"{name} IS NULL"])
    c = rng.choice([-1, 0, 1, 2, 3])
    return rng.choice(
        [
            f"{name} < {c}",
            f"{name} >= {c}",
            f"{name} <> {c}",
            f"{name} BETWEEN {c} AND {c + 2}",
            f"{name} IS NOT NULL",
            f"({name} < 0 OR {name} > 2)",
        ]
    )


def _statement(rng: random.Random, names: list[str], kinds: list[str]) -> str:
    keyed = rng.sample(range(len(names)), rng.randint(0, len(names)))
    keys = [_key(rng, names[k], kinds[k]) for k in keyed]
    aggregates = [_aggregate(rng, names, kinds) for _ in range(rng.randint(1, 3))]
    items = [f"{k} AS k{j}" for j, k in enumerate(keys)] + [f"{a} AS x{j}" for j, a in enumerate(aggregates)]
    sql = f"SELECT {', '.join(items)} FROM {{t}}"
    if rng.random() < 0.6:
        leaves = [_leaf(rng, names[k], kinds[k]) for k in rng.sample(range(len(names)), rng.randint(1, len(names)))]
        sql += " WHERE " + " AND ".join(leaves)
    if keys:
        sql += rng.choice([" GROUP BY ALL", " GROUP BY " + ", ".join(f"k{j}" for j in range(len(keys)))])
        if rng.random() < 0.3:
            sql += " HAVING count(*) > 1"
        if rng.random() < 0.3:
            sql += " ORDER BY " + ", ".join(f"k{j}" for j in range(len(keys))) + " LIMIT 3"
    return sql


def _canonical(rows: list[tuple]) -> list[tuple]:
    def key(value):
        if value is None:
            return (0, "")
        if isinstance(value, float) and math.isnan(value):
            return (1, "")
        return (2, repr(value) if not isinstance(value, (int, float)) else f"{float(value):+.9e}")

    return sorted(rows, key=lambda row: [key(v) for v in row])


def _same(got: list[tuple], expected: list[tuple]) -> bool:
    if len(got) != len(expected):
        return False
    for a, b in zip(_canonical(got), _canonical(expected), strict=True):
        for x, y in zip(a, b, strict=True):
            if isinstance(x, float) and isinstance(y, float):
                if math.isnan(x) != math.isnan(y) or (
                    not math.isnan(x) and not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
                ):
                    return False
            elif x != y:
                return False
    return True


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("AGG_SEEDS", "8"))))
def test_scan_aggregates_equal_duckdb_over_every_cell(tmp_path, seed):
    rng = random.Random(1000 + seed)
    oracle = duckdb.connect()
    computed = 0
    with zarrsql.connect() as con:
        for case in range(8):
            path, names, kinds, axes, data = _write(tmp_path / f"s{case}.zarr", rng)
            oracle.register("cells", _cells(names, axes, data))
            for _ in range(5):
                sql = _statement(rng, names, kinds)
                expected_rel = oracle.sql(sql.format(t="cells"))
                expected = expected_rel.fetchall()
                rel = con.sql(sql.format(t=f"read_zarr('{path}')"))
                got = rel.fetchall()
                ordered = " ORDER BY " in sql
                assert (
                    (got == expected)
                    if ordered and not any(isinstance(v, float) for row in got for v in row)
                    else _same(got, expected)
                ), (sql, kinds, got, expected)
                assert rel.columns == expected_rel.columns, sql
                assert [str(t) for t in rel.types] == [str(t) for t in expected_rel.types], sql
                computed += "__zarrsql_grouped_" in rel.sql_query()
            oracle.unregister("cells")
    # most random statements have the shape the scan computes: the property is about them
    assert computed >= 25, computed
