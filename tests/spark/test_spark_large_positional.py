"""Spark plans partitions over a long positional axis from runs, never one ordinal at a time.

A positional dimension (no coordinate array) keeps its filtered positions as runs
(plan/positions.py). The driver turned them into unit ordinals through an array of every kept
position, which was refused past 2^25 positions (`x >= 1` on 4 * 10^7 cells), and a full scan
through an array of every unit ordinal (8 GB for 10^9 chunks of one cell). The stores here are
metadata documents and a few written chunks. Each plan runs in a child process under an
address-space cap (as tests/places/test_positional_dimensions_stay_lazy.py does): it reports
the partitions and the first rows of the first and last ones. Expectations come from numpy
arithmetic over the positions and from zarr-python reading the written chunks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import zarr

pytestmark = pytest.mark.spark

TALL = 40_000_000  # 4 * 10^7 cells in chunks of 1,000: 40,000 work units
TALL_CHUNK = 1_000
BILLION = 1_000_000_000  # 10^9 chunks of one cell, none written
PARTITION_BYTES = 128 * 2**20  # the source's default
#: The child's address space: enough for Spark's Python side and numpy, far from 10^9 ordinals.
CAP_GB = 4


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("long_positional")
    tall = zarr.open_group(base / "tall.zarr", mode="w", zarr_format=3)
    a = tall.create_array("v", shape=(TALL,), chunks=(TALL_CHUNK,), dtype="int16", dimension_names=["x"], fill_value=-1)
    a[:5] = np.arange(100, 105, dtype="int16")  # the first chunk and the last written, the rest fill
    a[TALL - 5 :] = np.arange(5, dtype="int16")
    billion = zarr.open_group(base / "billion.zarr", mode="w", zarr_format=3)
    billion.create_array("v", shape=(BILLION,), chunks=(1,), dtype="float32", dimension_names=["x"], fill_value=0)
    return {"tall": str(base / "tall.zarr"), "billion": str(base / "billion.zarr")}


_CHILD = textwrap.dedent(
    """
    import itertools, json, pickle, resource, sys
    cap = int(sys.argv[1]) << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from pyspark.sql import datasource as ds
    from zarrsql.spark.source import ZarrDataSource

    def spark_filter(f):
        kind, column, value = f
        return getattr(ds, kind)((column,), tuple(value) if kind == "In" else value)

    def first_rows(reader, part, k=5):
        rows = []
        for batch in reader.read(part):
            rows += list(zip(batch.column("x").to_pylist(), batch.column("v").to_pylist()))
            if len(rows) >= k:
                break
        return rows[:k]

    out = []
    for store, filters in json.loads(sys.stdin.read()):
        source = ZarrDataSource({"path": store, "pushdown": "true"})
        reader = source.reader(source.schema())
        pushed = [ds.Not(spark_filter(f[1])) if f[0] == "Not" else spark_filter(f) for f in filters]
        try:
            left = list(reader.pushFilters(pushed))
            parts = reader.partitions()
            out.append({
                "left": len(left),
                "runs": [[list(r) for r in p.runs] for p in parts],
                "largest_pickle": max(len(pickle.dumps(p)) for p in parts),
                "head": first_rows(reader, parts[0]),
                "tail_head": first_rows(reader, parts[-1]),
            })
        except Exception as e:  # reported, for the test to show
            out.append(f"{type(e).__module__}.{type(e).__name__}: {str(e)[:300]}")
    print(json.dumps(out))
    """
)


def _plan(cases: list[tuple[str, list[Any]]]) -> list[Any]:
    """Each case's partitions (or its error) from a child process under the address-space cap."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(CAP_GB)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _first_kept(unit: int, g: int, keeps: Any, k: int = 5) -> list[int]:
    """The first `k` positions of chunk `unit` that `keeps` (numpy over the chunk's positions)."""
    positions = np.arange(unit * g, (unit + 1) * g)
    return positions[keeps(positions)][:k].tolist()  # type: ignore[no-any-return]


def _values(store: str, positions: list[int]) -> list[Any]:
    """zarr-python's values at `positions`, its nonzero fill value (-1) as SQL's NULL."""
    a = zarr.open_array(store, path="v")
    return [None if v == -1 else v.item() for v in a.get_coordinate_selection(np.array(positions, dtype=np.int64))]


def _check(store: str, got: Any, g: int, keeps: Any, units: np.ndarray, per_partition: int) -> None:
    """`got` partitions exactly `units` (each once, in order) into groups of `per_partition`,
    and the first rows of its first and last partitions are the store's at the positions kept."""
    assert isinstance(got, dict), got
    assert got["left"] == 0  # every filter on the positions is applied by the scan
    ordinals = np.concatenate([np.arange(a, b) for runs in got["runs"] for a, b in runs])
    assert np.array_equal(ordinals, units)
    sizes = [sum(b - a for a, b in runs) for runs in got["runs"]]
    assert sizes[:-1] == [per_partition] * (len(sizes) - 1)
    assert 0 < sizes[-1] <= per_partition
    assert got["largest_pickle"] < 300  # a partition is a few pairs of integers
    for rows, first_unit in ((got["head"], units[0]), (got["tail_head"], got["runs"][-1][0][0])):
        positions = _first_kept(int(first_unit), g, keeps)
        assert rows == [[p, v] for p, v in zip(positions, _values(store, positions), strict=True)]


def test_a_filter_keeping_more_than_2_25_positions_plans_partitions(stores: dict[str, str]) -> None:
    tall, g = stores["tall"], TALL_CHUNK
    per_partition = PARTITION_BYTES // (g * (8 + 2))  # x (BIGINT) and v (SMALLINT)
    cases = [
        ([["GreaterThanOrEqual", "x", 1]], lambda x: x >= 1),  # 39,999,999 positions
        (
            [["GreaterThanOrEqual", "x", 2_500_500], ["LessThan", "x", 39_000_250]],
            lambda x: (x >= 2_500_500) & (x < 39_000_250),
        ),
        ([["Not", ["In", "x", [2, 39_999_998]]]], lambda x: ~np.isin(x, [2, 39_999_998])),  # three runs
        ([], lambda x: np.ones(len(x), dtype=bool)),
    ]
    got = _plan([(tall, filters) for filters, _ in cases])
    # the kept units: numpy over the chunk numbers of the first and last position kept
    bounds = [(1, TALL), (2_500_500, 39_000_250), (0, TALL), (0, TALL)]
    for result, (_, keeps), (first, stop) in zip(got, cases, bounds, strict=True):
        _check(tall, result, g, keeps, np.arange(first // g, (stop - 1) // g + 1), per_partition)


def test_a_billion_one_cell_chunks_plan_without_an_ordinal_each(stores: dict[str, str]) -> None:
    billion = stores["billion"]
    per_partition = PARTITION_BYTES // (8 + 4)  # a unit is one cell: x (BIGINT) and v (FLOAT)
    got = _plan([(billion, []), (billion, [["GreaterThanOrEqual", "x", 10]]), (billion, [["LessThan", "x", 0]])])
    for result, first in zip(got[:2], (0, 10), strict=True):
        assert isinstance(result, dict), result
        runs = [r for p in result["runs"] for r in p]
        # consecutive runs covering [first, 10^9) exactly, in partitions of per_partition units
        assert runs[0][0] == first
        assert runs[-1][1] == BILLION
        assert all(a[1] == b[0] for a, b in zip(runs, runs[1:], strict=False))
        sizes = [sum(b - a for a, b in p) for p in result["runs"]]
        assert sizes[:-1] == [per_partition] * (len(sizes) - 1)
        assert 0 < sizes[-1] <= per_partition
        assert result["largest_pickle"] < 300
        # the first five cells of the first and last partitions: the fill value 0 is data
        assert result["head"] == [[first + k, 0.0] for k in range(5)]
        assert result["tail_head"] == [[result["runs"][-1][0][0] + k, 0.0] for k in range(5)]
    assert isinstance(got[2], dict)
    assert got[2]["runs"] == [[]]  # one partition naming no unit
    assert got[2]["head"] == []


# -- kept units as runs over several dimensions, against numpy over every cell ---------------

SHAPE, CHUNKS = (37, 23, 5), (5, 4, 2)
Y = np.linspace(80.0, -30.0, SHAPE[1])  # a descending coordinate between two positional axes


@pytest.fixture(scope="module")
def cube(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("v", shape=SHAPE, chunks=CHUNKS, dtype="int8", dimension_names=["t", "y", "z"], fill_value=0)
    root.create_array("y", data=Y, dimension_names=["y"])
    return str(path)


def _cases() -> list[tuple[Any, Any]]:
    from zarrsql.plan.predicate import And, Cmp, InSet, Not, Or

    return [
        (Cmp("t", ">=", 12), lambda t, y, z: t >= 12),
        (And((Cmp("t", ">", 3), Cmp("t", "<", 9), Cmp("z", "=", 4))), lambda t, y, z: (t > 3) & (t < 9) & (z == 4)),
        (And((Not(InSet("t", (0, 17, 36))), Cmp("y", "<", 10.0))), lambda t, y, z: ~np.isin(t, [0, 17, 36]) & (y < 10)),
        (
            And((InSet("t", (2, 30)), Cmp("y", ">", 50.0), Cmp("z", "<=", 1))),
            lambda t, y, z: np.isin(t, [2, 30]) & (y > 50) & (z <= 1),
        ),
        (And((Cmp("y", ">", 100.0), Cmp("t", ">", 1))), lambda t, y, z: (y > 100) & (t > 1)),
        (Or((Cmp("t", "<", 2), Cmp("z", "=", 3))), lambda t, y, z: (t < 2) | (z == 3)),  # not separable: listed
        (Cmp("z", "!=", 2), lambda t, y, z: z != 2),
    ]


def test_kept_units_over_several_dimensions_are_numpys(cube: str) -> None:
    from zarrsql.scan import ReadRequest, open_table
    from zarrsql.spark.partitions import group, kept_ordinals

    t, y, z = np.meshgrid(np.arange(SHAPE[0]), Y, np.arange(SHAPE[2]), indexing="ij")
    counts = tuple(-(-n // g) for n, g in zip(SHAPE, CHUNKS, strict=True))
    scan = open_table(ReadRequest(store=cube))
    for predicate, where in _cases():
        cells = np.argwhere(where(t, y, z))  # every cell the predicate keeps, by index
        want = np.unique(np.ravel_multi_index((cells // np.array(CHUNKS)).T, counts)) if len(cells) else []
        kept = kept_ordinals(scan.plan(predicate))
        assert np.array_equal(np.asarray(kept), want), predicate
        for step in (1, 3, 7, 1000):
            parts = group(kept, step)
            assert [i for runs in parts for a, b in runs for i in range(a, b)] == list(want)
            assert all(sum(b - a for a, b in runs) == step for runs in parts[:-1])
