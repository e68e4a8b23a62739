#!/usr/bin/env python3
"""Answers from metadata: count(*), min/max of a dimension and a count under a coordinate
predicate, on the ERA5-like store and on one ten times longer (issue 20, goal 3).

    python benchmarks/run_metadata.py            # 1x = 1,460 h, 10x = 14,600 h, 5 repetitions
    python benchmarks/run_metadata.py --quick    # 1x = 96 h, 10x = 960 h, 3 repetitions (~1 min)

Stores (built on first use in benchmarks/data/, idempotent):

* 1x: the ERA5-like store of make_era5.py (data chunks written);
* 10x: the same layout ten times longer in time, with only its metadata and coordinates
  written (`make_metadata_store`): its data chunks are absent, which is a valid Zarr store
  whose cells are the fill value. An answer from metadata reads no data chunk, so the
  absent chunks change nothing for it; the scanned rows below still stream every row;
* a Parquet copy of the 1x store written by DuckDB's `COPY ... TO (FORMAT parquet)` with
  its defaults, for reference.

Engines, each repetition in a fresh process (imports excluded from the time, interleaved,
the order rotated per repetition):

* `zarrsql`: `zarrsql.connect()` and the statement on `read_zarr(store)`: answered from
  the coordinates;
* `zarrsql-scan`: the same aggregate over `(SELECT * FROM read_zarr(store))`, which is not
  answered: DuckDB aggregates the streamed rows (what these statements cost before, except
  the plain count(*), which was already answered);
* `parquet+duckdb`: `duckdb.connect()` and the statement on `read_parquet(copy)` (1x only).

Each child times `connect()` (`connect_s`), the first statement, which opens the store or
file (`first_s`), and the median and the minimum of five more runs of it in the same
process (`warm_s`, `warm_min_s`; two runs for `zarrsql-scan`);
for zarrsql it records `zarrsql.trace()` of the first and of the last run. Results are
checked against numpy on each store's coordinate arrays (zarr-python), so every engine's
answer is compared with the same oracle. The 1-minute load average is kept
before and after every child.

Goal: zarrsql's time 10x / 1x about 1 (<= 1.25 here, first and warm, since one child is
noisy), no scan, no row streamed and no data chunk decoded (the first run decodes only the
coordinate chunks, the warm runs read nothing).
Results: benchmarks/results/metadata[_quick].json and .md.
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
import harness  # noqa: E402
import make_era5  # noqa: E402

DATA = HERE / "data"
DAY = ("2020-01-02", "2020-01-03")  # inside every store, the 96-hour quick store included
QUERIES = {
    "M1": "SELECT count(*) AS n FROM {src}",
    "M2": "SELECT min(time) AS t0, max(time) AS t1 FROM {src}",
    "M3": (
        f"SELECT count(*) AS n FROM {{src}} WHERE time >= '{DAY[0]}' AND time < '{DAY[1]}' "
        "AND latitude BETWEEN 30 AND 60 AND longitude < 30"
    ),
    "M4": (
        "SELECT count(*) AS n, min(latitude) AS lat0, max(latitude) AS lat1, min(time) AS t0, "
        "max(time) AS t1, count(DISTINCT longitude) AS lons FROM {src} "
        "WHERE (latitude BETWEEN 30 AND 60 OR latitude < -80) AND longitude < 30"
    ),
}
GOAL_RATIO = 1.25
#: Runs after the first in each child (the median is `warm_s`); a scan of the 10x store
#: streams 424M rows per run, so it repeats less.
WARM_RUNS = {"zarrsql-scan": 2}

CHILD = r"""
import json, os, statistics, sys, time
t0 = time.perf_counter()
engine, store, sql, warm_runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if engine == "parquet+duckdb":
    import duckdb
    src = f"read_parquet('{store}')"
else:
    import zarrsql
    src = f"read_zarr('{store}')"
    if engine == "zarrsql-scan":
        src = f"(SELECT * FROM {src})"
imported = time.perf_counter()
text = sql.format(src=src)
out = {"import_s": imported - t0}
COUNTERS = ("scans", "rows", "chunks_decoded", "work_units_read", "requests", "bytes_read")

def run(con):
    start = time.perf_counter()
    if engine == "parquet+duckdb":
        rows, trace = con.sql(text).fetchall(), None
    else:
        with zarrsql.trace() as t:
            rows = con.sql(text).fetchall()
        trace = {k: getattr(t, k) for k in COUNTERS}
    return time.perf_counter() - start, rows, trace

start = time.perf_counter()
con = duckdb.connect() if engine == "parquet+duckdb" else zarrsql.connect()
out["connect_s"] = time.perf_counter() - start
out["first_s"], rows, out["trace_first"] = run(con)
warm = [run(con) for _ in range(warm_runs)]
out["warm_s"] = statistics.median(w[0] for w in warm)
out["warm_min_s"] = min(w[0] for w in warm)
out["trace_warm"] = warm[-1][2]
out["result"] = [[v.isoformat() if hasattr(v, "isoformat") else v for v in row] for row in rows]
out["same_every_time"] = all(w[1] == rows for w in warm)
print(json.dumps(out))
"""


def make_metadata_store(out: Path, n_time: int) -> Path:
    """make_era5's layout over `n_time` hours, with the metadata and coordinates written and
    no data chunk (a chunk that was never written reads as the fill value)."""
    import zarr
    from zarr.codecs import ZstdCodec

    stamp = out.with_name(out.name + ".stamp.json")
    want = {"generator": "run_metadata.make_metadata_store", "n_time": n_time, "layout": make_era5.FORMAT_VERSION}
    if stamp.is_file() and out.is_dir() and json.loads(stamp.read_text()) == want:
        return out
    coords = make_era5.coords(n_time)
    root = zarr.open_group(str(out), mode="w", zarr_format=3, attributes={"Conventions": "CF-1.6"})
    attrs = {
        "time": {"units": make_era5.TIME_UNITS, "calendar": "standard", "standard_name": "time", "axis": "T"},
        "latitude": {"units": "degrees_north", "standard_name": "latitude", "axis": "Y"},
        "longitude": {"units": "degrees_east", "standard_name": "longitude", "axis": "X"},
    }
    for name, values in coords.items():
        fill = 0 if name == "time" else float("nan")
        arr = root.create_array(
            name,
            shape=values.shape,
            chunks=values.shape,
            dtype=values.dtype,
            fill_value=fill,
            compressors=ZstdCodec(level=make_era5.ZSTD_LEVEL),
            dimension_names=[name],
            attributes=attrs[name],
        )
        arr[:] = values
    for name, (long_name, units, std) in make_era5.VARIABLES.items():
        root.create_array(
            name,
            shape=(n_time, make_era5.N_LAT, make_era5.N_LON),
            chunks=(make_era5.CHUNK_T, make_era5.N_LAT, make_era5.N_LON),
            dtype="float32",
            fill_value=float("nan"),
            compressors=ZstdCodec(level=make_era5.ZSTD_LEVEL),
            dimension_names=make_era5.DIMS,
            attributes={"units": units, "long_name": long_name, "standard_name": std},
        )
    zarr.consolidate_metadata(str(out))
    stamp.write_text(json.dumps(want))
    return out


def make_parquet(store: Path, out: Path) -> Path:
    """The 1x store as Parquet, as a user writes it: DuckDB's COPY with its defaults."""
    stamp = out.with_name(out.name + ".stamp.json")
    want = {"generator": "run_metadata.make_parquet", "store": json.loads(make_era5.stamp_path(store).read_text())}
    if stamp.is_file() and out.is_file() and json.loads(stamp.read_text()) == want:
        return out
    import zarrsql

    tmp = out.with_name(out.name + ".tmp")
    with zarrsql.connect() as con:
        con.execute(
            f"COPY (SELECT time, latitude, longitude, t2m, u10, v10 FROM read_zarr('{store}')) "
            f"TO '{tmp}' (FORMAT parquet)"
        )
    tmp.replace(out)
    stamp.write_text(json.dumps(want))
    return out


def expected_answers(store: Path) -> dict[str, list]:
    """Each query's answer from numpy on the store's coordinate arrays (zarr-python), times
    as ISO text."""
    import numpy as np
    import zarr

    g = zarr.open_group(str(store), mode="r")
    hours, lat, lon = g["time"][:], g["latitude"][:], g["longitude"][:]
    t = np.datetime64("1900-01-01T00", "us") + hours.astype("timedelta64[h]")

    def iso(v: np.datetime64) -> str:
        return str(v.astype("datetime64[s]"))

    day = (t >= np.datetime64(DAY[0])) & (t < np.datetime64(DAY[1]))
    box_lat, box_lon = (lat >= 30) & (lat <= 60), lon < 30
    m4_lat = box_lat | (lat < -80)
    return {
        "M1": [[int(t.size * lat.size * lon.size)]],
        "M2": [[iso(t.min()), iso(t.max())]],
        "M3": [[int(day.sum() * box_lat.sum() * box_lon.sum())]],
        "M4": [
            [
                int(t.size * m4_lat.sum() * box_lon.sum()),
                float(lat[m4_lat].min()),
                float(lat[m4_lat].max()),
                iso(t.min()),
                iso(t.max()),
                int(np.unique(lon[box_lon]).size),
            ]
        ],
    }


def coordinate_chunks(store: Path) -> int:
    """Chunks of the coordinate arrays: what a first answer may decode."""
    import zarr

    g = zarr.open_group(str(store), mode="r")
    return sum(-(-g[n].shape[0] // g[n].chunks[0]) for n in ("time", "latitude", "longitude"))


def run_child(engine: str, path: Path, sql: str, timeout: float, warm_runs: int = 5) -> dict:
    before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, engine, str(path), sql, str(warm_runs)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=harness.child_env(),
    )
    rec: dict = {"process_s": time.perf_counter() - started, "load_before": before, "load_after": os.getloadavg()[0]}
    if proc.returncode != 0:
        rec["error"] = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return rec
    rec.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return rec


def _same(a: list, b: list) -> bool:
    """Equal rows, floats within 1e-6 (FLOAT latitudes come back as doubles from both)."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b, strict=True):
        if len(ra) != len(rb):
            return False
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, float) or isinstance(y, float):
                if abs(float(x) - float(y)) > 1e-6 * max(1.0, abs(float(y))):
                    return False
            elif x != y:
                return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="96-hour 1x store, 960-hour 10x store, 3 repetitions")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--no-scan-10x", action="store_true", help="skip zarrsql-scan on the 10x store (slowest cells)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    repeat = a.repeat or (3 if a.quick else 5)
    n1 = make_era5.N_TIME_QUICK if a.quick else make_era5.N_TIME_FULL
    suffix = "_quick" if a.quick else ""
    one = make_era5.build(make_era5.default_out(a.quick), n1, verbose=False)
    ten = make_metadata_store(DATA / f"era5{suffix}_x10_metadata.zarr", 10 * n1)
    parquet = make_parquet(one, DATA / f"era5{suffix}_duckdb_copy.parquet")
    harness.warm([one, ten, parquet])
    cells = [("zarrsql", "1x", one), ("zarrsql", "10x", ten), ("zarrsql-scan", "1x", one)]
    if not a.no_scan_10x:
        cells.append(("zarrsql-scan", "10x", ten))
    cells.append(("parquet+duckdb", "1x", parquet))
    for engine, _, path in cells:  # bytecode and page cache warm for every engine
        run_child(engine, path, QUERIES["M1"], a.timeout, warm_runs=0)
    runs: dict[str, list[dict]] = {f"{e}|{s}|{q}": [] for e, s, _ in cells for q in QUERIES}
    for rep in range(repeat):
        order = cells[rep % len(cells) :] + cells[: rep % len(cells)]
        for q, sql in QUERIES.items():
            for engine, size, path in order:
                warm = WARM_RUNS.get(engine, 5)
                runs[f"{engine}|{size}|{q}"].append(run_child(engine, path, sql, a.timeout, warm_runs=warm))
    expected = {"1x": expected_answers(one), "10x": expected_answers(ten)}
    doc = summarize(a, runs, cells, expected, {"1x": one, "10x": ten}, parquet, n1)
    out = a.out or HERE / "results" / f"metadata{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str))
    md = markdown(doc)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0 if doc["results_agree"] else 2


def summarize(a, runs, cells, expected, stores, parquet, n1) -> dict:
    med: dict[str, dict] = {}
    agree, problems = True, []
    for key, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        engine, size, q = key.split("|")
        if len(ok) < len(rs):
            agree = False
            problems.append(f"{key}: {rs[0].get('error') if 'error' in rs[0] else 'a repetition failed'}")
        if not ok:
            continue
        med[key] = {
            stage: statistics.median(r[stage] for r in ok)
            for stage in ("import_s", "connect_s", "first_s", "warm_s", "warm_min_s")
        }
        med[key].update(
            {"trace_first": ok[0].get("trace_first"), "trace_warm": ok[0].get("trace_warm"), "result": ok[0]["result"]}
        )
        for r in ok:
            reference = expected[size][q]
            if not (_same(r["result"], reference) and r["same_every_time"]):
                agree = False
                problems.append(f"{key}: {r['result']} != {reference}")
    ratios, no_data = {}, {}
    chunks = {s: coordinate_chunks(p) for s, p in stores.items()}
    for q in QUERIES:
        one, ten = med.get(f"zarrsql|1x|{q}"), med.get(f"zarrsql|10x|{q}")
        if one and ten:
            ratios[q] = {
                "first": ten["first_s"] / one["first_s"],
                "warm": ten["warm_s"] / one["warm_s"],
                "warm_min": ten["warm_min_s"] / one["warm_min_s"],
            }
        for size in ("1x", "10x"):
            m = med.get(f"zarrsql|{size}|{q}")
            if m:
                first, warm = m["trace_first"], m["trace_warm"]
                no_data[f"{size}|{q}"] = (
                    first["scans"] == 0
                    and first["rows"] == 0
                    and first["chunks_decoded"] <= chunks[size]
                    and not any(warm.values())
                )
    loads = [r[k] for rs in runs.values() for r in rs for k in ("load_before", "load_after")]
    return {
        "benchmark": "answers from metadata (issue 20, goal 3)",
        "quick": a.quick,
        "repeat": a.repeat or (3 if a.quick else 5),
        "machine": harness.machine_info(),
        "versions": harness.versions(["zarrsql", "duckdb", "zarr", "numpy", "pyarrow"]),
        "stores": {
            "1x": {"path": str(stores["1x"]), "hours": n1, "data_chunks": "written"},
            "10x": {
                "path": str(stores["10x"]),
                "hours": 10 * n1,
                "data_chunks": "absent (metadata and coordinates only)",
            },
            "parquet": {
                "path": str(parquet),
                "writer": "DuckDB COPY ... (FORMAT parquet), defaults",
                "mb": parquet.stat().st_size / 1e6,
            },
        },
        "coordinate_chunks": chunks,
        "queries": QUERIES,
        "medians": med,
        "zarrsql_10x_over_1x": ratios,
        "goal_ratio": GOAL_RATIO,
        "warm_runs": {e: WARM_RUNS.get(e, 5) for e, _, _ in cells},
        "goal_ratio_met": {q: max(r["first"], r["warm"]) <= GOAL_RATIO for q, r in ratios.items()},
        "no_data_chunk_read": no_data,
        "results_agree": agree,
        "problems": problems,
        "load_1min": {"min": min(loads, default=None), "max": max(loads, default=None)},
        "runs": runs,
        "notes": (
            "connect_s: zarrsql.connect() or duckdb.connect(); first_s: the first statement in the "
            "process (opening the store or file included); warm_s: the median of 5 more runs of it in "
            "the same process; imports excluded. Machine load is shared: see load_before/load_after."
        ),
    }


def markdown(doc: dict) -> str:
    med = doc["medians"]
    engines = sorted({k.rsplit("|", 1)[0] for k in med}, key=lambda c: (c.split("|")[0] != "zarrsql", c))
    lines = [
        f"# Answers from metadata{' (quick)' if doc['quick'] else ''}",
        "",
        f"{doc['machine']['date']}, {doc['repeat']} repetitions, medians; 1x = {doc['stores']['1x']['hours']} h, "
        f"10x = {doc['stores']['10x']['hours']} h (metadata and coordinates only); load (1 min) "
        f"{doc['load_1min']['min']:.2f}-{doc['load_1min']['max']:.2f}.",
        "",
        "First statement in a fresh process (opening the store included), ms; in parentheses the",
        "median of 5 more runs in the same process (warm; warm min: the fastest of them, the",
        "ratio least moved by foreign load). `connect()` is not included (see connect_s).",
        "",
        "| query | " + " | ".join(engines) + " | zarrsql 10x/1x (first, warm, warm min) | no data chunk read |",
        "|---" * (len(engines) + 3) + "|",
    ]
    for q in doc["queries"]:
        cells = []
        for e in engines:
            m = med.get(f"{e}|{q}")
            cells.append("—" if m is None else f"{m['first_s'] * 1e3:.1f} ({m['warm_s'] * 1e3:.1f})")
        r = doc["zarrsql_10x_over_1x"].get(q)
        ratio = "—" if r is None else f"{r['first']:.2f}, {r['warm']:.2f}, {r['warm_min']:.2f}"
        nd = all(v for k, v in doc["no_data_chunk_read"].items() if k.endswith(q))
        lines.append(f"| {q} | " + " | ".join(cells) + f" | {ratio} | {'yes' if nd else '**no**'} |")
    lines += ["", "Queries (`{src}` is the engine's table):", ""]
    lines += [f"- {q}: `{sql}`" for q, sql in doc["queries"].items()]
    met = doc["goal_ratio_met"]
    lines += [
        "",
        f"Goal: zarrsql 10x/1x (first and warm) <= {doc['goal_ratio']}: "
        + ", ".join(f"{q} {'met' if v else 'missed'}" for q, v in met.items())
        + f"; results agree: {doc['results_agree']}.",
    ]
    if doc["problems"]:
        lines += ["", "**Problems:**", *[f"- {x}" for x in doc["problems"]]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
