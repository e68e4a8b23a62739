#!/usr/bin/env python3
"""Scale (issue 20 goal 5): the ERA5-like store and a 10x longer one, side by side.

    python benchmarks/run_scale.py            # 1,460 h (452 MB) vs 14,600 h (~4.5 GB), 3 repetitions
    python benchmarks/run_scale.py --quick    # 96 h vs 960 h, 1 repetition, about two minutes

Q1, Q2, Q3 and Q5 of run_era5.py run on both stores for zarrsql, DuckDB on a Parquet copy of
each store (DuckDB's COPY defaults) and the numcodecs decode floor (the reference of the
agreement check, and the machine's own 10x/1x ratio for reading and decoding the same bytes).
Every (engine, query, store, repetition) is a fresh process (benchmarks/engines.py), the
repetitions interleaved over engines and both stores, each run under the load guard of
harness.py. Goals, for zarrsql: time on the 10x store at most 10.5x the 1x store's, peak RSS
at most 1.2x (flat). Q3 reads one day and should take the same time on both stores; Q5
returns every row, so its result, and with it the RSS, grows 10x (its RSS is reported,
not judged).

The stores are built once and stamped (make_era5.py; the 10x build takes CPU minutes), read
once before timing (warm page cache: both stores and both Parquet files fit in RAM), and the
fraction of their bytes in the page cache is measured with mincore(2) before and after the
timed runs; the disk is described in the results.

Writes results/scale.json and results/scale.md (scale_quick.* with --quick).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import engines as E  # noqa: E402  (stdlib-only at import)
import harness as H  # noqa: E402
import make_era5 as M  # noqa: E402
import run_era5 as R  # noqa: E402

RESULTS = HERE / "results"
SCALE = 10
QUERIES = ["Q1", "Q2", "Q3", "Q5"]
ENGINES = ["floor.numcodecs", "parquet+duckdb", "zarrsql"]
REFERENCE = "floor.numcodecs"
TIME_GOAL = 10.5  # zarrsql: median on the 10x store / median on the 1x store
RSS_GOAL = 1.2  # zarrsql: peak RSS on the 10x store / on the 1x store
RSS_FLAT_QUERIES = ["Q1", "Q2", "Q3"]  # Q5 materialises every row: its result grows with the store
VERSIONED = ["zarrsql", "duckdb", "zarr", "numcodecs", "pyarrow", "numpy"]


def stores(quick: bool) -> dict[int, dict]:
    """Both stores (built if their stamps do not match) and their Parquet copies."""
    out = {}
    for k in (1, SCALE):
        store = M.default_out(quick, k)
        M.build(store, M.n_time_for(quick, k))
        parquet = M.build_parquet(store, writer="duckdb")
        out[k] = {"store": store, "parquet": parquet, "n_time": M.n_time_for(quick, k)}
    return out


WARM_ENOUGH = 0.999  # below this fraction of an input's bytes in the page cache, read it again


def _input_of(engine: str, s: dict) -> Path:
    return s["parquet"] if engine.startswith("parquet") else s["store"]


def warm_run(path: Path, run) -> dict:
    """Run ``run()`` with its input in the page cache: the machine is shared and other
    processes' files push ours out (10.5 GB of inputs in 23.5 GB of RAM), so the input's
    residency is measured (mincore) before every run and the input read again when pages
    are missing. Both numbers are kept with the run."""
    before = H.resident_fraction([path])
    rewarmed = before is not None and before < WARM_ENOUGH
    if rewarmed:
        H.warm([path])
    rec = run()
    rec["page_cache"] = {
        "input": path.name,
        "resident_before": before,
        "rewarmed": rewarmed,
        "resident_at_start": H.resident_fraction([path]) if rewarmed else before,
    }
    return rec


def compare(q, ref, r) -> list[str]:
    if q in E.LARGE_RESULT_QUERIES or not ref.get("_result_path") or not r.get("_result_path"):
        return R.compare_digest(ref["digest"], r["digest"])
    return R.compare_small(q, R.load_cols(ref["_result_path"]), R.load_cols(r["_result_path"]))


def cell_of(runs: list[dict], discarded: list[dict]) -> dict:
    ok = [r for r in runs if r.get("ok")]
    clean = [r for r in ok if not r["load"].get("kept_although_loaded")]
    timed = clean or ok
    return {
        "median_query_s": statistics.median(r["query_s"] for r in timed) if timed else None,
        "median_query_cpu_s": statistics.median(r["query_cpu_s"] for r in timed) if timed else None,
        "min_query_s": min((r["query_s"] for r in timed), default=None),
        "max_query_s": max((r["query_s"] for r in timed), default=None),
        "peak_rss_mb": max((r["peak_rss_mb"] for r in ok), default=None),
        "loaded_in_median": 0 if clean else len(timed),
        "runs": [{**R._run_summary(r, r["rep"]), "page_cache": r.get("page_cache")} for r in runs],
        "min_resident_at_start": min(
            (
                r["page_cache"]["resident_at_start"]
                for r in runs
                if (r.get("page_cache") or {}).get("resident_at_start") is not None
            ),
            default=None,
        ),
        "rewarmed_runs": sum(1 for r in runs if (r.get("page_cache") or {}).get("rewarmed")),
        "discarded_runs": discarded,
        "errors": [r.get("error", "?") for r in runs if not r.get("ok")],
    }


def evaluate(cells, engines, queries) -> tuple[dict, list[dict]]:
    """Per (engine, query): the 10x/1x ratios of time and peak RSS; zarrsql's goals."""
    ratios, goals = {}, []
    for q in queries:
        for e in engines:
            a, b = cells.get(f"{e}/{q}/1") or {}, cells.get(f"{e}/{q}/{SCALE}") or {}
            ratios[f"{e}/{q}"] = {
                "time": R.ratio(b.get("median_query_s"), a.get("median_query_s")),
                "rss": R.ratio(b.get("peak_rss_mb"), a.get("peak_rss_mb")),
                "cpu": R.ratio(b.get("median_query_cpu_s"), a.get("median_query_cpu_s")),
            }
        if "zarrsql" not in engines:
            continue
        rt = ratios[f"zarrsql/{q}"]
        goals.append(_goal(f"{q} time on {SCALE}× ≤ {TIME_GOAL:g}× the 1× store", q, rt["time"], TIME_GOAL))
        if q in RSS_FLAT_QUERIES:
            goals.append(_goal(f"{q} peak RSS on {SCALE}× ≤ {RSS_GOAL:g}× the 1× store", q, rt["rss"], RSS_GOAL))
    return ratios, goals


def _goal(text, q, r, lim) -> dict:
    return {
        "goal": text,
        "query": q,
        "ratio": r,
        "measured": "—" if r is None else f"{r:.2f}×",
        "status": "n/a (not measured)" if r is None else ("met" if r <= lim else "**MISSED**"),
        "met": None if r is None else r <= lim,
    }


def markdown(doc) -> str:
    L = ["# Scale: the ERA5-like store and a 10× longer one", ""]
    s1, s10 = doc["stores"]["1"], doc["stores"][str(SCALE)]
    c = doc["conditions"]
    L.append(
        f"1× `{s1['path_rel']}`: {s1['n_time']:,} hourly steps, {s1['size_mb']:,.0f} MB (Parquet "
        f"{s1['parquet_mb']:,.0f} MB); {SCALE}× `{s10['path_rel']}`: {s10['n_time']:,} hourly steps, "
        f"{s10['size_mb']:,.0f} MB (Parquet {s10['parquet_mb']:,.0f} MB). {doc['repeat']} repetition"
        f"{'s' if doc['repeat'] != 1 else ''} per cell, each a fresh process, interleaved over engines and "
        "stores; open + query, imports excluded; peak RSS = the child's VmHWM."
    )
    L.append("")
    d = c["disk"]
    L.append(
        f"Conditions: warm page cache — every file read once before timing, and an input read "
        f"again before a run when less than {WARM_ENOUGH:.1%} of it was in the page cache "
        f"({c['rewarmed_runs']} runs); at the start of a run at least "
        f"{_pct(c['min_resident_at_start'])} of its input was resident (mincore); of all inputs "
        f"{_pct(c['resident_before'])} before the timed runs, {_pct(c['resident_after'])} after. "
        f"Disk `{d.get('device')}` ({d.get('fstype')}, "
        f"{'rotational' if d.get('rotational') else 'non-rotational'} as the kernel reports it), "
        f"{d.get('free_gb')} GB free; RAM {d.get('memtotal_gb')} GB, {d.get('memavailable_gb')} GB "
        f"available at the start. {doc['machine'].get('cpu_count')} CPUs."
    )
    L.append("")
    L.append(
        "| query | engine | 1× (median · peak RSS) | " + f"{SCALE}× (median · peak RSS) | time {SCALE}×/1× | "
        f"RSS {SCALE}×/1× | CPU time {SCALE}×/1× |"
    )
    L.append("|---|---|---|---|---|---|---|")
    for q in doc["queries"]:
        for e in doc["engines"]:
            r = doc["ratios"][f"{e}/{q}"]
            row = [
                f"{q} {E.QUERIES[q]['title']}",
                e,
                R.cell_text(doc["cells"].get(f"{e}/{q}/1")),
                R.cell_text(doc["cells"].get(f"{e}/{q}/{SCALE}")),
                "—" if r["time"] is None else f"{r['time']:.2f}×",
                "—" if r["rss"] is None else f"{r['rss']:.2f}×",
                "—" if r.get("cpu") is None else f"{r['cpu']:.2f}×",
            ]
            L.append("| " + " | ".join(row) + " |")
    L.append("")
    L.append(
        "† repetitions spread by more than 1.5×; ‡ every attempt of a run was under foreign load. "
        "CPU time: the timed region's CPU seconds over all threads, which move little under load."
    )
    L.append("")
    R.load_markdown(doc, L)
    if doc["goals"]:
        L.append("## zarrsql goals")
        L.append("")
        L.append("| goal | measured | status |")
        L.append("|---|---|---|")
        L.extend(f"| {g['goal']} | {g['measured']} | {g['status']} |" for g in doc["goals"])
        L.append("")
        L.append(
            f"Q5 returns every row: its result is {SCALE}× larger, so its peak RSS grows with it and is not judged."
        )
        L.append("")
    L.append("## Do the engines agree?")
    L.append("")
    if doc["disagreements"]:
        L.append("**ENGINES DISAGREE:**")
        L.append("")
        L.extend(
            f"- **{x['engine']} {x['query']} {x['scale']}×**: " + "; ".join(x["problems"]) for x in doc["disagreements"]
        )
    else:
        L.append(f"Yes: every successful run matches {doc['reference']} on the same store.")
    L.append("")
    return "\n".join(L)


def _pct(x):
    return "—" if x is None else f"{100 * x:.0f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{M.N_TIME_QUICK} h vs {M.N_TIME_QUICK * SCALE} h stores")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated, from " + ", ".join(ENGINES))
    ap.add_argument("--queries", default=",".join(QUERIES), help="comma-separated, from " + ", ".join(QUERIES))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per child process")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the child processes")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default results/scale[_quick].json)")
    H.add_load_arguments(ap)
    a = ap.parse_args(argv)
    repeat = a.repeat or (1 if a.quick else 3)
    engines = [e for e in ENGINES if e in a.engines.split(",")]
    queries = [q for q in QUERIES if q in a.queries.upper().split(",")]
    if not engines or not queries:
        ap.error(f"choose engines from {ENGINES} and queries from {QUERIES}")
    policy = H.policy_from_args(a, quick=a.quick)
    day = R.Q3_DAY_QUICK if a.quick else R.Q3_DAY_FULL
    out_json = a.out or RESULTS / ("scale_quick.json" if a.quick else "scale.json")
    t_start = time.perf_counter()

    R.log("== building inputs (untimed; the 10x build takes minutes the first time)")
    st = stores(a.quick)
    inputs = [p for s in st.values() for p in (s["store"], s["parquet"])]
    H.warm(inputs)
    R.warm_imports(a.python, engines)
    resident_before = H.resident_fraction(inputs)
    R.log(f"== inputs in the page cache: {_pct(resident_before)}")

    keys = [(e, q, k) for q in queries for k in st for e in engines]
    runs = {f"{e}/{q}/{k}": [] for e, q, k in keys}
    discarded = {key: [] for key in runs}
    with tempfile.TemporaryDirectory(prefix="zarrsql-scale-") as work:
        for rep in range(repeat):
            for q in queries:
                order = list(st) if rep % 2 == 0 else list(st)[::-1]
                for k in order:
                    rot = (rep + k) % len(engines)
                    for e in engines[rot:] + engines[:rot]:
                        s = st[k]
                        tag = f"{e.replace('+', '_')}_{q}_{k}_{rep}"
                        r, dropped = H.with_retries(
                            lambda e=e, q=q, s=s, tag=tag: warm_run(
                                _input_of(e, s),
                                lambda: R.run_child(
                                    a.python, e, q, s["store"], s["parquet"], day, work, tag, a.timeout, policy=policy
                                ),
                            ),
                            policy,
                            R.log,
                        )
                        r["rep"] = rep
                        runs[f"{e}/{q}/{k}"].append(r)
                        discarded[f"{e}/{q}/{k}"] += [R._run_summary(x, rep) for x in dropped]
                        ld = r["load"]
                        R.log(
                            f"  rep {rep + 1}/{repeat} {q} {k:>2}× {e:16s} "
                            + (
                                f"{r['query_s']:.3f} s, {r['peak_rss_mb']:.0f} MB"
                                if r.get("ok")
                                else "FAILED: " + r.get("error", "?")[:200]
                            )
                            + (
                                f", foreign {ld['foreign_cores']:.2f} cores"
                                if ld.get("foreign_cores") is not None
                                else ""
                            )
                        )
        disagreements = []
        for q in queries:
            for k in st:
                ref_runs = [r for r in runs.get(f"{REFERENCE}/{q}/{k}", []) if r.get("ok")]
                ref_e = (
                    REFERENCE
                    if ref_runs
                    else next((e for e in engines if any(r.get("ok") for r in runs[f"{e}/{q}/{k}"])), None)
                )
                if ref_e is None:
                    continue
                ref = next(r for r in runs[f"{ref_e}/{q}/{k}"] if r.get("ok"))
                for e in engines:
                    problems = [
                        f"rep {r['rep'] + 1}: {p}"
                        for r in runs[f"{e}/{q}/{k}"]
                        if r.get("ok")
                        for p in compare(q, ref, r)
                    ]
                    if problems:
                        disagreements.append(
                            {"engine": e, "query": q, "scale": k, "reference": ref_e, "problems": problems[:8]}
                        )
    resident_after = H.resident_fraction(inputs)
    cells = {key: cell_of(runs[key], discarded[key]) for key in runs}
    ratios, goals = evaluate(cells, engines, queries)
    doc = {
        "benchmark": "scale",
        "quick": a.quick,
        "repeat": repeat,
        "engines": engines,
        "queries": queries,
        "reference": REFERENCE,
        "q3_day": day,
        "stores": {
            str(k): {
                "path": str(s["store"]),
                "path_rel": str(s["store"].relative_to(HERE.parent)),
                "n_time": s["n_time"],
                "size_mb": M.du_mb(s["store"]),
                "parquet": str(s["parquet"]),
                "parquet_mb": s["parquet"].stat().st_size / 1e6,
            }
            for k, s in st.items()
        },
        "conditions": {
            "page_cache": "warm: every input file read once (harness.warm) before the timed runs, "
            "and its residency checked (mincore) before every run: an input with less "
            f"than {WARM_ENOUGH:.1%} of its bytes in the page cache is read again first",
            "rewarmed_runs": sum(c["rewarmed_runs"] for c in cells.values()),
            "min_resident_at_start": min(
                (c["min_resident_at_start"] for c in cells.values() if c["min_resident_at_start"] is not None),
                default=None,
            ),
            "resident_before": resident_before,
            "resident_after": resident_after,
            "disk": H.disk_info(st[1]["store"].parent),
        },
        "timing": "median_query_s: open + query + materialised result in a fresh process, imports excluded; "
        "peak_rss_mb: max over repetitions of the child's VmHWM; medians from the runs without "
        "foreign load when a cell has any",
        "machine": H.machine_info(),
        "versions": H.versions(VERSIONED),
        "load_guard": H.load_summary(
            [r for rs in runs.values() for r in rs], [r for rs in discarded.values() for r in rs], policy
        ),
        "cells": cells,
        "ratios": ratios,
        "goals": goals,
        "disagreements": disagreements,
    }
    doc["wall_s"] = time.perf_counter() - t_start
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    md = markdown(doc)
    out_json.with_suffix(".md").write_text(md + "\n")
    print(md)
    R.log(f"== wrote {out_json} and {out_json.with_suffix('.md')} ({doc['wall_s']:.0f} s)")
    return 2 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
