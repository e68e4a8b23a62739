"""DuckDB 1.5's path prunes a filter on a long positional axis by arithmetic, never by arrays.

On DuckDB 1.5 a scan is a `pyarrow.dataset.Dataset` shell (engine/dataset.py) that prunes by
stating each work unit's range of every coordinate to Arrow. A positional dimension's range
over a unit was found by building the unit's positions and taking their min and max: 3 * 10^9
positions for a filter on an axis of 3 * 10^9 cells (13 to 70 s), 8 GB for one unit of 2^30
cells, and past 20,000 units nothing was pruned at all, so `WHERE x BETWEEN 10 AND 20` read
every cell. The stores here are metadata documents and a few written chunks.

The shell runs on both DuckDB versions here, through its own `scanner(filter=...)` as DuckDB
1.5 calls it; on DuckDB 1.5 the same filters also run as SQL. Each case runs in a child
process under an address-space cap (as tests/places/test_positional_dimensions_stay_lazy.py
does). Expectations: numpy arithmetic over the positions, and zarr-python reading the store.
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

from zarrsql.engine.source import HAS_SOURCES

LONG = 3_000_000_000
#: The child's address space: enough for DuckDB, Arrow and numpy, far from 2^30 positions (8 GB).
CAP_GB = 4
#: Seconds a child may take before it counts as hung: each takes a few (most of it imports);
#: the arrays and full scans it replaces took minutes.
GUARD = 60


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("positional15")
    out = {}
    # 3,000 units of 10^6 cells; the first and last chunks written, the rest the fill value -1 (NULL)
    root = zarr.open_group(base / "long.zarr", mode="w", zarr_format=3)
    a = root.create_array("v", shape=(LONG,), chunks=(1_000_000,), dtype="int16", dimension_names=["x"], fill_value=-1)
    a[:5] = np.arange(100, 105, dtype="int16")
    a[LONG - 10 :] = np.arange(10, dtype="int16")
    out["long"] = str(base / "long.zarr")
    # three units of 2^30 cells: building one unit's positions takes 8 GB
    root = zarr.open_group(base / "wide.zarr", mode="w", zarr_format=3)
    root.create_array("v", shape=(LONG,), chunks=(2**30,), dtype="int8", dimension_names=["x"], fill_value=0)
    out["wide"] = str(base / "wide.zarr")
    # 10^9 units of one cell, past the 20,000 units pruned one by one
    root = zarr.open_group(base / "cells.zarr", mode="w", zarr_format=3)
    root.create_array("v", shape=(10**9,), chunks=(1,), dtype="float32", dimension_names=["x"], fill_value=0)
    out["cells"] = str(base / "cells.zarr")
    # the longest axis a table may have: 2^63 - 1 positions in 2^32 chunks (of 2^31 cells each)
    root = zarr.open_group(base / "far.zarr", mode="w", zarr_format=3)
    root.create_array("v", shape=(2**63 - 1,), chunks=(2**31,), dtype="int8", dimension_names=["x"], fill_value=0)
    out["far"] = str(base / "far.zarr")
    return out


_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    cap = int(sys.argv[1]) << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import pyarrow.compute as pc
    import zarrsql
    from zarrsql.engine.dataset import ZarrDataset
    from zarrsql.engine.source import HAS_SOURCES
    from zarrsql.scan import ReadRequest, open_table

    def arrow_filter(f):
        op, value = f
        x = pc.field("x")
        if op == "in":
            return x.isin(value)
        if op == "between":
            return (x >= value[0]) & (x <= value[1])
        return {">": x > value, ">=": x >= value, "<": x < value, "<=": x <= value, "==": x == value}[op]

    con = zarrsql.connect()
    out = []
    for kind, store, what in json.loads(sys.stdin.read()):
        try:
            if kind == "sql":
                out.append(None if HAS_SOURCES else [list(r) for r in con.sql(what.format(s=store)).fetchall()])
                continue
            shell = ZarrDataset(open_table(ReadRequest(store=store)))
            rows = []
            for batch in shell.scanner(columns=["x", "v"], filter=arrow_filter(what)).to_reader():
                rows += [list(r) for r in zip(batch.column("x").to_pylist(), batch.column("v").to_pylist())]
            out.append(sorted(rows))
        except Exception as e:  # reported, for the test to show
            out.append(f"{type(e).__module__}.{type(e).__name__}: {str(e)[:300]}")
    print(json.dumps(out))
    """
)


def _run(cases: list[tuple[str, str, Any]]) -> list[Any]:
    """Each case's rows (None: SQL on DuckDB 2, which scans through its own protocol)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(CAP_GB)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=GUARD,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _rows(store: str, positions: np.ndarray) -> list[list[Any]]:
    """[position, value] at `positions`, read by zarr-python one slice each (its coordinate
    selection walks every chunk of the array); a nonzero fill value as NULL."""
    a = zarr.open_array(store, path="v")
    fill = a.fill_value
    values = [a[p : p + 1][0] for p in positions.tolist()]
    return [[p, None if fill != 0 and v == fill else v.item()] for p, v in zip(positions.tolist(), values, strict=True)]


def _kept(n: int, op: str, value: Any, near: tuple[int, int]) -> np.ndarray:
    """Numpy over the positions of [near) (the only ones the filter can keep) and its bounds."""
    x = np.arange(max(0, near[0]), min(n, near[1]), dtype=np.int64)
    keep = {
        "in": lambda: np.isin(x, value),
        "between": lambda: (x >= value[0]) & (x <= value[1]),
        ">": lambda: x > value,
        ">=": lambda: x >= value,
        "<": lambda: x < value,
        "<=": lambda: x <= value,
        "==": lambda: x == value,
    }[op]()
    return x[keep]


def test_filters_on_a_3e9_positional_axis_read_only_their_chunks(stores: dict[str, str]) -> None:
    store = stores["long"]
    near = [(0, 100), (LONG - 100, LONG)]  # every filter here keeps positions in these alone
    filters = [
        ("between", [10, 20]),
        (">", LONG - 10),
        ("in", [3, LONG - 1, LONG + 5, -2]),
        ("<", 3),
        ("==", LONG - 4),
        (">=", LONG),
        ("<", -(2**40)),
    ]
    got = _run([("shell", store, f) for f in filters])
    for (op, value), rows in zip(filters, got, strict=True):
        want = np.concatenate([_kept(LONG, op, value, span) for span in near]).astype(np.int64)
        assert rows == _rows(store, want), (op, value)


@pytest.mark.skipif(HAS_SOURCES, reason="DuckDB 2 scans through its scan-source protocol, not the shell")
def test_the_same_filters_as_sql_on_duckdb_15(stores: dict[str, str]) -> None:
    store = stores["long"]
    cases = {
        "SELECT count(*) FROM read_zarr('{s}') WHERE x BETWEEN 10 AND 20": [[11]],
        "SELECT x, v FROM read_zarr('{s}') WHERE x > 2999999990 ORDER BY x": _rows(store, np.arange(LONG - 9, LONG)),
        "SELECT x, v FROM read_zarr('{s}') WHERE x IN (2, 2999999999) ORDER BY x": _rows(
            store, np.array([2, LONG - 1])
        ),
        "SELECT count(*), min(x), max(x) FROM read_zarr('{s}') WHERE x >= 2999000000": [
            [10**6, LONG - 10**6, LONG - 1]
        ],
    }
    got = _run([("sql", store, sql) for sql in cases])
    assert got == list(cases.values())


def test_a_unit_of_2_30_positions_is_weighed_without_its_positions(stores: dict[str, str]) -> None:
    """Each unit here holds 2^30 positions (8 GB as an array, past the child's cap): filters
    keeping none of them answer without reading a unit, and one keeping a unit's last row
    reads it."""
    store = stores["wide"]
    filters = [(">=", LONG), ("<", 0), ("between", [LONG + 1, LONG + 9]), ("in", [-1, LONG])]
    got = _run([("shell", store, f) for f in filters])
    assert got == [[]] * len(filters)


def test_past_20000_units_a_filter_still_prunes(stores: dict[str, str]) -> None:
    """10^9 units of one cell, and an axis of 2^63 - 1 positions in 2^32 units (too large to
    read one: filters keeping none of it). These read every unit before, filtering each row."""
    cells, far = stores["cells"], stores["far"]
    n, last = 10**9, 2**63 - 2
    cases = [
        ("shell", cells, (">", n - 4)),
        ("shell", cells, ("in", [0, 123_456_789, n - 1, n])),
        ("shell", cells, ("between", [500_000_000, 500_000_002])),
        ("shell", far, ("<", 0)),
        ("shell", far, (">", last)),
        ("shell", far, ("in", [-1, -(2**62)])),
    ]
    got = _run(cases)
    want = [
        _rows(cells, np.arange(n - 3, n)),
        _rows(cells, np.array([0, 123_456_789, n - 1])),
        _rows(cells, np.arange(500_000_000, 500_000_003)),
        [],
        [],
        [],
    ]
    assert got == want


# -- pruning along each axis past 20,000 units keeps every matching row -----------------------

NY, NX = 150, 300  # chunks of (1, 2): 22,500 work units, none written
Y = np.linspace(60.0, -14.5, NY)  # descending, one NaN (a NULL coordinate)
Y[40] = np.nan


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("grid15") / "grid.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    root.create_array("v", shape=(NY, NX), chunks=(1, 2), dtype="int32", dimension_names=["y", "x"], fill_value=0)
    root.create_array("y", data=Y, dimension_names=["y"])
    return str(path)


def _conditions() -> dict[str, tuple[Any, Any, Any, Any]]:
    """Each condition as the Arrow filter DuckDB 1.5 pushes, as numpy over the cells, and its
    parts on y alone and on x alone (what pruning along each axis weighs)."""
    import pyarrow.compute as pc

    y, x = pc.field("y"), pc.field("x")
    every = lambda v: np.ones(len(v), dtype=bool)  # noqa: E731
    return {
        "x >= 297": (x >= 297, lambda y, x: x >= 297, every, lambda x: x >= 297),
        "y BETWEEN 10 AND 10.6 AND x < 3": (
            (y >= 10) & (y <= 10.6) & (x < 3),
            lambda y, x: (y >= 10) & (y <= 10.6) & (x < 3),
            lambda y: (y >= 10) & (y <= 10.6),
            lambda x: x < 3,
        ),
        "x IN (0, 151, 299) AND y > 59": (
            x.isin([0, 151, 299]) & (y > 59),
            lambda y, x: np.isin(x, [0, 151, 299]) & (y > 59),
            lambda y: y > 59,
            lambda x: np.isin(x, [0, 151, 299]),
        ),
        "(x < 2 OR x >= 298) AND y < -14": (
            ((x < 2) | (x >= 298)) & (y < -14),
            lambda y, x: ((x < 2) | (x >= 298)) & (y < -14),
            lambda y: y < -14,
            lambda x: (x < 2) | (x >= 298),
        ),
        "y > 100": (y > 100, lambda y, x: y > 100, lambda y: y > 100, every),
    }


@pytest.mark.parametrize("condition", list(_conditions()))
def test_past_20000_units_each_axis_prunes_and_every_row_stays(grid: str, condition: str) -> None:
    import zarrsql
    from zarrsql.engine.dataset import ZarrDataset
    from zarrsql.scan import ReadRequest, open_table

    arrow, where, on_y, on_x = _conditions()[condition]
    shell = ZarrDataset(open_table(ReadRequest(store=grid)))
    got = []
    with zarrsql.trace() as t:
        for batch in shell.scanner(columns=["y", "x", "v"], filter=arrow).to_reader():
            got += [tuple(r.values()) for r in batch.to_pylist()]
    # numpy over every cell (NaN compares false, as NULL does); every cell unwritten, so each
    # reads as zarr-python's fill value (0, data)
    y, x = np.meshgrid(Y, np.arange(NX), indexing="ij")
    fill = zarr.open_array(grid, path="v").fill_value
    with np.errstate(invalid="ignore"):
        i, j = np.nonzero(where(y, x))
        # the units read: the y chunks (one row each) whose part may hold (a NaN row may: it
        # states no range), times the x chunks (two columns each) holding an x its part keeps
        rows_kept = int((on_y(Y) | np.isnan(Y)).sum())
    x_chunks = len(np.unique(np.flatnonzero(on_x(np.arange(NX))) // 2))
    want = [(None if np.isnan(Y[a]) else float(Y[a]), int(b), int(fill)) for a, b in zip(i, j, strict=True)]
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert t.work_units_read == rows_kept * x_chunks
