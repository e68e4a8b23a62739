"""The writer process of the crash test: appends rows to a table-layout store in a loop until
it is killed. Every row is a function of its position `i`, so a reader can check any state.

Imported by the forkserver before the test starts writers, so a writer starts in
milliseconds and the kills land in appends, not in imports."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import zarr

from zarrsql.write.table import write_table

ROWS_PER_APPEND = 7
CHUNK = 4  # appends cross chunk boundaries, so partial chunks are rewritten
COLOURS = ["red", "green", "blue"]


def rows(lo: int, hi: int) -> pa.Table:
    """Rows lo..hi-1: i, 2i, a label, a categorical colour, a point and a linestring."""
    i = np.arange(lo, hi, dtype=np.int64)
    point = pa.StructArray.from_arrays([pa.array(i, pa.float64()), pa.array(-i, pa.float64())], ["x", "y"])
    vertices = np.repeat(i, 2)
    flat = pa.StructArray.from_arrays([pa.array(vertices, pa.float64()), pa.array(vertices + 0.5)], ["x", "y"])
    track = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * len(i) + 1, 2), pa.int32()), flat)
    colour = pa.DictionaryArray.from_arrays(pa.array(i % 3, pa.int8()), pa.array(COLOURS))
    labels = pa.array([f"row {k}" for k in i])
    return pa.table({"i": i, "twice": 2 * i, "label": labels, "colour": colour, "pt": point, "track": track})


def committed_rows(store: str) -> int:
    return int(zarr.open_group(store, mode="r", use_consolidated=True)["i"].shape[0])


def create(store: str) -> None:
    write_table(rows(0, ROWS_PER_APPEND).to_reader(), store, chunks=CHUNK)


def append_forever(store: str, started: Any) -> None:
    """Append ROWS_PER_APPEND rows at a time, for ever (the test kills the process)."""
    started.set()
    while True:
        n = committed_rows(store)
        write_table(rows(n, n + ROWS_PER_APPEND).to_reader(max_chunksize=3), store, mode="a")


# ----------------------------------------------------------------------------- grid appends
GRID_STEPS = 2  # time steps per grid append
GRID_X = 3
GRID_CHUNKS = {"time": 3, "x": 2}  # steps of 2 in chunks of 3: the chunk across the end is rewritten


def grid_sql(lo: int, hi: int) -> str:
    """Time steps lo..hi-1 of the grid: v = 10 * time + x."""
    return (
        f"SELECT t AS time, x, (10 * t + x)::DOUBLE AS v FROM range({lo}, {hi}) a(t), range({GRID_X}) b(x) "
        "ORDER BY time, x"
    )


def grid_steps(store: str) -> int:
    return int(zarr.open_group(store, mode="r", use_consolidated=True)["time"].shape[0])


def create_grid(store: str) -> None:
    import zarrsql

    con = zarrsql.connect()
    zarrsql.to_zarr(con.sql(grid_sql(0, GRID_STEPS)), store, dims=["time", "x"], chunks=GRID_CHUNKS, connection=con)


def append_grid_forever(store: str, started: Any) -> None:
    """Append GRID_STEPS time steps at a time along `time`, for ever."""
    import zarrsql

    con = zarrsql.connect()
    started.set()
    while True:
        n = grid_steps(store)
        zarrsql.to_zarr(con.sql(grid_sql(n, n + GRID_STEPS)), store, dims=["time", "x"], mode="a",
                        append_dim="time", connection=con)  # fmt: skip


def _warm_up() -> None:
    """Write and append once in a scratch directory, so that every module the writer loads
    lazily is loaded in the forkserver already (a fresh writer then appends at once)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        store = f"{scratch}/warm.zarr"
        create(store)
        write_table(rows(ROWS_PER_APPEND, 2 * ROWS_PER_APPEND).to_reader(), store, mode="a")
        import dask.array  # noqa: F401 - xarray's chunk managers load it on first open
        import xarray as xr

        import zarrsql.write.api
        import zarrsql.write.grid_append  # noqa: F401

        xr.open_zarr(store).close()  # loads xarray's backends and chunk managers once


_warm_up()
