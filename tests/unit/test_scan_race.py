"""Scans running in threads, with the interpreter switching threads as often as it can,
give exactly what a plain DuckDB connection gives over xarray's table.

A scan's decoding threads share its caches (coordinate patterns), the trace counters and
the cached node tree of the store; several connections in threads share the tree too. A
structure touched without its lock fails here (`dictionary changed size during iteration`)
or gives a wrong row. The queries run in a subprocess: `sys.setswitchinterval(1e-6)` slows
every thread of the process, and the rest of the suite should not pay for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr

QUERIES = [
    # every column, every unit: the patterns cache fills and evicts all the time
    "SELECT count(*), sum(v), sum(t), sum(y), sum(x), count(v) FROM read_zarr('{store}')",
    # a mask across dimensions: units of mixed shapes, some with partial masks
    "SELECT count(*), sum(v), sum(x) FROM read_zarr('{store}') WHERE x < 5 OR t > 20",
    # rows themselves, ordered, to compare value by value
    "SELECT t, y, x, v FROM read_zarr('{store}') WHERE t = 3 OR y = 2 ORDER BY t, y, x",
    # a count the connection answers from the plan, beside scans of the same store
    "SELECT count(*) FROM read_zarr('{store}') WHERE x < 5 OR t > 20",
]
THREADS = 4
ROUNDS = 3


def _store(tmp_path: Path) -> Path:
    """A float variable on (t, y, x) in many small chunks, some chunks never written."""
    rng = np.random.default_rng(7)
    v = rng.normal(size=(24, 12, 12)).astype("float64")
    v[:4] = np.nan  # nan_as_null: NULL values, counted apart by count(v)
    ds = xr.Dataset(
        {"v": (("t", "y", "x"), v)},
        coords={"t": np.arange(24, dtype="int64"), "y": np.arange(12) * 0.5, "x": np.arange(12, dtype="int32")},
    )
    path = tmp_path / "race.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.chunk({"t": 2, "y": 4, "x": 4}).to_zarr(path, zarr_format=3, consolidated=True)
    return path


def _oracle(path: Path) -> list[list]:
    """The same queries by a plain DuckDB connection over xarray's to_dataframe()."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = xr.open_zarr(path).to_dataframe().reset_index()
    con = duckdb.connect()
    con.register("frame", frame)
    return [_rows(con.sql(q.replace("read_zarr('{store}')", "frame")).fetchall()) for q in QUERIES]


def _rows(rows: list[tuple]) -> list:
    """Rows as JSON-comparable lists, floats rounded (sums in another order differ in ulps)."""
    return [[round(v, 6) if isinstance(v, float) else v for v in row] for row in rows]


def _stress(store: str) -> dict:
    """Every query in `THREADS` threads at once, `ROUNDS` times, each thread its connection."""
    import zarrsql

    sys.setswitchinterval(1e-6)
    results: dict[str, list] = {}
    errors: list[str] = []

    def work(n: int) -> None:
        con = zarrsql.connect()
        try:
            for r in range(ROUNDS):
                results[f"{n}/{r}"] = [_rows(con.sql(q.format(store=store)).fetchall()) for q in QUERIES]
        except Exception as err:  # reported to the test, which fails on any
            errors.append(f"thread {n}: {type(err).__name__}: {err}")
        finally:
            con.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"results": results, "errors": errors}


@pytest.mark.timeout(240)
def test_threads_with_a_tiny_switch_interval_match_the_oracle(tmp_path):
    path = _store(tmp_path)
    expected = _oracle(path)
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, __file__, str(path)], capture_output=True, text=True, env=env, timeout=200, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["errors"] == []
    assert len(report["results"]) == THREADS * ROUNDS
    for key, got in report["results"].items():
        assert got == json.loads(json.dumps(expected)), key


if __name__ == "__main__":
    print(json.dumps(_stress(sys.argv[1])))
