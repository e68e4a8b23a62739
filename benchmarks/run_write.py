"""Writing a query result back to Zarr: zarrsql beside xarray and xarray-sql.

    python benchmarks/run_write.py            # full ERA5-like store: ~10M-row results
    python benchmarks/run_write.py --quick    # the 96-hour store: a smoke run

Two results of the ERA5-like store (benchmarks/make_era5.py) are written as a grid store:

- `daily`: Q2 grouped by day: `avg(t2m)` per (day, latitude, longitude), 1.77M rows
  (full store; 116k quick);
- `copy`: a full copy of one variable, `t2m` for the first 344 hours: 9.99M rows (quick:
  all 96 hours, 2.79M).

Engines, each run in a fresh process that times the whole write (imports excluded, as in
run_era5.py; `process_s` in the JSON includes them) and reports its peak RSS:

- `zarrsql`: `zarrsql.to_zarr(con.sql(<SQL over read_zarr>), out, dims=...)`;
- `zarrsql-sorted`: the same, forced onto the bounded path (rows sorted by chunk in DuckDB,
  one chunk per variable held) that results above 128 MiB of arrays take;
- `xarray`: `to_dataframe()` of the store, the same SQL in DuckDB, `set_index(dims)
  .to_xarray()`, `to_zarr()`: what a user does without zarrsql;
- `xarray-sql`: `xarray_sql.register` + the same SQL in DuckDB, `xarray_sql.to_dataset()`
  of the result, `to_zarr()`.

Every output is opened with xarray and compared with zarrsql's (values within 1e-6 of each
other, same coordinates). Writes results/write.json and results/write.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import make_era5 as M  # noqa: E402

RESULTS = HERE / "results"
ENGINES = ("zarrsql", "zarrsql-sorted", "xarray", "xarray-sql", "duckdb-sort")
#: Engines that write no store: `duckdb-sort` is the memory baseline of the RSS goal.
BASELINES = ("duckdb-sort",)
COPY_HOURS_FULL = 344  # 344 hours x 121 x 240 = 9.99M rows
CASES = {
    "daily": {
        "sql": "SELECT date_trunc('day', time) AS day, latitude, longitude, avg(t2m) AS t2m FROM {src} GROUP BY ALL",
        "dims": ["day", "latitude", "longitude"],
    },
    "copy": {
        "sql": "SELECT time, latitude, longitude, t2m FROM {src} WHERE time < TIMESTAMP '{end}'",
        "dims": ["time", "latitude", "longitude"],
    },
}


def case_sql(case: str, src: str, quick: bool) -> str:
    """The case's SQL over `src`; `copy` ends after its hours (the store starts 2020-01-01T00)."""
    import numpy as np

    hours = M.N_TIME_QUICK if quick else COPY_HOURS_FULL
    end = str(np.datetime64("2020-01-01T00:00") + np.timedelta64(hours, "h")).replace("T", " ")
    return CASES[case]["sql"].format(src=src, end=end)


# --------------------------------------------------------------------------- children
def write_zarrsql(case: str, store: str, out: str, quick: bool) -> None:
    import zarrsql

    con = zarrsql.connect()
    rel = con.sql(case_sql(case, f"read_zarr('{store}')", quick))
    zarrsql.to_zarr(rel, out, dims=CASES[case]["dims"], connection=con)


def write_zarrsql_sorted(case: str, store: str, out: str, quick: bool) -> None:
    """zarrsql on its bounded path whatever the size: rows sorted by chunk in DuckDB, one
    chunk per variable held (the path results above 128 MiB of arrays take)."""
    from zarrsql.write import grid, pivot

    grid.IN_MEMORY_BYTES = 0
    pivot.ONE_READ_BYTES = 0
    write_zarrsql(case, store, out, quick)


def write_xarray(case: str, store: str, out: str, quick: bool) -> None:
    import duckdb
    import xarray as xr

    ds = xr.open_zarr(store, chunks=None)[["t2m"]]
    df = ds.to_dataframe().reset_index()
    con = duckdb.connect()
    con.register("era5", df)
    result = con.sql(case_sql(case, "era5", quick)).df()
    del df
    result.set_index(CASES[case]["dims"]).to_xarray().to_zarr(out, mode="w-")


def write_xarray_sql(case: str, store: str, out: str, quick: bool) -> None:
    import duckdb
    import xarray as xr
    import xarray_sql as xql

    ds = xr.open_zarr(store, chunks=None)[["t2m"]]
    con = duckdb.connect()
    xql.register(con, "era5", ds)
    rel = con.sql(case_sql(case, "era5", quick))
    stream = getattr(rel, "to_arrow_reader", None) or rel.fetch_record_batch
    xql.to_dataset(stream(1 << 17), dims=CASES[case]["dims"]).to_zarr(out, mode="w-")


def sort_only(case: str, store: str, out: str, quick: bool) -> None:
    """The RSS goal's baseline, writing nothing: the same result, sorted by its dimensions in
    DuckDB (what the bounded path asks of DuckDB: every row, ordered by chunk), streamed to
    nowhere. Its peak RSS is the process plus DuckDB's sort buffer."""
    import zarrsql

    con = zarrsql.connect()
    sql = case_sql(case, f"read_zarr('{store}')", quick)
    order = ", ".join(CASES[case]["dims"])
    reader = con.sql(f"SELECT * FROM ({sql}) ORDER BY {order}").to_arrow_reader(1 << 17)
    for _batch in reader:
        pass


WRITERS = {
    "zarrsql": write_zarrsql,
    "zarrsql-sorted": write_zarrsql_sorted,
    "xarray": write_xarray,
    "xarray-sql": write_xarray_sql,
    "duckdb-sort": sort_only,
}
#: Imported before the clock starts (as run_era5.py excludes imports); the time with them is
#: kept as `process_s`.
IMPORTS = {
    "zarrsql": [*harness.ZARRSQL_IMPORTS, "zarrsql.write.api", "zarrsql.write.grid", "pandas", "zarr"],
    "zarrsql-sorted": [*harness.ZARRSQL_IMPORTS, "zarrsql.write.api", "zarrsql.write.grid", "pandas", "zarr"],
    "xarray": ["xarray", "duckdb", "pandas", "zarr"],
    "xarray-sql": ["xarray", "xarray_sql", "duckdb", "pandas", "zarr"],
    "duckdb-sort": [*harness.ZARRSQL_IMPORTS, "zarrsql.write.api", "zarrsql.write.grid", "pandas", "zarr"],
}


def child(engine: str, case: str, store: str, out: str, quick: bool, report: str) -> int:
    import importlib

    for name in IMPORTS[engine]:
        importlib.import_module(name)
    t0 = time.perf_counter()
    try:
        WRITERS[engine](case, store, out, quick)
        rec = {"ok": True}
    except Exception as err:  # noqa: BLE001 - recorded, the parent reports it
        rec = {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}
    rec["seconds"] = time.perf_counter() - t0
    rec["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(report).write_text(json.dumps(rec))
    return 0


# --------------------------------------------------------------------------- parent
def _env() -> dict:
    """The children's environment, importing zarrsql from this checkout's src/."""
    env = harness.child_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def run_one(python: str, engine: str, case: str, store: Path, workdir: Path, quick: bool, timeout: float) -> dict:
    out = workdir / f"{engine}-{case}.zarr"
    report = workdir / f"{engine}-{case}.json"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [python, __file__, "--child", engine, case, str(store), str(out), str(report)]
    if quick:
        cmd.append("--quick")
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())
        rc: object = done.returncode
        tail = done.stderr[-1500:]
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", ""
    rec = json.loads(report.read_text()) if report.is_file() else {"ok": False, "error": f"exit {rc}: {tail}"}
    rec["process_s"] = time.perf_counter() - t0
    rec["output"] = str(out)
    rec["load_before"], rec["load_after"] = load, os.getloadavg()[0]
    return rec


def compare(reference: str, other: str, dims: list[str]) -> str | None:
    """None when both outputs hold the same grid (values within 1e-6), else what differs."""
    import numpy as np
    import xarray as xr

    a, b = xr.open_zarr(reference).load(), xr.open_zarr(other).load()
    for d in dims:
        if not np.array_equal(np.sort(a[d].values), np.sort(b[d].values)):
            return f"coordinate {d} differs"
    b = b.reindex({d: a[d].values for d in dims})
    if not np.allclose(a.t2m.values, b.t2m.values, rtol=1e-6, atol=1e-6, equal_nan=True):
        return "t2m values differ"
    return None


def chunk_row_mb(reference: str) -> float:
    """One row of the output's chunks (along the first dimension), as float64, in MB."""
    import numpy as np
    import zarr

    arr = zarr.open_array(Path(reference) / "t2m")
    return float(arr.chunks[0] * np.prod(arr.shape[1:]) * arr.dtype.itemsize / 2**20)


def markdown(doc: dict) -> str:
    engines = [e for e in ENGINES if any(e in cell["engines"] for cell in doc["cases"].values())]
    lines = [
        f"# Writing results to Zarr ({'quick' if doc['quick'] else 'full'} ERA5-like store)",
        "",
        f"{doc['machine'].get('cpu_count')} CPUs, {doc['machine'].get('memory_gb')} GB; "
        f"{doc['repeat']} run(s) per cell, each in a fresh process; median seconds of the write "
        "(open, query, pivot, write; imports excluded) / peak RSS of the process.",
        "",
        "| case | rows | " + " | ".join(engines) + " | one row of chunks |",
        "|---|---|" + "---|" * len(engines) + "---|",
    ]
    for case, cell in doc["cases"].items():
        parts = []
        for e in engines:
            r = cell["engines"].get(e, {})
            if not r.get("ok"):
                parts.append(f"failed: {r.get('error', '')[:60]}")
                continue
            differs = "" if r.get("agrees", True) else " (differs)"
            parts.append(f"{r['median_s']:.1f} s / {r['peak_rss_mb']:.0f} MB{differs}")
        lines.append(f"| {case} | {cell['rows']:,} | " + " | ".join(parts) + f" | {cell['chunk_row_mb']:.0f} MB |")
    lines += ["", *rss_goal_lines(doc)]
    return "\n".join(lines) + "\n"


def rss_goal_lines(doc: dict) -> list[str]:
    """The RSS goal per case: a zarrsql write's peak at most the sort baseline's peak plus two
    rows of output chunks (medians of the runs' peaks; each run's peaks are in the JSON)."""
    lines = [
        "| case | engine | peak RSS (median of runs) | duckdb-sort peak + 2 rows of chunks | goal met |",
        "|---|---|---|---|---|",
    ]
    for case, cell in doc["cases"].items():
        base = cell["engines"].get("duckdb-sort", {})
        if not base.get("ok"):
            continue
        bound = base["median_peak_rss_mb"] + 2 * cell["chunk_row_mb"]
        for engine in ("zarrsql", "zarrsql-sorted"):
            r = cell["engines"].get(engine, {})
            if r.get("ok"):
                met = "yes" if r["median_peak_rss_mb"] <= bound else "**no**"
                lines.append(f"| {case} | {engine} | {r['median_peak_rss_mb']:.0f} MB | {bound:.0f} MB | {met} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=5, metavar=("ENGINE", "CASE", "STORE", "OUT", "REPORT"))
    a = ap.parse_args(argv)
    if a.child:
        return child(*a.child[:4], a.quick, a.child[4])
    repeat = a.repeat or (1 if a.quick else 3)
    store = M.build(M.default_out(a.quick), M.N_TIME_QUICK if a.quick else M.N_TIME_FULL, verbose=False)
    harness.warm([store])
    engines = [e for e in a.engines.split(",") if e]
    doc: dict = {"quick": a.quick, "repeat": repeat, "machine": harness.machine_info(), "cases": {}}
    doc["versions"] = harness.versions(["zarrsql", "duckdb", "xarray", "zarr", "xarray-sql", "pandas", "numpy"])
    work = Path(tempfile.mkdtemp(prefix="zarrsql-write-bench-"))
    try:
        for case in a.cases.split(","):
            cell: dict = {"engines": {}}
            every: dict[str, list[dict]] = {e: [] for e in engines}
            for _ in range(repeat):  # interleaved: one run of each engine per round
                for engine in engines:
                    every[engine].append(run_one(a.python, engine, case, store, work, a.quick, a.timeout))
            for engine in engines:
                runs = every[engine]
                ok = [r for r in runs if r.get("ok")]
                rec = {"ok": bool(ok), "runs": runs}
                if ok:
                    rec["median_s"] = sorted(r["seconds"] for r in ok)[len(ok) // 2]
                    rec["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok)
                    # DuckDB's own peak moves by tens of MB between identical runs (its threads'
                    # hash partitions), so the RSS goal compares medians of the runs' peaks
                    rec["median_peak_rss_mb"] = sorted(r["peak_rss_mb"] for r in ok)[len(ok) // 2]
                else:
                    rec["error"] = runs[-1].get("error", "")
                cell["engines"][engine] = rec
                print(f"{case} {engine}: {rec.get('median_s', 'failed')} s, {rec.get('peak_rss_mb')} MB", flush=True)
            reference = work / f"zarrsql-{case}.zarr"
            import xarray as xr

            cell["rows"] = int(xr.open_zarr(reference).t2m.count()) if reference.exists() else 0
            cell["chunk_row_mb"] = chunk_row_mb(str(reference)) if reference.exists() else 0.0
            for engine, rec in cell["engines"].items():
                if rec["ok"] and reference.exists() and engine not in BASELINES:
                    rec["agrees"] = compare(str(reference), rec["runs"][-1]["output"], CASES[case]["dims"]) is None
            doc["cases"][case] = cell
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = a.out or RESULTS / ("write_quick.json" if a.quick else "write.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str))
    out.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
