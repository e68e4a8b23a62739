#!/usr/bin/env python3
"""Does the progress display slow a scan? Q1 of the ERA5-like benchmark, progress on vs off.

    python benchmarks/run_progress.py              # full store (1,460 hours), 7 repetitions each
    python benchmarks/run_progress.py --quick      # 96-hour store: a smoke run
    python benchmarks/run_progress.py --n-time 480 --repeat 9

Both sides run in one process on one connection, interleaved (off, on, off, on, ...) after
an untimed warm-up, so the page cache, the imports and the store's metadata cache are the
same for both. "On" forces the display as a terminal would show it (the bar is drawn, into
/dev/null) and from the first moment (no one-second delay), so every unit of the scan runs
with the counters watched and the display refreshing: the worst case. Writes
results/progress.json and results/progress.md; exits 1 when the median with progress is
more than 5 % slower (the goal: not measurably slower).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_era5 as M  # noqa: E402
from harness import machine_info, versions, warm  # noqa: E402

RESULTS = HERE / "results"
GOAL = 1.05  # median(on) / median(off)
Q1 = "SELECT avg(t2m) AS avg_t2m FROM read_zarr('{store}')"


def _timed(con, sql: str) -> float:
    t0 = time.perf_counter()
    con.sql(sql).fetchall()
    return time.perf_counter() - t0


@contextlib.contextmanager
def _progress(on: bool, progress, devnull):
    """Progress shown (as on a terminal, drawn into /dev/null) or switched off."""
    import zarrsql

    zarrsql.set_option("progress", on)
    saved = progress.display_kind, progress.DELAY, sys.stderr
    progress.display_kind, progress.DELAY, sys.stderr = (lambda: "terminal"), 0.0, devnull
    try:
        yield
    finally:
        progress.display_kind, progress.DELAY, sys.stderr = saved
        zarrsql.set_option("progress", True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n-time", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    n_time = a.n_time or (M.N_TIME_QUICK if a.quick else M.N_TIME_FULL)
    store = M.build(M.DATA / f"era5_progress_{n_time}.zarr", n_time)
    warm([store])

    import zarrsql
    from zarrsql.notebook import progress

    progress.install()
    con = zarrsql.connect()
    sql = Q1.format(store=store)
    times: dict[str, list[float]] = {"off": [], "on": []}
    bars = 0
    with open(os.devnull, "w") as devnull:
        for side in ("off", "on"):  # warm-up, untimed
            with _progress(side == "on", progress, devnull):
                _timed(con, sql)
        for _ in range(a.repeat):
            for side in ("off", "on"):
                before = progress.MONITOR.shown[-1:]
                with _progress(side == "on", progress, devnull):
                    times[side].append(_timed(con, sql))
                    time.sleep(progress.GRACE + 2 * progress.TICK)  # let the display close
                if side == "on":
                    bars += progress.MONITOR.shown[-1:] != before
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["on"] / med["off"]
    best = min(times["on"]) / min(times["off"])  # the least noisy comparison on a shared machine
    doc = {
        "query": "Q1",
        "sql": Q1,
        "n_time": n_time,
        "repeat": a.repeat,
        "seconds": times,
        "median_s": med,
        "ratio_on_off": ratio,
        "ratio_min_on_off": best,
        "runs_with_a_bar": bars,
        "goal_ratio": GOAL,
        "machine": machine_info(),
        "versions": versions(["duckdb", "zarr", "tqdm", "numpy", "pyarrow"]),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "progress.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = (
        f"# Progress overhead (Q1, {n_time} hours, {a.repeat} interleaved repetitions)\n\n"
        "| progress | median s | min s | max s |\n|---|---|---|---|\n"
        + "".join(f"| {k} | {med[k]:.3f} | {min(v):.3f} | {max(v):.3f} |\n" for k, v in times.items())
        + f"\nmedian on / off: **{ratio:.3f}**, fastest on / fastest off: {best:.3f} (goal ≤ {GOAL}); "
        f"runs that drew a bar: {bars} of {a.repeat}\n"
    )
    (RESULTS / "progress.md").write_text(md)
    print(md)
    return 0 if ratio <= GOAL and bars == a.repeat else 1


if __name__ == "__main__":
    sys.exit(main())
