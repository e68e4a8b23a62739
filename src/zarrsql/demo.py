"""`zarrsql demo`: write a small climate-like store and run example queries on it.

The store is written with zarr-python alone (no xarray needed) but carries what xarray
writes: dimension names, CF time units, a descending latitude axis and NaN gaps.

The demo never deletes or overwrites anything. It writes the store into a temporary folder
next to the target and renames it into place once complete, so an interrupted demo leaves
nothing behind: an error or `stop` removes the folder as the write unwinds, and the command
line, which ends an interrupted process without unwinding (`os._exit`), calls
`discard_staging` first. Its root group carries the attribute `zarrsql_demo`, so a later run
recognises its own store and queries it again; any other non-empty folder is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from zarrsql.errors import ParameterError

#: The root attribute that marks a store written by the demo; its value is the layout's
#: version (a store of another version is refused rather than replaced).
MARKER = "zarrsql_demo"
LAYOUT_VERSION = 1
DEFAULT_PATH = "zarrsql-demo.zarr"

#: The temporary folders of writes under way, for `discard_staging`.
_STAGING: set[str] = set()
_STAGING_LOCK = threading.Lock()

QUERIES = [
    ("The tables of the store", "SELECT table_name, dims, shape, data_vars FROM read_zarr_tables({store})"),
    ("The arrays and their roles", "SELECT name, role, dtype, shape FROM read_zarr_metadata({store})"),
    (
        "Mean temperature per latitude band (NaN gaps are NULL, so avg skips them)",
        "SELECT lat, round(avg(t2m), 2) AS mean_t2m, count(t2m) AS n FROM {source} "
        "GROUP BY lat ORDER BY lat DESC LIMIT 5",
    ),
    (
        "One day over a box: WHERE on coordinates reads only the chunks it needs",
        "SELECT time, lat, lon, t2m FROM read_zarr({store}) WHERE time >= '2024-01-03' AND time < '2024-01-04' "
        "AND lat BETWEEN 40 AND 50 AND lon BETWEEN 10 AND 20 ORDER BY time, lat, lon LIMIT 5",
    ),
    (
        "Daily totals, joined to themselves a day later",
        "WITH d AS (SELECT date_trunc('day', time) AS day, sum(precip) AS p FROM {source} GROUP BY day) "
        "SELECT a.day, round(a.p, 1) AS precip, round(b.p, 1) AS next_day "
        "FROM d a JOIN d b ON b.day = a.day + INTERVAL 1 DAY ORDER BY a.day",
    ),
]


def sql_of(template: str, store: str) -> str:
    """A query of QUERIES for the store at `store`. `{source}` is the store as a string in
    FROM, which zarrsql claims only for names ending in `.zarr`; otherwise `read_zarr(...)`."""
    literal = "'" + store.replace("'", "''") + "'"
    source = literal if store.rstrip("/").lower().endswith(".zarr") else f"read_zarr({literal})"
    return template.format(store=literal, source=source)


def _check_stop(stop: threading.Event | None) -> None:
    """Give up between two steps once `stop` is set (Ctrl-C on the command line)."""
    if stop is not None and stop.is_set():
        raise KeyboardInterrupt


def _write_arrays(path: str, stop: threading.Event | None = None) -> None:
    """Write the demo's arrays as a new store at `path` (a folder that does not exist yet),
    giving up between arrays once `stop` is set."""
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
        root = zarr.open_group(path, mode="w-", zarr_format=3, attributes={MARKER: LAYOUT_VERSION})
        time = root.create_array(
            "time",
            shape=hours.shape,
            dtype="int64",
            dimension_names=["time"],
            attributes={"units": "hours since 2024-01-01 00:00:00", "calendar": "proleptic_gregorian"},
        )
        time[:] = hours
        axes: list[tuple[str, np.ndarray, dict[str, Any]]] = [
            ("lat", lat, {"units": "degrees_north"}),
            ("lon", lon, {"units": "degrees_east"}),
        ]
        for name, values, attrs in axes:
            _check_stop(stop)
            arr = root.create_array(name, shape=values.shape, dtype="float32", dimension_names=[name], attributes=attrs)
            arr[:] = values
        for name, values, units in [("t2m", t2m, "K"), ("precip", precip, "mm")]:
            _check_stop(stop)
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
        _check_stop(stop)
        zarr.consolidate_metadata(path)


def prepare(path: str) -> bool:
    """Check `path` for the demo: True if a store must be written there, False if it already
    holds the demo's store; refuses anything else (see the module docstring)."""
    if not os.path.lexists(path):
        return True
    if not os.path.isdir(path):
        raise ParameterError(
            f"demo --path '{path}' is a file, not a folder; give a new folder name, e.g. --path demo.zarr"
        )
    if not os.listdir(path):
        return True
    version = demo_version(path)
    if version == LAYOUT_VERSION:
        return False
    if version is not None:
        raise ParameterError(
            f"demo --path '{path}' holds an example store of another zarrsql version (layout {version!r}); "
            "remove it yourself or give a new folder with --path"
        )
    raise ParameterError(
        f"demo --path '{path}' is a folder that is not empty and was not written by the demo; "
        "the demo does not overwrite it: give a new or empty folder with --path"
    )


def demo_version(path: str) -> object:
    """The `zarrsql_demo` attribute of the store at `path` (None when it is not a demo store)."""
    try:
        with open(os.path.join(path, "zarr.json"), encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, ValueError):
        return None
    attributes = document.get("attributes") if isinstance(document, dict) else None
    return attributes.get(MARKER) if isinstance(attributes, dict) else None


def write_store(path: str, *, stop: threading.Event | None = None) -> str:
    """Write the demo store at `path`, which must not exist or be an empty folder, and return it.

    The arrays are written into a temporary folder beside `path`, renamed into place when
    complete; on any failure, or once `stop` is set, only that temporary folder (the demo's
    own) is removed, and KeyboardInterrupt is raised for a stop.
    """
    parent = os.path.dirname(os.path.abspath(path))
    staging = _staging_folder(path, parent)
    with _STAGING_LOCK:
        _STAGING.add(staging)
    try:
        store = os.path.join(staging, "store.zarr")
        _write_arrays(store, stop)
        os.replace(store, path)  # over an empty folder too (POSIX rename)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with _STAGING_LOCK:
            _STAGING.discard(staging)
    return path


def _staging_folder(path: str, parent: str) -> str:
    """A new temporary folder in `parent`, which is created if missing; an OS refusal (a
    file where a folder must be, a place that cannot be written) is told in --path's words."""
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as err:
        raise _unwritable(path, parent, err, "cannot be created") from err
    try:
        return tempfile.mkdtemp(prefix=".zarrsql-demo-", dir=parent)
    except OSError as err:
        raise _unwritable(path, parent, err, "cannot be written in") from err


def _unwritable(path: str, parent: str, err: OSError, problem: str) -> ParameterError:
    """The refusal of a --path whose folder `problem` (the OS's `err`): a file on the way is
    named as such (the OS says only "File exists" or "Not a directory")."""
    above = parent
    while not os.path.lexists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)  # the nearest part of the path that exists
    if os.path.lexists(above) and not os.path.isdir(above):
        what = f"'{above}' is a file, not a folder"
    else:
        what = f"its folder '{parent}' {problem} ({err.strerror or err})"
    return ParameterError(
        f"demo --path '{path}' cannot be written: {what}; give a --path in a folder you can write to, "
        "e.g. --path demo.zarr"
    )


def discard_staging() -> None:
    """Remove the temporary folders of writes still under way: for a process about to end
    without unwinding them (the command line's exit on Ctrl-C)."""
    with _STAGING_LOCK:
        folders = sorted(_STAGING)
        _STAGING.clear()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def run(path: str | None = None, *, out: Callable[[str], None] = print, stop: threading.Event | None = None) -> None:
    """Write the store (default: ./zarrsql-demo.zarr) unless it is already there, and print
    each query and its result. Once `stop` is set (Ctrl-C on the command line) it gives up
    before the next step with KeyboardInterrupt, a store half written removed."""
    import zarrsql

    store = os.path.realpath(path or DEFAULT_PATH)  # a symbolic link: write where it points
    if prepare(store):
        write_store(store, stop=stop)
        out(f"Wrote an example store: {store}\n")
    else:
        out(f"Using the example store written earlier: {store}\n")
    with zarrsql.connect() as con:
        con.execute("SET enable_progress_bar = false")
        for title, template in QUERIES:
            _check_stop(stop)
            sql = sql_of(template, store)
            out(f"-- {title}\n{sql}")
            with zarrsql.trace() as t:
                text = str(con.sql(sql))
            out(text)
            if t.scans:
                read = f"{t.work_units_read} of {t.work_units_planned}"
                out(f"   work units read: {read}, chunks decoded: {t.chunks_decoded}\n")
