"""A positional dimension (no coordinate array) is never held as one array of positions.

Its values are the positions 0 .. n-1, which the scan once built with `np.arange(n)` at open:
3 GB for an axis of 4 * 10^8 cells, even for `count(*)`, and a process killed for 3 * 10^9.
The stores here are metadata documents (and one chunk at the far end): their axes are long,
their bytes few. Each query runs in a child process under an address-space cap, which reports
its result and how much its peak RSS grew; the expectations come from zarr-python reading the
store and from numpy over the positions the query names.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrsql
from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Or, evaluate, leaf_truth

LONG = 3_000_000_000  # 24 GB as int64 positions
HUGE = 10**12  # refused outright as an absurd length before
CHUNK = 1_000_000
#: The peak RSS a query may add: the scan's own buffers, never an axis' positions.
GROWTH_MB = 400
#: The child's address space: enough for DuckDB and numpy, far from an axis of positions.
CAP_GB = 4


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("lazy")
    out = {}
    for name, n in (("long", LONG), ("huge", HUGE)):
        root = zarr.open_group(base / f"{name}.zarr", mode="w", zarr_format=3)
        a = root.create_array("v", shape=(n,), chunks=(CHUNK,), dtype="int16", dimension_names=["i"], fill_value=-1)
        a[n - 10 :] = np.arange(10, dtype="int16")  # one chunk written, at the far end
        out[name] = base / f"{name}.zarr"
    # two axes: a long positional one and a coordinate of three values
    root = zarr.open_group(base / "grid.zarr", mode="w", zarr_format=3)
    g = root.create_array(
        "v", shape=(1_000_000_000, 3), chunks=(CHUNK, 3), dtype="float32", dimension_names=["i", "c"], fill_value=0
    )
    g[:4] = np.arange(12, dtype="float32").reshape(4, 3)
    c = root.create_array("c", shape=(3,), dtype="float64", dimension_names=["c"])
    c[:] = [10.0, 20.0, 30.0]
    out["grid"] = base / "grid.zarr"
    return out


_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    cap = int(sys.argv[1]) << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import zarrsql
    con = zarrsql.connect()
    con.sql("SELECT 1").fetchall()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = []
    for sql in json.loads(sys.stdin.read()):
        try:
            out.append([list(r) for r in con.sql(sql).fetchall()])
        except Exception as e:  # reported, for the test to show
            out.append(f"{type(e).__module__}.{type(e).__name__}: {str(e)[:300]}")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    print(json.dumps({"results": out, "grown_mb": grown}, default=str))
    """
)


def _run(queries: list[str]) -> tuple[list, int]:
    """The queries' rows (or error text) from a child process, and its peak RSS growth in MB."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(CAP_GB)],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return got["results"], got["grown_mb"]


def _values(store: Path) -> np.ndarray:
    """zarr-python's reading of the far chunk, its nonzero Zarr `fill_value` (-1) as SQL's
    NULL: the sentinel rule of docs/user-guide.md (a zero fill, as in the grid, stays data)."""
    a = zarr.open_array(store, path="v")
    tail = a[a.shape[0] - 20 :]
    return np.array([None if v == -1 else int(v) for v in tail], dtype=object)


@pytest.mark.parametrize("name", ["long", "huge"])
def test_counts_and_ranges_of_positions_hold_no_axis(stores: dict[str, Path], name: str) -> None:
    store = stores[name]
    n = zarr.open_array(store, path="v").shape[0]
    got, grown = _run(
        [
            f"SELECT count(*), min(i), max(i) FROM '{store}'",
            f"SELECT count(i), count(DISTINCT i) FROM '{store}'",
        ]
    )
    # the positions are numpy's arange(n): n of them, distinct, from 0 to n - 1
    assert got == [[[n, 0, n - 1]], [[n, n]]]
    assert grown < GROWTH_MB, f"peak RSS grew {grown} MB"


def test_filters_on_a_long_positional_axis_read_only_their_chunks(stores: dict[str, Path]) -> None:
    store = stores["long"]
    n = LONG
    tail = _values(store)  # positions n-20 .. n-1
    at = {n - 20 + k: v for k, v in enumerate(tail)}
    cases = {
        f"SELECT i, v FROM '{store}' WHERE i >= {n - 5} ORDER BY i": [[p, at[p]] for p in range(n - 5, n)],
        f"SELECT i, v FROM '{store}' WHERE i BETWEEN 2147483645 AND 2147483650 ORDER BY i": [
            [p, None] for p in range(2147483645, 2147483651)
        ],
        f"SELECT i, v FROM '{store}' WHERE i IN (5, {n - 1}) ORDER BY i": [[5, None], [n - 1, at[n - 1]]],
        f"SELECT i, v FROM '{store}' WHERE i = {n - 1} OR i < 2 ORDER BY i": [[0, None], [1, None], [n - 1, at[n - 1]]],
        f"SELECT i, v FROM '{store}' WHERE NOT (i < {n - 2}) ORDER BY i": [[n - 2, at[n - 2]], [n - 1, at[n - 1]]],
        f"SELECT count(*), sum(v) FROM '{store}' WHERE i > {n - 1_000_000}": [
            [999_999, int(sum(v for v in tail if v is not None))]
        ],
        f"SELECT i, v FROM '{store}' ORDER BY i DESC LIMIT 2": [[n - 1, at[n - 1]], [n - 2, at[n - 2]]],
        f"SELECT i FROM '{store}' ORDER BY i LIMIT 2": [[0], [1]],
    }
    got, grown = _run(list(cases))
    assert got == list(cases.values())
    assert grown < GROWTH_MB, f"peak RSS grew {grown} MB"


def test_a_long_positional_axis_beside_a_coordinate(stores: dict[str, Path]) -> None:
    store = stores["grid"]
    a = zarr.open_array(store, path="v")
    head = a[:4]  # the written cells; the rest hold the fill value 0
    coords = zarr.open_array(store, path="c")[:].tolist()
    n = a.shape[0]
    cases = {
        f"SELECT count(*), min(i), max(i), min(c), max(c) FROM '{store}'": [
            [n * 3, 0, n - 1, min(coords), max(coords)]
        ],
        f"SELECT c, sum(v) FROM '{store}' WHERE i < 10 GROUP BY c ORDER BY c": [
            [coords[j], float(head[:, j].sum())] for j in range(3)
        ],
        f"SELECT i, c, v FROM '{store}' WHERE (i < 2 AND c = 10) OR (i = {n - 1} AND c = 30) ORDER BY i": [
            [0, 10.0, float(head[0, 0])],
            [1, 10.0, float(head[1, 0])],
            [n - 1, 30.0, 0.0],
        ],
        f"SELECT i, c FROM '{store}' ORDER BY i DESC, c LIMIT 2": [[n - 1, 10.0], [n - 1, 20.0]],
        f"SELECT i, c, v FROM zarr_sample('{store}', 'SELECT 2.5 AS i, 20.0 AS c UNION ALL SELECT 1e12, 30.0') "
        "ORDER BY i": [[3, 20.0, float(head[3, 1])], [n - 1, 30.0, 0.0]],
    }
    got, grown = _run(list(cases))
    assert got == list(cases.values())
    assert grown < GROWTH_MB, f"peak RSS grew {grown} MB"


# -- the positions as runs, against numpy over np.arange -------------------------------------

_N = 50


def _numpy_kept(predicate, n: int) -> np.ndarray:
    values = np.arange(n, dtype=np.int64)
    t, _ = evaluate(predicate, lambda leaf: leaf_truth(leaf, values, None))
    return np.flatnonzero(t)


@pytest.mark.parametrize(
    "predicate",
    [
        Cmp("i", ">=", 45),
        Cmp("i", "<", 0),
        Cmp("i", "!=", 7),
        Cmp("i", "=", 60),
        Cmp("i", "<=", 10**20),
        Cmp("i", ">", -(10**20)),
        Cmp("i", "<", None),
        And((Cmp("i", ">", 3), Cmp("i", "<=", 9))),
        Or((Cmp("i", "<", 3), InSet("i", (20, 22, 99, -1)), Cmp("i", ">=", 48))),
        Not(InSet("i", (4, 5, 6))),
        Not(InSet("i", (4, None))),
        InSet("i", (4, None)),
        Not(Cmp("i", "=", None)),
        Or((Not(And((Cmp("i", ">", 10), Cmp("i", "<", 40)))), Cmp("i", "=", 25))),
        IsNull("i"),
        IsNull("i", negated=True),
        And((Cmp("i", ">=", 2.5), Cmp("i", "<", 7.0))),
    ],
)
def test_positions_where_is_numpys_evaluation(predicate) -> None:
    from zarrsql.plan.positions import positions_where

    runs = positions_where(predicate, _N, "i")
    assert runs is not None
    np.testing.assert_array_equal(np.asarray(runs), _numpy_kept(predicate, _N))


def test_positions_answer_as_their_array_does() -> None:
    from zarrsql.plan.positions import positions_where

    p = positions_where(Or((Cmp("i", "<", 5), And((Cmp("i", ">=", 20), Cmp("i", "<", 30))))), _N, "i")
    assert p is not None
    held = _numpy_kept(Or((Cmp("i", "<", 5), And((Cmp("i", ">=", 20), Cmp("i", "<", 30))))), _N)
    assert len(p) == len(held)
    assert (p.min(), p.max()) == (held.min(), held.max())
    for key in (slice(None), slice(3, 9), slice(2, 14, 3), slice(-4, None), np.array([0, 6, 14, -1])):
        np.testing.assert_array_equal(p[key], held[key])
    assert (p[7], p[-1]) == (held[7], held[-1])
    for side in ("left", "right"):
        probe = np.array([-3, 0, 4, 5, 12, 20, 29, 30, 100, 4.5, 19.2])
        np.testing.assert_array_equal(p.searchsorted(probe, side=side), np.searchsorted(held, probe, side=side))
    for g in (1, 3, 7, 64):
        np.testing.assert_array_equal(p.chunks(g), np.unique(held // g))
    np.testing.assert_array_equal(p // 4, held // 4)  # operators over the held positions
    with pytest.raises(IndexError):
        p[len(held)]


def test_the_whole_of_a_long_axis_is_refused_by_name_not_allocated() -> None:
    from zarrsql.plan.positions import MAX_POSITIONS_HELD, Positions

    long = Positions.whole(MAX_POSITIONS_HELD + 1, "i")
    assert (len(long), long[-1]) == (MAX_POSITIONS_HELD + 1, MAX_POSITIONS_HELD)
    np.testing.assert_array_equal(long[10:13], np.arange(10, 13))
    with pytest.raises(zarrsql.UnsupportedError, match="positional dimension 'i'"):
        np.asarray(long)
