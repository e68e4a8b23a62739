"""min, max and count(DISTINCT) of dimension columns answered from the coordinates equal
DuckDB computing them over every cell.

Random small grids (float coordinates with NaN and repeats, integers, strings, CF-encoded
times with a missing value, positional dimensions, axes of length 0, a one-dimensional
auxiliary coordinate) and random select lists
mixing count(*), count(c), min(c), max(c) and count(DISTINCT c) under random WHEREs. The
oracle is a plain DuckDB connection running the same statement over a table of every cell,
built with numpy from the arrays as zarr-python reads them (times decoded with numpy from
their units). Results and result types must be equal, and no scan may run. Seeded, so a
failure replays.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import zarr

import zarrsql
from zarrsql.plan.classes import axes_for, live_classes
from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Or, Predicate, evaluate, leaf_truth

KINDS = ("float", "float32", "int", "positional", "string", "time")
#: CF time units of the "time" coordinates, and the decoded value of 0 in them.
TIME_UNITS, TIME_BASE = "hours since 2000-01-01", np.datetime64("2000-01-01T00:00:00", "us")
TIME_FILL = -9999


def _coordinate(rng: random.Random, kind: str, n: int) -> np.ndarray | None:
    if kind == "positional":
        return None
    if kind in ("float", "float32"):
        values = [rng.choice([-1.5, -0.0, 0.0, 1.5, 2.0, 3.25, np.nan]) for _ in range(n)]
        return np.array(values, dtype="float64" if kind == "float" else "float32")
    if kind == "int":
        return np.array([rng.choice([-2, 0, 1, 3, 4]) for _ in range(n)], dtype="int16")
    if kind == "time":
        return np.array([rng.choice([0, 5, 24, 30, TIME_FILL]) for _ in range(n)], dtype="int64")
    return np.array([rng.choice(["a", "b", "ab", "c"]) for _ in range(n)], dtype=object)


def _write(path: Path, rng: random.Random) -> tuple[str, list[tuple[str, int, str, np.ndarray]]]:
    """A random store: its path and columns (name, axis, kind, raw values along the axis):
    one per dimension, and maybe a one-dimensional auxiliary coordinate `x` (CF
    `coordinates`) along one of them."""
    ndim = rng.randint(1, 3)
    names = ["a", "b", "c"][:ndim]
    shape = tuple(rng.choice([0, 1, 2, 3, 5, 6]) if rng.random() < 0.1 else rng.randint(1, 6) for _ in range(ndim))
    chunks = tuple(rng.randint(1, 4) for _ in range(ndim))
    kinds = [rng.choice(KINDS) for _ in range(ndim)]
    aux = (rng.randrange(ndim), rng.choice(["float", "int", "string"])) if rng.random() < 0.4 else None
    root = zarr.open_group(path, mode="w", zarr_format=3)
    attrs = {"coordinates": "x"} if aux else {}
    root.create_array(
        "v", shape=shape, chunks=chunks, dtype="float32", dimension_names=names, fill_value=0.0, attributes=attrs
    )
    arrays = list(zip(names, names, kinds, strict=True)) + ([("x", names[aux[0]], aux[1])] if aux else [])
    for name, dim, kind in arrays:
        n = shape[names.index(dim)]
        values = _coordinate(rng, kind, n)
        if values is None:
            continue
        dtype = str if kind == "string" else values.dtype
        attrs = {"units": TIME_UNITS, "calendar": "standard", "_FillValue": TIME_FILL} if kind == "time" else {}
        chunk = (max(1, rng.randint(1, max(n, 1))),)
        root.create_array(name, shape=(n,), chunks=chunk, dtype=dtype, dimension_names=[dim], attributes=attrs)
        if n:
            root[name][:] = values
    group = zarr.open_group(path, mode="r")
    columns = []
    for name, dim, kind in arrays:
        k = names.index(dim)
        columns.append((name, k, kind, np.asarray(group[name][:]) if name in group else np.arange(shape[k])))
    return str(path), columns


def _oracle_column(kind: str, flat: np.ndarray, nan_as_null: bool) -> pa.Array:
    """A coordinate column as DuckDB would hold it: CF time decoded with numpy (the fill
    value is NULL), NaN NULL when `nan_as_null`, the stored type otherwise kept."""
    if kind == "time":
        stamps = TIME_BASE + flat.astype("int64") * np.timedelta64(3600_000_000, "us")
        return pa.array(stamps, type=pa.timestamp("us"), mask=flat == TIME_FILL)
    if kind == "string":
        return pa.array(flat.tolist(), type=pa.string())
    if kind == "positional":
        return pa.array(flat.astype("int64"))
    mask = np.isnan(flat) if flat.dtype.kind == "f" and nan_as_null else None
    return pa.array(flat, mask=mask)


def _cells(columns: list[tuple[str, int, str, np.ndarray]], nan_as_null: bool) -> pa.Table:
    """Every cell's coordinates, row-major: each column's values at the cell's position
    along its axis."""
    shape = [len(values) for name, _, _, values in columns if name != "x"]  # the dimensions come first
    index = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    return pa.table(
        {name: _oracle_column(kind, values[index[k].reshape(-1)], nan_as_null) for name, k, kind, values in columns}
    )


def _leaf(rng: random.Random, name: str, kind: str) -> str:
    if kind == "string":
        return rng.choice([f"{name} = 'a'", f"{name} < 'b'", f"{name} IN ('a', 'c')", f"{name} LIKE 'a%'"])
    if kind == "time":
        day = rng.choice(["2000-01-01", "2000-01-01 05:00", "2000-01-02"])
        return rng.choice(
            [f"{name} < TIMESTAMP '{day}'", f"{name} >= TIMESTAMP '{day}'", f"{name} IS NULL", f"hour({name}) = 5"]
        )
    c = rng.choice([-1, 0, 1.5, 2, 3])
    return rng.choice(
        [
            f"{name} < {c}",
            f"{name} >= {c}",
            f"{name} = {c}",
            f"{name} BETWEEN {c} AND {c + 2}",
            f"{name} IN ({c}, 2)",
            f"{name} IS NULL",
            f"isnan({name})" if kind.startswith("float") else f"{name} % 2 = 0",
            f"NOT ({name} > {c})",
        ]
    )


def _where(rng: random.Random, names: list[str], kinds: list[str], depth: int = 0) -> str:
    if depth >= 2 or rng.random() < 0.4:
        k = rng.randrange(len(names))
        return _leaf(rng, names[k], kinds[k])
    op = rng.choice([" AND ", " OR "])
    return "(" + op.join(_where(rng, names, kinds, depth + 1) for _ in range(rng.randint(2, 3))) + ")"


def _select(rng: random.Random, names: list[str]) -> str:
    items = []
    for _ in range(rng.randint(1, 4)):
        name = rng.choice(names)
        kinds = [f"min({name})", f"max({name})", f"count(DISTINCT {name})", f"count({name})", "count(*)"]
        items.append(rng.choice(kinds))
    return ", ".join(items)


@pytest.mark.parametrize("seed", range(8))
def test_answered_aggregates_equal_duckdb_over_every_cell(tmp_path, seed):
    rng = random.Random(7000 + seed)
    oracle = duckdb.connect()
    with zarrsql.connect() as con:
        for case in range(8):
            path, columns = _write(tmp_path / f"s{case}.zarr", rng)
            names, kinds = [c[0] for c in columns], [c[2] for c in columns]
            nan_as_null = rng.random() < 0.5
            oracle.register("cells", _cells(columns, nan_as_null))
            source = f"read_zarr('{path}', nan_as_null := {str(nan_as_null).lower()})"
            for _ in range(5):
                where = "" if rng.random() < 0.25 else f" WHERE {_where(rng, names, kinds)}"
                select = _select(rng, names)
                expected = oracle.sql(f"SELECT {select} FROM cells{where}")
                with zarrsql.trace() as t:
                    got = con.sql(f"SELECT {select} FROM {source}{where}")
                    rows = got.fetchall()
                sql = (select, where, kinds, nan_as_null)
                assert [str(x) for x in got.types] == [str(x) for x in expected.types], sql
                assert _same(rows, expected.fetchall()), sql
                if _arrow_compares_nan(columns, nan_as_null, where):
                    continue  # DuckDB 1.5 lets Arrow filter: the statement is scanned instead
                assert t.scans == 0, f"not answered from the coordinates: {sql}"
                assert t.rows == 0, sql
            oracle.unregister("cells")


def _arrow_compares_nan(columns: list[tuple[str, int, str, np.ndarray]], nan_as_null: bool, where: str) -> bool:
    """On DuckDB 1.5 a pushed comparison is Arrow's, where NaN is below every number, not
    DuckDB's, where it is above: a WHERE over NaN values is not answered there."""
    nan = any(k.startswith("float") and np.isnan(v).any() for _, _, k, v in columns)
    return duckdb.__version__.startswith("1.") and not nan_as_null and bool(where) and nan


def _same(got: list[tuple], expected: list[tuple]) -> bool:
    """Equal rows, a NaN equal to a NaN (DuckDB's own rule for min and max)."""
    if len(got) != len(expected):
        return False
    for g, e in zip(got[0] if got else (), expected[0] if expected else (), strict=True):
        both_nan = isinstance(g, float) and isinstance(e, float) and g != g and e != e
        if not both_nan and (g != e or type(g) is not type(e)):
            return False
    return True


# -- live classes against brute force --------------------------------------------------------


def _predicate(rng: random.Random, names: list[str], depth: int = 0) -> Predicate:
    if depth > 2 or rng.random() < 0.4:
        name, r = rng.choice(names), rng.random()
        if r < 0.6:
            return Cmp(name, rng.choice(["<", "<=", "=", "!=", ">", ">="]), float(rng.randint(-1, 4)))
        if r < 0.8:
            return InSet(name, (float(rng.randint(0, 3)), float(rng.randint(0, 3))))
        return IsNull(name, negated=rng.random() < 0.5)
    if rng.random() < 0.2:
        return Not(_predicate(rng, names, depth + 1))
    kind = And if rng.random() < 0.5 else Or
    return kind(tuple(_predicate(rng, names, depth + 1) for _ in range(rng.randint(2, 3))))


@pytest.mark.parametrize("seed", range(4))
def test_live_classes_are_the_positions_of_kept_cells(seed):
    """A position of an axis is in a live class exactly when some cell through it is kept:
    checked by evaluating the predicate over every cell with numpy."""
    rng = random.Random(9000 + seed)
    for _ in range(150):
        ndim = rng.randint(1, 3)
        names = ["a", "b", "c"][:ndim]
        shape = tuple(rng.choice([0, 1, 2, 4, 5]) for _ in range(ndim))
        values = [np.array([rng.choice([-1.0, 0.0, 1.0, 2.0, 3.0]) for _ in range(n)]) for n in shape]
        nulls = [np.array([rng.random() < 0.2 for _ in range(n)], dtype=bool) for n in shape]
        predicate = _predicate(rng, names)

        def truth(leaf, values=values, nulls=nulls, names=names):
            k = names.index(leaf.column)
            return leaf_truth(leaf, values[k], nulls[k])

        axes = axes_for(predicate, ndim, lambda leaf, names=names: names.index(leaf.column), truth, shape)
        cells = np.ones(shape, dtype=bool)
        if all(shape):

            def grid(leaf, names=names, shape=shape):
                t, n = truth(leaf)
                view = [1] * len(shape)
                view[names.index(leaf.column)] = len(t)
                return t.reshape(view), n.reshape(view)

            cells = np.broadcast_to(evaluate(predicate, grid)[0], shape)
        for k in range(ndim):
            live = live_classes(predicate, axes, k)
            assert live is not None
            others = tuple(j for j in range(ndim) if j != k)
            kept = cells.any(axis=others) if all(shape) else np.zeros(shape[k], dtype=bool)
            inverse = axes[k].inverse
            assert inverse is not None
            assert (live[inverse] == kept).all(), (predicate, shape, k)
