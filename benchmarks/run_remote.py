#!/usr/bin/env python3
"""Remote stores: zarrsql over HTTP with injected latency, vs local disk and xarray-sql 0.6.0.

    python benchmarks/run_remote.py                  # full ERA5-like store, 20 ms, 3 repetitions
    python benchmarks/run_remote.py --quick --repeat 1

A local HTTP server (tests/remote/httpserver.py, its own process so it does not share the
GIL with the reader) serves benchmarks/data with `--latency` seconds added to every request.
Each (engine, query, repetition) runs in a fresh process, timed from the end of the imports
to the materialised result (open + query), as run_era5.py does; the server's request log
gives the requests each run made. Q1 is the full-table aggregate, Q3 the one-day slice.
Writes benchmarks/results/remote.md (and .json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness import child_env, machine_info  # noqa: E402

ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from tests.remote.s3server import dependent_rounds  # noqa: E402

SERVER = ROOT / "tests" / "remote" / "httpserver.py"
DAYS = {"era5.zarr": "2020-02-01", "era5_quick.zarr": "2020-01-02"}
CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {bench!r})
import engines as E
imports = ["remote_floor", "aiohttp"] if {runner!r} == "floor" else E.ENGINE_IMPORTS[{runner!r}]
for name in imports + {extra!r}:
    __import__(name)
run = sys.modules["remote_floor"].run if {runner!r} == "floor" else None
start = time.perf_counter()
if run is not None:
    table = run({query!r}, {store!r}, {day!r})
else:
    table = E.RUNNERS[{runner!r}]({query!r}, {store!r}, None, {day!r})
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"seconds": seconds, "value": table.column(0)[0].as_py(), "peak_rss_mb": peak}}))
"""
ENGINES = {  # column: (runner in engines.py, or "floor" for remote_floor.py; over HTTP?)
    "floor, local disk": ("floor", False),
    "floor, HTTP": ("floor", True),
    "zarrsql, local disk": ("zarrsql", False),
    "zarrsql, HTTP": ("zarrsql", True),
    "xarray-sql 0.6.0 + DuckDB, HTTP": ("xarray-sql+duckdb", True),
}


def server_timeline(port: int) -> list[list]:
    """(method, path, arrived, answered) of every request the server answered so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__timeline") as r:
        return json.load(r)


#: Imported before the clock starts for HTTP runs, as the engines' own libraries are: both
#: zarrsql and xarray load fsspec's HTTP filesystem lazily, on the first remote open.
HTTP_IMPORTS = ["fsspec", "aiohttp", "fsspec.implementations.http"]


def run_child(python: str, runner: str, query: str, store: str, day: str) -> dict:
    extra = HTTP_IMPORTS if store.startswith("http") else []
    code = CHILD.format(bench=str(HERE), runner=runner, query=query, store=store, day=day, extra=extra)
    # bytecode cached as run_era5.py does: lazily imported modules are not recompiled in the clock
    load = os.getloadavg()[0]
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600, env=child_env())
    res = {"load_before": load, "load_after": os.getloadavg()[0]}
    if out.returncode != 0:
        return {**res, "error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return {**res, **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the 96-hour store (4 chunks per variable)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.02, help="seconds added to each request")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the children")
    args = ap.parse_args()
    name = "era5_quick.zarr" if args.quick else "era5.zarr"
    store_path = HERE / "data" / name
    if not store_path.exists():
        subprocess.run([sys.executable, str(HERE / "make_era5.py"), *(["--quick"] if args.quick else [])], check=True)
    server = subprocess.Popen([sys.executable, str(SERVER), str(HERE / "data"), "--latency", str(args.latency)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}/{name}"
        # one untimed Q3 per engine first: every module it imports lazily is in the bytecode
        # cache and the store's files in the OS cache before any run is timed
        for runner, remote in ENGINES.values():
            run_child(args.python, runner, "Q3", url if remote else str(store_path), DAYS[name])
        results: dict[str, dict[str, list[dict]]] = {}
        for rep in range(args.repeat):
            for query in ("Q1", "Q3"):
                order = list(ENGINES.items())
                for column, (runner, remote) in order[rep % len(order):] + order[: rep % len(order)]:
                    before = len(server_timeline(port))
                    res = run_child(args.python, runner, query, url if remote else str(store_path), DAYS[name])
                    made = server_timeline(port)[before:]
                    res["requests"] = len(made) if remote else None
                    res["rounds"] = dependent_rounds(made) if remote else None
                    results.setdefault(query, {}).setdefault(column, []).append(res)
                    print(f"rep {rep + 1} {query} {column}: {res}", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait()
    write(results, name, args)
    return 0


def _cell(runs: list[dict]) -> tuple[str, float | None]:
    ok = [r for r in runs if "seconds" in r]
    if not ok:
        return f"failed: {runs[0].get('error', '?')[:80]}", None
    median = statistics.median(r["seconds"] for r in ok)
    reqs = [r["requests"] for r in ok if r.get("requests") is not None]
    text = f"{median:.3f} s" + (f" · {int(statistics.median(reqs))} requests" if reqs else "")
    return text, median


def _median(runs: list[dict], key: str) -> float | None:
    ok = [r[key] for r in runs if key in r and r[key] is not None and "seconds" in r]
    return statistics.median(ok) if ok else None


def goals(results: dict, latency: float) -> dict[str, dict]:
    """Issue 20, goal 7: Q1 over HTTP within 1.2x the fetch+decode floor over HTTP; Q3 over
    HTTP within zarrsql's local time plus one round trip per dependent round the query needs
    (the floor's rounds: metadata, coordinates, the chunk)."""
    out = {}
    for query, cols in results.items():
        remote = _median(cols["zarrsql, HTTP"], "seconds")
        if query == "Q1":
            floor = _median(cols["floor, HTTP"], "seconds")
            bound = 1.2 * floor if floor else None
            rule = "zarrsql, HTTP <= 1.2 x floor, HTTP"
        else:
            local = _median(cols["zarrsql, local disk"], "seconds")
            rounds = _median(cols["floor, HTTP"], "rounds")
            bound = local + rounds * latency if local and rounds else None
            rule = "zarrsql, HTTP <= zarrsql, local disk + rounds x latency"
        out[query] = {"rule": rule, "bound": bound, "measured": remote,
                      "met": None if bound is None or remote is None else remote <= bound}
    return out


def write(results: dict, name: str, args: argparse.Namespace) -> None:
    met = goals(results, args.latency)
    lines = [
        f"# Remote stores: zarrsql over HTTP ({args.latency * 1000:.0f} ms per request) vs local disk and xarray-sql",
        "",
        f"Store `benchmarks/data/{name}` served by `tests/remote/httpserver.py` on 127.0.0.1 with "
        f"{args.latency * 1000:.0f} ms added to every request. Median of {args.repeat} runs, each in a fresh "
        "process, open + query (imports excluded: "
        "fsspec's HTTP filesystem and aiohttp count as imports); requests from the server's log. Q1 = "
        "`SELECT avg(t2m)` over the whole table, Q3 = one day × 30°×30° box. zarrsql's default "
        "`concurrency` (32 requests in flight), cold metadata cache (a new process). The floor is "
        "`benchmarks/remote_floor.py`: the same requests in the same dependent order, 32 in flight, each "
        "chunk decompressed and reduced on a thread per core, no SQL and no table — the least a reader "
        "must do, with the same HTTP client (aiohttp), on the same two cores as the server. *rounds*: the "
        "longest chain of requests each sent after the one before was answered (server's log): the round "
        "trips a run waited for one after another.",
        "",
        "| query | " + " | ".join(ENGINES) + " | HTTP / local | floor: HTTP / local | zarrsql / floor, HTTP"
        " | rounds: floor, zarrsql |",
        "|---|" + "---|" * (len(ENGINES) + 4),
    ]
    for query, cols in results.items():
        cells = {c: _cell(cols[c]) for c in ENGINES}
        local, remote = cells["zarrsql, local disk"][1], cells["zarrsql, HTTP"][1]
        ratio = f"{remote / local:.2f}×" if local and remote else "—"
        floor_local, floor_remote = cells["floor, local disk"][1], cells["floor, HTTP"][1]
        ratio += f" | {floor_remote / floor_local:.2f}×" if floor_local and floor_remote else " | —"
        ratio += f" | {remote / floor_remote:.2f}×" if remote and floor_remote else " | —"
        rounds = [_median(cols[c], "rounds") for c in ("floor, HTTP", "zarrsql, HTTP")]
        shown = ", ".join("—" if r is None else f"{r:g}" for r in rounds)
        lines.append(f"| {query} | " + " | ".join(cells[c][0] for c in ENGINES) + f" | {ratio} | {shown} |")
    lines += ["", "Peak RSS of the process (MB, median):", "",
              "| query | " + " | ".join(ENGINES) + " |", "|---|" + "---|" * len(ENGINES)]
    for query, cols in results.items():
        peaks = [_median(cols[c], "peak_rss_mb") for c in ENGINES]
        lines.append(f"| {query} | " + " | ".join("—" if p is None else f"{p:.0f}" for p in peaks) + " |")
    lines += ["", "Goals (issue 20, goal 7):", "", "| query | goal | bound | zarrsql, HTTP | met |",
              "|---|---|---|---|---|"]
    for query, g in met.items():
        bound = "—" if g["bound"] is None else f"{g['bound']:.3f} s"
        measured = "—" if g["measured"] is None else f"{g['measured']:.3f} s"
        verdict = "n/a" if g["met"] is None else ("yes" if g["met"] else "no")
        lines.append(f"| {query} | {g['rule']} | {bound} | {measured} | {verdict} |")
    loads = [r[k] for cols in results.values() for runs in cols.values() for r in runs
             for k in ("load_before", "load_after") if k in r]
    if loads:
        lines += ["", f"Load average (1 min) around the runs: {min(loads):.1f} – {max(loads):.1f} "
                  f"on {os.cpu_count()} cores (every run's in the JSON)."]
    text = "\n".join(lines) + "\n"
    out = HERE / "results" / ("remote_quick.md" if args.quick else "remote.md")
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(
        {"machine": machine_info(), "store": name, "latency": args.latency, "repeat": args.repeat,
         "goals": met, "results": results}, indent=1))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
