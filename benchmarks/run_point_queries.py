#!/usr/bin/env python3
"""Loops of small queries: what a statement costs when it reads a thousand rows.

    python benchmarks/run_point_queries.py                   # 200 queries per loop, 5 repetitions
    python benchmarks/run_point_queries.py --quick           # 50 queries, 3 repetitions
    python benchmarks/run_point_queries.py --before OLD/src  # also a zarrsql from another tree

The store: 2,000 stations x 1,000 hours of float32 `v`, chunks (100, 250), Zarr v3, the
station names a string coordinate. A dashboard or an API asks it one station at a time:

* `agg`:  `SELECT avg(v), count(*) FROM {src} WHERE station = 'ST00010'`
* `rows`: `SELECT v FROM {src} WHERE station = 'ST00010'`

each over `--queries` stations spread over the table. Engines, each in a fresh process:
`zarrsql` (this tree, `read_zarr`), `parquet` (DuckDB on a Parquet copy written by DuckDB's
`COPY ... TO 'x.parquet'` with its defaults) and, with `--before SRC`, `zarrsql@before`: the
zarrsql package found under SRC (e.g. `git archive HEAD src | tar -x -C /tmp/old`), for a
before/after comparison measured side by side. Inside a child one warm-up query of each
loop runs untimed (the first statement of a process opens the store and imports the
engine), then the loop is timed; the headline is the median over repetitions of the mean
milliseconds per query. Repetitions are interleaved, the engines' order rotated, and every
child runs under the load guard (`harness.run_guarded`: a child that ran while other
processes used more than `--max-foreign-load` cores is run again and the discarded runs are
kept). Every engine's answers are checked against the Parquet child's (avg within 1e-9,
counts and the sorted values equal); the run exits with status 2 when they differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

DATA = HERE / "data"
RESULTS = HERE / "results"
STATIONS, HOURS, CHUNKS = 2000, 1000, (100, 250)
QUERIES = {
    "agg": "SELECT avg(v), count(*) FROM {src} WHERE station = '{station}'",
    "rows": "SELECT v FROM {src} WHERE station = '{station}'",
}

_CHILD = r"""
import hashlib, json, sys, time
engine, source, stations = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
queries = json.loads(sys.argv[4])
if engine == "parquet":
    import duckdb
    con, src = duckdb.connect(), f"read_parquet('{source}')"
else:
    import zarrsql
    con, src = zarrsql.connect(), f"read_zarr('{source}')"
out = {"ms_per_query": {}, "cpu_ms_per_query": {}, "answers": {}}
out["module"] = None if engine == "parquet" else zarrsql.__file__
for kind, text in queries.items():
    statements = [text.format(src=src, station=s) for s in stations]
    con.sql(statements[0]).fetchall()  # untimed: the store opened, the engine's modules imported
    start, cpu = time.perf_counter(), time.process_time()
    rows = [con.sql(q).fetchall() for q in statements]
    out["ms_per_query"][kind] = (time.perf_counter() - start) / len(statements) * 1000
    out["cpu_ms_per_query"][kind] = (time.process_time() - cpu) / len(statements) * 1000
    if kind == "agg":
        out["answers"][kind] = [[float(r[0][0]), int(r[0][1])] for r in rows]
    else:
        out["answers"][kind] = [hashlib.sha1(repr(sorted(float(v) for (v,) in r)).encode()).hexdigest() for r in rows]
print(json.dumps(out))
"""


def build(out: Path) -> tuple[Path, Path]:
    """The store and its Parquet copy, made again whenever this generator's parameters or
    the writers' versions change (a stamp beside them says what they were made with)."""
    import duckdb
    import xarray as xr
    import zarr

    want = {
        "stations": STATIONS, "hours": HOURS, "chunks": CHUNKS, "seed": 1, "zarr": zarr.__version__,
        "xarray": xr.__version__, "duckdb": duckdb.__version__, "parquet_writer": "duckdb COPY defaults",
    }  # fmt: skip
    store, parquet = out / "point_queries.zarr", out / "point_queries.parquet"
    stamp = out / "point_queries.stamp.json"
    if store.is_dir() and parquet.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == want:
        return store, parquet
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(1)
    names = np.array([f"ST{i:05d}" for i in range(STATIONS)])
    hours = pd.date_range("2020-01-01", periods=HOURS, freq="h")
    values = rng.normal(0, 1, (STATIONS, HOURS)).astype("float32")
    ds = xr.Dataset({"v": (("station", "time"), values)}, coords={"station": names, "time": hours})
    if store.exists():
        shutil.rmtree(store)
    ds.to_zarr(store, mode="w", encoding={"v": {"chunks": CHUNKS}}, zarr_format=3, consolidated=False)
    frame = ds.to_dataframe().reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    con = duckdb.connect()
    con.register("frame", frame)
    tmp = parquet.with_name(parquet.name + ".tmp")
    con.execute(f"COPY (SELECT * FROM frame) TO '{tmp}' (FORMAT parquet)")
    tmp.replace(parquet)
    stamp.write_text(json.dumps(want) + "\n")
    return store, parquet


def run_child(python: str, engine: str, source: Path, stations: list[str], policy: harness.LoadPolicy,
              pythonpath: str | None) -> dict:  # fmt: skip
    """One fresh process of `engine` under the load guard: its ms per query and answers."""
    env = harness.child_env()
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    stdout = DATA / f"point_queries_{os.getpid()}.out"

    def attempt() -> dict:
        with open(stdout, "w") as fh:
            load = harness.run_guarded(
                [python, "-c", _CHILD, "parquet" if engine == "parquet" else "zarrsql", str(source),
                 json.dumps(stations), json.dumps(QUERIES)],
                timeout=900, policy=policy, stdout=fh, env=env, cwd=HERE,
            )  # fmt: skip
        text = stdout.read_text().strip()
        if load.returncode != 0 or not text:
            return {"error": f"exit status {load.returncode}", "load": load.record()}
        rec = json.loads(text.splitlines()[-1])
        rec["load"] = load.record()
        return rec

    try:
        kept, discarded = harness.with_retries(attempt, policy, log=lambda m: print(m, file=sys.stderr))
    finally:
        stdout.unlink(missing_ok=True)
    kept["discarded"] = discarded
    return kept


def disagreements(runs: dict[str, list[dict]]) -> list[str]:
    """Where an engine's answers differ from the Parquet child's."""
    reference = next((r["answers"] for r in runs.get("parquet", []) if "answers" in r), None)
    if reference is None:
        return ["no Parquet answers to compare with"]
    out = []
    for engine, rs in runs.items():
        for r in rs:
            if "answers" not in r:
                out.append(f"{engine}: {r.get('error')}")
                continue
            for (a, n), (b, m) in zip(r["answers"]["agg"], reference["agg"], strict=True):
                if n != m or abs(a - b) > 1e-9 * max(1.0, abs(b)):
                    out.append(f"{engine}: agg ({a}, {n}) vs Parquet's ({b}, {m})")
                    break
            if r["answers"]["rows"] != reference["rows"]:
                out.append(f"{engine}: rows differ from Parquet's")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="50 queries per loop, 3 repetitions")
    ap.add_argument("--queries", type=int, default=None, help="queries per loop (default 200; 50 with --quick)")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 5; 3 with --quick)")
    ap.add_argument("--before", default=None, help="a source tree whose zarrsql runs as the engine zarrsql@before")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the children")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default results/point_queries.json)")
    harness.add_load_arguments(ap)
    a = ap.parse_args(argv)
    n = a.queries or (50 if a.quick else 200)
    repeat = a.repeat or (3 if a.quick else 5)
    policy = harness.policy_from_args(a, quick=a.quick)
    out = a.out or RESULTS / ("point_queries_quick.json" if a.quick else "point_queries.json")
    DATA.mkdir(exist_ok=True)
    store, parquet = build(DATA)
    harness.warm([store, parquet])
    stations = [f"ST{i:05d}" for i in range(0, STATIONS, max(1, STATIONS // n))][:n]
    engines = ["zarrsql", "parquet"] + (["zarrsql@before"] if a.before else [])
    source = {"zarrsql": store, "parquet": parquet, "zarrsql@before": store}
    path = {"zarrsql@before": str(Path(a.before).resolve()) if a.before else None}
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for rep in range(repeat):
        order = engines[rep % len(engines) :] + engines[: rep % len(engines)]
        for engine in order:
            r = run_child(a.python, engine, source[engine], stations, policy, path.get(engine))
            r["repetition"] = rep
            runs[engine].append(r)
            shown = r.get("error") or " ".join(f"{k}={v:.2f} ms" for k, v in r["ms_per_query"].items())
            print(f"rep {rep} {engine:15s} {shown}", file=sys.stderr, flush=True)
    medians, cpu = (
        {
            e: {k: statistics.median(r[field][k] for r in rs if field in r) for k in QUERIES}
            for e, rs in runs.items()
            if any(field in r for r in rs)
        }
        for field in ("ms_per_query", "cpu_ms_per_query")
    )
    kept = [r for rs in runs.values() for r in rs]
    discarded = [d for r in kept for d in r.get("discarded", [])]
    doc = {
        "queries_per_loop": n,
        "repeat": repeat,
        "statements": QUERIES,
        "machine": harness.machine_info(),
        "versions": harness.versions(["duckdb", "pyarrow", "numpy", "zarr", "xarray"]),
        "inputs": {"store": str(store), "parquet": str(parquet), "before": path["zarrsql@before"],
                   "store_digest": hashlib.sha1(json.dumps([STATIONS, HOURS, CHUNKS]).encode()).hexdigest()[:12]},
        "load": harness.load_summary(kept, discarded, policy),
        "median_ms_per_query": medians,
        "median_cpu_ms_per_query": cpu,
        "disagreements": disagreements(runs),
        "runs": runs,
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{n} queries per loop, median of {repeat} fresh processes, ms per query (wall / process CPU)")
    for e, m in medians.items():
        print(f"{e:>15}: " + "  ".join(f"{k} {v:6.2f} / {cpu[e][k]:6.2f}" for k, v in m.items()))
    print("answers agree" if not doc["disagreements"] else f"DISAGREE: {doc['disagreements']}")
    return 2 if doc["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
