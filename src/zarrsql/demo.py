"""`zarrsql demo`: write a small climate-like store and run example queries on it.

The store is written with zarr-python alone (no xarray needed) but carries what xarray
writes: dimension names, CF time units, a descending latitude axis and NaN gaps.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import numpy as np

QUERIES = [
    ("The tables of the store", "SELECT table_name, dims, shape, data_vars FROM read_zarr_tables('{store}')"),
    ("The arrays and their roles", "SELECT name, role, dtype, shape FROM read_zarr_metadata('{store}')"),
    (
        "Mean temperature per latitude band (NaN gaps are NULL, so avg skips them)",
        "SELECT lat, round(avg(t2m), 2) AS mean_t2m, count(t2m) AS n FROM '{store}' "
        "GROUP BY lat ORDER BY lat DESC LIMIT 5",
    ),
    (
        "One day over a box: WHERE on coordinates reads only the chunks it needs",
        "SELECT time, lat, lon, t2m FROM read_zarr('{store}') WHERE time >= '2024-01-03' AND time < '2024-01-04' "
        "AND lat BETWEEN 40 AND 50 AND lon BETWEEN 10 AND 20 ORDER BY time, lat, lon LIMIT 5",
    ),
    (
        "Daily totals, joined to themselves a day later",
        "WITH d AS (SELECT date_trunc('day', time) AS day, sum(precip) AS p FROM '{store}' GROUP BY day) "
        "SELECT a.day, round(a.p, 1) AS precip, round(b.p, 1) AS next_day "
        "FROM d a JOIN d b ON b.day = a.day + INTERVAL 1 DAY ORDER BY a.day",
    ),
]


def write_store(path: str) -> str:
    """Write the demo store at `path` (overwriting it) and return the path."""
    import zarr

    rng = np.random.default_rng(42)
    hours = np.arange(0, 24 * 7, 3, dtype="int64")  # one week, three-hourly
    lat = np.arange(60.0, 29.0, -2.5, dtype="float32")  # descending, like most reanalyses
    lon = np.arange(0.0, 40.0, 2.5, dtype="float32")
    shape = (hours.size, lat.size, lon.size)
    t2m = (
        288
        - 0.5 * (lat[None, :, None] - 45)
        + 3 * np.sin(hours[:, None, None] / 24 * 2 * np.pi)
        + rng.normal(0, 1, shape)
    ).astype("float32")
    t2m[rng.random(shape) < 0.02] = np.nan
    precip = np.clip(rng.gamma(0.3, 2.0, shape), 0, None).astype("float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(path, mode="w", zarr_format=3)
        time = root.create_array(
            "time",
            shape=hours.shape,
            dtype="int64",
            dimension_names=["time"],
            attributes={"units": "hours since 2024-01-01 00:00:00", "calendar": "proleptic_gregorian"},
        )
        time[:] = hours
        for name, values, attrs in [("lat", lat, {"units": "degrees_north"}), ("lon", lon, {"units": "degrees_east"})]:
            arr = root.create_array(name, shape=values.shape, dtype="float32", dimension_names=[name], attributes=attrs)
            arr[:] = values
        for name, values, units in [("t2m", t2m, "K"), ("precip", precip, "mm")]:
            arr = root.create_array(
                name,
                shape=shape,
                dtype="float32",
                chunks=(8, 7, 8),
                dimension_names=["time", "lat", "lon"],
                attributes={"units": units},
                fill_value=np.nan,
            )
            arr[:] = values
        zarr.consolidate_metadata(path)
    return path


def run(path: str | None = None, *, out: Callable[[str], None] = print) -> None:
    """Write the store (default: ./zarrsql-demo.zarr) and print each query and its result."""
    import zarrsql

    store = write_store(os.path.abspath(path or "zarrsql-demo.zarr"))
    out(f"Wrote an example store: {store}\n")
    with zarrsql.connect() as con:
        for title, template in QUERIES:
            sql = template.format(store=store)
            out(f"-- {title}\n{sql}")
            with zarrsql.trace() as t:
                rel = con.sql(sql)
                text = str(rel)
            out(text)
            if t.scans:
                read = f"{t.work_units_read} of {t.work_units_planned}"
                out(f"   work units read: {read}, chunks decoded: {t.chunks_decoded}\n")
