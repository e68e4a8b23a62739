#!/usr/bin/env python3
"""The AnnData benchmark: zarrsql against anndata + pandas/scipy on a 50k × 20k CSR matrix.

    python benchmarks/run_anndata.py             # 50,000 cells × 20,000 genes, 5%: 3 repetitions
    python benchmarks/run_anndata.py --quick     # 5,000 × 2,000: a smoke run, 1 repetition
    python benchmarks/run_anndata.py --repeat 5 --engines zarrsql,anndata.backed --queries selective

The store (`benchmarks/data/anndata_50k.zarr`, Zarr v3, about 50 million stored entries) is
written once by `anndata.AnnData.write_zarr` with anndata's default chunking and reused; a
`.stamp.json` beside it records a finished build and the generator's parameters.

Queries (the same answer from every engine, checked through a digest):

* `full`: `SELECT var, avg(X) FROM obs_var GROUP BY var` — per gene, the mean of its stored
  entries (the sparse table has one row per stored entry);
* `selective`: `SELECT obs, var, X FROM obs_var WHERE obs IN (100 cells)` — every stored
  entry of 100 cells picked at random (seeded), by name.

Engines:

* `zarrsql`: the SQL above on `read_zarr(store, table_name := 'obs_var')`, fetched to Arrow;
* `anndata`: `anndata.read_zarr` (everything in memory), then scipy/numpy (`full`: column
  sums / stored entries per column; `selective`: `adata[cells]` and the slice's COO entries
  as a pandas frame);
* `anndata.backed`: only what the query needs through anndata's lazy APIs: the obs/var
  indexes with `anndata.io.read_elem`, X with `anndata.io.sparse_dataset` (rows read on
  demand), then the same scipy/pandas steps (`full` still has to read all of X).

Each (engine, query, repetition) runs in a fresh process (this file with `--child`);
repetitions are interleaved and the engine order rotates. Reported: the median of the
child's open + query + materialise time, its import time, and its peak RSS (VmHWM). An extra
untimed zarrsql child per query records `zarrsql.trace()` counters. Results go to
`benchmarks/results/anndata.json` and `.md` (`anndata_quick.*` with `--quick`).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import child_env, machine_info, versions, warm  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"

SIZES = {"full": (50_000, 20_000), "quick": (5_000, 2_000)}
DENSITY = 0.05
N_SELECTED = 100
ENGINES = ["zarrsql", "anndata", "anndata.backed"]
QUERIES = {
    "full": "SELECT var, avg(X) AS mean_x FROM {src} GROUP BY var",
    "selective": "SELECT obs, var, X FROM {src} WHERE obs IN ({cells})",
}
ENGINE_IMPORTS = {
    "zarrsql": ["zarrsql", "pyarrow"],
    "anndata": ["anndata", "scipy.sparse", "pandas", "numpy"],
    "anndata.backed": ["anndata", "scipy.sparse", "pandas", "numpy", "zarr"],
}
VERSIONED = ["anndata", "zarr", "duckdb", "scipy", "pandas", "numpy", "pyarrow", "zarrsql"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the store
def store_path(quick: bool) -> Path:
    return DATA / ("anndata_quick.zarr" if quick else "anndata_50k.zarr")


def cell_names(n: int) -> list[str]:
    return [f"CELL{i:06d}" for i in range(n)]


def gene_names(m: int) -> list[str]:
    return [f"GENE{j:05d}" for j in range(m)]


def selected_cells(n: int) -> list[str]:
    """The 100 cells of the selective query: seeded, spread over the whole matrix."""
    import numpy as np

    rows = np.sort(np.random.default_rng(7).choice(n, N_SELECTED, replace=False))
    names = cell_names(n)
    return [names[r] for r in rows]


def build_store(quick: bool, *, force: bool = False) -> Path:
    """Write the CSR store with anndata (once; the stamp records a finished build)."""
    path = store_path(quick)
    stamp = path.with_name(path.name + ".stamp.json")
    n, m = SIZES["quick" if quick else "full"]
    params = {"n_obs": n, "n_vars": m, "density": DENSITY, "seed": 0, "format": "csr", "zarr_format": 3}
    if not force and stamp.is_file() and json.loads(stamp.read_text()).get("params") == params:
        return path
    import shutil
    import warnings

    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    import anndata as ad

    log(f"writing {path} ({n:,} × {m:,}, {DENSITY:.0%}) ...")
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    indptr = [np.zeros(1, dtype=np.int64)]
    indices, data = [], []
    block = max(1, 40_000_000 // m)  # rows per block: ~40M random draws at a time
    for start in range(0, n, block):
        rows = min(block, n - start)
        mask = rng.random((rows, m), dtype=np.float32) < DENSITY
        r, c = np.nonzero(mask)
        indices.append(c.astype(np.int32))
        data.append((1 + rng.poisson(2.0, c.size)).astype(np.float32))
        indptr.append(indptr[-1][-1] + np.cumsum(np.bincount(r, minlength=rows)))
    x = sp.csr_matrix((np.concatenate(data), np.concatenate(indices), np.concatenate(indptr)), shape=(n, m))
    cell_types = np.array(["B", "Mono", "NK", "T"])
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(cell_types[rng.integers(0, 4, n)]), "n_genes": np.diff(x.indptr)},
        index=cell_names(n),
    )
    adata = ad.AnnData(X=x, obs=obs, var=pd.DataFrame(index=gene_names(m)))
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), ad.settings.override(zarr_write_format=3):
        warnings.simplefilter("ignore")
        adata.write_zarr(str(path))
    stamp.write_text(json.dumps({"params": params, "nnz": int(x.nnz), "seconds": round(time.perf_counter() - t0, 1)}))
    log(f"  {x.nnz:,} stored entries, {time.perf_counter() - t0:.0f} s")
    return path


# --------------------------------------------------------------------------- child: one run
def peak_rss_mb() -> float:
    """Peak RSS (VmHWM) of this process image, MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def digest(query: str, names_a, names_b, values) -> dict:
    """An order-free summary both sides compute the same way: row count, value sum, and a
    checksum of the (name, name, value) rows (value rounded to float32 precision)."""
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    check = 0
    for a, b, v in zip(names_a, names_b, values, strict=True):
        check = (check + zlib.crc32(f"{a}|{b}|{float(np.float32(v)):.6g}".encode())) % (1 << 61)
    return {"rows": int(values.size), "sum": float(values.sum()), "check": check}


def run_zarrsql(query: str, store: str, cells: list[str], trace: bool) -> tuple[dict, dict | None]:
    import zarrsql

    con = zarrsql.connect()
    sql = QUERIES[query].format(
        src=f"read_zarr('{store}', table_name := 'obs_var')", cells=", ".join(f"'{c}'" for c in cells)
    )
    if trace:
        with zarrsql.trace() as t:  # DuckDB 2.x streams: read every batch inside the block
            table = con.sql(sql).arrow()
            if hasattr(table, "read_all"):
                table = table.read_all()
        counters = {
            k: getattr(t, k)
            for k in ("work_units_planned", "work_units_read", "chunks_decoded", "bytes_read", "requests", "rows")
        }
    else:
        table, counters = con.sql(sql).arrow(), None
    if hasattr(table, "read_all"):  # DuckDB 2.x hands back a RecordBatchReader
        table = table.read_all()
    cols = table.to_pydict()
    if query == "full":
        return {"columns": cols["var"], "other": [""] * len(cols["var"]), "values": cols["mean_x"]}, counters
    return {"columns": cols["obs"], "other": cols["var"], "values": cols["X"]}, counters


def _full_from_csr(x, var_names) -> dict:
    import numpy as np

    stored = np.bincount(x.indices, minlength=x.shape[1])
    sums = np.bincount(x.indices, weights=x.data, minlength=x.shape[1])
    keep = stored > 0  # a gene without stored entries has no row in the SQL result
    means = sums[keep] / stored[keep]
    return {"columns": list(np.asarray(var_names)[keep]), "other": [""] * int(keep.sum()), "values": means}


def _entries_frame(sub, obs_names, var_names):
    import numpy as np
    import pandas as pd

    coo = sub.tocoo()
    return pd.DataFrame({"obs": np.asarray(obs_names)[coo.row], "var": np.asarray(var_names)[coo.col], "X": coo.data})


def run_anndata(query: str, store: str, cells: list[str]) -> dict:
    import warnings

    import anndata as ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = ad.read_zarr(store)
    if query == "full":
        return _full_from_csr(adata.X, adata.var_names)
    sub = adata[cells]
    frame = _entries_frame(sub.X, sub.obs_names, sub.var_names)
    return {"columns": frame["obs"].tolist(), "other": frame["var"].tolist(), "values": frame["X"].to_numpy()}


def run_anndata_backed(query: str, store: str, cells: list[str]) -> dict:
    import warnings

    import numpy as np
    import zarr

    import anndata as ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(store, mode="r")
        var_names = ad.io.read_elem(group["var"]).index
        x = ad.io.sparse_dataset(group["X"])
        if query == "full":
            return _full_from_csr(x[:], var_names)  # a full aggregate reads all of X anyway
        obs_names = ad.io.read_elem(group["obs"]).index
        rows = np.sort(obs_names.get_indexer(cells))
        sub = x[rows]
    frame = _entries_frame(sub, obs_names[rows], var_names)
    return {"columns": frame["obs"].tolist(), "other": frame["var"].tolist(), "values": frame["X"].to_numpy()}


def child(args: argparse.Namespace) -> int:
    rec: dict = {"ok": False, "engine": args.engine, "query": args.query}
    try:
        t_import = time.perf_counter()
        for mod in ENGINE_IMPORTS[args.engine]:
            __import__(mod)
        rec["import_s"] = time.perf_counter() - t_import
        cells = json.loads(Path(args.cells).read_text())
        t_query = time.perf_counter()
        counters = None
        if args.engine == "zarrsql":
            result, counters = run_zarrsql(args.query, args.store, cells, args.trace)
        elif args.engine == "anndata":
            result = run_anndata(args.query, args.store, cells)
        else:
            result = run_anndata_backed(args.query, args.store, cells)
        rec["query_s"] = time.perf_counter() - t_query
        rec["peak_rss_mb"] = peak_rss_mb()
        rec["digest"] = digest(args.query, result["columns"], result["other"], result["values"])
        rec["trace"] = counters
        rec["ok"] = True
    except Exception as err:  # noqa: BLE001 - a failed engine is recorded, not fatal
        rec["error"] = f"{type(err).__name__}: {err}"
        rec["traceback"] = traceback.format_exc()[-3000:]
    Path(args.out).write_text(json.dumps(rec))
    return 0


# --------------------------------------------------------------------------- parent
def run_child(
    python: str,
    engine: str,
    query: str,
    store: Path,
    cells_file: Path,
    workdir: Path,
    tag: str,
    timeout: float,
    *,
    trace: bool = False,
) -> dict:
    out = workdir / f"{tag}.json"
    cmd = [
        python,
        str(Path(__file__).resolve()),
        "--child",
        "--engine",
        engine,
        "--query",
        query,
        "--store",
        str(store),
        "--cells",
        str(cells_file),
        "--out",
        str(out),
    ]
    if trace:
        cmd.append("--trace")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env(), cwd=str(HERE.parent))
        rc: int | str = p.returncode
        stderr = p.stderr
    except subprocess.TimeoutExpired:
        rc, stderr = "timeout", ""
    rec = (
        json.loads(out.read_text())
        if out.is_file()
        else {"ok": False, "error": f"child exited with {rc}: {stderr[-500:]}"}
    )
    rec["process_s"] = time.perf_counter() - t0
    return rec


def agree(a: dict, b: dict) -> bool:
    return (
        a["rows"] == b["rows"]
        and a["check"] == b["check"]
        and abs(a["sum"] - b["sum"]) <= 1e-6 * max(1.0, abs(b["sum"]))
    )


def summarise(runs: dict, engines: list[str], queries: list[str]) -> dict:
    out: dict = {}
    for q in queries:
        for e in engines:
            recs = runs[(e, q)]
            ok = [r for r in recs if r.get("ok")]
            cell = {"ok": len(ok) == len(recs) and bool(ok), "repetitions": len(recs)}
            if ok:
                cell["query_s"] = statistics.median(r["query_s"] for r in ok)
                cell["import_s"] = statistics.median(r["import_s"] for r in ok)
                cell["peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in ok)
                cell["query_s_all"] = [round(r["query_s"], 4) for r in ok]
                cell["digest"] = ok[0]["digest"]
            else:
                cell["error"] = recs[0].get("error") if recs else "not run"
            out[f"{e}/{q}"] = cell
    return out


def markdown(report: dict) -> str:
    s = report["summary"]
    n, m = report["store"]["n_obs"], report["store"]["n_vars"]
    lines = [
        "# AnnData benchmark",
        "",
        f"Store: `{report['store']['path']}`, {n:,} cells × {m:,} genes, CSR, "
        f"{report['store']['nnz']:,} stored entries ({DENSITY:.0%}), Zarr v3 written by anndata "
        f"{report['versions'].get('anndata')} with its default chunking.",
        f"Machine: {report['machine'].get('cpu_count')} CPUs, {report['machine'].get('memory_gb', '?')} GB; "
        f"DuckDB {report['versions'].get('duckdb')}; zarrsql {report['machine'].get('zarrsql_git')}; "
        f"{report['machine']['date']}.",
        f"Each cell: median of {report['repeat']} fresh processes (open + query + materialise the result; "
        "import time separately), peak RSS of the process.",
        "",
        "- `full`: `SELECT var, avg(X) FROM obs_var GROUP BY var` (mean of each gene's stored entries)",
        f"- `selective`: `SELECT obs, var, X FROM obs_var WHERE obs IN ({N_SELECTED} cells)`",
        "- `anndata`: `anndata.read_zarr` (all in memory) + scipy/pandas; `anndata.backed`: obs/var "
        "indexes by `read_elem`, X by `anndata.io.sparse_dataset` (rows on demand) + scipy/pandas",
        "",
        "| query | engine | open + query (s) | import (s) | total (s) | peak RSS (MB) | same result |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for q in report["queries"]:
        for e in report["engines"]:
            c = s[f"{e}/{q}"]
            if not c.get("query_s"):
                lines.append(f"| {q} | {e} | failed: {c.get('error', '')[:80]} | | | | |")
                continue
            same = report["agreement"].get(f"{e}/{q}", "—")
            total = c["query_s"] + c["import_s"]
            cells = [f"{c['query_s']:.3f}", f"{c['import_s']:.2f}", f"{total:.2f}", f"{c['peak_rss_mb']:.0f}", same]
            lines.append(f"| {q} | {e} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## zarrsql.trace() (untimed runs)",
        "",
        "| query | work units planned | read | chunks decoded | bytes read | rows |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for q, t in report["trace"].items():
        if t:
            lines.append(
                f"| {q} | {t['work_units_planned']} | {t['work_units_read']} | {t['chunks_decoded']:,} | "
                f"{t['bytes_read']:,} | {t['rows']:,} |"
            )
        else:
            lines.append(f"| {q} | failed | | | | |")
    lines += ["", "## Goals", ""]
    for goal, (ok, detail) in report["goals"].items():
        lines.append(f"- {'PASS' if ok else 'FAIL'}: {goal} — {detail}")
    return "\n".join(lines) + "\n"


def chunks_needed(store: Path, n: int) -> dict:
    """What a reader of the selected rows must decode at least, from the store's layout: the
    chunks of `indices` and of `data` holding those rows' entries (found through `indptr`),
    plus every `indptr` chunk and the chunks of the obs and var names (the coordinates)."""
    import warnings

    import numpy as np
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(store), mode="r")
        indptr = group["X/indptr"][...]
        size = group["X/data"].chunks[0]
        names = sum(group[f"{a}/{group[a].attrs['_index']}"].nchunks for a in ("obs", "var"))
        rows = np.flatnonzero(np.isin(np.array(cell_names(n)), selected_cells(n)))
        touched = {
            c
            for r in rows
            for c in range(indptr[r] // size, (indptr[r + 1] - 1) // size + 1)
            if indptr[r + 1] > indptr[r]
        }
        return {
            "entries_chunks": 2 * len(touched),
            "indptr_chunks": group["X/indptr"].nchunks,
            "name_chunks": names,
            "data_chunks_total": group["X/data"].nchunks,
            "chunk_entries": size,
        }


def goals(summary: dict, trace: dict, needed: dict) -> dict:
    out = {}
    t_sel, t_full = trace.get("selective"), trace.get("full")
    if t_sel and t_full:
        rows = summary.get("zarrsql/selective", {}).get("digest", {}).get("rows")
        bound = needed["entries_chunks"] + needed["indptr_chunks"] + needed["name_chunks"]
        # a chunk of indices/data that straddles two work units is decoded by both (as a dense
        # chunk straddling two units is): at most two more chunks per unit read
        slack = 2 * t_sel["work_units_read"]
        touched = t_sel["rows"] == rows and t_sel["chunks_decoded"] <= bound + slack
        out["the selective query touches only those rows' data"] = (
            touched,
            f"rows produced {t_sel['rows']:,} (result {rows:,}); chunks decoded {t_sel['chunks_decoded']:,}, "
            f"where the selected rows' entries lie in {needed['entries_chunks']} chunks of indices and data "
            f"(of {2 * needed['data_chunks_total']}, {needed['chunk_entries']:,} entries each) plus "
            f"{needed['indptr_chunks']} of indptr and {needed['name_chunks']} of names = {bound} "
            f"(+{slack} for chunks straddling the {t_sel['work_units_read']} work units read); "
            f"bytes read {t_sel['bytes_read']:,} vs {t_full['bytes_read']:,} for the full scan; "
            f"work units read {t_sel['work_units_read']} of {t_sel['work_units_planned']}",
        )
    z = summary.get("zarrsql/selective", {}).get("query_s")
    for e in ("anndata", "anndata.backed"):
        other = summary.get(f"{e}/selective", {}).get("query_s")
        if z and other:
            out[f"the selective query is faster than {e}"] = (
                z < other,
                f"{z:.3f} s vs {other:.3f} s ({other / z:.2f}×)",
            )
    return out


def parent(args: argparse.Namespace) -> int:
    engines = args.engines.split(",")
    queries = args.queries.split(",")
    repeat = args.repeat or (1 if args.quick else 3)
    store = build_store(args.quick, force=args.force)
    n, m = SIZES["quick" if args.quick else "full"]
    stamp = json.loads(store.with_name(store.name + ".stamp.json").read_text())
    warm([store])
    runs: dict = {(e, q): [] for e in engines for q in queries}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cells_file = work / "cells.json"
        cells_file.write_text(json.dumps(selected_cells(n)))
        for mods in {tuple(ENGINE_IMPORTS[e]) for e in engines}:  # warm the bytecode cache
            subprocess.run(
                [args.python, "-c", "; ".join(f"import {x}" for x in mods)],
                env=child_env(),
                capture_output=True,
                timeout=600,
            )
        for rep in range(repeat):
            order = engines[rep % len(engines) :] + engines[: rep % len(engines)]
            for q in queries:
                for e in order:
                    rec = run_child(args.python, e, q, store, cells_file, work, f"{e}-{q}-{rep}", args.timeout)
                    runs[(e, q)].append(rec)
                    log(
                        f"rep {rep + 1}/{repeat} {q:9s} {e:15s} "
                        + (
                            f"{rec['query_s']:.3f} s, {rec['peak_rss_mb']:.0f} MB"
                            if rec.get("ok")
                            else f"FAILED {rec.get('error')}"
                        )
                    )
        trace = {}
        if "zarrsql" in engines:
            for q in queries:
                rec = run_child(
                    args.python, "zarrsql", q, store, cells_file, work, f"trace-{q}", args.timeout, trace=True
                )
                trace[q] = rec.get("trace") if rec.get("ok") else None
    summary = summarise(runs, engines, queries)
    needed = chunks_needed(store, n)
    agreement = {}
    for q in queries:
        ref = next(
            (
                summary[f"{e}/{q}"].get("digest")
                for e in ("anndata", "anndata.backed", "zarrsql")
                if e in engines and summary[f"{e}/{q}"].get("digest")
            ),
            None,
        )
        for e in engines:
            d = summary[f"{e}/{q}"].get("digest")
            agreement[f"{e}/{q}"] = "yes" if d and ref and agree(d, ref) else ("—" if not d else "NO")
    report = {
        "store": {"path": str(store.relative_to(HERE.parent)), "n_obs": n, "n_vars": m, "nnz": stamp["nnz"]},
        "engines": engines,
        "queries": queries,
        "repeat": repeat,
        "machine": machine_info(),
        "versions": versions(VERSIONED),
        "summary": summary,
        "agreement": agreement,
        "trace": trace,
        "chunks_needed_by_selective": needed,
        "goals": {k: list(v) for k, v in goals(summary, trace, needed).items()},
        "runs": {f"{e}/{q}": recs for (e, q), recs in runs.items()},
    }
    out = Path(args.out) if args.out else RESULTS / ("anndata_quick.json" if args.quick else "anndata.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    text = markdown(report | {"goals": {k: tuple(v) for k, v in report["goals"].items()}})
    out.with_suffix(".md").write_text(text)
    print(text)
    return 2 if "NO" in agreement.values() else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the 5,000 × 2,000 store, 1 repetition")
    ap.add_argument("--repeat", type=int, default=0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--python", default=sys.executable, help="interpreter for the child processes")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default="")
    ap.add_argument("--force", action="store_true", help="rewrite the store")
    ap.add_argument("--build-only", action="store_true")
    # child mode (internal)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    ap.add_argument("--query", choices=list(QUERIES), help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--cells", help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if args.build_only:
        build_store(args.quick, force=args.force)
        return 0
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
