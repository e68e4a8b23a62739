#!/usr/bin/env python3
"""zarrsql's Spark data source beside zarrsql on DuckDB and xarray + dask, and the driver's
planning cost on metadata-only stores of 10^4, 10^5 and 10^6 chunks.

    python benchmarks/run_spark.py            # full ERA5-like store (1,460 h, 61 chunks a variable)
    python benchmarks/run_spark.py --quick    # the 96-hour store: a smoke run
    python benchmarks/run_spark.py --planning-only

Queries (benchmarks/engines.py): Q1 SELECT avg(t2m), Q2 GROUP BY latitude, longitude, Q3 one
day x 30°x30° box. Spark runs local[2] in one session (its start-up is reported apart, the
queries are timed warm: the second of two runs); DuckDB and xarray + dask run in this
process with two threads. "partitions" is Spark's input partitions, DuckDB's work units
read and dask's tasks over t2m chunks; "bytes read" is what zarrsql's counters see for the
source's own reader (replayed in this process for Spark, whose executors are other
processes) and, for xarray, the size on disk of the chunks its selection touches.

Writes results/spark.json and results/spark.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SRC))

import engines as E  # noqa: E402
import make_era5 as M  # noqa: E402

RESULTS = HERE / "results"
QUERIES = ("Q1", "Q2", "Q3")
#: Spark's Python sources get no projection: each query's view names the columns it reads.
COLUMNS = {"Q1": "t2m", "Q2": "latitude,longitude,t2m", "Q3": "time,latitude,longitude,t2m"}
PLANNING_SIZES = (10_000, 100_000, 1_000_000)

PLANNING_SCRIPT = r"""
import json, resource, sys, time
from zarrsql.spark.source import ZarrDataSource
import numpy as np
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
source = ZarrDataSource({"path": sys.argv[1]})
reader = source.reader(source.schema())
t1 = time.perf_counter()
parts = reader.partitions()
t2 = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
units = sum(b - a for p in parts for a, b in p.runs)
print(json.dumps({"open_s": t1 - t0, "plan_s": t2 - t1, "partitions": len(parts), "units": units,
                  "rss_before_mb": base / 1024, "rss_peak_mb": peak / 1024}))
"""


def metadata_only_store(path: Path, n_chunks: int) -> str:
    """A 721 x 1440 hourly field with one chunk an hour, as ARCO-ERA5 chunks its variables:
    coordinates written, the data variable only declared (no chunk exists)."""
    import numpy as np
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    t = root.create_array("time", shape=(n_chunks,), chunks=(n_chunks,), dtype="int64", dimension_names=["time"])
    t[:] = np.arange(n_chunks, dtype=np.int64)
    t.attrs.update({"units": "hours since 1940-01-01", "calendar": "proleptic_gregorian"})
    lat = root.create_array("latitude", shape=(721,), chunks=(721,), dtype="float32", dimension_names=["latitude"])
    lat[:] = np.linspace(90, -90, 721, dtype=np.float32)
    lon = root.create_array("longitude", shape=(1440,), chunks=(1440,), dtype="float32", dimension_names=["longitude"])
    lon[:] = np.arange(1440, dtype=np.float32) * 0.25
    root.create_array(
        "t2m",
        shape=(n_chunks, 721, 1440),
        chunks=(1, 721, 1440),
        dtype="float32",
        dimension_names=["time", "latitude", "longitude"],
        fill_value=np.nan,
    )
    zarr.consolidate_metadata(str(path))
    return str(path)


def planning(sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            store = metadata_only_store(Path(tmp) / f"meta_{n}.zarr", n)
            env = {**os.environ, "PYTHONPATH": str(SRC)}
            done = subprocess.run(
                [sys.executable, "-c", PLANNING_SCRIPT, store], capture_output=True, text=True, env=env, check=True
            )
            row = {"chunks": n, **json.loads(done.stdout.strip().splitlines()[-1])}
            print(f"planning {n:>9,} chunks: {row}", file=sys.stderr)
            out.append(row)
    return out


def _spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    from pyspark.sql import SparkSession

    import zarrsql.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="spark-warehouse-"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    zarrsql.spark.register(spark)
    return spark


def _replayed_bytes(store: str, columns: str, where: list[Any]) -> tuple[int, int]:
    """(bytes read, work units read) of the Spark reader's own partitions, in this process."""
    import zarrsql
    from zarrsql.spark.source import ZarrDataSource

    source = ZarrDataSource({"path": store, "columns": columns, "pushdown": "true"})
    reader = source.reader(source.schema())
    list(reader.pushFilters(where))
    parts = reader.partitions()
    with zarrsql.trace() as t:
        for p in parts:
            for _ in reader.read(p):
                pass
    return t.bytes_read, t.work_units_read


def _q3_filters(day: str) -> list[Any]:
    import datetime as dt

    from pyspark.sql import datasource as ds

    start = dt.datetime.fromisoformat(day)
    return [
        ds.GreaterThanOrEqual(("time",), start),
        ds.LessThan(("time",), start + dt.timedelta(days=1)),
        ds.GreaterThanOrEqual(("latitude",), float(E.Q3_LAT[0])),
        ds.LessThanOrEqual(("latitude",), float(E.Q3_LAT[1])),
        ds.GreaterThanOrEqual(("longitude",), float(E.Q3_LON[0])),
        ds.LessThanOrEqual(("longitude",), float(E.Q3_LON[1])),
    ]


def run_spark(store: str, day: str) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    spark = _spark_session()
    start_s = time.perf_counter() - t0
    out = {}
    for q in QUERIES:
        # pushdown is opt-in; each view is read by queries with the same WHERE, so Spark's
        # reuse of a filtered query's reader (docs/spark.md, Pushdown) cannot change a result
        era5 = spark.read.format("zarr").option("columns", COLUMNS[q]).option("pushdown", "true")
        era5.load(store).createOrReplaceTempView("era5")
        sql = E.sql_for(q, "era5", day).replace("time >= '", "time >= timestamp_ntz'")
        sql = sql.replace("time < '", "time < timestamp_ntz'")
        times = []
        for _ in range(2):
            t = time.perf_counter()
            rows = spark.sql(sql).collect()
            times.append(time.perf_counter() - t)
        where = sql.split(" FROM era5", 1)[1]
        parts = spark.sql(f"SELECT * FROM era5 {where.split(' GROUP BY')[0]}").rdd.getNumPartitions()
        nbytes, units = _replayed_bytes(store, COLUMNS[q], _q3_filters(day) if q == "Q3" else [])
        out[q] = {
            "seconds": times[-1],
            "first_seconds": times[0],
            "partitions": parts,
            "work_units": units,
            "bytes_read": nbytes,
            "result": [tuple(r) for r in rows][:5],
            "rows": len(rows),
        }
        print(f"spark {q}: {out[q]['seconds']:.2f} s, {parts} partitions", file=sys.stderr)
    spark.stop()
    return out, start_s


def run_duckdb(store: str, day: str) -> dict[str, Any]:
    import zarrsql

    con = zarrsql.connect()
    con.sql("SET threads = 2")
    out = {}
    for q in QUERIES:
        sql = E.sql_for(q, f"read_zarr('{store}')", day)
        times = []
        for _ in range(2):
            with zarrsql.trace() as tr:
                t = time.perf_counter()
                rows = con.sql(sql).fetchall()
                times.append(time.perf_counter() - t)
        out[q] = {
            "seconds": times[-1],
            "partitions": tr.work_units_read,
            "work_units": tr.work_units_read,
            "bytes_read": tr.bytes_read,
            "result": rows[:5],
            "rows": len(rows),
        }
        print(f"duckdb {q}: {out[q]['seconds']:.2f} s", file=sys.stderr)
    return out


def _chunk_bytes(store: str, lo: int, hi: int) -> int:
    chunks = Path(store) / "t2m" / "c"
    return sum(f.stat().st_size for i in range(lo, hi) for f in (chunks / str(i)).rglob("*") if f.is_file())


def run_xarray(store: str, day: str) -> dict[str, Any]:
    import dask
    import numpy as np
    import xarray as xr

    dask.config.set(scheduler="threads", num_workers=2)
    out = {}
    for q in QUERIES:
        times = []
        for _ in range(2):
            t = time.perf_counter()
            ds = xr.open_zarr(store)
            if q == "Q1":
                arr = ds.t2m.mean()
            elif q == "Q2":
                arr = ds.t2m.mean("time")
            else:
                sel = ds.t2m.sel(
                    time=day, latitude=slice(E.Q3_LAT[1], E.Q3_LAT[0]), longitude=slice(E.Q3_LON[0], E.Q3_LON[1])
                )
                arr = sel.mean()
            tasks = arr.data.npartitions if hasattr(arr.data, "npartitions") else None
            value = arr.compute()
            times.append(time.perf_counter() - t)
        n_chunks = ds.t2m.data.numblocks[0]
        first = int(np.flatnonzero(ds.time.values >= np.datetime64(day))[0]) // M.CHUNK_T
        lo, hi = (first, first + 1) if q == "Q3" else (0, n_chunks)
        out[q] = {
            "seconds": times[-1],
            "partitions": hi - lo,
            "dask_output_blocks": tasks,
            "bytes_read": _chunk_bytes(store, lo, hi),
            "result": float(value.mean()),
            "rows": int(value.size),
        }
        print(f"xarray {q}: {out[q]['seconds']:.2f} s", file=sys.stderr)
    return out


def _agree(spark: dict[str, Any], duck: dict[str, Any], xarray_: dict[str, Any]) -> dict[str, bool]:
    checks = {}
    for q in ("Q1", "Q3"):
        s, d, x = spark[q]["result"][0][0], duck[q]["result"][0][0], xarray_[q]["result"]
        checks[q] = abs(s - d) <= 1e-6 * abs(d) and abs(x - d) <= 1e-4 * abs(d)
    checks["Q2"] = spark["Q2"]["rows"] == duck["Q2"]["rows"] == xarray_["Q2"]["rows"]
    return checks


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _machine(m: dict[str, Any]) -> str:
    return f"{m.get('cpu_model')}, {m.get('cpu_count')} cores, {m.get('memory_gb')} GB, {m.get('date')}"


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# Spark data source benchmark ({res['store_label']})",
        "",
        f"Machine: {_machine(res['machine'])}. Spark local[2] session start: {res['spark_start_s']:.1f} s "
        "(not in the query times; queries timed warm, second of two runs).",
        "",
        "| query | engine | time | partitions | bytes read |",
        "|---|---|---|---|---|",
    ]
    for q in QUERIES:
        for name in ("spark", "duckdb", "xarray"):
            r = res[name][q]
            lines.append(
                f"| {q} {E.QUERIES[q]['title']} | {res['labels'][name]} | {r['seconds']:.2f} s | "
                f"{r['partitions']} | {_mb(r['bytes_read'])} |"
            )
    lines += [
        "",
        f"Results agree (Q1, Q3 averages; Q2 row counts): {res['agree']}",
        "",
        "## Driver planning on metadata-only stores (721 x 1440 chunks, one per hour)",
        "",
        "| chunks | open (schema) | plan partitions | partitions | peak RSS |",
        "|---|---|---|---|---|",
    ]
    for p in res["planning"]:
        lines.append(
            f"| {p['chunks']:,} | {p['open_s']:.2f} s | {p['plan_s']:.2f} s | {p['partitions']:,} | "
            f"{p['rss_peak_mb']:.0f} MB (from {p['rss_before_mb']:.0f} MB after imports) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--planning-only", action="store_true")
    args = ap.parse_args(argv)
    sizes = PLANNING_SIZES
    plan_rows = planning(sizes)
    if args.planning_only:
        print(json.dumps(plan_rows, indent=2))
        return 0
    n_time = M.N_TIME_QUICK if args.quick else M.N_TIME_FULL
    store = str(M.build(M.default_out(args.quick), n_time))
    day = "2020-01-02" if args.quick else "2020-02-01"
    from harness import machine_info

    xarray_ = run_xarray(store, day)
    duck = run_duckdb(store, day)
    spark, start_s = run_spark(store, day)
    res = {
        "store": store,
        "store_label": f"ERA5-like, {n_time} h",
        "day": day,
        "machine": machine_info(),
        "spark_start_s": start_s,
        "spark": spark,
        "duckdb": duck,
        "xarray": xarray_,
        "planning": plan_rows,
        "labels": {
            "spark": "Spark local[2] (zarr source, `columns`)",
            "duckdb": "zarrsql on DuckDB",
            "xarray": "xarray + dask",
        },
    }
    res["agree"] = _agree(spark, duck, xarray_)
    RESULTS.mkdir(exist_ok=True)
    stem = "spark_quick" if args.quick else "spark"
    (RESULTS / f"{stem}.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    text = markdown(res)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)
    return 0 if all(res["agree"].values()) else 2


if __name__ == "__main__":
    sys.exit(main())
