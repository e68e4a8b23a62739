#!/usr/bin/env python3
"""One engine x one query, in a fresh process: the timed unit of the ERA5 benchmark.

run_era5.py starts this file once per (engine, query, repetition):

    python benchmarks/engines.py ENGINE QUERY --store S.zarr --parquet P.parquet \
        --q3-day 2020-02-01 --out run.json --result run.npz [--trace]

Timing, measured inside the child with ``time.perf_counter``:

* ``import_s``  importing the engine's libraries (the list in ``ENGINE_IMPORTS``);
* ``query_s``   open the store/file/dataset + run the query + materialise the full
                result (an Arrow table for the SQL engines, numpy arrays or an Arrow
                table for the floor) — the "cold process, open + first query" number
                of the anchors;
* ``total_s``   import_s + query_s;
* ``query_cpu_s`` the CPU time (all threads, user + system) of the query_s region.

``peak_rss_mb`` is the process's peak RSS (``VmHWM``) taken right after the result is
materialised (so it includes the imports but not the result checking below).

After the clock stops, the result is brought to a canonical form (time as int64
nanoseconds since the epoch, numbers as float64, rows sorted where the query has no
defined order) and written to ``--result`` (small results) and summarised in the
JSON digest, so the parent can check that every engine returns the same answer.

Module-level imports here are the standard library only, so that run_era5.py can
import the query definitions without paying for the engines.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402

from harness import ZARRSQL_IMPORTS  # noqa: E402  (standard library only)

# --------------------------------------------------------------------------- queries
# ``{src}`` is the engine's table expression: a registered table name, read_parquet(...)
# or read_zarr(...). Every engine runs the same text (the floor implements the same
# semantics by hand with zarr + numpy).
Q3_LAT = (30, 60)  # latitude BETWEEN 30 AND 60: 21 grid rows (30.0, 31.5, ..., 60.0)
Q3_LON = (0, 30)  # longitude BETWEEN 0 AND 30: 21 grid columns (0.0, 1.5, ..., 30.0)
Q6_POINT = (45.0, 90.0)  # (latitude, longitude): grid values (indices 30 and 60)
Q4_LIMIT = 10

QUERIES: dict[str, dict] = {
    "Q1": {
        "title": "SELECT avg(t2m)",
        "sql": "SELECT avg(t2m) AS avg_t2m FROM {src}",
        "columns": ["avg_t2m"],
        "sort": [],
    },
    "Q2": {
        "title": "GROUP BY latitude, longitude",
        "sql": "SELECT latitude, longitude, avg(t2m) AS avg_t2m FROM {src} GROUP BY latitude, longitude",
        "columns": ["latitude", "longitude", "avg_t2m"],
        "sort": ["latitude", "longitude"],
    },
    "Q3": {
        "title": "one day x 30°x30° box",
        "sql": (
            "SELECT avg(t2m) AS avg_t2m FROM {src} "
            "WHERE time >= '{day}' AND time < '{next_day}' "
            f"AND latitude BETWEEN {Q3_LAT[0]} AND {Q3_LAT[1]} "
            f"AND longitude BETWEEN {Q3_LON[0]} AND {Q3_LON[1]}"
        ),
        "columns": ["avg_t2m"],
        "sort": [],
    },
    "Q4": {
        "title": "SELECT * LIMIT 10",
        "sql": f"SELECT * FROM {{src}} LIMIT {Q4_LIMIT}",
        "columns": ["time", "latitude", "longitude", "t2m", "u10", "v10"],
        "sort": None,  # any 10 rows are a right answer: the parent checks them against the store
    },
    "Q5": {
        "title": "three columns to Arrow (t2m, u10, v10)",
        "sql": "SELECT t2m, u10, v10 FROM {src}",
        "columns": ["t2m", "u10", "v10"],
        "sort": None,  # 42M rows: compared through order-free digests (count/sum/min/max)
    },
    "Q6": {
        "title": "point time series (lat 45, lon 90)",
        "sql": (f"SELECT time, t2m FROM {{src}} WHERE latitude = {Q6_POINT[0]} AND longitude = {Q6_POINT[1]}"),
        "columns": ["time", "t2m"],
        "sort": ["time"],
    },
}

ENGINES = [
    "floor",
    "floor.numcodecs",
    "floor.zstandard",
    "floor+duckdb",
    "xarray.sel",
    "xarray+duckdb",
    "xarray-sql+duckdb",
    "xarray-sql+datafusion",
    "parquet+duckdb",
    "parquet.zstd+duckdb",
    "parquet.pyarrow+duckdb",
    "zarrsql.duckdb-aggregates",
    "zarrsql",
]

# What each engine imports before its clock for open + query starts.
ENGINE_IMPORTS = {
    "floor": ["numpy", "zarr", "pyarrow"],
    "floor.numcodecs": ["numpy", "numcodecs", "numcodecs.zstd", "pyarrow", "concurrent.futures"],
    "floor.zstandard": ["numpy", "zstandard", "pyarrow", "concurrent.futures"],
    "floor+duckdb": ["numpy", "numcodecs", "numcodecs.zstd", "pyarrow", "concurrent.futures", "duckdb"],
    "xarray.sel": ["numpy", "xarray", "zarr"],
    "xarray+duckdb": ["numpy", "pandas", "xarray", "zarr", "duckdb", "pyarrow"],
    "xarray-sql+duckdb": ["numpy", "xarray", "zarr", "xarray_sql", "duckdb", "pyarrow"],
    "xarray-sql+datafusion": ["numpy", "xarray", "zarr", "xarray_sql", "datafusion", "pyarrow"],
    "parquet+duckdb": ["duckdb", "pyarrow"],
    "parquet.zstd+duckdb": ["duckdb", "pyarrow"],
    "parquet.pyarrow+duckdb": ["duckdb", "pyarrow"],
    # `import zarrsql` is lazy (the engine loads on first use): import what its first query
    # loads (harness.ZARRSQL_IMPORTS), so the clock starts after the same libraries as the others'
    "zarrsql": ZARRSQL_IMPORTS,
    "zarrsql.duckdb-aggregates": ZARRSQL_IMPORTS,
}

# Engines that implement only some queries; every other engine runs every query. The
# harness skips the other cells (shown as "—", not as failures).
SUPPORTED_QUERIES = {
    "xarray.sel": ("Q3", "Q6"),
}


def supports(engine: str, query: str) -> bool:
    allowed = SUPPORTED_QUERIES.get(engine)
    return allowed is None or query in allowed


SMALL_RESULT_ROWS = 200_000  # results up to this size are saved whole for comparison
LARGE_RESULT_QUERIES = ("Q5",)  # compared through digest_large only (order-free, piecewise)


def sql_for(query: str, src: str, day: str) -> str:
    import datetime as _dt

    next_day = (_dt.date.fromisoformat(day) + _dt.timedelta(days=1)).isoformat()
    return QUERIES[query]["sql"].format(src=src, day=day, next_day=next_day)


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _to_arrow_table(res):
    """A DuckDB relation / DataFusion frame -> pyarrow.Table (fully materialised)."""
    for meth in ("to_arrow_table", "fetch_arrow_table"):
        f = getattr(res, meth, None)
        if f is not None:
            return f()
    out = res.arrow()  # DuckDB 2.x: a RecordBatchReader
    return out.read_all() if hasattr(out, "read_all") else out


# --------------------------------------------------------------------------- the floor
def _decode_time(arr):
    """CF 'UNITS since EPOCH' int values -> datetime64[ns] (the standard calendar only)."""
    import numpy as np

    units = arr.attrs.get("units", "")
    cal = arr.attrs.get("calendar", "standard")
    if cal not in ("standard", "gregorian", "proleptic_gregorian"):
        raise ValueError(f"floor: calendar {cal!r} not supported")
    unit, _, epoch = units.partition(" since ")
    step = {"days": "D", "hours": "h", "minutes": "m", "seconds": "s"}[unit.strip()]
    epoch = np.datetime64(epoch.strip().replace(" ", "T"), "ns")
    return epoch + arr[:].astype(np.int64).astype(f"timedelta64[{step}]").astype("timedelta64[ns]")


def _index_range(mask):
    """The contiguous index range where ``mask`` holds (coordinates are monotonic)."""
    import numpy as np

    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return slice(0, 0)
    if idx[-1] - idx[0] + 1 != idx.size:
        raise ValueError("floor: selection is not contiguous (non-monotonic coordinate)")
    return slice(int(idx[0]), int(idx[-1]) + 1)


def floor_index_ranges(g, query: str, day: str) -> tuple[slice, slice, slice]:
    """Q3 and Q6: the (time, latitude, longitude) index ranges of t2m the floor reads.

    Computed from the coordinate arrays (time decoded from its CF units) exactly as the
    SQL predicates select: Q3 ``day <= time < day + 1`` and both ``BETWEEN``s inclusive;
    Q6 the whole time axis at the one grid point equal to ``Q6_POINT``. The harness also
    uses this, untimed, to count the chunks these ranges touch (``chunks_touched``).
    """
    import numpy as np

    lat, lon = g["latitude"][:], g["longitude"][:]
    if query == "Q3":
        t = _decode_time(g["time"])
        d0 = np.datetime64(day, "ns")
        ts = _index_range((t >= d0) & (t < d0 + np.timedelta64(1, "D")))
        ys = _index_range((lat >= Q3_LAT[0]) & (lat <= Q3_LAT[1]))
        xs = _index_range((lon >= Q3_LON[0]) & (lon <= Q3_LON[1]))
        return ts, ys, xs
    if query == "Q6":
        (iy,) = np.flatnonzero(lat == np.float32(Q6_POINT[0]))
        (ix,) = np.flatnonzero(lon == np.float32(Q6_POINT[1]))
        return slice(0, g["time"].shape[0]), slice(int(iy), int(iy) + 1), slice(int(ix), int(ix) + 1)
    raise KeyError(f"floor_index_ranges: {query} has no coordinate selection")


def time_chunks(ts: slice, ct: int) -> tuple[int, int]:
    """The chunks c0..c1-1 along an axis chunked by `ct` that the index range `ts` touches
    ((0, 0) for an empty range)."""
    return (ts.start // ct, (ts.stop - 1) // ct + 1) if ts.stop > ts.start else (0, 0)


def chunks_touched(ranges, chunk_shape) -> int:
    """How many chunks of a regular grid with ``chunk_shape`` the index ``ranges`` touch."""
    n = 1
    for s, c in zip(ranges, chunk_shape, strict=True):
        if s.stop <= s.start:
            return 0
        n *= (s.stop - 1) // c - s.start // c + 1
    return n


def run_floor(query: str, store: str, parquet: str, day: str):
    """zarr-python read of exactly the needed slices + numpy."""
    import numpy as np
    import zarr

    g = zarr.open_group(store, mode="r")
    if query == "Q1":
        a = g["t2m"][...]
        return {"avg_t2m": np.array([a.mean(dtype=np.float64)])}
    if query == "Q2":
        a = g["t2m"][...]
        m = a.mean(axis=0, dtype=np.float64)  # (lat, lon)
        lat, lon = g["latitude"][:], g["longitude"][:]
        return {
            "latitude": np.repeat(lat, lon.size),
            "longitude": np.tile(lon, lat.size),
            "avg_t2m": m.ravel(),
        }
    if query == "Q3":
        ts, ys, xs = floor_index_ranges(g, "Q3", day)
        sub = g["t2m"][ts, ys, xs]
        val = sub.mean(dtype=np.float64) if sub.size else np.nan
        return {"avg_t2m": np.array([val])}
    if query == "Q4":
        # the first 10 rows in (time, latitude, longitude) row-major order
        lon = g["longitude"]
        n = min(Q4_LIMIT, lon.shape[0])
        t = _decode_time(g["time"])  # tiny
        out = {
            "time": np.repeat(t[:1], n),
            "latitude": np.repeat(g["latitude"][:1], n),
            "longitude": lon[:n],
        }
        for v in ("t2m", "u10", "v10"):
            out[v] = g[v][0, 0, :n]
        return out
    if query == "Q5":
        import pyarrow as pa

        def zero_copy(a):
            # pa.array(ndarray) would be zero-copy too, but its first call lazily imports
            # pandas (~0.25 s); wrapping the buffer is the cheapest honest path.
            a = np.ascontiguousarray(a).reshape(-1)
            return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), a.size, [None, pa.py_buffer(a)])

        return pa.table({v: zero_copy(g[v][...]) for v in ("t2m", "u10", "v10")})
    if query == "Q6":
        ts, ys, xs = floor_index_ranges(g, "Q6", day)
        return {"time": _decode_time(g["time"]), "t2m": g["t2m"][ts, ys.start, xs.start]}
    raise KeyError(query)


# --------------------------------------------------------------------------- decode floors
# What a hand-written reader of this store can do: read each chunk file, zstd-decode it into
# its slot of a preallocated array, DECODE_THREADS threads, then numpy. No zarr-python in the
# loop (its asyncio pipeline costs more than the decoding, see docs/benchmarks.md "Why the old
# harness disagreed"). Two zstd bindings: numcodecs (what zarr-python uses) and zstandard.
DECODE_THREADS = 2


class _ZstdNumcodecs:
    """numcodecs' Zstd, decoding straight into the destination buffer (no copy)."""

    def __init__(self):
        from numcodecs import Zstd

        self._codec = Zstd()

    def into(self, data: bytes, out) -> None:
        self._codec.decode(data, out=out)


class _ZstdZstandard:
    """python-zstandard, reading the frame into the destination buffer (readinto, no copy).
    One decompression context per thread: a context is not safe to share between threads."""

    def __init__(self):
        import threading

        self._local = threading.local()

    def into(self, data: bytes, out) -> None:
        import zstandard

        d = getattr(self._local, "d", None)
        if d is None:
            d = self._local.d = zstandard.ZstdDecompressor()
        mv = memoryview(out).cast("B")
        with d.stream_reader(data) as r:
            pos = 0
            while pos < len(mv):
                k = r.readinto(mv[pos:])
                if not k:
                    break
                pos += k
        if pos != len(mv):
            raise ValueError(f"decode floor: a chunk decoded to {pos} bytes, expected {len(mv)}")


DECODERS = {"floor.numcodecs": _ZstdNumcodecs, "floor.zstandard": _ZstdZstandard}


class _RawArray:
    """One array of the store read without zarr-python: its zarr.json, its chunk files.

    Only the layout make_era5.py writes is accepted (regular grid, default chunk keys with
    "/", bytes little-endian + zstd): anything else is an error, never a wrong answer.
    """

    _DTYPES = {"float32": "<f4", "float64": "<f8", "int64": "<i8", "int32": "<i4"}

    def __init__(self, root, name: str, decoder):
        import json as _json
        from pathlib import Path

        self.dir = Path(root) / name
        meta = _json.loads((self.dir / "zarr.json").read_text())
        codecs = [c["name"] for c in meta["codecs"]]
        endian = meta["codecs"][0].get("configuration", {}).get("endian", "little")
        sep = meta["chunk_key_encoding"].get("configuration", {}).get("separator", "/")
        if codecs != ["bytes", "zstd"] or endian != "little" or sep != "/" or meta["data_type"] not in self._DTYPES:
            raise ValueError(f"decode floor: {self.dir} is not a bytes+zstd array with '/' chunk keys")
        self.shape = tuple(meta["shape"])
        self.chunks = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
        self.dtype = self._DTYPES[meta["data_type"]]
        self.attrs = meta.get("attributes", {})
        self.decoder = decoder

    def chunk_file(self, idx) -> str:
        return str(self.dir / "c" / "/".join(str(i) for i in idx))

    def read_time_chunks(self, c0: int, c1: int, pool):
        """Chunks c0..c1-1 along the first axis (the others are single chunks) decoded into
        one preallocated array, the thread pool decoding one chunk per task. Returns the
        (rows, ...) view of the valid rows (the last chunk of a grid may be partial)."""
        import numpy as np

        if any(c != s for c, s in zip(self.chunks[1:], self.shape[1:], strict=True)):
            raise ValueError(f"decode floor: {self.dir} is chunked along more than its first axis")
        ct = self.chunks[0]
        buf = np.empty(((c1 - c0) * ct, *self.shape[1:]), dtype=self.dtype)

        def one(ci):
            with open(self.chunk_file((ci,) + (0,) * (len(self.shape) - 1)), "rb") as fh:
                data = fh.read()
            self.decoder.into(data, buf[(ci - c0) * ct : (ci - c0 + 1) * ct])

        list(pool.map(one, range(c0, c1)))
        return buf[: min(self.shape[0], c1 * ct) - c0 * ct]

    def __getitem__(self, key):
        """``a[:]`` of a small array (coordinates): every chunk, in this thread."""
        if key != slice(None) or len(self.shape) != 1:
            raise KeyError("decode floor: only a[:] of a 1-d array is supported")
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            return self.read_time_chunks(0, -(-self.shape[0] // self.chunks[0]), pool)


class _RawGroup:
    def __init__(self, root, decoder):
        self.root, self.decoder, self._arrays = root, decoder, {}

    def __getitem__(self, name):
        if name not in self._arrays:
            self._arrays[name] = _RawArray(self.root, name, self.decoder)
        return self._arrays[name]


def run_decode_floor(engine: str, query: str, store: str, parquet: str, day: str):
    """The decode floor: chunk files -> zstd (DECODERS[engine]) -> preallocated arrays,
    DECODE_THREADS threads; the reductions in numpy float64 like the zarr-python floor."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    g = _RawGroup(store, DECODERS[engine]())
    with ThreadPoolExecutor(DECODE_THREADS) as pool:
        t2m = g["t2m"]
        n_chunks = -(-t2m.shape[0] // t2m.chunks[0])
        if query == "Q1":
            a = t2m.read_time_chunks(0, n_chunks, pool)
            return {"avg_t2m": np.array([a.mean(dtype=np.float64)])}
        if query == "Q2":
            a = t2m.read_time_chunks(0, n_chunks, pool)
            lat, lon = g["latitude"][:], g["longitude"][:]
            return {
                "latitude": np.repeat(lat, lon.size),
                "longitude": np.tile(lon, lat.size),
                "avg_t2m": a.mean(axis=0, dtype=np.float64).ravel(),
            }
        if query in ("Q3", "Q6"):
            ts, ys, xs = floor_index_ranges(g, query, day)
            if ts.stop <= ts.start:
                sub = np.empty((0,), np.float32)
            else:
                ct = t2m.chunks[0]
                c0, c1 = time_chunks(ts, ct)
                a = t2m.read_time_chunks(c0, c1, pool)
                sub = a[ts.start - c0 * ct : ts.stop - c0 * ct, ys, xs]
            if query == "Q3":
                return {"avg_t2m": np.array([sub.mean(dtype=np.float64) if sub.size else np.nan])}
            return {"time": _decode_time(g["time"]), "t2m": sub[:, 0, 0]}
        if query == "Q4":
            lon = g["longitude"][:]
            n = min(Q4_LIMIT, lon.size)
            out = {
                "time": np.repeat(_decode_time(g["time"])[:1], n),
                "latitude": np.repeat(g["latitude"][:][:1], n),
                "longitude": lon[:n],
            }
            for v in ("t2m", "u10", "v10"):
                out[v] = g[v].read_time_chunks(0, 1, pool)[0, 0, :n]
            return out
        if query == "Q5":
            import pyarrow as pa

            def arrow(a):
                a = a.reshape(-1)  # the valid prefix of a C-contiguous buffer: no copy
                return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), a.size, [None, pa.py_buffer(a)])

            return pa.table({v: arrow(g[v].read_time_chunks(0, n_chunks, pool)) for v in ("t2m", "u10", "v10")})
    raise KeyError(query)


# --------------------------------------------------------------------------- the host floor
# What any Python producer hosted in DuckDB pays at least: the decode floor above (chunk files,
# numcodecs zstd into buffers, DECODE_THREADS threads) streamed as Arrow record batches into
# DuckDB, which runs the same SQL. It knows each query in advance, so it decodes only the
# variables and time chunks the query needs and plans nothing; DuckDB's connect, bind, stream
# ingestion and result are inside its time as they are inside zarrsql's. zarrsql / this is
# zarrsql's own overhead; this / the decode floor and / Parquet is the price of the host.
HOST_FLOOR_COLUMNS = {
    "Q1": ("t2m",),
    "Q2": ("latitude", "longitude", "t2m"),
    "Q3": ("time", "latitude", "longitude", "t2m"),
    "Q4": ("time", "latitude", "longitude", "t2m", "u10", "v10"),
    "Q5": ("t2m", "u10", "v10"),
    "Q6": ("time", "latitude", "longitude", "t2m"),
}


def _host_floor_batches(g, query: str, day: str, pool):
    """(schema, iterator of record batches): one batch per time chunk, the next chunks'
    decoding submitted before the current batch is handed over (two in flight)."""
    import numpy as np
    import pyarrow as pa

    cols = HOST_FLOOR_COLUMNS[query]
    data = [c for c in cols if c in ("t2m", "u10", "v10")]
    t2m = g["t2m"]
    ct, (ny, nx) = t2m.chunks[0], t2m.shape[1:]
    c0, c1 = 0, -(-t2m.shape[0] // ct)
    if query in ("Q3", "Q6"):  # only the time chunks of the selected rows; DuckDB filters them
        ts, _, _ = floor_index_ranges(g, query, day)
        c0, c1 = time_chunks(ts, ct)
    elif query == "Q4":
        c1 = 1
    time = _decode_time(g["time"]) if "time" in cols else None
    lat, lon = g["latitude"][:], g["longitude"][:]
    types = {"time": pa.timestamp("ns"), "latitude": pa.float32(), "longitude": pa.float32()}
    schema = pa.schema([(c, types.get(c, pa.float32())) for c in cols])
    patterns: dict = {}  # rows per chunk -> (latitude, longitude) columns, built once

    def arrow(a):
        a = a.reshape(-1)
        return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), a.size, [None, pa.py_buffer(a)])

    def one(ci):
        return {v: g[v].read_time_chunks(ci, ci + 1, _Inline) for v in data}

    def batch(ci, decoded):
        rows = decoded[data[0]].shape[0]
        if rows not in patterns:
            patterns[rows] = (arrow(np.tile(np.repeat(lat, nx), rows)), arrow(np.tile(lon, ny * rows)))
        out = []
        for c in cols:
            if c == "time":
                ns = np.repeat(time[ci * ct : ci * ct + rows].view(np.int64), ny * nx)
                out.append(arrow(ns).view(pa.timestamp("ns")))  # pa.array would import pandas
            elif c in ("latitude", "longitude"):
                out.append(patterns[rows][c == "longitude"])
            else:
                out.append(arrow(decoded[c]))
        return pa.RecordBatch.from_arrays(out, schema=schema)

    def gen():
        futures = [pool.submit(one, ci) for ci in range(c0, min(c1, c0 + 2))]
        for ci in range(c0, c1):
            decoded = futures.pop(0).result()
            if ci + 2 < c1:
                futures.append(pool.submit(one, ci + 2))
            yield batch(ci, decoded)

    return schema, gen()


class _Inline:
    """A 'pool' that runs read_time_chunks's single task in the calling (pool) thread."""

    @staticmethod
    def map(fn, items):
        return [fn(i) for i in items]


def run_host_floor(query: str, store: str, parquet: str, day: str):
    from concurrent.futures import ThreadPoolExecutor

    import duckdb
    import pyarrow as pa

    g = _RawGroup(store, _ZstdNumcodecs())
    with ThreadPoolExecutor(DECODE_THREADS) as pool:
        con = duckdb.connect()
        schema, batches = _host_floor_batches(g, query, day, pool)
        con.register("era5", pa.RecordBatchReader.from_batches(schema, batches))
        try:
            return _to_arrow_table(con.sql(sql_for(query, "era5", day)))
        finally:
            con.close()


# --------------------------------------------------------------------------- xarray .sel
def run_xarray_sel(query: str, store: str, parquet: str, day: str):
    """The idiomatic xarray path for coordinate selections (Q3 and Q6 only).

    ``xr.open_zarr(store)`` (lazily indexed: xarray reads only the chunks a selection
    needs), label-based ``.sel``, then the reduction / the values. Same semantics and
    result columns as the SQL: Q3's half-open day is the closed label slice
    ``[day, next day - 1 ns]`` (``.sel`` slices include both ends), latitude is
    descending so its slice runs ``60 -> 30``, and the mean accumulates in float64 like
    SQL ``avg``; Q6 is the exact point ``.sel(latitude=45.0, longitude=90.0)``.
    """
    import numpy as np
    import xarray as xr

    if not supports("xarray.sel", query):
        raise ValueError(f"xarray.sel implements only {SUPPORTED_QUERIES['xarray.sel']}, not {query}")
    ds = xr.open_zarr(store)
    if query == "Q3":
        d0 = np.datetime64(day, "ns")
        d1 = d0 + np.timedelta64(1, "D") - np.timedelta64(1, "ns")
        box = ds["t2m"].sel(
            time=slice(d0, d1),
            latitude=slice(Q3_LAT[1], Q3_LAT[0]),  # descending coordinate
            longitude=slice(Q3_LON[0], Q3_LON[1]),
        )
        return {"avg_t2m": np.array([float(box.mean(dtype=np.float64).values)])}
    # Q6
    series = ds["t2m"].sel(latitude=Q6_POINT[0], longitude=Q6_POINT[1])
    return {"time": series["time"].values, "t2m": series.values}


# --------------------------------------------------------------------------- SQL engines
def run_xarray_duckdb(query, store, parquet, day):
    """The naive user path: the whole dataset to pandas, then DuckDB over the frame."""
    import duckdb
    import xarray as xr

    ds = xr.open_zarr(store, chunks=None)
    df = ds.to_dataframe().reset_index()
    con = duckdb.connect()
    con.register("era5", df)
    return _to_arrow_table(con.sql(sql_for(query, "era5", day)))


def run_xarray_sql_duckdb(query, store, parquet, day):
    import duckdb
    import xarray as xr
    import xarray_sql as xql

    ds = xr.open_zarr(store, chunks=None)
    con = duckdb.connect()
    xql.register(con, "era5", ds)
    return _to_arrow_table(con.sql(sql_for(query, "era5", day)))


def run_xarray_sql_datafusion(query, store, parquet, day):
    import xarray as xr
    import xarray_sql as xql

    ds = xr.open_zarr(store, chunks=None)
    ctx = xql.Context()
    ctx.from_dataset("era5", ds)
    return _to_arrow_table(ctx.sql(sql_for(query, "era5", day)))


def run_parquet_duckdb(query, store, parquet, day):
    import duckdb

    con = duckdb.connect()
    return _to_arrow_table(con.sql(sql_for(query, f"read_parquet({_sql_str(parquet)})", day)))


def _copy_by(parquet: str, writer: str) -> str:
    """The copy `writer` wrote next to the DuckDB one (make_era5.parquet_path)."""
    return parquet[: -len(".parquet")] + f".{writer}.parquet" if parquet.endswith(".parquet") else parquet


def run_zarrsql(query, store, parquet, day):
    import zarrsql

    con = zarrsql.connect()
    return _to_arrow_table(con.sql(sql_for(query, f"read_zarr({_sql_str(store)})", day)))


def run_zarrsql_duckdb_aggregates(query, store, parquet, day):
    """zarrsql with every aggregate left to DuckDB (`scan_aggregates` off): the same scan
    streaming its rows, for comparing with the aggregates computed inside the scan."""
    import zarrsql

    zarrsql.set_option("scan_aggregates", False)
    return run_zarrsql(query, store, parquet, day)


RUNNERS = {
    "floor": run_floor,
    "floor.numcodecs": lambda q, s, p, d: run_decode_floor("floor.numcodecs", q, s, p, d),
    "floor.zstandard": lambda q, s, p, d: run_decode_floor("floor.zstandard", q, s, p, d),
    "floor+duckdb": run_host_floor,
    "xarray.sel": run_xarray_sel,
    "xarray+duckdb": run_xarray_duckdb,
    "xarray-sql+duckdb": run_xarray_sql_duckdb,
    "xarray-sql+datafusion": run_xarray_sql_datafusion,
    "parquet+duckdb": run_parquet_duckdb,
    "parquet.zstd+duckdb": lambda q, s, p, d: run_parquet_duckdb(q, s, _copy_by(p, "duckdb-zstd"), d),
    "parquet.pyarrow+duckdb": lambda q, s, p, d: run_parquet_duckdb(q, s, _copy_by(p, "pyarrow"), d),
    "zarrsql": run_zarrsql,
    "zarrsql.duckdb-aggregates": run_zarrsql_duckdb_aggregates,
}

TRACE_FIELDS = (
    "work_units_planned",
    "work_units_read",
    "chunks_decoded",
    "bytes_read",
    "requests",
    "rows",
)


# --------------------------------------------------------------------------- canonical form
def canonical(result, query: str):
    """Result -> {column: float64 or int64(ns) numpy array}, in QUERIES' column order."""
    import numpy as np

    cols: dict[str, np.ndarray] = {}
    if isinstance(result, dict):
        items = list(result.items())
    else:  # pyarrow.Table
        import pyarrow as pa
        import pyarrow.compute as pc

        items = []
        for name, col in zip(result.column_names, result.columns, strict=True):
            if pa.types.is_timestamp(col.type):
                if col.type.tz is not None:
                    col = col.cast(pa.timestamp(col.type.unit))
                col = col.cast(pa.timestamp("ns")).cast(pa.int64())
                items.append((name, col.to_numpy(zero_copy_only=False)))
            else:
                if col.null_count:
                    col = pc.fill_null(col.cast(pa.float64()), float("nan"))
                items.append((name, col.to_numpy(zero_copy_only=False)))
    for name, arr in items:
        arr = np.asarray(arr)
        if arr.dtype.kind == "M":
            arr = arr.astype("datetime64[ns]").astype(np.int64)
        elif arr.dtype.kind in "fiub":
            arr = arr.astype(np.float64)
        else:
            arr = arr.astype(np.float64)
        cols[name.lower()] = arr
    want = QUERIES[query]["columns"]
    if list(cols) != want:
        missing = [c for c in want if c not in cols]
        if missing:
            raise ValueError(f"result columns {list(cols)} lack {missing}")
        cols = {c: cols[c] for c in want}
    keys = QUERIES[query]["sort"]
    if keys:
        order = np.lexsort([cols[k] for k in reversed(keys)])
        cols = {k: v[order] for k, v in cols.items()}
    return cols


def digest(cols) -> dict:
    import numpy as np

    n = len(next(iter(cols.values()))) if cols else 0
    d = {"rows": int(n), "columns": {}}
    for name, a in cols.items():
        finite = a[~np.isnan(a)] if a.dtype.kind == "f" else a
        d["columns"][name] = {
            "sum": float(np.sum(finite, dtype=np.float64)) if finite.size else None,
            "sumsq": float(np.dot(finite.astype(np.float64), finite.astype(np.float64)))
            if finite.size and name not in ("time",)
            else None,
            "min": float(finite.min()) if finite.size else None,
            "max": float(finite.max()) if finite.size else None,
            "nulls": int(n - finite.size),
        }
        if n == 1:
            d["columns"][name]["value"] = float(a[0]) if a.dtype.kind == "f" else int(a[0])
    return d


def _slices(result, name):
    """The values of column ``name`` of a result (dict of arrays or Arrow table) as numpy
    pieces of at most 2**22 values, so a digest never holds a float64 copy of a column."""
    import numpy as np

    step = 1 << 22
    if isinstance(result, dict):
        pieces = [np.asarray(result[name]).reshape(-1)]
    else:
        import pyarrow as pa
        import pyarrow.compute as pc

        col = result.column(
            result.column_names.index(name)
            if name in result.column_names
            else [c.lower() for c in result.column_names].index(name)
        )
        pieces = []
        for ch in col.chunks:
            if ch.null_count:
                ch = pc.fill_null(ch.cast(pa.float64()), float("nan"))
            pieces.append(ch.to_numpy(zero_copy_only=False))
    for a in pieces:
        for lo in range(0, a.size, step):
            yield a[lo : lo + step]


def digest_large(result, query: str) -> dict:
    """``digest`` of a large result (Q5) computed piece by piece, without canonical()'s
    float64 copy of every column: count, nulls, min, max, sum and sum of squares."""
    import numpy as np

    d = {"rows": 0, "columns": {}}
    for name in QUERIES[query]["columns"]:
        n = nulls = 0
        s = ss = 0.0
        lo, hi = np.inf, -np.inf
        for a in _slices(result, name):
            f = a[~np.isnan(a)] if a.dtype.kind == "f" else a
            f = f.astype(np.float64)
            n += a.size
            nulls += a.size - f.size
            if f.size:
                s += float(f.sum())
                ss += float(np.dot(f, f))
                lo, hi = min(lo, float(f.min())), max(hi, float(f.max()))
        finite = n - nulls
        d["columns"][name] = {
            "sum": s if finite else None,
            "sumsq": ss if finite else None,
            "min": lo if finite else None,
            "max": hi if finite else None,
            "nulls": nulls,
        }
        d["rows"] = n
    return d


def _cpu_s() -> float:
    """CPU seconds of this process so far, every thread (user + system): beside the wall
    clock, the timed region's CPU time shows its parallelism and barely moves under load."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mb() -> float:
    """Peak RSS of this process image, in MiB.

    ``VmHWM`` from /proc/self/status: the high-water mark of the address space created
    by exec. (``ru_maxrss`` is not used on Linux: it survives exec, so a child started
    with fork/vfork reports at least its parent's peak.)
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("query", choices=list(QUERIES))
    ap.add_argument("--store", required=True)
    ap.add_argument("--parquet", default="")
    ap.add_argument("--q3-day", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--result", default="")
    ap.add_argument("--trace", action="store_true", help="zarrsql: record zarrsql.trace() counters")
    a = ap.parse_args(argv)

    rec: dict = {"engine": a.engine, "query": a.query, "ok": False}
    if not supports(a.engine, a.query):
        rec["error"] = f"unsupported: {a.engine} implements only {', '.join(SUPPORTED_QUERIES[a.engine])}"
        with open(a.out, "w") as fh:
            json.dump(rec, fh)
        return 1
    try:
        for mod in ENGINE_IMPORTS[a.engine]:
            importlib.import_module(mod)
        t1, c1 = time.perf_counter(), _cpu_s()
        runner = RUNNERS[a.engine]
        if a.trace and a.engine == "zarrsql":
            import zarrsql

            with zarrsql.trace() as tr:
                result = runner(a.query, a.store, a.parquet, a.q3_day)
            rec["trace"] = {f: getattr(tr, f, None) for f in TRACE_FIELDS}
        else:
            result = runner(a.query, a.store, a.parquet, a.q3_day)
        t2, c2 = time.perf_counter(), _cpu_s()
        rec["peak_rss_mb"] = peak_rss_mb()
        rec.update(import_s=t1 - T0, query_s=t2 - t1, total_s=t2 - T0, query_cpu_s=c2 - c1)
        rec["result_type"] = type(result).__module__ + "." + type(result).__qualname__
        if a.query in LARGE_RESULT_QUERIES:
            rec["digest"] = digest_large(result, a.query)
            result = None
        else:
            cols = canonical(result, a.query)
            rec["digest"] = digest(cols)
        if a.result and result is not None and rec["digest"]["rows"] <= SMALL_RESULT_ROWS:
            import numpy as np

            with open(a.result, "wb") as fh:
                np.savez(fh, **cols)
            rec["result_file"] = a.result
        rec["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - everything is recorded for the parent
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["traceback"] = traceback.format_exc()[-4000:]
    with open(a.out, "w") as fh:
        json.dump(rec, fh)
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
