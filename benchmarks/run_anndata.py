#!/usr/bin/env python3
"""The AnnData benchmark: zarrsql against anndata + pandas/scipy on a 50k × 20k sparse matrix.

    python benchmarks/run_anndata.py             # 50,000 cells × 20,000 genes, 5%: 3 repetitions
    python benchmarks/run_anndata.py --quick     # 5,000 × 2,000: a smoke run, 1 repetition
    python benchmarks/run_anndata.py --repeat 5 --engines zarrsql,anndata.backed --queries selective

Two stores of the same matrix (`benchmarks/data/anndata_50k.zarr` in CSR and
`anndata_50k_csc.zarr` in CSC; Zarr v3, about 50 million stored entries each) are written
once by `anndata.AnnData.write_zarr` with anndata's default chunking and reused; a
`.stamp.json` beside each records a finished build and the generator's parameters.

Queries (the same answer from every engine, checked through a digest):

* `full`: `SELECT var, avg(X) FROM obs_var GROUP BY var` — per gene, the mean of its stored
  entries (the sparse table has one row per stored entry);
* `selective`: `SELECT obs, var, X FROM obs_var WHERE obs IN (100 cells)` — every stored
  entry of 100 cells picked at random (seeded), by name, on the CSR store;
* `genewise`: `SELECT obs, var, X FROM obs_var WHERE var IN (100 genes)` — every stored
  entry of 100 genes picked at random (seeded), by name, on the CSC store;
* `genes_csr`: the same 100 genes on the CSR store, where genes are the minor axis: every
  chunk holds some of their entries, so every engine reads all of X; what differs is how the
  condition is applied per stored entry.

Engines:

* `zarrsql`: the SQL above on `read_zarr(store, table_name := 'obs_var')`, fetched to Arrow;
* `anndata`: `anndata.read_zarr` (everything in memory), then scipy/numpy (`full`: column
  sums / stored entries per column; `selective`: `adata[cells]`, `genewise`:
  `adata[:, genes]`, and the slice's COO entries as a pandas frame);
* `anndata.backed`: only what the query needs through anndata's lazy APIs: the obs/var
  indexes with `anndata.io.read_elem`, X with `anndata.io.sparse_dataset` (rows of a CSR,
  columns of a CSC matrix read on demand), then the same scipy/pandas steps (`full` still
  has to read all of X).

Each (engine, query, repetition) runs in a fresh process (this file with `--child`);
repetitions are interleaved and the engine order rotates. Reported: the median of the
child's open + query time, its CPU time, its import time (zarrsql's lazily loaded engine
counted there, as anndata's modules are), and its peak RSS (VmHWM). The timed region ends
when the engine holds its result in memory (an Arrow table, a pandas frame, numpy arrays);
turning it into Python lists for the digest is not timed. The 1-minute load average before
and after each child is kept with its record. An extra untimed zarrsql child per query
records `zarrsql.trace()` counters. Results go to `benchmarks/results/anndata.json` and
`.md` (`anndata_quick.*` with `--quick`).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ZARRSQL_IMPORTS, child_env, machine_info, versions, warm  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"

SIZES = {"full": (50_000, 20_000), "quick": (5_000, 2_000)}
DENSITY = 0.05
N_SELECTED = 100
ENGINES = ["zarrsql", "anndata", "anndata.backed"]
QUERIES = {
    "full": "SELECT var, avg(X) AS mean_x FROM {src} GROUP BY var",
    "selective": "SELECT obs, var, X FROM {src} WHERE obs IN ({names})",
    "genewise": "SELECT obs, var, X FROM {src} WHERE var IN ({names})",
    "genes_csr": "SELECT obs, var, X FROM {src} WHERE var IN ({names})",
}
#: The sparse format of the store each query runs on.
FORMAT = {"full": "csr", "selective": "csr", "genewise": "csc", "genes_csr": "csr"}
#: The queries selecting genes (the others select cells, or none).
GENE_QUERIES = ("genewise", "genes_csr")
ENGINE_IMPORTS = {
    "zarrsql": [*ZARRSQL_IMPORTS, "zarrsql.scan.sparse", "zarrsql.decode.sparse", "zarrsql.conventions.anndata"],
    "anndata": ["anndata", "scipy.sparse", "pandas", "numpy"],
    "anndata.backed": ["anndata", "scipy.sparse", "pandas", "numpy", "zarr"],
}
VERSIONED = ["anndata", "zarr", "duckdb", "scipy", "pandas", "numpy", "pyarrow", "zarrsql"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the store
def store_path(quick: bool, fmt: str = "csr") -> Path:
    suffix = "" if fmt == "csr" else f"_{fmt}"
    return DATA / (f"anndata_quick{suffix}.zarr" if quick else f"anndata_50k{suffix}.zarr")


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


def selected_genes(m: int) -> list[str]:
    """The 100 genes of the gene-wise query: seeded, spread over the whole matrix."""
    import numpy as np

    cols = np.sort(np.random.default_rng(11).choice(m, N_SELECTED, replace=False))
    names = gene_names(m)
    return [names[c] for c in cols]


def selected_names(query: str, n: int, m: int) -> list[str]:
    return selected_genes(m) if query in GENE_QUERIES else selected_cells(n)


def build_store(quick: bool, fmt: str = "csr", *, force: bool = False) -> Path:
    """Write the store in `fmt` (csr/csc) with anndata (once; the stamp records a finished build)."""
    path = store_path(quick, fmt)
    stamp = path.with_name(path.name + ".stamp.json")
    n, m = SIZES["quick" if quick else "full"]
    params = {"n_obs": n, "n_vars": m, "density": DENSITY, "seed": 0, "format": fmt, "zarr_format": 3}
    if not force and stamp.is_file() and json.loads(stamp.read_text()).get("params") == params:
        return path
    import shutil
    import warnings

    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    import anndata as ad

    log(f"writing {path} ({n:,} × {m:,}, {DENSITY:.0%}, {fmt}) ...")
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
    if fmt == "csc":
        x = x.tocsc()
    cell_types = np.array(["B", "Mono", "NK", "T"])
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(cell_types[rng.integers(0, 4, n)]), "n_genes": x.getnnz(axis=1).astype(np.int64)},
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


def cpu_seconds() -> float:
    """CPU time of this process, every thread (user + system): a check on wall times taken
    while other work shares the machine."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def digest(query: str, names_a, names_b, values) -> dict:
    """An order-free summary both sides compute the same way: row count, value sum, and a
    checksum of the (name, name, value) rows (value rounded to float32 precision)."""
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    check = 0
    for a, b, v in zip(names_a, names_b, values, strict=True):
        check = (check + zlib.crc32(f"{a}|{b}|{float(np.float32(v)):.6g}".encode())) % (1 << 61)
    return {"rows": int(values.size), "sum": float(values.sum()), "check": check}


def run_zarrsql(query: str, store: str, names: list[str], trace: bool) -> tuple[Any, dict | None]:
    import zarrsql

    con = zarrsql.connect()
    sql = QUERIES[query].format(
        src=f"read_zarr('{store}', table_name := 'obs_var')", names=", ".join(f"'{c}'" for c in names)
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
    return table, counters


def as_lists(query: str, result: Any) -> dict:
    """An engine's result (an Arrow table, a pandas frame, or arrays) as the digest's lists:
    done after the timed region, which ends once the engine has its own result in memory."""
    if hasattr(result, "to_pydict"):  # zarrsql: a pyarrow Table
        cols = result.to_pydict()
        if query == "full":
            return {"columns": cols["var"], "other": [""] * len(cols["var"]), "values": cols["mean_x"]}
        return {"columns": cols["obs"], "other": cols["var"], "values": cols["X"]}
    if hasattr(result, "columns") and hasattr(result, "to_numpy"):  # a pandas frame of entries
        return {"columns": result["obs"].tolist(), "other": result["var"].tolist(), "values": result["X"].to_numpy()}
    return {"columns": list(result["columns"]), "other": [""] * len(result["columns"]), "values": result["values"]}


def _full_from_csr(x, var_names) -> dict:
    import numpy as np

    x = x.tocsr()  # the full query runs on the CSR store: a no-op there
    stored = np.bincount(x.indices, minlength=x.shape[1])
    sums = np.bincount(x.indices, weights=x.data, minlength=x.shape[1])
    keep = stored > 0  # a gene without stored entries has no row in the SQL result
    means = sums[keep] / stored[keep]
    return {"columns": np.asarray(var_names)[keep], "values": means}


def _entries_frame(sub, obs_names, var_names):
    import numpy as np
    import pandas as pd

    coo = sub.tocoo()
    return pd.DataFrame({"obs": np.asarray(obs_names)[coo.row], "var": np.asarray(var_names)[coo.col], "X": coo.data})


def run_anndata(query: str, store: str, names: list[str]) -> Any:
    import warnings

    import anndata as ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = ad.read_zarr(store)
    if query == "full":
        return _full_from_csr(adata.X, adata.var_names)
    sub = adata[:, names] if query in GENE_QUERIES else adata[names]
    return _entries_frame(sub.X, sub.obs_names, sub.var_names)


def run_anndata_backed(query: str, store: str, names: list[str]) -> Any:
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
        if query in GENE_QUERIES:  # columns: a CSC matrix's compressed axis, a CSR's minor one
            cols = np.sort(var_names.get_indexer(names))
            sub, obs_names, var_names = x[:, cols], obs_names, var_names[cols]
        else:
            rows = np.sort(obs_names.get_indexer(names))
            sub, obs_names = x[rows], obs_names[rows]
    return _entries_frame(sub, obs_names, var_names)


def child(args: argparse.Namespace) -> int:
    rec: dict = {"ok": False, "engine": args.engine, "query": args.query}
    try:
        t_import = time.perf_counter()
        for mod in ENGINE_IMPORTS[args.engine]:
            __import__(mod)
        if args.engine == "zarrsql":  # `import zarrsql` is lazy: its engine loads on first use
            getattr(sys.modules["zarrsql"], "connect")  # noqa: B009 - counted as import, like anndata's
        rec["import_s"] = time.perf_counter() - t_import
        names = json.loads(Path(args.cells).read_text())
        t_query, cpu_query = time.perf_counter(), cpu_seconds()
        counters = None
        if args.engine == "zarrsql":
            result, counters = run_zarrsql(args.query, args.store, names, args.trace)
        elif args.engine == "anndata":
            result = run_anndata(args.query, args.store, names)
        else:
            result = run_anndata_backed(args.query, args.store, names)
        rec["query_s"] = time.perf_counter() - t_query
        rec["query_cpu_s"] = cpu_seconds() - cpu_query
        rec["peak_rss_mb"] = peak_rss_mb()
        lists = as_lists(args.query, result)
        rec["digest"] = digest(args.query, lists["columns"], lists["other"], lists["values"])
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
    load_before = os.getloadavg()[0]
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
    rec["loadavg_1m_before"], rec["loadavg_1m_after"] = load_before, os.getloadavg()[0]
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
                cell["query_cpu_s"] = statistics.median(r["query_cpu_s"] for r in ok)
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
    paths = ", ".join(f"`{p}` ({f.upper()})" for f, p in report["store"]["paths"].items())
    lines = [
        "# AnnData benchmark",
        "",
        f"Stores: {paths}; the same {n:,} cells × {m:,} genes matrix, "
        f"{report['store']['nnz']:,} stored entries ({DENSITY:.0%}), Zarr v3 written by anndata "
        f"{report['versions'].get('anndata')} with its default chunking.",
        f"Machine: {report['machine'].get('cpu_count')} CPUs, {report['machine'].get('memory_gb', '?')} GB; "
        f"DuckDB {report['versions'].get('duckdb')}; zarrsql {report['machine'].get('zarrsql_git')}; "
        f"{report['machine']['date']}; 1-minute load average during the runs "
        f"{report['load']['min']:.2f}–{report['load']['max']:.2f}.",
        f"Each cell: median of {report['repeat']} fresh processes (open + query + the result in memory "
        "as Arrow/pandas/numpy; "
        "import time separately), peak RSS of the process.",
        "",
        "- `full` (CSR): `SELECT var, avg(X) FROM obs_var GROUP BY var` (mean of each gene's stored entries)",
        f"- `selective` (CSR): `SELECT obs, var, X FROM obs_var WHERE obs IN ({N_SELECTED} cells)`",
        f"- `genewise` (CSC): `SELECT obs, var, X FROM obs_var WHERE var IN ({N_SELECTED} genes)`",
        f"- `genes_csr` (CSR): the same {N_SELECTED} genes, the minor axis of the matrix",
        "- `anndata`: `anndata.read_zarr` (all in memory) + scipy/pandas; `anndata.backed`: obs/var "
        "indexes by `read_elem`, X by `anndata.io.sparse_dataset` (rows/columns on demand) + scipy/pandas",
        "",
        "| query | engine | open + query (s) | its CPU (s) | import (s) | total (s) | peak RSS (MB) | same result |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for q in report["queries"]:
        for e in report["engines"]:
            c = s[f"{e}/{q}"]
            if not c.get("query_s"):
                lines.append(f"| {q} | {e} | failed: {c.get('error', '')[:80]} | | | | | |")
                continue
            same = report["agreement"].get(f"{e}/{q}", "—")
            total = c["query_s"] + c["import_s"]
            cells = [
                f"{c['query_s']:.3f}",
                f"{c['query_cpu_s']:.2f}",
                f"{c['import_s']:.2f}",
                f"{total:.2f}",
                f"{c['peak_rss_mb']:.0f}",
                same,
            ]
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


def chunks_needed(store: Path, positions) -> dict:
    """What a reader of the selected compressed-axis positions (rows of a CSR, columns of a
    CSC matrix) must decode at least, from the store's layout: the chunks of `indices` and
    of `data` holding their entries (found through `indptr`), plus every `indptr` chunk and
    the chunks of the obs and var names (the coordinates)."""
    import warnings

    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(store), mode="r")
        indptr = group["X/indptr"][...]
        size = group["X/data"].chunks[0]
        names = sum(group[f"{a}/{group[a].attrs['_index']}"].nchunks for a in ("obs", "var"))
        touched = {
            c
            for r in positions
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
    """The issue's goal 6 (selective and gene-wise at most anndata backed's time, full at least
    2× faster than anndata in memory) and the read-only-what-is-needed check per selection."""
    out = {}
    for q, what in (("selective", "rows"), ("genewise", "genes")):
        t_sel, t_full, need = trace.get(q), trace.get("full"), needed.get(q)
        if not (t_sel and need):
            continue
        rows = summary.get(f"zarrsql/{q}", {}).get("digest", {}).get("rows")
        bound = need["entries_chunks"] + need["indptr_chunks"] + need["name_chunks"]
        touched = t_sel["rows"] == rows and t_sel["chunks_decoded"] <= bound
        full_bytes = f" vs {t_full['bytes_read']:,} for the full scan" if t_full else ""
        out[f"the {q} query decodes only the chunks holding those {what}' entries"] = (
            touched,
            f"rows produced {t_sel['rows']:,} (result {rows:,}); chunks decoded {t_sel['chunks_decoded']:,}, "
            f"where the selected {what}' entries lie in {need['entries_chunks']} chunks of indices and data "
            f"(of {2 * need['data_chunks_total']}, {need['chunk_entries']:,} entries each) plus "
            f"{need['indptr_chunks']} of indptr and {need['name_chunks']} of names = {bound}; "
            f"bytes read {t_sel['bytes_read']:,}{full_bytes}; "
            f"work units read {t_sel['work_units_read']} of {t_sel['work_units_planned']}",
        )
    for q in ("selective", "genewise"):
        z = summary.get(f"zarrsql/{q}", {}).get("query_s")
        other = summary.get(f"anndata.backed/{q}", {}).get("query_s")
        if z and other:
            out[f"{q}: zarrsql at most anndata backed's time"] = (
                z <= other,
                f"{z:.3f} s vs {other:.3f} s ({other / z:.2f}×)",
            )
    z = summary.get("zarrsql/full", {}).get("query_s")
    other = summary.get("anndata/full", {}).get("query_s")
    if z and other:
        out["full: zarrsql at least 2× faster than anndata in memory"] = (
            other >= 2 * z,
            f"{z:.3f} s vs {other:.3f} s ({other / z:.2f}×)",
        )
    return out


def _positions(query: str, names: list[str], n: int, m: int) -> list[int]:
    """The compressed-axis positions a selective query's names stand for."""
    every = gene_names(m) if query == "genewise" else cell_names(n)
    where = {name: i for i, name in enumerate(every)}
    return sorted(where[x] for x in names)


def parent(args: argparse.Namespace) -> int:
    engines = args.engines.split(",")
    queries = args.queries.split(",")
    repeat = args.repeat or (1 if args.quick else 3)
    stores = {f: build_store(args.quick, f, force=args.force) for f in sorted({FORMAT[q] for q in queries})}
    n, m = SIZES["quick" if args.quick else "full"]
    stamp = json.loads(
        next(iter(stores.values())).with_name(next(iter(stores.values())).name + ".stamp.json").read_text()
    )
    warm(stores.values())
    runs: dict = {(e, q): [] for e in engines for q in queries}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        names_files = {}
        for q in queries:
            names_files[q] = work / f"names-{q}.json"
            names_files[q].write_text(json.dumps(selected_names(q, n, m)))
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
                    store = stores[FORMAT[q]]
                    rec = run_child(args.python, e, q, store, names_files[q], work, f"{e}-{q}-{rep}", args.timeout)
                    runs[(e, q)].append(rec)
                    log(
                        f"rep {rep + 1}/{repeat} {q:9s} {e:15s} "
                        + (
                            f"{rec['query_s']:.3f} s, {rec['peak_rss_mb']:.0f} MB"
                            if rec.get("ok")
                            else f"FAILED {rec.get('error')}"
                        )
                        + f" (load {rec['loadavg_1m_before']:.2f} → {rec['loadavg_1m_after']:.2f})"
                    )
        trace = {}
        if "zarrsql" in engines:
            for q in queries:
                store = stores[FORMAT[q]]
                rec = run_child(
                    args.python, "zarrsql", q, store, names_files[q], work, f"trace-{q}", args.timeout, trace=True
                )
                trace[q] = rec.get("trace") if rec.get("ok") else None
    summary = summarise(runs, engines, queries)
    needed = {
        q: chunks_needed(stores[FORMAT[q]], _positions(q, selected_names(q, n, m), n, m))
        for q in queries
        if q in ("selective", "genewise")  # the compressed axis' positions: genes_csr reads all of X
    }
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
    loads = [r[k] for recs in runs.values() for r in recs for k in ("loadavg_1m_before", "loadavg_1m_after")]
    report = {
        "store": {
            "paths": {f: str(p.relative_to(HERE.parent)) for f, p in stores.items()},
            "n_obs": n,
            "n_vars": m,
            "nnz": stamp["nnz"],
        },
        "engines": engines,
        "queries": queries,
        "repeat": repeat,
        "machine": machine_info(),
        "versions": versions(VERSIONED),
        "load": {"min": min(loads, default=0.0), "max": max(loads, default=0.0)},
        "summary": summary,
        "agreement": agreement,
        "trace": trace,
        "chunks_needed": needed,
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
    ap.add_argument("--quick", action="store_true", help="the 5,000 × 2,000 stores, 1 repetition")
    ap.add_argument("--repeat", type=int, default=0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--python", default=sys.executable, help="interpreter for the child processes")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default="")
    ap.add_argument("--force", action="store_true", help="rewrite the stores")
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
        for fmt in ("csr", "csc"):
            build_store(args.quick, fmt, force=args.force)
        return 0
    return parent(args)


if __name__ == "__main__":
    sys.exit(main())
