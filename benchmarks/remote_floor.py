"""The floor for the remote benchmark: the least a reader of the ERA5-like store must do.

No SQL, no table: read the consolidated `zarr.json`; for Q3 the three coordinate chunks, to
find the one day and box; then the needed `t2m` chunks, 32 requests in flight (aiohttp, as
zarrsql and fsspec use), each decompressed (zstd) and reduced on a pool of one thread per
core while the next ones arrive. The same code reads a local folder (files instead of GETs),
so local and HTTP floors are measured alike. It knows this store's layout (Zarr v3, `bytes`
+ `zstd`, one chunk along latitude and longitude) and nothing else: a lower bound to compare
zarrsql with, not a reader.
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs
import numpy as np
import pyarrow as pa
from engines import Q3_LAT, Q3_LON

IN_FLIGHT = 32


class _Source:
    """GETs below a URL, or file reads below a folder, as coroutines."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.remote = base.startswith("http")
        self.session = None

    async def __aenter__(self) -> _Source:
        if self.remote:
            import aiohttp

            self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    async def get(self, key: str) -> bytes:
        if self.session is None:
            return await asyncio.to_thread(Path(self.base, key).read_bytes)
        async with self.session.get(f"{self.base}/{key}", read_bufsize=1 << 21) as r:
            r.raise_for_status()
            return await r.read()


def _decode(raw: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(numcodecs.Zstd().decode(raw), dtype=dtype).reshape(shape)


def _dtype(meta: dict) -> str:
    return np.dtype(meta["data_type"]).newbyteorder("<").str


def _time_axis(raw: bytes, meta: dict) -> np.ndarray:
    unit, _, epoch = meta["attributes"]["units"].partition(" since ")
    step = {"days": "D", "hours": "h", "minutes": "m", "seconds": "s"}[unit.strip()]
    values = _decode(raw, _dtype(meta), (-1,))
    return np.datetime64(epoch.strip().replace(" ", "T"), "s") + values.astype(np.int64).astype(f"timedelta64[{step}]")


async def _run(query: str, store: str, day: str) -> float:
    async with _Source(store) as src:
        root = json.loads(await src.get("zarr.json"))
        metas = root["consolidated_metadata"]["metadata"]
        t2m = metas["t2m"]
        shape, chunks = t2m["shape"], t2m["chunk_grid"]["configuration"]["chunk_shape"]
        box = (slice(None), slice(None), slice(None))
        steps = range(-(-shape[0] // chunks[0]))
        if query == "Q3":
            raws = await asyncio.gather(*(src.get(f"{n}/c/0") for n in ("time", "latitude", "longitude")))
            t = _time_axis(raws[0], metas["time"])
            lat = _decode(raws[1], _dtype(metas["latitude"]), (-1,))
            lon = _decode(raws[2], _dtype(metas["longitude"]), (-1,))
            d0 = np.datetime64(day, "s")
            ts = np.flatnonzero((t >= d0) & (t < d0 + np.timedelta64(1, "D")))
            ys = np.flatnonzero((lat >= Q3_LAT[0]) & (lat <= Q3_LAT[1]))
            xs = np.flatnonzero((lon >= Q3_LON[0]) & (lon <= Q3_LON[1]))
            steps = range(ts[0] // chunks[0], ts[-1] // chunks[0] + 1)
            box = (ts, ys, xs)
        pool = ThreadPoolExecutor(os.cpu_count() or 1)
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(IN_FLIGHT)

        def reduce(raw: bytes, step: int) -> tuple[float, int]:
            block = _decode(raw, "<f4", tuple(chunks))
            if query == "Q3":
                rows = box[0][(box[0] >= step * chunks[0]) & (box[0] < (step + 1) * chunks[0])] - step * chunks[0]
                block = block[np.ix_(rows, box[1], box[2])]
            valid = block[~np.isnan(block)]
            return float(valid.sum(dtype=np.float64)), int(valid.size)

        async def one(step: int) -> tuple[float, int]:
            async with gate:
                raw = await src.get(f"t2m/c/{step}/0/0")
            return await loop.run_in_executor(pool, reduce, raw, step)

        parts = await asyncio.gather(*(one(s) for s in steps))
        pool.shutdown()
    total, count = (sum(x) for x in zip(*parts, strict=True))
    return total / count


def run(query: str, store: str, day: str) -> pa.Table:
    if query not in ("Q1", "Q3"):
        raise KeyError(f"the remote floor implements Q1 and Q3, not {query}")
    value = np.array([asyncio.run(_run(query, store, day))], dtype="<f8")
    # from a buffer: pa.array/pa.table of Python values would import pandas (~0.4 s) first
    return pa.Table.from_arrays([pa.Array.from_buffers(pa.float64(), 1, [None, pa.py_buffer(value)])], ["avg_t2m"])
