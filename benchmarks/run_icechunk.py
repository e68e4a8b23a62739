#!/usr/bin/env python3
"""The ERA5-like store as an Icechunk repository: Q1-Q4 on the repository beside the plain store.

    python benchmarks/run_icechunk.py --quick        # the 96-hour store, 3 repetitions
    python benchmarks/run_icechunk.py                # the full 1,460-hour store
    python benchmarks/run_icechunk.py --repeat 5 --queries Q1,Q3

The repository holds the very bytes of the plain store (every key copied as it is, into one
commit on `main`), so the two differ only in how keys are found and read. Columns:

- `zarrsql plain`: `read_zarr('<store>')` on the plain folder;
- `zarrsql icechunk`: `read_zarr('<repository>')` on the repository (detected, branch main);
- `xarray icechunk`: `xr.open_zarr(session.store, chunks=None)` on a read-only session of the
  same repository, the query computed with xarray/numpy (Q3 with `.sel`, Q4 `.isel`).

Each (column, query, repetition) runs in a fresh process; the time is open + query inside
it, imports excluded. The goal: zarrsql on the repository within 1.5x of the plain store,
and faster than xarray on the same repository, on every query. Results go to
results/icechunk.json and .md (results/icechunk_quick.* with --quick).
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
sys.path.insert(0, str(HERE))

import engines as E  # noqa: E402
import make_era5 as M  # noqa: E402
from harness import ZARRSQL_IMPORTS, child_env, machine_info, versions, warm  # noqa: E402

RESULTS = HERE / "results"
COLUMNS = ["zarrsql plain", "zarrsql icechunk", "xarray icechunk"]
QUERIES = ["Q1", "Q2", "Q3", "Q4"]
GOAL = 1.5  # zarrsql icechunk / zarrsql plain
RTOL = 1e-6


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_repository(store: Path, repo: Path) -> Path:
    """Copy every key of `store` into a new repository at `repo` (once; a stamp records it)."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    import icechunk

    stamp = repo.with_suffix(".stamp.json")
    source_stamp = M.stamp_path(store).read_text() if M.stamp_path(store).exists() else ""
    if repo.exists() and stamp.exists() and json.loads(stamp.read_text()).get("source") == source_stamp:
        return repo
    import shutil

    shutil.rmtree(repo, ignore_errors=True)
    t0 = time.perf_counter()
    created = icechunk.Repository.create(icechunk.local_filesystem_storage(str(repo)))
    session = created.writable_session("main")
    target = session.store
    prototype = default_buffer_prototype()
    files = [p for p in store.rglob("*") if p.is_file() and (p.name == "zarr.json" or not p.name.endswith(".json"))]
    # documents first, parents before children: Icechunk places a chunk only under its array
    files.sort(key=lambda p: (p.name != "zarr.json", len(p.relative_to(store).parts), str(p)))
    for path in files:
        key = path.relative_to(store).as_posix()
        data = path.read_bytes()
        if key == "zarr.json":  # Icechunk keeps its own listing: no consolidated block
            doc = json.loads(data)
            doc.pop("consolidated_metadata", None)
            data = json.dumps(doc).encode()
        sync(target.set(key, prototype.buffer.from_bytes(data)))
    session.commit("the ERA5-like store, key by key")
    zarr.open_group(created.readonly_session("main").store, mode="r")  # readable by zarr-python
    stamp.write_text(json.dumps({"source": source_stamp}))
    log(f"repository built in {time.perf_counter() - t0:.1f} s: {repo}")
    return repo


# --------------------------------------------------------------------------- the child
def _xarray(repo: str, query: str, day: str):
    import numpy as np
    import xarray as xr

    import icechunk

    storage = icechunk.local_filesystem_storage(repo)
    session = icechunk.Repository.open(storage).readonly_session("main")
    ds = xr.open_zarr(session.store, consolidated=False, chunks=None)
    if query == "Q1":
        return [[float(ds.t2m.mean(dtype="float64").values)]]
    if query == "Q2":
        mean = ds.t2m.mean("time", dtype="float64")
        lat, lon = np.meshgrid(ds.latitude.values, ds.longitude.values, indexing="ij")
        return [
            [float(a), float(b), float(c)]
            for a, b, c in zip(lat.ravel(), lon.ravel(), mean.values.ravel(), strict=True)
        ]
    if query == "Q3":
        start = np.datetime64(day)
        box = ds.t2m.sel(
            time=slice(start, start + np.timedelta64(1, "D") - np.timedelta64(1, "ns")),
            latitude=slice(E.Q3_LAT[1], E.Q3_LAT[0]),
            longitude=slice(E.Q3_LON[0], E.Q3_LON[1]),
        )
        return [[float(box.mean(dtype="float64").values)]]
    rows = ds.isel(time=0, latitude=0, longitude=slice(0, E.Q4_LIMIT)).to_dataframe().reset_index()
    return [list(r) for r in rows[["latitude", "longitude", "t2m"]].itertuples(index=False)]


def _zarrsql(location: str, query: str, day: str):
    import zarrsql

    sql = E.QUERIES[query]["sql"].format(src=f"read_zarr('{location}')", day=day, next_day=_next_day(day))
    table = zarrsql.connect().sql(sql).to_arrow_table()
    if query == "Q4":
        table = table.select(["latitude", "longitude", "t2m"])
    return [[float(v) for v in row.values()] for row in table.to_pylist()]


def _next_day(day: str) -> str:
    import datetime

    return (datetime.date.fromisoformat(day) + datetime.timedelta(days=1)).isoformat()


def child(column: str, query: str, store: str, repo: str, day: str) -> None:
    import importlib

    for name in ("icechunk", "xarray", "zarr", *ZARRSQL_IMPORTS, "zarrsql.store.icechunk"):
        importlib.import_module(name)
    t0 = time.perf_counter()
    if column == "xarray icechunk":
        rows = _xarray(repo, query, day)
    else:
        rows = _zarrsql(store if column == "zarrsql plain" else repo, query, day)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "rows": rows}))


# --------------------------------------------------------------------------- the parent
def run_child(python: str, column: str, query: str, store: Path, repo: Path, day: str, timeout: float) -> dict:
    args = [python, str(Path(__file__)), "--child", column, query, str(store), str(repo), day]
    env = child_env()
    # this checkout's zarrsql, ahead of any installed one
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent / "src"), env.get("PYTHONPATH")) if p)
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(HERE.parent))
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def agree(query: str, rows: list, reference: list) -> bool:
    """Same rows (sorted, Q4 by its coordinates only: any 10 rows answer a LIMIT), values
    within RTOL."""
    if query == "Q4":
        return len(rows) == len(reference) == E.Q4_LIMIT
    a, b = sorted(rows), sorted(reference)
    return len(a) == len(b) and all(
        abs(x - y) <= RTOL * max(abs(x), abs(y), 1e-12)
        for ra, rb in zip(a, b, strict=True)
        for x, y in zip(ra, rb, strict=True)
    )


def markdown(results: dict, quick: bool) -> str:
    lines = [
        f"## ERA5-like store as an Icechunk repository ({'96' if quick else '1,460'} hours)",
        "",
        "open + query, median seconds in a fresh process (imports excluded)",
        "",
        "| query | " + " | ".join(COLUMNS) + " | icechunk / plain | goal ≤ 1.5 | faster than xarray |",
        "|---|" + "---|" * (len(COLUMNS) + 3),
    ]
    for q, cells in results["medians"].items():
        plain, ice, xr_ = (cells.get(c) for c in COLUMNS)
        ratio = ice / plain if plain and ice else None
        fmt = [f"{v:.3f}" if v is not None else "failed" for v in (plain, ice, xr_)]
        lines.append(
            f"| {q} | " + " | ".join(fmt) + f" | {ratio:.2f} | {'yes' if ratio and ratio <= GOAL else 'no'} | "
            f"{'yes' if ice and xr_ and ice < xr_ else 'no'} |"
            if ratio
            else f"| {q} | " + " | ".join(fmt) + " | — | — | — |"
        )
    disagreements = results["disagreements"]
    lines += ["", "All columns agree." if not disagreements else f"**Disagreements: {disagreements}**"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    n_time = M.N_TIME_QUICK if args.quick else M.N_TIME_FULL
    store = M.build(M.default_out(args.quick), n_time)
    repo = build_repository(store, store.with_suffix(".icechunk"))
    day = "2020-01-02" if args.quick else "2020-02-01"
    warm([store, repo])
    runs: dict[str, dict[str, list[dict]]] = {q: {c: [] for c in COLUMNS} for q in queries}
    for rep in range(args.repeat):
        for q in queries:
            for column in COLUMNS[rep % len(COLUMNS) :] + COLUMNS[: rep % len(COLUMNS)]:
                out = run_child(args.python, column, q, store, repo, day, args.timeout)
                runs[q][column].append(out)
                log(f"rep {rep + 1} {q} {column}: {out.get('seconds', out.get('error'))}")
    medians = {
        q: {
            c: statistics.median(r["seconds"] for r in rs) if all("seconds" in r for r in rs) else None
            for c, rs in cells.items()
        }
        for q, cells in runs.items()
    }
    disagreements = [
        f"{q} {c}"
        for q, cells in runs.items()
        for c, rs in cells.items()
        for r in rs
        if "rows" in r and "rows" in (ref := cells["zarrsql plain"][0]) and not agree(q, r["rows"], ref["rows"])
    ]
    results = {
        "machine": machine_info(),
        "versions": versions(["zarrsql", "icechunk", "xarray", "zarr", "duckdb", "numpy"]),
        "store": str(store),
        "repository": str(repo),
        "medians": medians,
        "seconds": {q: {c: [r.get("seconds") for r in rs] for c, rs in cells.items()} for q, cells in runs.items()},
        "disagreements": disagreements,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "icechunk_quick" if args.quick else "icechunk"
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2))
    text = markdown(results, args.quick)
    (RESULTS / f"{name}.md").write_text(text)
    print(text)
    return 2 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
