#!/usr/bin/env python3
"""The ERA5-like store as NetCDF4 files + kerchunk references: Q1-Q4 beside the plain store.

    python benchmarks/run_virtual.py --quick      # the 96-hour store, 1 repetition
    python benchmarks/run_virtual.py              # the full store, 3 repetitions

The plain Zarr v3 store (benchmarks/make_era5.py) is written once more as NetCDF4 files by
xarray (engine h5netcdf, zlib level 1 + shuffle, one-day chunks as in the store, ten days
per file), and kerchunk makes references to them: one JSON set per file combined along
time with MultiZarrToZarr, and the same set in the Parquet layout. All are built once (a
stamp file records a completed build) under the git-ignored benchmarks/data/.

The NetCDF files hold other bytes than the plain store (zlib + shuffle, which HDF5 writes,
where the store has zstd), so a fourth store isolates what the references cost: the
reference set's keys copied into a plain Zarr v2 folder, every chunk the very bytes the
references point at (`same_bytes.zarr`).

Engines, each timed in a fresh process (import excluded, open + query + full result
included, median of the repetitions, which are interleaved: one run of every engine per
round; the load average is recorded before and after each run):
- `zarrsql:zarr`    read_zarr on the plain store (zstd);
- `zarrsql:same-bytes` read_zarr on the plain copy of the references' bytes (zlib + shuffle);
- `zarrsql:json`    read_zarr on the JSON reference set (chunks are ranged reads of the .nc);
- `zarrsql:parquet` read_zarr on the Parquet reference set;
- `xarray:netcdf`   xarray.open_mfdataset(engine="h5netcdf") on the same files, the query
  computed with xarray's own operations (mean, sel, isel).
Goals (issue 13): the virtual stores within 1.5x of the plain store holding the same bytes,
faster than xarray on every query (the ratios to the zstd store are reported too). Every
engine's answer is checked against the plain store's.
Output: benchmarks/results/virtual[_quick].json and .md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from engines import Q3_LAT, Q3_LON, Q4_LIMIT, QUERIES, sql_for  # noqa: E402
from harness import ZARRSQL_IMPORTS, child_env  # noqa: E402

ENGINES = ("zarrsql:zarr", "zarrsql:same-bytes", "zarrsql:json", "zarrsql:parquet", "xarray:netcdf")
RUN_QUERIES = ("Q1", "Q2", "Q3", "Q4")
DAYS_PER_FILE = 10
#: What each engine imports before its clock starts (engines.py's rule): the Parquet layout's
#: records are read with pyarrow.parquet, a library import.
_ZARRSQL = (*ZARRSQL_IMPORTS, "zarrsql.store.references")
IMPORTS = {
    "zarrsql:zarr": _ZARRSQL,
    "zarrsql:same-bytes": _ZARRSQL,
    "zarrsql:json": _ZARRSQL,
    "zarrsql:parquet": (*_ZARRSQL, "pyarrow.parquet", "zarrsql.store.parquet_records"),
    "xarray:netcdf": ("xarray", "h5netcdf", "pandas"),
}
BUILD_VERSION = 2


# ----------------------------------------------------------------------------- building
def _paths(quick: bool) -> dict[str, Path]:
    base = HERE / "data" / ("era5_quick_virtual" if quick else "era5_virtual")
    return {"base": base, "json": base / "refs.json", "parquet": base / "refs.parq", "stamp": base / "stamp.json",
            "same": base / "same_bytes.zarr"}  # fmt: skip


def build(store: Path, quick: bool) -> dict[str, Path]:
    """The NetCDF files and reference sets of `store` (idempotent)."""
    paths = _paths(quick)
    stamp = {"version": BUILD_VERSION, "store": str(store), "days_per_file": DAYS_PER_FILE}
    if paths["stamp"].exists() and json.loads(paths["stamp"].read_text()) == stamp:
        return paths
    import xarray as xr
    from kerchunk.combine import MultiZarrToZarr
    from kerchunk.df import refs_to_dataframe
    from kerchunk.hdf import SingleHdf5ToZarr

    paths["base"].mkdir(parents=True, exist_ok=True)  # files already written whole are kept
    ds = xr.open_zarr(store, consolidated=True)
    step = 24 * DAYS_PER_FILE
    files = []
    for k, start in enumerate(range(0, ds.sizes["time"], step)):
        part = ds.isel(time=slice(start, start + step))
        days = (24, part.sizes["latitude"], part.sizes["longitude"])  # time is unlimited: 24 fits a shorter file
        enc = {v: {"zlib": True, "complevel": 1, "shuffle": True, "chunksizes": days} for v in part.data_vars}
        enc["time"] = {"units": "hours since 1900-01-01 00:00:00", "dtype": "int64"}
        path = paths["base"] / f"era5_{k:02d}.nc"
        if not path.exists():
            part.to_netcdf(path.with_suffix(".tmp"), engine="h5netcdf", encoding=enc, unlimited_dims=["time"])
            path.with_suffix(".tmp").rename(path)
        files.append(path)
    # kerchunk waits for zarr's event-loop thread while holding h5py's global lock; a collection
    # on that thread freeing an h5py object would wait for the lock for good (VirtualiZarr #1072)
    gc.collect()
    gc.disable()
    try:
        singles = [SingleHdf5ToZarr(str(f), inline_threshold=0).translate() for f in files]
    finally:
        gc.enable()
    combined = MultiZarrToZarr(singles, concat_dims=["time"], identical_dims=["latitude", "longitude"]).translate()
    paths["json"].write_text(json.dumps(combined))
    refs_to_dataframe(combined, str(paths["parquet"]))
    copy_referenced_bytes(combined["refs"], paths["same"])
    paths["stamp"].write_text(json.dumps(stamp))
    return paths


def copy_referenced_bytes(refs: dict[str, Any], out: Path) -> None:
    """A plain Zarr folder of the reference set's keys: documents as they are, inline data
    decoded, and every referenced chunk the very byte range of its file."""
    import base64
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    for key, value in refs.items():
        target = out / key
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, list):
            path, offset, length = value
            with open(path, "rb") as f:
                f.seek(offset)
                target.write_bytes(f.read(length))
        elif isinstance(value, str) and value.startswith("base64:"):
            target.write_bytes(base64.b64decode(value[7:]))
        else:
            target.write_text(value if isinstance(value, str) else json.dumps(value))


# ----------------------------------------------------------------------------- one run
def _xarray(query: str, files: list[str], day: str) -> Any:
    import numpy as np
    import xarray as xr

    ds = xr.open_mfdataset(files, engine="h5netcdf", combine="by_coords", chunks=None, parallel=False)
    t2m = ds.t2m
    if query == "Q1":
        return float(t2m.mean(dtype="float64").values)
    if query == "Q2":
        return t2m.mean("time", dtype="float64").values
    if query == "Q3":
        next_day = np.datetime64(day) + np.timedelta64(1, "D")
        box = t2m.sel(time=slice(day, next_day - np.timedelta64(1, "s")))
        box = box.where((box.latitude >= Q3_LAT[0]) & (box.latitude <= Q3_LAT[1]), drop=True)
        box = box.where((box.longitude >= Q3_LON[0]) & (box.longitude <= Q3_LON[1]), drop=True)
        return float(box.mean(dtype="float64").values)
    return ds.isel(time=0, latitude=0, longitude=slice(0, Q4_LIMIT)).to_dataframe().reset_index()


def _zarrsql(query: str, store: str, day: str) -> Any:
    import zarrsql

    con = zarrsql.connect()
    return con.sql(sql_for(query, f"read_zarr('{store}')", day)).arrow().read_all()


def child(engine: str, query: str, source: str, day: str) -> None:
    """Run one (engine, query) and print its time and a digest of the answer."""
    import importlib

    import numpy as np

    for module in IMPORTS[engine]:
        importlib.import_module(module)  # imports are not timed, as in engines.py
    t0 = time.perf_counter()
    out = _xarray(query, json.loads(source), day) if engine == "xarray:netcdf" else _zarrsql(query, source, day)
    seconds = time.perf_counter() - t0
    if query in ("Q1", "Q3"):
        value = float(out) if isinstance(out, float) else float(out.column(0)[0].as_py())
        digest: Any = value
    elif query == "Q2":
        if isinstance(out, np.ndarray):
            digest = float(np.nansum(out))
        else:
            digest = float(np.nansum(out.column("avg_t2m").to_numpy()))
    else:
        digest = len(out)
    print(json.dumps({"seconds": seconds, "digest": digest}))


# ----------------------------------------------------------------------------- harness
def _run(engine: str, query: str, source: str, day: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", engine, query, source, day]
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent / "src"), env.get("PYTHONPATH", "")) if p)
    load = os.getloadavg()[0]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    if done.returncode:
        rec = {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    else:
        rec = json.loads(done.stdout.strip().splitlines()[-1])
    rec["load_before"], rec["load_after"] = load, os.getloadavg()[0]
    return rec


def _agree(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return a == b


RATIOS = (
    ("json / same bytes", "zarrsql:json", "zarrsql:same-bytes"),
    ("parquet / same bytes", "zarrsql:parquet", "zarrsql:same-bytes"),
    ("json / zstd store", "zarrsql:json", "zarrsql:zarr"),
    ("parquet / zstd store", "zarrsql:parquet", "zarrsql:zarr"),
)


def _table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| query | " + " | ".join(ENGINES) + " | " + " | ".join(r[0] for r in RATIOS) + " |",
        "|---" * (len(ENGINES) + len(RATIOS) + 1) + "|",
    ]
    for q in RUN_QUERIES:
        row = results[q]
        cells = [f"{row[e]['median']:.3f} s" if "median" in row[e] else "error" for e in ENGINES]
        ratios = [
            f"{row[a]['median'] / row[b]['median']:.2f}x" if "median" in row[a] and "median" in row[b] else "—"
            for _, a, b in RATIOS
        ]
        lines.append(f"| {q} {QUERIES[q]['title']} | " + " | ".join(cells + ratios) + " |")
    runs = [r for q in results.values() for e in q.values() for r in e["runs"]]
    loads = [r[k] for r in runs for k in ("load_before", "load_after")]
    lines += ["", f"Load average (1 min) in the runs: {min(loads):.2f} to {max(loads):.2f}, {os.cpu_count()} cores."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--child", nargs=4, metavar=("ENGINE", "QUERY", "SOURCE", "DAY"))
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    from make_era5 import N_TIME_FULL, N_TIME_QUICK, default_out
    from make_era5 import build as build_store

    store = build_store(default_out(args.quick), N_TIME_QUICK if args.quick else N_TIME_FULL, verbose=False)
    paths = build(store, args.quick)
    files = json.dumps(sorted(str(p) for p in paths["base"].glob("*.nc")))
    sources = {
        "zarrsql:zarr": str(store),
        "zarrsql:same-bytes": str(paths["same"]),
        "zarrsql:json": str(paths["json"]),
        "zarrsql:parquet": str(paths["parquet"]),
        "xarray:netcdf": files,
    }
    day = "2020-01-02"
    repeat = args.repeat or (1 if args.quick else 3)
    results: dict[str, dict[str, Any]] = {}
    failures = 0
    for q in RUN_QUERIES:
        results[q] = {}
        every: dict[str, list[dict[str, Any]]] = {e: [] for e in ENGINES}
        for _ in range(repeat):  # interleaved: a run of every engine per round
            for engine in ENGINES:
                every[engine].append(_run(engine, q, sources[engine], day, args.timeout))
        for engine in ENGINES:
            runs = every[engine]
            ok = [r for r in runs if "seconds" in r]
            cell: dict[str, Any] = {"runs": runs}
            if ok:
                cell["median"] = statistics.median(r["seconds"] for r in ok)
                cell["digest"] = ok[0]["digest"]
            results[q][engine] = cell
        base = results[q]["zarrsql:zarr"].get("digest")
        for engine in ENGINES:
            cell = results[q][engine]
            cell["agrees"] = "digest" in cell and _agree(cell["digest"], base)
            failures += not cell["agrees"]
    table = _table(results)
    print(table)
    out = HERE / "results" / ("virtual_quick.json" if args.quick else "virtual.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"results": results, "files": json.loads(files)}, indent=1))
    out.with_suffix(".md").write_text(table + "\n")
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
