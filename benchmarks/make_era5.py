#!/usr/bin/env python3
"""Build the synthetic ERA5-like Zarr v3 store used by the benchmarks.

    python benchmarks/make_era5.py --out benchmarks/data/era5.zarr          # full: 1,460 h
    python benchmarks/make_era5.py --quick                                  # 96 h smoke store
    python benchmarks/make_era5.py --scale 10 --parquet duckdb              # 14,600 h + Parquet

Layout (as in shared/design/performance-anchors.md):

* ``time``      int64, 1,460 hourly steps, "hours since 1900-01-01 00:00:00",
                calendar "standard", starting 2020-01-01T00 (ends 2020-03-01T19)
* ``latitude``  float32, 121 values 90 -> -90 (1.5 degree, descending)
* ``longitude`` float32, 240 values 0 -> 358.5 (1.5 degree)
* ``t2m``, ``u10``, ``v10`` float32 over (time, latitude, longitude), chunks
  (24, 121, 240): one day per chunk, 61 chunks per variable, the last one ragged
  (20 steps); zstd; smooth-but-random values (deterministic: fixed seeds).

Written with zarr-python only (no xarray needed) but with xarray-compatible
metadata: ``dimension_names`` and CF attributes; consolidated metadata.

The build is idempotent: a sidecar ``<out>.stamp.json`` records the parameters
of a *completed* build; when it matches, nothing is done. Anything else at
``<out>`` is removed and rebuilt.

The data of a chunk depend only on (variable, chunk index), so the quick store
holds exactly the first 96 hours of the full one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

FORMAT_VERSION = 2  # bump when the generated content changes
N_TIME_FULL = 1460
N_TIME_QUICK = 96
N_LAT = 121
N_LON = 240
CHUNK_T = 24
# zstd level: chosen so the full store is ~450 MB on disk as in the anchors
# (the noise term dominates the compressed size; see --check-size).
ZSTD_LEVEL = 3
SEED = 20200101
HOURS_1900_TO_2020 = (np.datetime64("2020-01-01T00", "h") - np.datetime64("1900-01-01T00", "h")).astype(np.int64)
TIME_UNITS = "hours since 1900-01-01 00:00:00"
VARIABLES = {
    # name: (long_name, units, CF standard name)
    "t2m": ("2 metre temperature", "K", "air_temperature"),
    "u10": ("10 metre U wind component", "m s**-1", "eastward_wind"),
    "v10": ("10 metre V wind component", "m s**-1", "northward_wind"),
}
DIMS = ["time", "latitude", "longitude"]


def default_out(quick: bool, scale: int = 1) -> Path:
    """``era5.zarr`` / ``era5_quick.zarr``, or ``era5_x10.zarr`` / ``era5_quick_x10.zarr``
    for a store ``scale`` times longer in time (run_scale.py)."""
    name = "era5_quick" if quick else "era5"
    return DATA / (f"{name}_x{scale}.zarr" if scale != 1 else f"{name}.zarr")


def n_time_for(quick: bool, scale: int = 1) -> int:
    """Hourly steps of the store: 1,460 (96 quick) times ``scale``. The chunk data depend
    only on (variable, chunk index), so every store begins with the smaller ones."""
    return (N_TIME_QUICK if quick else N_TIME_FULL) * scale


def coords(n_time: int) -> dict[str, np.ndarray]:
    return {
        "time": HOURS_1900_TO_2020 + np.arange(n_time, dtype=np.int64),
        "latitude": (90.0 - 1.5 * np.arange(N_LAT)).astype(np.float32),
        "longitude": (1.5 * np.arange(N_LON)).astype(np.float32),
    }


def stamp_for(n_time: int, level: int) -> dict:
    return {
        "generator": "zarrsql benchmarks/make_era5.py",
        "format_version": FORMAT_VERSION,
        "n_time": n_time,
        "shape": [n_time, N_LAT, N_LON],
        "chunks": [CHUNK_T, N_LAT, N_LON],
        "zstd_level": level,
        "seed": SEED,
        "variables": list(VARIABLES),
    }


def stamp_path(out: Path) -> Path:
    return out.with_name(out.name + ".stamp.json")


def is_current(out: Path, n_time: int, level: int) -> bool:
    sp = stamp_path(out)
    if not out.is_dir() or not sp.is_file():
        return False
    try:
        return json.loads(sp.read_text()) == stamp_for(n_time, level)
    except (OSError, ValueError):
        return False


def _modes(var_index: int, k: int = 6):
    """Random smooth modes of one variable: amplitudes, wavenumbers, phases, speeds."""
    rng = np.random.default_rng([SEED, var_index, 10_000])
    return {
        "amp": rng.uniform(0.5, 4.0, k),
        "m": rng.integers(1, 7, k),  # zonal wavenumber
        "n": rng.integers(1, 5, k),  # meridional wavenumber
        "phi": rng.uniform(0, 2 * np.pi, k),
        "psi": rng.uniform(0, 2 * np.pi, k),
        "omega": rng.uniform(-0.05, 0.05, k),  # radians per hour: drifting weather
    }


def chunk_values(name: str, hours: np.ndarray, lat: np.ndarray, lon: np.ndarray, chunk_index: int) -> np.ndarray:
    """Values of variable ``name`` for the given hours (one chunk), float32 (t, lat, lon)."""
    var_index = list(VARIABLES).index(name)
    t = (hours - HOURS_1900_TO_2020).astype(np.float64)[:, None, None]
    phi = np.deg2rad(lat.astype(np.float64))[None, :, None]
    lam = np.deg2rad(lon.astype(np.float64))[None, None, :]
    if name == "t2m":
        base = 250.0 + 50.0 * np.cos(phi) ** 2 - 8.0 * np.sin(phi) * np.cos(2 * np.pi * t / 8766.0)
        # diurnal cycle: local solar hour = UTC + lon/15
        base = base + 4.0 * np.cos(phi) * np.cos(2 * np.pi * ((t % 24) + np.rad2deg(lam) / 15.0 - 14.0) / 24.0)
        noise_sd = 0.4
    elif name == "u10":
        base = -6.0 * np.cos(2 * phi) * np.cos(phi) + 0.0 * lam + 0.0 * t
        noise_sd = 0.8
    else:
        base = 1.5 * np.sin(2 * phi) * np.sin(lam) + 0.0 * t
        noise_sd = 0.8
    md = _modes(var_index)
    field = np.broadcast_to(base, (t.shape[0], lat.size, lon.size)).copy()
    for a, m, n, p, q, w in zip(md["amp"], md["m"], md["n"], md["phi"], md["psi"], md["omega"], strict=True):
        field += a * np.sin(m * lam + p + w * t) * np.cos(n * phi + q)
    rng = np.random.default_rng([SEED, var_index, chunk_index])
    field += rng.normal(0.0, noise_sd, field.shape)
    return field.astype(np.float32)


def build(out: Path, n_time: int, level: int = ZSTD_LEVEL, force: bool = False, verbose: bool = True) -> Path:
    import zarr
    from zarr.codecs import ZstdCodec

    out = Path(out)
    if not force and is_current(out, n_time, level):
        if verbose:
            print(f"{out}: up to date (stamp matches), nothing to do", file=sys.stderr)
        return out
    t0 = time.perf_counter()
    sp = stamp_path(out)
    if sp.exists():
        sp.unlink()
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)

    c = coords(n_time)
    root = zarr.open_group(
        str(out),
        mode="w",
        zarr_format=3,
        attributes={
            "Conventions": "CF-1.6",
            "title": "Synthetic ERA5-like surface fields (zarrsql benchmark)",
            "history": "generated by zarrsql benchmarks/make_era5.py",
        },
    )
    tarr = root.create_array(
        "time",
        shape=(n_time,),
        chunks=(n_time,),
        dtype="int64",
        fill_value=0,
        compressors=ZstdCodec(level=level),
        dimension_names=["time"],
        attributes={
            "units": TIME_UNITS,
            "calendar": "standard",
            "standard_name": "time",
            "long_name": "time",
            "axis": "T",
        },
    )
    tarr[:] = c["time"]
    larr = root.create_array(
        "latitude",
        shape=(N_LAT,),
        chunks=(N_LAT,),
        dtype="float32",
        fill_value=float("nan"),
        compressors=ZstdCodec(level=level),
        dimension_names=["latitude"],
        attributes={"units": "degrees_north", "standard_name": "latitude", "long_name": "latitude", "axis": "Y"},
    )
    larr[:] = c["latitude"]
    oarr = root.create_array(
        "longitude",
        shape=(N_LON,),
        chunks=(N_LON,),
        dtype="float32",
        fill_value=float("nan"),
        compressors=ZstdCodec(level=level),
        dimension_names=["longitude"],
        attributes={"units": "degrees_east", "standard_name": "longitude", "long_name": "longitude", "axis": "X"},
    )
    oarr[:] = c["longitude"]
    n_chunks = -(-n_time // CHUNK_T)
    for name, (long_name, units, std) in VARIABLES.items():
        arr = root.create_array(
            name,
            shape=(n_time, N_LAT, N_LON),
            chunks=(CHUNK_T, N_LAT, N_LON),
            dtype="float32",
            fill_value=float("nan"),
            compressors=ZstdCodec(level=level),
            dimension_names=DIMS,
            attributes={"units": units, "long_name": long_name, "standard_name": std},
        )
        for ci in range(n_chunks):
            lo, hi = ci * CHUNK_T, min((ci + 1) * CHUNK_T, n_time)
            arr[lo:hi] = chunk_values(name, c["time"][lo:hi], c["latitude"], c["longitude"], ci)
        if verbose:
            print(
                f"  {name}: {n_chunks} chunks written ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True
            )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Consolidated metadata.*")
        zarr.consolidate_metadata(str(out))
    sp.write_text(json.dumps(stamp_for(n_time, level), indent=2) + "\n")
    if verbose:
        print(f"{out}: built in {time.perf_counter() - t0:.1f} s, {du_mb(out):.1f} MB on disk", file=sys.stderr)
    return out


def du_mb(path: Path) -> float:
    """Bytes allocated on disk (like ``du``), in MB (1e6)."""
    total = 0
    for p in Path(path).rglob("*"):
        if p.is_file():
            st = p.stat()
            total += st.st_blocks * 512
    return total / 1e6


# --------------------------------------------------------------------------- Parquet copy
PARQUET_VERSION = 2
PARQUET_WRITERS = ("duckdb", "duckdb-zstd", "pyarrow")


def parquet_path(store: Path, writer: str = "duckdb") -> Path:
    """Where the Parquet copy of ``store`` lives: ``era5.parquet`` (DuckDB's COPY, the
    baseline), ``era5.duckdb-zstd.parquet`` (the same COPY with zstd instead of snappy) or
    ``era5.pyarrow.parquet`` (the old pyarrow copy, kept for comparison)."""
    store = Path(store)
    suffix = ".parquet" if writer == "duckdb" else f".{writer}.parquet"
    return store.with_name(store.stem + suffix)


def _day_tables(store: Path):
    """The store as a stream of pyarrow tables, one per time chunk (one day), rows in
    (time, latitude, longitude) row-major order: what both writers consume."""
    import pyarrow as pa
    import zarr

    g = zarr.open_group(str(store), mode="r")
    hours = g["time"][:]
    times = (np.datetime64("1900-01-01T00", "us") + hours.astype("timedelta64[h]")).astype("datetime64[us]")
    lat, lon = g["latitude"][:], g["longitude"][:]
    schema = pa.schema(
        [
            ("time", pa.timestamp("us")),
            ("latitude", pa.float32()),
            ("longitude", pa.float32()),
            ("t2m", pa.float32()),
            ("u10", pa.float32()),
            ("v10", pa.float32()),
        ]
    )

    def tables():
        for lo in range(0, hours.size, CHUNK_T):
            hi = min(lo + CHUNK_T, hours.size)
            nt = hi - lo
            cols = {
                "time": np.repeat(times[lo:hi], lat.size * lon.size),
                "latitude": np.tile(np.repeat(lat, lon.size), nt),
                "longitude": np.tile(lon, nt * lat.size),
            }
            for v in VARIABLES:
                cols[v] = g[v][lo:hi].reshape(-1)
            yield pa.table(cols, schema=schema)

    return schema, tables()


def _write_duckdb(store: Path, tmp: Path, compression: str | None = None) -> None:
    """``COPY (SELECT * FROM <the table>) TO 'x.parquet' (FORMAT parquet)`` with DuckDB's
    defaults, as a user would write a Parquet copy: snappy, row groups of 122,880 rows,
    dictionary pages only where a column's values repeat. The rows stream in by day, so
    the 10x store never has to fit in memory. `compression` changes only the codec (the
    "duckdb-zstd" copy: the Zarr store's own codec, to tell the codec's cost from the
    format's)."""
    import duckdb
    import pyarrow as pa

    schema, tables = _day_tables(store)
    batches = (b for t in tables for b in t.to_batches())
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    con = duckdb.connect()
    con.register("era5_rows", reader)
    codec = "" if compression is None else f", COMPRESSION {compression}"
    con.execute(f"COPY (SELECT * FROM era5_rows) TO '{tmp}' (FORMAT parquet{codec})")
    con.close()


def _write_pyarrow(store: Path, tmp: Path) -> None:
    """The copy the first harness wrote: pyarrow, one row group per day (696,960 rows),
    zstd at pyarrow's default level, dictionary encoding on (pyarrow's default)."""
    import pyarrow.parquet as pq

    schema, tables = _day_tables(store)
    with pq.ParquetWriter(str(tmp), schema, compression="zstd") as w:
        for t in tables:
            w.write_table(t, row_group_size=t.num_rows)


def build_parquet(
    store: Path, out: Path | None = None, force: bool = False, verbose: bool = True, writer: str = "duckdb"
) -> Path:
    """The same table as a Parquet file, for the ``parquet+duckdb`` baselines.

    Columns time timestamp[us], latitude, longitude, t2m, u10, v10 float32; rows in
    (time, latitude, longitude) row-major order. ``writer`` "duckdb"
    (the baseline) uses DuckDB's COPY defaults, "duckdb-zstd" the same with zstd; "pyarrow"
    rebuilds the copy the first harness measured. Idempotent through a stamp that includes the store's stamp.
    """
    if writer not in PARQUET_WRITERS:
        raise ValueError(f"build_parquet: writer {writer!r} is not one of {PARQUET_WRITERS}")
    store = Path(store)
    out = Path(out) if out is not None else parquet_path(store, writer)
    sp = stamp_path(out)
    store_stamp = json.loads(stamp_path(store).read_text())
    want = {"parquet_version": PARQUET_VERSION, "store": store_stamp, "writer": writer}
    if not force and out.is_file() and sp.is_file():
        try:
            if json.loads(sp.read_text()) == want:
                if verbose:
                    print(f"{out}: up to date (stamp matches), nothing to do", file=sys.stderr)
                return out
        except ValueError:
            pass
    t0 = time.perf_counter()
    if sp.exists():
        sp.unlink()
    tmp = out.with_name(out.name + ".tmp")
    if writer == "pyarrow":
        _write_pyarrow(store, tmp)
    else:
        _write_duckdb(store, tmp, "zstd" if writer == "duckdb-zstd" else None)
    tmp.replace(out)
    sp.write_text(json.dumps(want, indent=2) + "\n")
    if verbose:
        print(
            f"{out}: written by {writer} in {time.perf_counter() - t0:.1f} s, {out.stat().st_size / 1e6:.1f} MB",
            file=sys.stderr,
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="store path (default benchmarks/data/era5.zarr)")
    ap.add_argument("--quick", action="store_true", help=f"{N_TIME_QUICK} time steps (smoke store)")
    ap.add_argument(
        "--scale", type=int, default=1, help="a store this many times longer in time (10: 14,600 hours, era5_x10.zarr)"
    )
    ap.add_argument("--n-time", type=int, default=None, help="override the number of hourly steps")
    ap.add_argument("--level", type=int, default=ZSTD_LEVEL, help="zstd level")
    ap.add_argument(
        "--parquet",
        default="",
        help="also write Parquet copies: comma-separated writers from " + ", ".join(PARQUET_WRITERS),
    )
    ap.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    a = ap.parse_args(argv)
    if a.scale < 1:
        ap.error("--scale must be at least 1")
    n_time = a.n_time or n_time_for(a.quick, a.scale)
    out = a.out or default_out(a.quick, a.scale)
    build(out, n_time, a.level, a.force)
    for writer in [w.strip() for w in a.parquet.split(",") if w.strip()]:
        if writer not in PARQUET_WRITERS:
            ap.error(f"unknown Parquet writer {writer!r}; choose from {PARQUET_WRITERS}")
        build_parquet(out, force=a.force, writer=writer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
