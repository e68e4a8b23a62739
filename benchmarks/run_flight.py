#!/usr/bin/env python3
"""zarrsql over Arrow Flight SQL beside the same query in process: throughput and added latency.

    python benchmarks/run_flight.py            # full ERA5-like store, 5 repetitions
    python benchmarks/run_flight.py --quick    # the 96-hour store, 3 repetitions

The server is `zarrsql serve` in a process of its own (as users run it), on 127.0.0.1; the
client is ADBC's Flight SQL driver through its DB-API (`cursor.execute` + `fetch_arrow_table`:
a prepared statement, GetFlightInfo, DoGet, as every ADBC query does). In process is a zarrsql
connection in this process: `con.sql(query).to_arrow_table()`. Both are warm (one untimed run
first) and their repetitions interleave; the medians are compared. Every Flight result is
checked against the in-process one.

Queries: `rows_1m` (1,016,400 rows of time, latitude, longitude, t2m: a large result), `Q2` of
the ERA5 benchmark (29,040 rows, an aggregate over the whole store), and two small ones,
`scalar` (SELECT 42) and `Q3` (one day × 30°×30° box, one row), whose added latency is the
goal. Goals (issue 17): large results within 1.3× in process, small queries under 10 ms added.
Writes benchmarks/results/flight.json and flight.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import engines as E  # noqa: E402
import make_era5  # noqa: E402
from harness import child_env, machine_info, versions  # noqa: E402

LARGE_GOAL = 1.3  # Flight median / in-process median, large results
SMALL_GOAL_MS = 10.0  # Flight median - in-process median, small queries
SMALL_REPEATS = 4  # small queries run this many times more repetitions


#: The first 35 hours of the store: 35 × 121 × 240 = 1,016,400 rows (a whole-hour cut, so
#: the rows are the same whichever order the scan produces them in).
ROWS_1M = "SELECT time, latitude, longitude, t2m FROM {src} WHERE time < '2020-01-02 11:00:00'"
KEYS = ["time", "latitude", "longitude"]


def queries(store: Path, day: str) -> dict[str, tuple[str, str, list[str]]]:
    """name → (kind, SQL, sort keys for the comparison); kind "large" or "small" picks the goal."""
    src = f"read_zarr({E._sql_str(str(store))})"
    return {
        "rows_1m": ("large", ROWS_1M.format(src=src), KEYS),
        "Q2": ("large", E.sql_for("Q2", src, day), E.QUERIES["Q2"]["sort"]),
        "scalar": ("small", "SELECT 42 AS answer", []),
        "Q3": ("small", E.sql_for("Q3", src, day), []),
    }


def start_server() -> tuple[subprocess.Popen, int]:
    command = [sys.executable, "-m", "zarrsql", "serve", "--no-auth", "--port", "0"]
    env = {**child_env(), "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if "127.0.0.1:" not in line:
        raise SystemExit(f"zarrsql serve did not start: {line!r}")
    return proc, int(line.split("127.0.0.1:")[1].split()[0])


def timed(run) -> tuple[float, object]:
    start = time.perf_counter()
    table = run()
    return time.perf_counter() - start, table


def same(a, b, keys: list[str]) -> bool:
    """Equal tables once sorted by `keys`; floats to 1e-9 relative (parallel sums add in
    varying order)."""
    import numpy as np

    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    if keys:
        a, b = a.sort_by([(k, "ascending") for k in keys]), b.sort_by([(k, "ascending") for k in keys])
    for name in a.column_names:
        x, y = a[name].to_numpy(), b[name].to_numpy()
        if not (np.allclose(x, y, rtol=1e-9) if x.dtype.kind == "f" else (x == y).all()):
            return False
    return True


def measure(store: Path, day: str, repeat: int) -> dict:
    import adbc_driver_flightsql.dbapi as flightsql

    import zarrsql

    proc, port = start_server()
    try:
        local = zarrsql.connect()
        client = flightsql.connect(f"grpc://127.0.0.1:{port}", autocommit=True)
        cursor = client.cursor()

        def in_process(sql):
            return local.sql(sql).to_arrow_table()

        def over_flight(sql):
            cursor.execute(sql)
            return cursor.fetch_arrow_table()

        out = {}
        for name, (kind, sql, keys) in queries(store, day).items():
            print(f"{name}: warming up", file=sys.stderr, flush=True)
            reference = in_process(sql)
            agree = same(over_flight(sql), reference, keys)
            times: dict[str, list[float]] = {"in_process": [], "flight": []}
            # small queries take milliseconds, where a shared machine's noise is largest: more runs
            for i in range(repeat * (SMALL_REPEATS if kind == "small" else 1)):
                order = ("in_process", "flight") if i % 2 == 0 else ("flight", "in_process")
                for mode in order:
                    seconds, table = timed(lambda m=mode, q=sql: (in_process if m == "in_process" else over_flight)(q))
                    times[mode].append(seconds)
                    agree = agree and same(table, reference, keys)
            med = {m: statistics.median(v) for m, v in times.items()}
            out[name] = {
                "kind": kind,
                "sql": sql,
                "rows": reference.num_rows,
                "arrow_bytes": reference.nbytes,
                "seconds": times,
                "median_s": med,
                "ratio": med["flight"] / med["in_process"],
                "added_ms": (med["flight"] - med["in_process"]) * 1e3,
                "best_added_ms": (min(times["flight"]) - min(times["in_process"])) * 1e3,
                "flight_rows_per_s": reference.num_rows / med["flight"],
                "flight_mb_per_s": reference.nbytes / med["flight"] / 2**20,
                "in_process_mb_per_s": reference.nbytes / med["in_process"] / 2**20,
                "agree": agree,
            }
            print(
                f"{name}: {json.dumps({k: out[name][k] for k in ('median_s', 'ratio', 'added_ms')})}", file=sys.stderr
            )
        cursor.close()
        client.close()
        local.close()
    finally:
        proc.terminate()
        proc.wait(10)
    return out


def goals(results: dict) -> list[dict]:
    out = []
    for name, r in results.items():
        if r["kind"] == "large":
            out.append({"query": name, "goal": f"Flight ≤ {LARGE_GOAL}× in process", "value": round(r["ratio"], 3),
                        "met": r["ratio"] <= LARGE_GOAL})  # fmt: skip
        else:
            out.append({"query": name, "goal": f"added ≤ {SMALL_GOAL_MS:g} ms", "value": round(r["added_ms"], 2),
                        "met": r["added_ms"] <= SMALL_GOAL_MS})  # fmt: skip
    return out


def markdown(doc: dict) -> str:
    lines = [
        "# zarrsql over Arrow Flight SQL vs in process",
        "",
        f"Store: `{doc['store']}`; {doc['repeat']} interleaved repetitions ({doc['repeat'] * SMALL_REPEATS} for the "
        "small queries), medians; server: `zarrsql serve` "
        "(its own process), client: ADBC Flight SQL DB-API, both on 127.0.0.1.",
        f"Machine: {doc['machine'].get('cpu_model', '?')}, {doc['machine'].get('cpu_count')} CPUs; "
        f"{doc['machine']['date']}; load average {doc['load_average']['before'][0]:.1f} before, "
        f"{doc['load_average']['after'][0]:.1f} after (other work shared the CPUs: medians of noisy runs; "
        "'best added' compares the fastest runs).",
        "",
        "| query | rows | Arrow MB | in process | Flight SQL | ratio | added | best added | Flight MB/s | agree |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in doc["results"].items():
        lines.append(
            f"| {name} | {r['rows']:,} | {r['arrow_bytes'] / 2**20:.1f} | {r['median_s']['in_process'] * 1e3:.1f} ms | "
            f"{r['median_s']['flight'] * 1e3:.1f} ms | {r['ratio']:.2f}× | {r['added_ms']:.1f} ms | "
            f"{r['best_added_ms']:.1f} ms | "
            f"{r['flight_mb_per_s']:.0f} | {'yes' if r['agree'] else 'NO'} |"
        )
    lines += ["", "| goal | query | value | met |", "|---|---|---:|---|"]
    lines += [f"| {g['goal']} | {g['query']} | {g['value']} | {'yes' if g['met'] else 'no'} |" for g in doc["goals"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 96-hour store")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 5; 3 with --quick)")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default benchmarks/results/flight.json)")
    a = ap.parse_args(argv)
    store = make_era5.default_out(a.quick)
    make_era5.build(store, make_era5.N_TIME_QUICK if a.quick else make_era5.N_TIME_FULL)
    day = "2020-01-02" if a.quick else "2020-02-01"
    repeat = a.repeat or (3 if a.quick else 5)
    load_before = os.getloadavg()
    results = measure(store, day, repeat)
    doc = {
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "store": str(store.relative_to(ROOT)),
        "repeat": repeat,
        "machine": machine_info(),
        "versions": versions(["zarrsql", "duckdb", "pyarrow", "adbc-driver-flightsql", "adbc-driver-manager"]),
        "results": results,
        "goals": goals(results),
    }
    out = a.out or HERE / "results" / ("flight_quick.json" if a.quick else "flight.json")
    out.write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(doc)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0 if all(r["agree"] for r in results.values()) else 2


if __name__ == "__main__":
    sys.exit(main())
