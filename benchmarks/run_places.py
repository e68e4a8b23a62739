#!/usr/bin/env python3
"""100 stations' full time series from a store chunked for time series (zarrsql issue 14).

    python benchmarks/run_places.py [--repeat 3] [--out benchmarks/results/places.json]

The store: 8,760 hourly steps x 100 latitudes x 100 longitudes of float32, chunks
(8760, 10, 10): one chunk holds the whole series of a 10 x 10 patch. Each engine, in a fresh
process (imports excluded, open + query timed), fetches every hour at 100 stations:

* `zarrsql.sample`: `zarr_sample(store, 'stations')`, nearest cell per station;
* `zarrsql join`: `read_zarr(store) JOIN stations USING (lat, lon)` (stations on grid points);
* `xarray.sel`: `ds.t.sel(lat=..., lon=..., method="nearest")` on vectorized indexers, loaded;
* `xarray-sql join`: the same join on xarray-sql's DuckDB registration of the dataset.

Repetitions are interleaved and medians reported; every engine's sum of the values is
checked against xarray's. zarrsql's chunks read come from `zarrsql.trace()`; the number of
chunks holding a station is computed from the grid. Goal: zarrsql >= 10x faster than
xarray-sql's join and within 1.5x of xarray's `.sel`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NT, NY, NX = 8760, 100, 100
CHUNKS = (NT, 10, 10)
STATIONS = 100


def build(path: Path) -> None:
    stamp = path.with_suffix(".stamp.json")
    if stamp.exists() and path.exists():
        return
    import pandas as pd
    import xarray as xr

    lat = np.linspace(70, 20.5, NY)
    lon = np.arange(NX) * 0.5
    hours = np.arange(NT)
    base = (np.cos(np.radians(lat))[:, None] * 30 + np.sin(np.radians(lon * 4))[None, :] * 5).astype("float32")
    cycle = np.sin(2 * np.pi * hours / 24).astype("float32")[:, None, None]
    values = np.round(base[None] + cycle * 3, 2).astype("float32")
    ds = xr.Dataset(
        {"t": (("time", "lat", "lon"), values)},
        coords={"time": pd.date_range("2021-01-01", periods=NT, freq="h"), "lat": lat, "lon": lon},
    )
    ds.chunk(dict(zip(("time", "lat", "lon"), CHUNKS, strict=True))).to_zarr(path, mode="w", consolidated=True)
    stamp.write_text(json.dumps({"shape": [NT, NY, NX], "chunks": CHUNKS}))


def stations() -> dict[str, list]:
    rng = np.random.default_rng(42)
    iy, ix = rng.integers(0, NY, STATIONS), rng.integers(0, NX, STATIONS)
    lat = np.linspace(70, 20.5, NY)[iy]
    lon = (np.arange(NX) * 0.5)[ix]
    return {"id": list(range(STATIONS)), "lat": lat.tolist(), "lon": lon.tolist()}


CHILD = r"""
import json, sys, time
engine, store, points = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
import numpy as np, pandas as pd
if engine.startswith("zarrsql"):
    import zarrsql
elif engine == "xarray.sel":
    import xarray as xr
else:
    import duckdb, xarray as xr, xarray_sql as xql
stations = pd.DataFrame(points)
trace = None

def arrow(rel):
    out = rel.arrow()
    return out.read_all() if hasattr(out, "read_all") else out

start = time.perf_counter()
if engine == "zarrsql.sample":
    con = zarrsql.connect()
    with zarrsql.trace() as trace:
        table = arrow(con.sql(f"SELECT id, time, t FROM zarr_sample('{store}', 'stations')"))
    total, rows = float(np.sum(table.column("t").to_numpy().astype("float64"))), table.num_rows
elif engine == "zarrsql join":
    con = zarrsql.connect()
    with zarrsql.trace() as trace:
        table = arrow(con.sql(f"SELECT s.id, z.time, z.t FROM read_zarr('{store}') z JOIN stations s USING (lat, lon)"))
    total, rows = float(np.sum(table.column("t").to_numpy().astype("float64"))), table.num_rows
elif engine == "xarray.sel":
    ds = xr.open_zarr(store)
    cells = ds.t.sel(lat=xr.DataArray(stations.lat, dims="p"), lon=xr.DataArray(stations.lon, dims="p"), method="nearest").load()
    total, rows = float(cells.values.astype("float64").sum()), cells.size
else:
    ds = xr.open_zarr(store, chunks=None)
    con = duckdb.connect()
    xql.register(con, "grid", ds)
    con.register("stations", stations)
    table = arrow(con.sql("SELECT s.id, z.time, z.t FROM grid z JOIN stations s USING (lat, lon)"))
    total, rows = float(np.sum(table.column("t").to_numpy().astype("float64"))), table.num_rows
elapsed = time.perf_counter() - start
chunks = None if trace is None else trace.chunks_decoded
print(json.dumps({"seconds": elapsed, "sum": total, "rows": rows, "chunks": chunks}))
"""

ENGINES = ("zarrsql.sample", "zarrsql join", "xarray.sel", "xarray-sql join")


def run(engine: str, store: Path, points: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, engine, str(store), json.dumps(points)],
        capture_output=True, text=True, timeout=900, check=False,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--out", type=Path, default=HERE / "results" / "places.json")
    a = p.parse_args(argv)
    store = HERE / "data" / "timeseries.zarr"
    store.parent.mkdir(exist_ok=True)
    build(store)
    points = stations()
    holding = len({(int(np.argmin(abs(np.linspace(70, 20.5, NY) - la))) // 10, int(round(lo / 0.5)) // 10)
                   for la, lo in zip(points["lat"], points["lon"], strict=True)})
    engines = a.engines.split(",")
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    loads = []
    for _ in range(a.repeat):
        loads.append(Path("/proc/loadavg").read_text().split()[0])
        for e in engines:
            runs[e].append(run(e, store, points))
    ok = {e: [r for r in rs if "error" not in r] for e, rs in runs.items()}
    med = {e: statistics.median(r["seconds"] for r in rs) if rs else None for e, rs in ok.items()}
    sums = {e: round(rs[0]["sum"], 1) for e, rs in ok.items() if rs}
    doc = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "store": {"shape": [NT, NY, NX], "chunks": CHUNKS, "chunks_total": (NY // 10) * (NX // 10)},
        "stations": STATIONS,
        "chunks_holding_a_station": holding,
        "load_1min": loads,
        "median_seconds": med,
        "sums": sums,
        "agree": len(set(sums.values())) == 1,
        "zarrsql_chunks_decoded": {e: ok[e][0]["chunks"] for e in engines if e.startswith("zarrsql") and ok[e]},
        "runs": runs,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2))
    print(f"{STATIONS} stations x {NT} hours; {holding} of {doc['store']['chunks_total']} chunks hold a station")
    for e in engines:
        extra = f", {doc['zarrsql_chunks_decoded'].get(e)} chunks decoded" if e.startswith("zarrsql") else ""
        shown = "failed: " + runs[e][0].get("error", "") if med[e] is None else f"{med[e]:.3f} s"
        print(f"{e:>16}: {shown}{extra}")
    print(f"results agree: {doc['agree']} {sums}")
    return 0 if doc["agree"] else 2


if __name__ == "__main__":
    sys.exit(main())
