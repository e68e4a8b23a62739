#!/usr/bin/env python3
"""Q3 (one day x a 30°x30° box) on a sharded copy of the ERA5-like store, beside an
unsharded copy with the same inner chunks.

A shard holds many inner chunks behind an index; a scan that needs a few of them should
fetch those byte ranges, not the whole shard. The unsharded copy stores exactly those inner
chunks as separate keys, so the bytes its needed chunk files hold (summed from the files
on disk) are the floor the sharded read is measured against.

    python benchmarks/run_sharded.py [--repeat 5] [--out benchmarks/results/sharded.json]

Each repetition runs each store in a fresh process (interleaved); medians are reported.
Goals (zarrsql issues 18 and 20): sharded bytes read <= 1.2x the needed inner chunks, and
time <= 1.2x the unsharded copy.
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
sys.path.insert(0, str(HERE))
import engines as E  # noqa: E402

INNER = (24, 11, 24)  # one day x 11 latitudes x 24 longitudes
SHARD = (24, 121, 240)  # one day's whole grid per shard, as the source chunks


def build(source: Path, out: Path, sharded: bool) -> None:
    import zarr
    from zarr.codecs import ZstdCodec

    stamp = out.with_suffix(".stamp.json")
    if stamp.exists() and out.exists():
        return
    src = zarr.open_group(str(source), mode="r")
    dst = zarr.open_group(str(out), mode="w", zarr_format=3)
    for name in ("time", "latitude", "longitude"):
        a = src[name]
        dst.create_array(name, data=a[...], dimension_names=[name], attributes=dict(a.attrs))
    t2m = src["t2m"]
    kw = {"shards": SHARD} if sharded else {}
    arr = dst.create_array(
        "t2m",
        shape=t2m.shape,
        dtype=t2m.dtype,
        chunks=INNER,
        compressors=ZstdCodec(level=3),
        dimension_names=["time", "latitude", "longitude"],
        attributes=dict(t2m.attrs),
        **kw,
    )
    for start in range(0, t2m.shape[0], SHARD[0]):
        arr[start : start + SHARD[0]] = t2m[start : start + SHARD[0]]
    zarr.consolidate_metadata(str(out))
    stamp.write_text(json.dumps({"inner": INNER, "sharded": sharded}))


def needed_bytes(plain: Path, day: str) -> tuple[int, int]:
    """(bytes, count) of the unsharded copy's chunk files that Q3's selection touches."""
    import zarr

    g = zarr.open_group(str(plain), mode="r")
    ts, ys, xs = E.floor_index_ranges(g, "Q3", day)
    total = count = 0
    for i in range(ts.start // INNER[0], -(-ts.stop // INNER[0])):
        for j in range(ys.start // INNER[1], -(-ys.stop // INNER[1])):
            for k in range(xs.start // INNER[2], -(-xs.stop // INNER[2])):
                total += (plain / "t2m" / "c" / str(i) / str(j) / str(k)).stat().st_size
                count += 1
    return total, count


CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import zarrsql
sys.path.insert(0, {here!r})
import engines as E
con = zarrsql.connect()
start = time.perf_counter()
with zarrsql.trace() as t:
    value = con.sql(E.sql_for("Q3", "read_zarr('{store}')", {day!r})).fetchall()[0][0]
elapsed = time.perf_counter() - start
print(json.dumps({{"seconds": elapsed, "value": value, "bytes_read": t.bytes_read, "requests": t.requests,
                  "chunks_decoded": t.chunks_decoded}}))
"""


def run_child(store: Path, day: str) -> dict:
    code = CHILD.format(here=str(HERE), store=str(store), day=day)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path, default=HERE / "results" / "sharded.json")
    a = p.parse_args(argv)
    data = HERE / "data"
    source = data / "era5_quick.zarr"
    if not source.exists():
        subprocess.run([sys.executable, str(HERE / "make_era5.py"), "--quick"], check=True)
    plain, sharded = data / "era5_quick_inner.zarr", data / "era5_quick_sharded.zarr"
    build(source, plain, sharded=False)
    build(source, sharded, sharded=True)
    day = "2020-01-02"
    floor_bytes, floor_chunks = needed_bytes(plain, day)
    runs: dict[str, list[dict]] = {"unsharded": [], "sharded": []}
    load = []
    for _ in range(a.repeat):
        load.append(Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?")
        for name, store in (("unsharded", plain), ("sharded", sharded)):
            runs[name].append(run_child(store, day))
    values = {r["value"] for rs in runs.values() for r in rs}
    med = {n: statistics.median(r["seconds"] for r in rs) for n, rs in runs.items()}
    doc = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inner_chunks": INNER,
        "shard_shape": SHARD,
        "q3_day": day,
        "needed_inner_chunks": floor_chunks,
        "needed_inner_bytes": floor_bytes,
        "load_1min_before_each_repetition": load,
        "results_agree": len({round(v, 4) for v in values}) == 1,
        "median_seconds": med,
        "bytes_read": {n: rs[0]["bytes_read"] for n, rs in runs.items()},
        "requests": {n: rs[0]["requests"] for n, rs in runs.items()},
        "runs": runs,
    }
    doc["bytes_ratio_sharded_to_needed"] = doc["bytes_read"]["sharded"] / floor_bytes
    doc["time_ratio_sharded_to_unsharded"] = med["sharded"] / med["unsharded"]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2))
    print(f"Q3 needs {floor_chunks} inner chunks = {floor_bytes:,} bytes (file sizes of the unsharded copy)")
    for n in runs:
        print(
            f"{n:>9}: {med[n] * 1000:7.1f} ms median, {doc['bytes_read'][n]:>10,} bytes read, "
            f"{doc['requests'][n]} requests"
        )
    print(
        f"sharded bytes / needed: {doc['bytes_ratio_sharded_to_needed']:.3f} (goal <= 1.2); "
        f"sharded time / unsharded: {doc['time_ratio_sharded_to_unsharded']:.3f} (goal <= 1.2); "
        f"results agree: {doc['results_agree']}"
    )
    return 0 if doc["results_agree"] else 2


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
