#!/usr/bin/env python3
"""Small chunks and many chunks (issue 20, goal 4).

Two measurements, each engine in a fresh process, repetitions interleaved (engine order
rotated), medians, results checked equal across engines, the load average recorded before
and after every child:

1. **Small chunks.** The ERA5-like `t2m` (1,460 h x 121 x 240 float32, the values of
   `make_era5.py`, seeded) stored in chunks of (6, 11, 24) (6 KB each, zstd 3): 26,840
   chunks, the last time chunk ragged (2 of its 6 hours). zarrsql's Q1 (`avg(t2m)`) and a
   `SELECT *` to Arrow are timed beside the floors that read and decode the same bytes:
   a numcodecs loop over the chunk files (1 and 2 threads), tensorstore and zarr-python
   with the zarrs codec pipeline (where they install; `--extra-python` names an
   interpreter that has them). Goal: Q1 within 1.5x the fastest floor. The per-chunk
   overhead is (zarrsql - fastest floor) / chunks, in microseconds.
2. **Many chunks.** A metadata-only array of 1,000,000 chunks ((1000, 1000, 1000) float32 in
   chunks of (10, 10, 10), coordinates x, y, z; no chunk written, so every chunk reads as
   the fill value): planning (open + plan + counting the kept units and rows + listing the
   reader's work units), with and without a WHERE, and binding (`DESCRIBE SELECT *`,
   `SELECT * ... LIMIT 10`, the same with a WHERE). Goal: each under 1 s.

    python benchmarks/run_small_chunks.py            # full: 5 repetitions, ~3 min
    python benchmarks/run_small_chunks.py --quick    # 480 h store (8,800 chunks), 1 repetition

Times are measured inside the child from the end of its imports to the materialised
result ("open + query"; zarrsql's `connect()` included, as in run_era5.py); `connect_s`
is recorded apart. Results: `benchmarks/results/small_chunks[_quick].json` and `.md`.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

CHUNKS = (6, 11, 24)
N_TIME_FULL, N_TIME_QUICK = 1460, 480
ZSTD_LEVEL = 3
MANY_SHAPE, MANY_CHUNKS = (1000, 1000, 1000), (10, 10, 10)
#: The WHERE of the many-chunk plans and queries: 10 of x's 100 chunks, 5 of y's.
MANY_WHERE = "x >= 100 AND x < 200 AND y < 50"
MANY_LIMIT_WHERE = "x BETWEEN 500 AND 510"
RTOL = 1e-9
GOAL_RATIO = 1.5
GOAL_SECONDS = 1.0
SMALL_ENGINES = ("numcodecs.1", "numcodecs.2", "zstandard.1", "tensorstore", "zarrs", "zarrsql.Q1", "zarrsql.star")
FLOORS = ("numcodecs.1", "numcodecs.2", "zstandard.1", "tensorstore", "zarrs")
EXTRA = ("tensorstore", "zarrs")  # run with --extra-python when given
MANY_ENGINES = ("many.plan", "many.describe", "many.limit", "many.limit_where")


# --------------------------------------------------------------------------- stores
def small_store(quick: bool) -> Path:
    return DATA / ("small_chunks_quick.zarr" if quick else "small_chunks.zarr")


def _stamp(n_time: int) -> dict:
    return {"generator": "benchmarks/run_small_chunks.py", "version": 1, "n_time": n_time, "chunks": CHUNKS,
            "zstd_level": ZSTD_LEVEL}


def _current(out: Path, stamp: dict) -> bool:
    sp = out.with_name(out.name + ".stamp.json")
    try:  # compared as JSON: the tuples of `stamp` come back as lists
        return out.is_dir() and json.loads(sp.read_text()) == json.loads(json.dumps(stamp))
    except (OSError, ValueError):
        return False


def _mark(out: Path, stamp: dict) -> None:
    out.with_name(out.name + ".stamp.json").write_text(json.dumps(stamp, indent=2) + "\n")


def build_small(out: Path, n_time: int) -> None:
    """The store of part 1, with zarr-python: coordinates as make_era5.py writes them, `t2m`
    in (6, 11, 24) chunks, written a day at a time from make_era5's seeded values."""
    stamp = _stamp(n_time)
    if _current(out, stamp):
        return
    import warnings

    import make_era5 as M
    import zarr
    from zarr.codecs import ZstdCodec

    t0 = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    c = M.coords(n_time)
    root = zarr.open_group(str(out), mode="w", zarr_format=3)
    specs = {"time": ("int64", {"units": M.TIME_UNITS, "calendar": "standard", "standard_name": "time"}),
             "latitude": ("float32", {"units": "degrees_north", "standard_name": "latitude"}),
             "longitude": ("float32", {"units": "degrees_east", "standard_name": "longitude"})}
    for name, (dtype, attrs) in specs.items():
        a = root.create_array(name, shape=c[name].shape, chunks=c[name].shape, dtype=dtype,
                              dimension_names=[name], attributes=attrs)
        a[:] = c[name]
    arr = root.create_array("t2m", shape=(n_time, M.N_LAT, M.N_LON), chunks=CHUNKS, dtype="float32",
                            fill_value=float("nan"), compressors=ZstdCodec(level=ZSTD_LEVEL),
                            dimension_names=M.DIMS, attributes={"units": "K", "standard_name": "air_temperature"})
    for ci in range(-(-n_time // M.CHUNK_T)):
        lo, hi = ci * M.CHUNK_T, min((ci + 1) * M.CHUNK_T, n_time)
        arr[lo:hi] = M.chunk_values("t2m", c["time"][lo:hi], c["latitude"], c["longitude"], ci)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        zarr.consolidate_metadata(str(out))
    _mark(out, stamp)
    print(f"{out}: built in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def build_many(out: Path) -> None:
    """The store of part 2: coordinates x, y, z (0..999) and `v`, 10^6 chunks, none written."""
    stamp = {"generator": "benchmarks/run_small_chunks.py", "version": 1, "shape": MANY_SHAPE, "chunks": MANY_CHUNKS}
    if _current(out, stamp):
        return
    import warnings

    import numpy as np
    import zarr

    if out.exists():
        shutil.rmtree(out)
    root = zarr.open_group(str(out), mode="w", zarr_format=3)
    for k, name in enumerate("xyz"):
        a = root.create_array(name, shape=(MANY_SHAPE[k],), chunks=(MANY_SHAPE[k],), dtype="int32",
                              dimension_names=[name])
        a[:] = np.arange(MANY_SHAPE[k], dtype="int32")
    root.create_array("v", shape=MANY_SHAPE, chunks=MANY_CHUNKS, dtype="float32", fill_value=float("nan"),
                      dimension_names=list("xyz"))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        zarr.consolidate_metadata(str(out))
    _mark(out, stamp)


def grid_of(shape, chunks) -> int:
    n = 1
    for s, c in zip(shape, chunks, strict=True):
        n *= -(-s // c)
    return n


# --------------------------------------------------------------------------- children
def _peak_rss_mb() -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _t2m_layout(store: Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    doc = json.loads((store / "t2m" / "zarr.json").read_text())
    codecs = [c["name"] for c in doc["codecs"]]
    assert codecs == ["bytes", "zstd"], f"the floor decodes bytes + zstd, the store has {codecs}"
    return tuple(doc["shape"]), tuple(doc["chunk_grid"]["configuration"]["chunk_shape"])


def floor_numcodecs(store: Path, threads: int) -> dict:
    """Every chunk file read and decoded by numcodecs, the edge chunks clipped, summed in
    float64 (Q1's avg): the floor a Python loop over the same bytes reaches."""
    from concurrent.futures import ThreadPoolExecutor

    import numcodecs
    import numpy as np

    shape, chunks = _t2m_layout(store)
    grid = [-(-s // c) for s, c in zip(shape, chunks, strict=True)]
    zstd = numcodecs.Zstd()
    base = str(store / "t2m" / "c")

    def plane(i: int) -> tuple[float, int]:
        total, count = 0.0, 0
        t = min(chunks[0], shape[0] - i * chunks[0])
        for j in range(grid[1]):
            y = min(chunks[1], shape[1] - j * chunks[1])
            for k in range(grid[2]):
                x = min(chunks[2], shape[2] - k * chunks[2])
                with open(f"{base}/{i}/{j}/{k}", "rb") as f:
                    raw = f.read()
                a = np.frombuffer(zstd.decode(raw), dtype="<f4").reshape(chunks)[:t, :y, :x]
                total += float(a.sum(dtype=np.float64))
                count += a.size
        return total, count

    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(plane, range(grid[0])))
    total, count = sum(p[0] for p in parts), sum(p[1] for p in parts)
    return {"avg": total / count, "rows": count}


def floor_zstandard(store: Path) -> dict:
    """The chunk files read in a Python loop, a time step's chunks (one row of the grid's
    first axis) at a time, and decoded in one `zstandard` batch call each
    (`multi_decompress_to_buffer`, in C without the GIL): the floor of the decoder zarrsql
    uses for batches of zstd chunks when that package is installed."""
    import numpy as np
    import zstandard

    shape, chunks = _t2m_layout(store)
    grid = [-(-s // c) for s, c in zip(shape, chunks, strict=True)]
    nbytes = chunks[0] * chunks[1] * chunks[2] * 4
    dctx = zstandard.ZstdDecompressor()
    base = str(store / "t2m" / "c")
    total, count = 0.0, 0
    for i in range(grid[0]):
        t = min(chunks[0], shape[0] - i * chunks[0])
        frames, clips = [], []
        for j in range(grid[1]):
            y = min(chunks[1], shape[1] - j * chunks[1])
            for k in range(grid[2]):
                with open(f"{base}/{i}/{j}/{k}", "rb") as f:
                    frames.append(f.read())
                clips.append((y, min(chunks[2], shape[2] - k * chunks[2])))
        sizes = np.full(len(frames), nbytes, dtype=np.uint64).tobytes()
        for seg, (y, x) in zip(dctx.multi_decompress_to_buffer(frames, decompressed_sizes=sizes), clips, strict=True):
            a = np.frombuffer(seg, dtype="<f4").reshape(chunks)[:t, :y, :x]
            total += float(a.sum(dtype=np.float64))
            count += a.size
    return {"avg": total / count, "rows": count}


def floor_tensorstore(store: Path) -> dict:
    import numpy as np
    import tensorstore as ts

    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store / "t2m")}}).result()
    values = arr.read().result()
    return {"avg": float(values.sum(dtype=np.float64)) / values.size, "rows": int(values.size)}


def floor_zarrs(store: Path) -> dict:
    import numpy as np
    import zarr

    zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    values = zarr.open_array(str(store / "t2m"), mode="r")[...]
    return {"avg": float(values.sum(dtype=np.float64)) / values.size, "rows": int(values.size)}


def zarrsql_query(store: Path, star: bool) -> dict:
    import numpy as np

    import zarrsql

    import resource

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    t, c = time.perf_counter(), cpu()
    con = zarrsql.connect()
    connect_s, connect_cpu_s = time.perf_counter() - t, cpu() - c
    src = f"read_zarr('{store}')"
    if not star:
        (avg,), = con.sql(f"SELECT avg(t2m) FROM {src}").fetchall()
        return {"avg": avg, "connect_s": connect_s, "connect_cpu_s": connect_cpu_s}
    table = con.sql(f"SELECT * FROM {src}").to_arrow_table()
    t2m = table.column("t2m").to_numpy()
    return {"avg": float(t2m.sum(dtype=np.float64)) / len(t2m), "rows": table.num_rows, "connect_s": connect_s,
            "connect_cpu_s": connect_cpu_s,
            "columns": table.column_names, "nulls": sum(c.null_count for c in table.columns)}


def many_plan() -> dict:
    """Open + plan + count (arithmetic) + list the reader's work units, with and without WHERE."""
    from zarrsql.plan.predicate import And, Cmp
    from zarrsql.scan import open_scan

    store = str(DATA / "many_chunks.zarr")
    where = And((Cmp("x", ">=", 100), Cmp("x", "<", 200), Cmp("y", "<", 50)))
    out = {}
    for label, predicate in (("all", None), ("where", where)):
        t = time.perf_counter()
        scan = open_scan({"store": store}, predicate=predicate)
        t_plan = time.perf_counter()
        kept, rows = scan.plan.units_kept(), scan.plan.rows()
        t_count = time.perf_counter()
        listed = getattr(scan.plan, "grouped_units", scan.plan.units)
        units = chunks = 0
        for unit in listed():
            units += 1
            chunks += getattr(unit, "merged", 1)
        t_list = time.perf_counter()
        out[label] = {"open_plan_s": t_plan - t, "count_s": t_count - t_plan, "list_s": t_list - t_count,
                      "total_s": t_list - t, "units_kept": kept, "rows": rows, "units_listed": units,
                      "chunks_listed": chunks}
    return out


def many_sql(kind: str) -> dict:
    import zarrsql

    t = time.perf_counter()
    con = zarrsql.connect()
    connect_s = time.perf_counter() - t
    src = f"read_zarr('{DATA / 'many_chunks.zarr'}')"
    sql = {"many.describe": f"DESCRIBE SELECT * FROM {src}",
           "many.limit": f"SELECT * FROM {src} LIMIT 10",
           "many.limit_where": f"SELECT * FROM {src} WHERE {MANY_LIMIT_WHERE} LIMIT 10"}[kind]
    t = time.perf_counter()
    rows = con.sql(sql).fetchall()
    return {"connect_s": connect_s, "bind_s": time.perf_counter() - t,
            "rows": [[None if v != v else v for v in r] for r in rows]}


def child(engine: str, store: Path) -> dict:
    """One timed run; `query_s` runs from the end of the imports to the materialised result."""
    modules = {"numcodecs.1": ["numcodecs", "numpy"], "numcodecs.2": ["numcodecs", "numpy"],
               "zstandard.1": ["zstandard", "numpy"],
               "tensorstore": ["tensorstore", "numpy"], "zarrs": ["zarr", "zarrs", "numpy"]}.get(engine, ["zarrsql"])
    import importlib

    if modules == ["zarrsql"]:  # what its first query loads, as run_era5.py's children do
        from harness import ZARRSQL_IMPORTS

        modules = ZARRSQL_IMPORTS
    for m in modules:
        importlib.import_module(m)
    if engine.startswith("many."):
        importlib.import_module("zarrsql.scan")
    import resource

    import_s = time.perf_counter() - T0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    if engine.startswith("numcodecs."):
        result = floor_numcodecs(store, int(engine.split(".")[1]))
    elif engine == "zstandard.1":
        result = floor_zstandard(store)
    elif engine == "tensorstore":
        result = floor_tensorstore(store)
    elif engine == "zarrs":
        result = floor_zarrs(store)
    elif engine.startswith("zarrsql."):
        result = zarrsql_query(store, engine == "zarrsql.star")
    elif engine == "many.plan":
        result = many_plan()
    else:
        result = many_sql(engine)
    query_s = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)  # every thread's
    return {"ok": True, "import_s": import_s, "query_s": query_s, "cpu_s": cpu_s, "peak_rss_mb": _peak_rss_mb(),
            **result}


def trace_run(store: Path) -> dict:
    """zarrsql's counters over Q1 (untimed): every chunk decoded once, in how many batches."""
    import zarrsql

    con = zarrsql.connect()
    with zarrsql.trace() as t:
        con.sql(f"SELECT avg(t2m) FROM read_zarr('{store}')").fetchall()
    return {k: getattr(t, k) for k in ("work_units_planned", "work_units_read", "chunks_decoded", "requests",
                                       "bytes_read")}


# --------------------------------------------------------------------------- parent
def run_child(python: str, engine: str, store: Path, timeout: float) -> dict:
    from harness import child_env

    before = os.getloadavg()
    cmd = [python, str(Path(__file__).resolve()), "--child", engine, "--store", str(store)]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env(), cwd=str(HERE.parent))
        lines = p.stdout.strip().splitlines()
        rec = json.loads(lines[-1]) if p.returncode == 0 and lines else {
            "ok": False, "error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    except subprocess.TimeoutExpired:
        rec = {"ok": False, "error": f"timeout after {timeout} s"}
    rec["process_s"] = time.perf_counter() - t
    rec["loadavg_before"] = list(before)
    rec["loadavg_after"] = list(os.getloadavg())
    return rec


def interleaved(jobs: list[tuple[str, str, Path]], repeat: int, timeout: float) -> dict[str, list[dict]]:
    """Every (engine, python, store) `repeat` times, one repetition of all at a time, the
    order rotated by one engine per repetition."""
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in jobs}
    for r in range(repeat):
        shift = r % len(jobs)
        for name, python, store in jobs[shift:] + jobs[:shift]:
            rec = run_child(python, name, store, timeout)
            runs[name].append(rec)
            shown = f"{rec['query_s']:.3f} s" if rec.get("ok") else f"failed: {rec.get('error')}"
            print(f"  [{r + 1}/{repeat}] {name:<18} {shown}  (load {rec['loadavg_before'][0]:.2f})", file=sys.stderr)
    return runs


def median_of(runs: list[dict], key: str = "query_s") -> float | None:
    values = [r[key] for r in runs if r.get("ok") and r.get(key) is not None]
    return statistics.median(values) if values else None


def available(python: str, module: str) -> str | None:
    """None when `python` imports `module`, else why not."""
    p = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
    return None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["import failed"])[-1]


def small_part(args, store: Path) -> dict:
    n_time = N_TIME_QUICK if args.quick else N_TIME_FULL
    build_small(store, n_time)
    from harness import warm

    warm([store])
    shape = (n_time, 121, 240)
    chunks = grid_of(shape, CHUNKS)
    jobs, unavailable = [], {}
    for name in SMALL_ENGINES:
        python = args.extra_python if (name in EXTRA and args.extra_python) else sys.executable
        why = available(python, {"tensorstore": "tensorstore", "zarrs": "zarrs", "zstandard.1": "zstandard"}.get(
            name, "numcodecs"))
        if why is not None:
            unavailable[name] = f"{python}: {why}"
            continue
        jobs.append((name, python, store))
    from harness import ZARRSQL_IMPORTS, child_env

    for python in {p for _, p, _ in jobs}:  # imports and bytecode warm (the children's cache), untimed
        mods = ZARRSQL_IMPORTS if python == sys.executable else ["numpy"]
        subprocess.run([python, "-c", "import importlib\nfor m in %r: importlib.import_module(m)" % (mods,)],
                       capture_output=True, env=child_env(), cwd=str(HERE.parent))
    runs = interleaved(jobs, args.repeat, args.timeout)
    medians = {n: median_of(r) for n, r in runs.items()}
    # agreement: every successful run's avg against the 1-thread numcodecs floor's
    ref = next((r["avg"] for r in runs.get("numcodecs.1", []) if r.get("ok")), None)
    disagree = []
    for name, rs in runs.items():
        for r in rs:
            if r.get("ok") and ref is not None and abs(r["avg"] - ref) > RTOL * abs(ref):
                disagree.append(f"{name}: avg {r['avg']!r} != {ref!r}")
            if r.get("ok") and "rows" in r and r["rows"] != shape[0] * shape[1] * shape[2]:
                disagree.append(f"{name}: {r['rows']} rows, the array has {shape[0] * shape[1] * shape[2]} cells")
            if r.get("ok") and r.get("nulls"):
                disagree.append(f"{name}: {r['nulls']} NULLs in a store without NaN")
    floors = {n: medians[n] for n in FLOORS if medians.get(n) is not None}
    fastest = min(floors, key=floors.get) if floors else None
    doc = {"store": str(store), "shape": shape, "chunk_shape": CHUNKS, "chunks": chunks,
           "chunk_bytes": CHUNKS[0] * CHUNKS[1] * CHUNKS[2] * 4, "unavailable": unavailable,
           "median_query_s": medians, "median_cpu_s": {n: median_of(r, "cpu_s") for n, r in runs.items()},
           "fastest_floor": fastest, "agree": not disagree, "disagreements": disagree,
           "runs": runs}
    for q in ("zarrsql.Q1", "zarrsql.star"):
        z = medians.get(q)
        if z is None or fastest is None:
            continue
        connect = median_of(runs[q], "connect_s") or 0.0
        cpu = {n: median_of(runs[n], "cpu_s") for n in (*floors, q)}
        cpu_floor = min((v for n, v in cpu.items() if n != q and v is not None), default=None)
        doc[q] = {"ratio_to_fastest_floor": z / floors[fastest],
                  # CPU time of every thread, less disturbed by other processes than wall time
                  "cpu_ratio_to_least_cpu_floor": None if cpu_floor is None or cpu[q] is None else cpu[q] / cpu_floor,
                  "cpu_overhead_us_per_chunk": None if cpu_floor is None or cpu[q] is None
                  else (cpu[q] - cpu_floor) / chunks * 1e6,
                  "cpu_overhead_us_per_chunk_after_connect": None if cpu_floor is None or cpu[q] is None
                  else (cpu[q] - (median_of(runs[q], "connect_cpu_s") or 0.0) - cpu_floor) / chunks * 1e6,
                  "ratio_to_each_floor": {n: z / f for n, f in floors.items()},
                  "overhead_us_per_chunk": (z - floors[fastest]) / chunks * 1e6,
                  "overhead_us_per_chunk_after_connect": (z - connect - floors[fastest]) / chunks * 1e6,
                  "median_connect_s": connect}
    if "zarrsql.Q1" in doc:
        doc["goal"] = {"text": f"Q1 <= {GOAL_RATIO}x the fastest floor ({fastest})",
                       "met": doc["zarrsql.Q1"]["ratio_to_fastest_floor"] <= GOAL_RATIO}
    traced = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--trace", "--store", str(store)],
                            capture_output=True, text=True, env=__import__("harness").child_env(), check=True)
    doc["trace"] = json.loads(traced.stdout.strip().splitlines()[-1])
    # every data chunk once, plus the one chunk of each of the 3 coordinates
    if (doc["trace"]["chunks_decoded"], doc["trace"]["work_units_read"]) != (chunks + 3, chunks):
        doc["disagreements"].append(f"zarrsql decoded {doc['trace']['chunks_decoded']} chunks and read "
                                    f"{doc['trace']['work_units_read']} units; expected {chunks} + 3 and {chunks}")
        doc["agree"] = False
    return doc


def many_part(args) -> dict:
    store = DATA / "many_chunks.zarr"
    build_many(store)
    jobs = [(name, sys.executable, store) for name in MANY_ENGINES]
    runs = interleaved(jobs, args.repeat, args.timeout)
    problems = []
    cells = MANY_SHAPE[0] * MANY_SHAPE[1] * MANY_SHAPE[2]
    expect = {"all": (grid_of(MANY_SHAPE, MANY_CHUNKS), cells),
              "where": (10 * 5 * 100, 100 * 50 * MANY_SHAPE[2])}  # x 100..199, y 0..49: chunks x rows
    for r in runs["many.plan"]:
        for label, (units, rows) in expect.items():
            got = r.get(label) if r.get("ok") else None
            if got and (got["units_kept"], got["rows"], got["chunks_listed"]) != (units, rows, units):
                problems.append(f"plan {label}: {got['units_kept']} units, {got['rows']} rows, "
                                f"{got['chunks_listed']} chunks listed; expected {units}, {rows}, {units}")
    for name in ("many.limit", "many.limit_where"):
        for r in runs[name]:
            if not r.get("ok"):
                continue
            rows = r["rows"]
            lo, hi = (0, 999) if name == "many.limit" else (500, 510)
            if len(rows) != 10 or any(not (lo <= x <= hi) or v is not None for x, _, _, v in rows):
                problems.append(f"{name}: rows {rows[:3]}... are not 10 fill-value rows with x in [{lo}, {hi}]")
    for r in runs["many.describe"]:
        if r.get("ok") and [row[0] for row in r["rows"]] != ["x", "y", "z", "v"]:
            problems.append(f"describe: columns {[row[0] for row in r['rows']]}")
    planned = [r for r in runs["many.plan"] if r.get("ok")]
    med = {f"plan_{label}_{k}": statistics.median(r[label][k] for r in planned)
           for label in expect for k in ("open_plan_s", "count_s", "list_s", "total_s") if planned}
    for name in MANY_ENGINES[1:]:
        med[name.split(".", 1)[1] + "_bind_s"] = median_of(runs[name], "bind_s")
        med[name.split(".", 1)[1] + "_connect_s"] = median_of(runs[name], "connect_s")
    timed = [v for k, v in med.items() if k.endswith("total_s") or k.endswith("bind_s")]
    return {"store": str(store), "shape": MANY_SHAPE, "chunk_shape": MANY_CHUNKS,
            "chunks": grid_of(MANY_SHAPE, MANY_CHUNKS), "where": MANY_WHERE, "limit_where": MANY_LIMIT_WHERE,
            "medians": med, "agree": not problems, "disagreements": problems,
            "goal": {"text": f"planning and binding each under {GOAL_SECONDS} s",
                     "met": bool(timed) and all(v is not None and v < GOAL_SECONDS for v in timed)},
            "runs": runs}


def _s(x) -> str:
    return "—" if x is None else f"{x:.3f}"


def markdown(doc: dict) -> str:
    small, many = doc["small"], doc["many"]
    L = [f"# Small chunks and many chunks ({'quick' if doc['quick'] else 'full'} run, {doc['machine']['date']})", "",
         f"Load average (1 min) from {doc['load_min']:.2f} to {doc['load_max']:.2f} over the runs; "
         f"{doc['repeat']} repetitions, medians.", "",
         f"## Small chunks: {small['chunks']:,} chunks of {small['chunk_shape']} float32 "
         f"({small['chunk_bytes']:,} B), shape {small['shape']}", "",
         "| engine | open + query (s) | / fastest floor | CPU time, all threads (s) |", "|---|---|---|---|"]
    fastest = small.get("fastest_floor")
    base = small["median_query_s"].get(fastest) if fastest else None
    for name, m in small["median_query_s"].items():
        cpu = small.get("median_cpu_s", {}).get(name)
        L.append(f"| {name} | {_s(m)} | {_s(m / base) if m and base else '—'} | {_s(cpu)} |")
    for name, why in small["unavailable"].items():
        L.append(f"| {name} | unavailable: {why} | |")
    L.append("")
    for q in ("zarrsql.Q1", "zarrsql.star"):
        if q in small:
            d = small[q]
            L.append(f"- {q}: {d['ratio_to_fastest_floor']:.2f}x the fastest floor ({fastest}); overhead "
                     f"{d['overhead_us_per_chunk']:.1f} µs per chunk ({d['overhead_us_per_chunk_after_connect']:.1f} "
                     f"µs without connect(), {d['median_connect_s']:.3f} s); CPU time "
                     f"{_s(d['cpu_ratio_to_least_cpu_floor'])}x the least CPU of a floor, "
                     f"{_s(d['cpu_overhead_us_per_chunk'])} µs of CPU per chunk more "
                     f"({_s(d['cpu_overhead_us_per_chunk_after_connect'])} without connect())")
    if "goal" in small:
        L.append(f"- goal: {small['goal']['text']}: **{'met' if small['goal']['met'] else 'missed'}**")
    L.append(f"- zarrsql trace (Q1): {small['trace']}")
    L.append(f"- results agree: {small['agree']}" + "".join(f"\n  - **{d}**" for d in small["disagreements"]))
    L += ["", f"## Many chunks: {many['chunks']:,} chunks of {many['chunk_shape']}, shape {many['shape']}, "
          "metadata only", "", "| measurement | seconds |", "|---|---|"]
    for k, v in many["medians"].items():
        L.append(f"| {k} | {_s(v)} |")
    L += ["", f"- WHERE of the plans: `{many['where']}`; of the LIMIT query: `{many['limit_where']}`",
          f"- goal: {many['goal']['text']}: **{'met' if many['goal']['met'] else 'missed'}**",
          f"- results agree: {many['agree']}" + "".join(f"\n  - **{d}**" for d in many["disagreements"]), ""]
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"{N_TIME_QUICK}-hour store, 1 repetition")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions (default 5, quick 1)")
    ap.add_argument("--extra-python", default=None,
                    help="interpreter with tensorstore and zarrs installed, for those two floors")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--store", type=Path, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        try:
            print(json.dumps(child(a.child, a.store)))
        except Exception as err:  # noqa: BLE001  (the parent records the failure)
            print(json.dumps({"ok": False, "error": f"{type(err).__name__}: {err}"}))
        return 0
    if a.trace:
        print(json.dumps(trace_run(a.store)))
        return 0
    from harness import machine_info, versions

    a.repeat = a.repeat or (1 if a.quick else 5)
    out = a.out or RESULTS / ("small_chunks_quick.json" if a.quick else "small_chunks.json")
    DATA.mkdir(exist_ok=True)
    doc = {"quick": a.quick, "repeat": a.repeat, "machine": machine_info(),
           "versions": versions(["zarr", "numcodecs", "numpy", "duckdb", "pyarrow"]),
           "extra_python": a.extra_python}
    if a.extra_python:
        doc["extra_versions"] = json.loads(subprocess.run(
            [a.extra_python, "-c", "import json; from importlib import metadata as m; print(json.dumps("
             "{n: m.version(n) for n in ('tensorstore', 'zarrs', 'zarr', 'numpy')}))"],
            capture_output=True, text=True).stdout or "{}")
    print("small chunks:", file=sys.stderr)
    doc["small"] = small_part(a, small_store(a.quick))
    print("many chunks:", file=sys.stderr)
    doc["many"] = many_part(a)
    loads = [x for part in ("small", "many") for rs in doc[part]["runs"].values() for r in rs
             for x in (r["loadavg_before"][0], r["loadavg_after"][0])]
    doc["load_min"], doc["load_max"] = min(loads), max(loads)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(doc)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0 if doc["small"]["agree"] and doc["many"]["agree"] else 2


if __name__ == "__main__":
    sys.exit(main())
