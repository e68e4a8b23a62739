#!/usr/bin/env python3
"""Joins with a large other side, joins on pandas times, and top-n over ties, side by side.

    python benchmarks/run_joins_topn.py [--repeat 5] [--tree OLD_SRC] [--out benchmarks/results/joins_topn.json]

On the ERA5-like store of `run_era5.py` (1,460 hours x 121 x 240, chunks of 24 hours) and its
Parquet copy written by DuckDB's defaults, each engine in a fresh process (imports and the
other side's setup untimed; open + query timed):

* `wide join`: the store joined on (time, latitude, longitude) to a DuckDB table of 466,560
  keys (72 hours x the latitudes above 50 x every longitude): more than the 1,000 keys listed
  as tuples, so each dimension is listed alone;
* `pandas join`: joined on time to a pandas frame of 48 `datetime64[ns]` times;
* `ties top-n`: `SELECT * ... ORDER BY latitude LIMIT 10` (latitude is not chunked);
* `ties top-n 1000`: `... ORDER BY longitude DESC LIMIT 1000`;
* `data top-n`: `SELECT * ... ORDER BY t2m DESC LIMIT 10` (the hottest cells: a data column,
  which Parquet's row-group statistics prune and Zarr has none of);
* `data top-n 2 keys`: `... ORDER BY u10, time LIMIT 100`;
* `data top-n where`: `... WHERE time >= '2020-02-10' AND latitude > 30 ORDER BY t2m DESC
  LIMIT 10` (the hottest cells of the last three weeks, north of 30°).

`--tree` adds the engine `zarrsql (tree)`: zarrsql imported from another source folder (a
`git archive` of an older commit), for before/after numbers in the same run. Repetitions are
interleaved, medians reported, and the joins' results checked equal across engines; a top-n
over ties may return any of the tied rows, so its check is the ORDER BY column's values.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

QUERIES = {
    "wide join": "SELECT count(*), round(sum(t2m), 1) FROM {src} z JOIN k "
    "ON z.time = k.time AND z.latitude = k.lat AND z.longitude = k.lon",
    "pandas join": "SELECT count(*), round(sum(t2m), 1) FROM {src} z JOIN frame USING (time)",
    "ties top-n": "SELECT * FROM {src} ORDER BY latitude LIMIT 10",
    "ties top-n 1000": "SELECT * FROM {src} ORDER BY longitude DESC LIMIT 1000",
    "data top-n": "SELECT * FROM {src} ORDER BY t2m DESC LIMIT 10",
    "data top-n 2 keys": "SELECT * FROM {src} ORDER BY u10, time LIMIT 100",
    "data top-n where": "SELECT * FROM {src} WHERE time >= '2020-02-10' AND latitude > 30 "
    "ORDER BY t2m DESC LIMIT 10",
}
ORDER_COLUMN = {"ties top-n": 1, "ties top-n 1000": 2, "data top-n": 3, "data top-n where": 3}

CHILD = r"""
import importlib, json, sys, time, warnings
warnings.simplefilter("ignore")
engine, query, store, parquet = sys.argv[1:5]
sys.path.insert(0, sys.argv[5])
from harness import ZARRSQL_IMPORTS
import duckdb, numpy as np, pandas as pd
frame = pd.DataFrame({"time": pd.date_range("2020-02-10", periods=48, freq="h").as_unit("ns")})
keys = ("CREATE TABLE k AS SELECT TIMESTAMP '2020-01-10' + INTERVAL (h) HOUR AS time, lat, lon FROM range(72) r(h), "
        f"(SELECT DISTINCT latitude AS lat FROM read_parquet('{parquet}') WHERE latitude > 50) a, "
        f"(SELECT DISTINCT longitude AS lon FROM read_parquet('{parquet}')) b")
if engine == "parquet+duckdb":
    con, src = duckdb.connect(), f"read_parquet('{parquet}')"
else:
    for m in ZARRSQL_IMPORTS + ["zarrsql.engine.joins", "zarrsql.engine.topn", "zarrsql.scan.first_cells"]:
        try:
            importlib.import_module(m)
        except ImportError:  # an older tree (--tree) without the module
            pass
    import zarrsql
    con, src = zarrsql.connect(), f"read_zarr('{store}')"
con.execute(keys)
con.register("frame", frame)
start = time.perf_counter()
rows = con.sql(query.format(src=src)).fetchall()
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "rows": [[str(v) for v in r] for r in rows]}))
"""


def run(engine: str, query: str, store: Path, parquet: Path, tree: str | None) -> dict:
    env = dict(os.environ)
    if engine == "zarrsql (tree)" and tree:
        env["PYTHONPATH"] = tree
    out = subprocess.run(
        [sys.executable, "-c", CHILD, engine, QUERIES[query], str(store), str(parquet), str(HERE)],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _checked(query: str, rows: list[list[str]]) -> list:
    """What must agree across engines: the rows of a join; the ORDER BY values of a top-n."""
    column = ORDER_COLUMN.get(query)
    return rows if column is None else [r[column] for r in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--tree", help="a source folder (…/src) of another zarrsql, run as 'zarrsql (tree)'")
    p.add_argument("--out", type=Path, default=HERE / "results" / "joins_topn.json")
    a = p.parse_args(argv)
    import make_era5

    store, parquet = HERE / "data" / "era5.zarr", HERE / "data" / "era5.parquet"
    if not (store.exists() and parquet.exists()):
        make_era5.main(["--parquet", "duckdb"])  # idempotent: built once, next to the others
    engines = ["parquet+duckdb", "zarrsql"] + (["zarrsql (tree)"] if a.tree else [])
    runs: dict[str, dict[str, list[dict]]] = {q: {e: [] for e in engines} for q in QUERIES}
    loads = []
    for _ in range(a.repeat):
        loads.append(Path("/proc/loadavg").read_text().split()[0])
        for q in QUERIES:
            for e in engines:
                runs[q][e].append(run(e, q, store, parquet, a.tree))
    table, agree = {}, True
    for q in QUERIES:
        ok = {e: [r for r in rs if "error" not in r] for e, rs in runs[q].items()}
        table[q] = {e: statistics.median(r["seconds"] for r in rs) if rs else None for e, rs in ok.items()}
        for rs in ok.values():  # kept in the JSON as a count and a digest, not row by row
            for r in rs:
                checked = _checked(q, r.pop("rows"))
                r["rows"], r["digest"] = len(checked), hashlib.sha1(json.dumps(checked).encode()).hexdigest()[:16]
        agree &= len({rs[0]["digest"] for rs in ok.values() if rs}) == 1
    doc = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tree": a.tree,
        "load_1min": loads,
        "median_seconds": table,
        "agree": agree,
        "runs": runs,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2))
    print(f"{'query':<18}" + "".join(f"{e:>18}" for e in engines) + "   zarrsql / Parquet")
    for q, med in table.items():
        cells = "".join(f"{'failed' if med[e] is None else f'{med[e]:.3f} s':>18}" for e in engines)
        ratio = med["zarrsql"] / med["parquet+duckdb"] if med["zarrsql"] and med["parquet+duckdb"] else None
        print(f"{q:<18}{cells}   {'—' if ratio is None else f'{ratio:.2f}x'}")
    print(f"results agree: {agree}; load (1 min) before each round: {', '.join(loads)}")
    return 0 if agree else 2


if __name__ == "__main__":
    sys.exit(main())
