#!/usr/bin/env python3
"""A wide store over S3: opening a group of 300 arrays without consolidated metadata.

    python benchmarks/run_wide.py                  # 300 arrays, 20 ms per request, 3 repetitions
    python benchmarks/run_wide.py --quick          # 1 repetition

The store (`benchmarks/data/wide300.zarr`, zarr-python, Zarr v3) has one group holding a
`time` coordinate and 300 float32 variables over it, and no consolidated metadata, so a
reader must list the group and fetch every array's `zarr.json`. It is uploaded to moto's S3
server (tests/remote/s3server.py, its own process), which adds `--latency` to every request
and logs when each arrived and was answered. Each (engine, repetition) runs in a fresh
process, interleaved, timed from the end of the imports to the answer; the log gives the
requests (by method) and the dependent rounds: the longest chain of requests each sent after
the previous one was answered (`s3server.dependent_rounds`). Engines:

- `floor`: one LIST of the group, then every `zarr.json` with 32 GETs in flight (s3fs's
  client with a pool of 32 connections, `get_object` itself) — the least any reader of an
  unconsolidated group must do;
- `zarrsql tables`: `SELECT * FROM read_zarr_tables(...)`;
- `zarrsql describe`: `DESCRIBE SELECT * FROM read_zarr(...)` (the 301-column table);
- `xarray`: `xr.open_zarr(..., consolidated=False)` (zarr-python over s3fs).

Every engine's answer (the data variables' names) is checked equal to the floor's. Writes
benchmarks/results/wide.md (and .json), with the machine's load before and after each run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
from harness import child_env, machine_info  # noqa: E402
from tests.remote.s3server import dependent_rounds  # noqa: E402

SERVER = ROOT / "tests" / "remote" / "s3server.py"
BUCKET = "wide-bench"
N_ARRAYS = 300
LENGTH = 48
IN_FLIGHT = 32

CHILD = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
import run_wide as W
for name in W.IMPORTS[{engine!r}]:
    __import__(name)
start = time.perf_counter()
names = W.ENGINES[{engine!r}]({url!r}, {endpoint!r})
print(json.dumps({{"seconds": time.perf_counter() - start, "names": sorted(names)}}))
"""

#: Imported before the clock starts, as every engine's libraries are.
IMPORTS = {
    "floor": ["s3fs", "aiobotocore", "json"],
    "zarrsql tables": ["s3fs", "zarrsql", "zarrsql.engine.api", "zarrsql.engine.connection"],
    "zarrsql describe": ["s3fs", "zarrsql", "zarrsql.engine.api", "zarrsql.engine.connection"],
    "xarray": ["s3fs", "xarray", "zarr"],
}


def _options(endpoint: str) -> str:
    return f"storage_options := MAP {{'endpoint_url': '{endpoint}', 'anon': 'true'}}"


def floor(url: str, endpoint: str) -> list[str]:
    """LIST the group, then GET every child's zarr.json, IN_FLIGHT at a time."""
    import asyncio

    import s3fs

    async def run() -> list[str]:
        # a connection per request in flight: botocore's pool holds 10 by default
        pool = {"max_pool_connections": IN_FLIGHT}
        fs = s3fs.S3FileSystem(anon=True, endpoint_url=endpoint, asynchronous=True, config_kwargs=pool)
        session = await fs.set_session()
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        listed = await fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix + "/", Delimiter="/")
        children = [p["Prefix"] for p in listed.get("CommonPrefixes", [])]
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def doc(child: str) -> dict:
            async with gate:
                r = await fs._call_s3("get_object", Bucket=bucket, Key=child + "zarr.json")
                return json.loads(await r["Body"].read())

        docs = await asyncio.gather(*(doc(c) for c in children))
        await session.close()
        names = [c.rstrip("/").rsplit("/", 1)[-1] for c in children]
        # the data variables: arrays that are not their own dimension's coordinate
        return [
            n for n, d in zip(names, docs, strict=True) if d["node_type"] == "array" and d.get("dimension_names") != [n]
        ]

    return asyncio.run(run())


def zarrsql_tables(url: str, endpoint: str) -> list[str]:
    import zarrsql

    con = zarrsql.connect()
    rows = con.sql(f"SELECT data_vars FROM read_zarr_tables('{url}', {_options(endpoint)})").fetchall()
    return [v for (variables,) in rows for v in variables]


def zarrsql_describe(url: str, endpoint: str) -> list[str]:
    import zarrsql

    con = zarrsql.connect()
    rows = con.sql(f"DESCRIBE SELECT * FROM read_zarr('{url}', {_options(endpoint)})").fetchall()
    return [name for name, *_ in rows if name != "time"]


def xarray(url: str, endpoint: str) -> list[str]:
    import xarray as xr

    ds = xr.open_zarr(url, consolidated=False, storage_options={"anon": True, "endpoint_url": endpoint})
    return list(ds.data_vars)


ENGINES = {"floor": floor, "zarrsql tables": zarrsql_tables, "zarrsql describe": zarrsql_describe, "xarray": xarray}


def build(path: Path) -> None:
    """The wide group, written once by zarr-python (no consolidated metadata)."""
    stamp = path.with_suffix(".zarr.stamp.json")
    if stamp.exists() and path.exists():
        return
    import numpy as np
    import zarr

    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    time = group.create_array("time", shape=(LENGTH,), chunks=(LENGTH,), dtype="int64", dimension_names=["time"])
    time[:] = np.arange(LENGTH)
    time.attrs["units"] = "hours since 2020-01-01 00:00:00"
    for i in range(N_ARRAYS):
        a = group.create_array(
            f"v{i:03d}", shape=(LENGTH,), chunks=(LENGTH,), dtype="float32", dimension_names=["time"]
        )
        a[:] = np.arange(LENGTH, dtype="float32") + i
    assert "consolidated_metadata" not in json.loads((path / "zarr.json").read_text())
    stamp.write_text(json.dumps({"arrays": N_ARRAYS + 1}))


def upload(path: Path, endpoint: str) -> str:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench"
    )
    client.create_bucket(Bucket=BUCKET, ACL="public-read")
    for f in sorted(path.rglob("*")):
        if f.is_file():
            client.put_object(
                Bucket=BUCKET,
                Key=f"{path.name}/{f.relative_to(path).as_posix()}",
                Body=f.read_bytes(),
                ACL="public-read",
            )
    return f"s3://{BUCKET}/{path.name}"


def _get(endpoint: str, what: str) -> list:
    with urllib.request.urlopen(f"{endpoint}/__{what}") as r:
        return json.load(r)


def run_child(python: str, engine: str, url: str, endpoint: str) -> dict:
    code = CHILD.format(bench=str(HERE), engine=engine, url=url, endpoint=endpoint)
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    for name in [n for n in env if n.startswith("AWS_")]:
        del env[name]
    env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"] = os.devnull + "-none"
    load = os.getloadavg()[0]
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    res: dict = {"load_before": load, "load_after": os.getloadavg()[0]}
    if out.returncode != 0:
        res["error"] = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"
        return res
    return {**res, **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one repetition")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--latency", type=float, default=0.02, help="seconds added to each request")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the children")
    args = ap.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    path = HERE / "data" / "wide300.zarr"
    build(path)
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--latency", str(args.latency)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    results: dict[str, list[dict]] = {}
    try:
        endpoint = f"http://127.0.0.1:{int(server.stdout.readline())}"
        url = upload(path, endpoint)
        for engine in ENGINES:  # untimed: bytecode caches written, the server warmed up
            run_child(args.python, engine, url, endpoint)
        for rep in range(repeat):
            order = list(ENGINES)[rep % len(ENGINES) :] + list(ENGINES)[: rep % len(ENGINES)]
            for engine in order:
                _get(endpoint, "reset")
                res = run_child(args.python, engine, url, endpoint)
                timeline = _get(endpoint, "timeline")
                res["requests"] = dict(Counter(m for m, *_ in timeline))
                res["rounds"] = dependent_rounds(timeline)
                results.setdefault(engine, []).append(res)
                brief = {k: v for k, v in res.items() if k != "names"}
                print(f"rep {rep + 1} {engine}: {brief}", file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait()
    return write(results, args, repeat)


def _median(runs: list[dict], key: str) -> float | None:
    ok = [r[key] for r in runs if key in r]
    return statistics.median(ok) if ok else None


def write(results: dict[str, list[dict]], args: argparse.Namespace, repeat: int) -> int:
    expected = next((r["names"] for r in results.get("floor", []) if "names" in r), None)
    agree = {e: all(r.get("names") == expected for r in runs if "names" in r) for e, runs in results.items()}
    waves = math.ceil((N_ARRAYS + 1) / IN_FLIGHT)
    lines = [
        f"# A wide store over S3: {N_ARRAYS} arrays, no consolidated metadata, "
        f"{args.latency * 1000:.0f} ms per request",
        "",
        f"`benchmarks/data/wide300.zarr` ({N_ARRAYS} float32 variables and a `time` coordinate in one group) on "
        "moto's S3 server (`tests/remote/s3server.py`, its own process, on the same cores), "
        f"{args.latency * 1000:.0f} ms added to every request. Median of {repeat} fresh processes, imports "
        "excluded. *rounds*: the longest chain of requests each sent after the one before was answered (from "
        f"the server's log). The least possible: 1 (the LIST) + ⌈{N_ARRAYS + 1} / {IN_FLIGHT}⌉ = {1 + waves} "
        "for the floor, which knows the store is a group; a reader also reads the root document first "
        f"({2 + waves}). moto spends milliseconds of CPU per request, so waves of {IN_FLIGHT} take longer than the "
        "latency and the chains are longer than these bounds on a busy machine.",
        "",
        "| engine | open | requests | rounds | same answer | load before → after |",
        "|---|---|---|---|---|---|",
    ]
    for engine, runs in results.items():
        seconds = _median(runs, "seconds")
        ok = [r for r in runs if "seconds" in r]
        if seconds is None:
            lines.append(f"| {engine} | failed: {runs[0].get('error', '?')[:80]} | | | | |")
            continue
        reqs = ", ".join(f"{n} {m}" for m, n in sorted(ok[0]["requests"].items()))
        loads = f"{min(r['load_before'] for r in ok):.1f} → {max(r['load_after'] for r in ok):.1f}"
        rounds = int(statistics.median(r["rounds"] for r in ok))
        lines.append(
            f"| {engine} | {seconds:.3f} s | {reqs} | {rounds} | {'yes' if agree[engine] else '**no**'} | {loads} |"
        )
    text = "\n".join(lines) + "\n"
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "wide.md").write_text(text)
    (HERE / "results" / "wide.json").write_text(
        json.dumps(
            {
                "machine": machine_info(),
                "latency": args.latency,
                "repeat": repeat,
                "arrays": N_ARRAYS + 1,
                "results": results,
            },
            indent=1,
        )
    )
    print(text)
    return 0 if all(agree.values()) else 2


if __name__ == "__main__":
    sys.exit(main())
