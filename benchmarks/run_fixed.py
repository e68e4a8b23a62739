#!/usr/bin/env python3
"""Fixed costs (issue 20, goal 2): what a user waits for before the first row, stage by stage.

    python benchmarks/run_fixed.py            # full ERA5-like store, 7 repetitions
    python benchmarks/run_fixed.py --quick    # the 96-hour store, 5 repetitions (< 2 min)

Every repetition starts one fresh Python process per engine (interleaved, the order rotated
per repetition); inside it the stages run one after the other and each is timed on its own
(wall clock and process CPU time):

| stage          | zarrsql                                      | parquet (DuckDB on a Parquet copy)      |
|----------------|----------------------------------------------|-----------------------------------------|
| import         | `import zarrsql`                             | `import duckdb`                         |
| connect        | `zarrsql.connect()`                          | `duckdb.connect()`                      |
| bind           | `SELECT * FROM read_zarr(s) LIMIT 0`         | `SELECT * FROM read_parquet(p) LIMIT 0` |
| query          | Q1 `SELECT avg(t2m) ...`                     | the same on the Parquet file            |
| query_again    | Q1 again on the same store                   | Q1 again on the same file               |
| second_bind    | LIMIT 0 of a second store (a copy)           | LIMIT 0 of a second file (a copy)       |
| second_query   | Q1 on the second store                       | Q1 on the second file                   |

The Parquet copy is written as a user would write it: DuckDB's `COPY (SELECT * FROM
read_zarr(s)) TO 'x.parquet' (FORMAT parquet)` with its defaults. Results are checked equal
across engines (column names of the LIMIT 0, Q1's value within 1e-9 relative) and the run
exits with status 2 when they differ. One extra, untimed zarrsql process records
`zarrsql.trace()` counters per stage; the parent compares the second query's requests and
bytes with the chunk files of `t2m` on disk (the data Q1 must read), so whatever is left is
metadata the second query read. The 1-minute load average before and after each child is
kept with its run; medians of wall times are the headline, CPU times sit beside them
because they are steadier when other processes share the machine.

A third engine, the host floor, is the least any Python producer inside DuckDB pays:
`import duckdb`, `duckdb.connect()`, a bind that builds the Arrow schema from the group's
`zarr.json` alone (importing pyarrow) and registers a stream, and queries that stream the
decode floor (`engines.run_host_floor`'s batches). A goal it misses too is out of reach of
such a producer.

Goals (docs/benchmarks.md#fixed-costs): import zarrsql <= 1.2x import duckdb; connect +
first bind <= DuckDB's connect + first bind of the Parquet copy; the second query on a store
reads no metadata.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402
import make_era5  # noqa: E402

DATA = HERE / "data"
RESULTS = HERE / "results"
STAGES = ("import", "connect", "bind", "query", "query_again", "second_bind", "second_query")
ENGINES = ("zarrsql", "parquet", "host")
Q1 = "SELECT avg(t2m) AS avg_t2m FROM {src}"
HEAVY = ("duckdb", "numpy", "pyarrow", "zarr", "numcodecs", "pandas", "asyncio")

# The child starts with nothing but `time` and `sys` (site's own) imported; json and os are
# imported after the last stage, so that a library that needs them pays for them.
_CHILD = r"""
import sys, time
_modules = set(sys.modules)
out = {{"stages": {{}}, "cpu": {{}}, "imported": {{}}}}
def stage(name, fn):
    global _modules
    w, c = time.perf_counter(), time.process_time()
    value = fn()
    out["stages"][name] = time.perf_counter() - w
    out["cpu"][name] = time.process_time() - c
    now = set(sys.modules)
    out["imported"][name] = sorted(m for m in now - _modules if m.split(".")[0] in {heavy!r} and "." not in m)
    out["imported"][name + "_count"] = len(now - _modules)
    _modules = now
    return value
{body}
import json
print(json.dumps(out))
"""

_ZARRSQL = r"""
zarrsql = stage("import", lambda: __import__("zarrsql"))
con = stage("connect", lambda: zarrsql.connect())
def bind(src):
    rel = con.sql(f"SELECT * FROM {{src}} LIMIT 0")
    rel.fetchall()
    return rel.columns
def query(src):
    return con.sql({q1!r}.format(src=src)).fetchall()[0][0]
first, second = "read_zarr({first!r})", "read_zarr({second!r})"
TRACE = {trace!r}
if TRACE:
    counts = {{}}
    def traced(name, fn):
        with zarrsql.trace() as t:
            value = stage(name, fn)
        counts[name] = {{"requests": t.requests, "bytes_read": t.bytes_read, "chunks_decoded": t.chunks_decoded}}
        return value
else:
    traced = stage
out["columns"] = traced("bind", lambda: bind(first))
out["value"] = traced("query", lambda: query(first))
out["value_again"] = traced("query_again", lambda: query(first))
out["second_columns"] = traced("second_bind", lambda: bind(second))
out["second_value"] = traced("second_query", lambda: query(second))
if TRACE:
    out["trace"] = counts
"""

_PARQUET = r"""
duckdb = stage("import", lambda: __import__("duckdb"))
con = stage("connect", lambda: duckdb.connect())
def bind(src):
    rel = con.sql(f"SELECT * FROM {{src}} LIMIT 0")
    rel.fetchall()
    return rel.columns
def query(src):
    return con.sql({q1!r}.format(src=src)).fetchall()[0][0]
first, second = "read_parquet({first!r})", "read_parquet({second!r})"
out["columns"] = stage("bind", lambda: bind(first))
out["value"] = stage("query", lambda: query(first))
out["value_again"] = stage("query_again", lambda: query(first))
out["second_columns"] = stage("second_bind", lambda: bind(second))
out["second_value"] = stage("second_query", lambda: query(second))
"""

# The host floor: the least any Python producer hosted in DuckDB pays. Its bind builds the
# Arrow schema from the group's zarr.json alone (pyarrow is the one library it needs) and
# registers a stream; its queries stream the decode floor (engines.run_host_floor's batches).
_HOST = r"""
duckdb = stage("import", lambda: __import__("duckdb"))
con = stage("connect", lambda: duckdb.connect())
sys.path.insert(0, {here!r})
def bind(store):
    import json, pathlib
    import pyarrow as pa
    meta = json.loads((pathlib.Path(store) / "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    dims = meta["t2m"]["dimension_names"]
    types = {{"time": pa.timestamp("ns")}}
    names = dims + sorted(n for n, m in meta.items() if m.get("dimension_names") == dims)
    schema = pa.schema([(n, types.get(n, pa.float32())) for n in names])
    con.register("era5", pa.RecordBatchReader.from_batches(schema, iter(())))
    rel = con.sql("SELECT * FROM era5 LIMIT 0")
    rel.fetchall()
    return rel.columns
def query(store):
    from concurrent.futures import ThreadPoolExecutor
    import pyarrow as pa
    import engines as E
    g = E._RawGroup(store, E._ZstdNumcodecs())
    with ThreadPoolExecutor(E.DECODE_THREADS) as pool:
        schema, batches = E._host_floor_batches(g, "Q1", "2020-01-01", pool)
        con.register("era5", pa.RecordBatchReader.from_batches(schema, batches))
        return con.sql({q1!r}.format(src="era5")).fetchall()[0][0]
first, second = {first!r}, {second!r}
out["columns"] = stage("bind", lambda: bind(first))
out["value"] = stage("query", lambda: query(first))
out["value_again"] = stage("query_again", lambda: query(first))
out["second_columns"] = stage("second_bind", lambda: bind(second))
out["second_value"] = stage("second_query", lambda: query(second))
"""


def child_code(engine: str, first: Path, second: Path, trace: bool = False) -> str:
    body = {"zarrsql": _ZARRSQL, "parquet": _PARQUET, "host": _HOST}[engine]
    filled = body.format(q1=Q1, first=str(first), second=str(second), trace=trace, here=str(HERE))
    return _CHILD.format(heavy=HEAVY, body=filled)


def run_child(python: str, code: str, timeout: float) -> dict:
    before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=timeout, env=harness.child_env(), cwd=HERE
    )
    elapsed = time.perf_counter() - started
    after = os.getloadavg()[0]
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-2000:], "load_before": before, "load_after": after}
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    doc.update(process_s=elapsed, load_before=before, load_after=after)
    return doc


# -- inputs --------------------------------------------------------------------------------


def second_copy(store: Path) -> Path:
    """A byte-identical copy of `store` under another path: a store the process has never opened."""
    out = DATA / f"fixed_second_{store.name}"
    stamp = out.with_name(out.name + ".stamp.json")
    want = json.loads(make_era5.stamp_path(store).read_text())
    if out.is_dir() and stamp.is_file() and json.loads(stamp.read_text()) == want:
        return out
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(store, out)
    stamp.write_text(json.dumps(want) + "\n")
    return out


def parquet_copy(python: str, store: Path, out: Path) -> Path:
    """`COPY (SELECT * FROM read_zarr(store)) TO out (FORMAT parquet)`: DuckDB's defaults, as a user writes it."""
    import duckdb

    stamp = out.with_name(out.name + ".stamp.json")
    want = {
        "store": json.loads(make_era5.stamp_path(store).read_text()),
        "writer": "duckdb COPY defaults",
        "duckdb": duckdb.__version__,
    }
    if out.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == want:
        return out
    tmp = out.with_name(out.name + ".tmp")
    code = (
        "import zarrsql\n"
        f"zarrsql.connect().execute(\"COPY (SELECT * FROM read_zarr('{store}')) TO '{tmp}' (FORMAT parquet)\")\n"
    )
    subprocess.run([python, "-c", code], check=True, env=harness.child_env(), cwd=HERE)
    tmp.replace(out)
    stamp.write_text(json.dumps(want) + "\n")
    return out


def t2m_chunk_files(store: Path) -> tuple[int, int]:
    """(count, bytes) of the chunk files of `t2m` on disk: what Q1 has to read, and nothing more."""
    files = [p for p in (store / "t2m" / "c").rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


# -- summary --------------------------------------------------------------------------------


def medians(runs: list[dict], key: str) -> dict[str, float]:
    ok = [r for r in runs if "error" not in r]
    return {s: statistics.median(r[key][s] for r in ok) for s in STAGES} if ok else {}


def agreement(runs: dict[str, list[dict]]) -> list[str]:
    """Differences between any run's results and the Parquet engine's first run."""
    ok = {e: [r for r in rs if "error" not in r] for e, rs in runs.items()}
    if not ok["parquet"]:
        return ["no successful parquet run to compare with"]
    ref = ok["parquet"][0]
    problems = []
    for engine, rs in ok.items():
        for i, r in enumerate(rs):
            problems += [
                f"{engine} run {i}: {key} {r[key]} != {ref[key]}"
                for key in ("columns", "second_columns")
                if r[key] != ref[key]
            ]
            problems += [
                f"{engine} run {i}: {key} {r[key]!r} != {ref['value']!r}"
                for key in ("value", "value_again", "second_value")
                if abs(r[key] - ref["value"]) > 1e-9 * abs(ref["value"])
            ]
    return problems


def goals(med: dict[str, dict[str, float]], metadata_second: dict | None) -> list[dict]:
    z, p = med.get("zarrsql", {}), med.get("parquet", {})
    out = []
    if z and p:
        ratio = z["import"] / p["import"]
        out.append({"goal": "import zarrsql <= 1.2x import duckdb", "value": ratio, "met": ratio <= 1.2})
        # import zarrsql alone loads no DuckDB: the user's first line is import + connect
        ratio = (z["import"] + z["connect"]) / (p["import"] + p["connect"])
        out.append(
            {"goal": "import + connect() <= 1.2x DuckDB's import + connect()", "value": ratio, "met": ratio <= 1.2}
        )
        mine, theirs = z["connect"] + z["bind"], p["connect"] + p["bind"]
        out.append(
            {
                "goal": "connect + first bind <= DuckDB's connect + first bind of the Parquet copy",
                "value": mine / theirs,
                "met": mine <= theirs,
            }
        )
        h = med.get("host", {})
        if h:  # the same goal for the host floor: missed there, it is out of reach of any producer
            least = h["connect"] + h["bind"]
            out.append(
                {
                    "goal": "(the host floor's connect + first bind against the same)",
                    "value": least / theirs,
                    "met": least <= theirs,
                }
            )
    if metadata_second is not None:
        extra = metadata_second["requests"] + metadata_second["bytes"]
        out.append(
            {
                "goal": "the second query reads no metadata (requests, bytes beyond t2m's chunk files)",
                "value": f"{metadata_second['requests']} requests, {metadata_second['bytes']} bytes",
                "met": extra == 0,
            }
        )
    return out


def markdown(doc: dict) -> str:
    med, cpu = doc["median_s"], doc["median_cpu_s"]
    lines = [
        f"# Fixed costs ({'quick' if doc['quick'] else 'full'} store)",
        "",
        f"{doc['machine']['date']}, {doc['repeat']} repetitions, load (1 min) before the children: "
        f"median {doc['load']['median']:.2f}, max {doc['load']['max']:.2f} on {doc['machine']['cpu_count']} CPUs"
        + (" — **noisy: the machine was shared**" if doc["load"]["median"] > 0.5 else ""),
        "",
        "Median seconds per stage (wall; CPU in parentheses), each engine in a fresh process.",
        "",
        "The host floor is the least any Python producer inside DuckDB pays: `import duckdb`, "
        "`duckdb.connect()`, a bind that builds the Arrow schema from `zarr.json` (importing "
        "pyarrow) and registers a stream, and queries that stream the decode floor.",
        "",
        "| stage | zarrsql | parquet+duckdb | host floor | ratio | ratio of CPU times | host / parquet |",
        "|---|---|---|---|---|---|---|",
    ]
    h = med.get("host", {})

    def host_cells(value, other):
        return (f"{value:.4f}", f"{value / other:.2f}×") if value is not None else ("—", "—")

    for s in STAGES:
        z, p = med.get("zarrsql", {}).get(s), med.get("parquet", {}).get(s)
        if z is None or p is None:
            continue
        zc, pc = cpu["zarrsql"][s], cpu["parquet"][s]
        hv, hr = host_cells(h.get(s), p)
        lines.append(
            f"| {s} | {z:.4f} ({zc:.4f}) | {p:.4f} ({pc:.4f}) | {hv} | {z / p:.2f}× | {zc / pc:.2f}× | {hr} |"
        )
    z, p = med.get("zarrsql", {}), med.get("parquet", {})
    if z and p:
        for label, parts in (
            ("import + connect", ("import", "connect")),
            ("connect + bind", ("connect", "bind")),
            ("import … first schema", ("import", "connect", "bind")),
            ("import … first result", ("import", "connect", "bind", "query")),
        ):
            a, b = sum(z[s] for s in parts), sum(p[s] for s in parts)
            ac, bc = sum(cpu["zarrsql"][s] for s in parts), sum(cpu["parquet"][s] for s in parts)
            hv, hr = host_cells(sum(h[s] for s in parts) if h else None, b)
            lines.append(
                f"| **{label}** | {a:.4f} ({ac:.4f}) | {b:.4f} ({bc:.4f}) | {hv} | {a / b:.2f}× | {ac / bc:.2f}× | {hr} |"
            )
    lines += ["", "Heavy modules each zarrsql stage imported (first run):", ""]
    first = next((r for r in doc["runs"]["zarrsql"] if "error" not in r), None)
    if first:
        for s in STAGES:
            lines.append(f"- {s}: {', '.join(first['imported'][s]) or '—'} ({first['imported'][s + '_count']} modules)")
    if doc.get("trace"):
        lines += [
            "",
            "`zarrsql.trace()` per stage (untimed run):",
            "",
            "| stage | requests | bytes read | chunks decoded |",
            "|---|---|---|---|",
        ]
        for s, t in doc["trace"].items():
            lines.append(f"| {s} | {t['requests']} | {t['bytes_read']:,} | {t['chunks_decoded']} |")
        m = doc["metadata_second_query"]
        lines += [
            "",
            f"`t2m` has {m['t2m_chunk_files']} chunk files, {m['t2m_chunk_bytes']:,} bytes; the second "
            f"query read {m['requests']} request(s) and {m['bytes']:,} bytes beyond them.",
        ]
    lines += ["", "| goal | value | met |", "|---|---|---|"]
    for g in doc["goals"]:
        v = f"{g['value']:.2f}×" if isinstance(g["value"], float) else g["value"]
        lines.append(f"| {g['goal']} | {v} | {'met' if g['met'] else '**missed**'} |")
    if doc["disagreements"]:
        lines += ["", "**The engines disagree:**", ""] + [f"- {d}" for d in doc["disagreements"]]
    failed = [(e, r["error"]) for e, rs in doc["runs"].items() for r in rs if "error" in r]
    if failed:
        lines += ["", "Failed runs:", ""] + [f"- {e}: `{err.splitlines()[-1]}`" for e, err in failed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 96-hour store (smoke run, < 2 min)")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 7; 5 with --quick)")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the children")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default results/fixed[_quick].json)")
    a = ap.parse_args(argv)
    repeat = a.repeat or (5 if a.quick else 7)
    out = a.out or RESULTS / ("fixed_quick.json" if a.quick else "fixed.json")

    store = make_era5.build(
        make_era5.default_out(a.quick), make_era5.N_TIME_QUICK if a.quick else make_era5.N_TIME_FULL
    )
    second = second_copy(store)
    pq = parquet_copy(a.python, store, DATA / f"fixed_{store.stem}.parquet")
    pq_second = DATA / f"fixed_second_{store.stem}.parquet"
    if not pq_second.is_file() or pq_second.stat().st_mtime < pq.stat().st_mtime:
        shutil.copyfile(pq, pq_second)
    harness.warm([store, second, pq, pq_second])

    codes = {
        "zarrsql": child_code("zarrsql", store, second),
        "parquet": child_code("parquet", pq, pq_second),
        "host": child_code("host", store, second),
    }
    for code in codes.values():  # bytecode and page cache warm for every engine
        run_child(a.python, code, a.timeout)
    runs: dict[str, list[dict]] = {e: [] for e in ENGINES}
    for rep in range(repeat):
        order = ENGINES[rep % len(ENGINES) :] + ENGINES[: rep % len(ENGINES)]
        for engine in order:
            r = run_child(a.python, codes[engine], a.timeout)
            r["repetition"] = rep
            runs[engine].append(r)
            stages = "FAILED" if "error" in r else " ".join(f"{s}={r['stages'][s]:.4f}" for s in STAGES)
            print(f"rep {rep} {engine:8s} {stages} load={r['load_before']:.2f}", file=sys.stderr, flush=True)
    traced = run_child(a.python, child_code("zarrsql", store, second, trace=True), a.timeout)
    chunk_count, chunk_bytes = t2m_chunk_files(store)
    trace = traced.get("trace")
    metadata_second = None
    if trace:
        metadata_second = {
            "requests": trace["query_again"]["requests"] - chunk_count,
            "bytes": trace["query_again"]["bytes_read"] - chunk_bytes,
            "t2m_chunk_files": chunk_count,
            "t2m_chunk_bytes": chunk_bytes,
        }
    loads = [r["load_before"] for rs in runs.values() for r in rs]
    doc = {
        "quick": a.quick,
        "repeat": repeat,
        "machine": harness.machine_info(),
        "versions": harness.versions(["duckdb", "pyarrow", "numpy", "numcodecs", "zarr"]),
        "inputs": {
            "store": str(store),
            "second_store": str(second),
            "parquet": str(pq),
            "second_parquet": str(pq_second),
            "parquet_writer": "DuckDB COPY ... (FORMAT parquet) defaults",
        },
        "load": {"median": statistics.median(loads), "max": max(loads)},
        "median_s": {e: medians(rs, "stages") for e, rs in runs.items()},
        "median_cpu_s": {e: medians(rs, "cpu") for e, rs in runs.items()},
        "trace": trace,
        "trace_run_error": traced.get("error"),
        "metadata_second_query": metadata_second,
        "disagreements": agreement(runs),
        "runs": runs,
    }
    doc["goals"] = goals(doc["median_s"], metadata_second)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(doc)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 2 if doc["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
