"""`ORDER BY <dimension> LIMIT n` beside a dimension whose coordinate is unsigned and stored
descending (pressure levels 1000, 850, 500, 250 as uint16), or int64 far apart.

The first rows' other axes are bounded to their first cells in storage order, which needs
the direction of each such axis. Worked out by subtracting neighbours, a descending uint16
axis wrapped around and looked ascending, so it was bounded with `<=` the wrong way and the
statement returned fewer rows than its LIMIT. Oracle: plain DuckDB over the raw arrays.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import zarr

import zarrsql


def _store(path: Path, level: np.ndarray) -> pa.Table:
    g = zarr.open_group(path, mode="w", zarr_format=3)
    t = g.create_array("time", shape=(3,), chunks=(1,), dtype="int32", fill_value=0, dimension_names=["time"])
    t.attrs["units"] = "days since 2000-01-01"
    t[:] = [0, 1, 2]
    lev = g.create_array(
        "level", shape=level.shape, chunks=(2,), dtype=level.dtype, fill_value=0, dimension_names=["level"]
    )
    lev[:] = level
    values = np.arange(3 * len(level), dtype="float64").reshape(3, len(level))
    v = g.create_array("v", shape=values.shape, chunks=(1, 2), dtype="float64", dimension_names=["time", "level"])
    v[:] = values
    times = np.datetime64("2000-01-01", "us") + np.arange(3).astype("timedelta64[D]")
    ti, li = np.meshgrid(np.arange(3), np.arange(len(level)), indexing="ij")
    return pa.table({"time": times[ti.ravel()], "level": level[li.ravel()], "v": values.ravel()})


@pytest.mark.parametrize(
    "level",
    [
        np.array([1000, 850, 500, 250], dtype="uint16"),
        np.array([2**63 + 5, 2**63 - 5, 7, 1], dtype="uint64"),
        np.array([2**62, -(2**62), -(2**63) + 1, -(2**63)], dtype="int64"),
        np.array([-(2**63), 0, 2**63 - 1], dtype="int64"),
    ],
    ids=["uint16_descending", "uint64_descending", "int64_far_descending", "int64_far_ascending"],
)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM {T} ORDER BY time LIMIT 3",
        "SELECT * FROM {T} ORDER BY time DESC LIMIT 2",
        "SELECT * FROM {T} ORDER BY time LIMIT 1",
    ],
)
def test_first_rows_are_all_there(tmp_path: Path, level: np.ndarray, sql: str) -> None:
    frame = _store(tmp_path / "levels.zarr", level)
    plain = duckdb.connect()
    plain.register("frame", frame)
    want = plain.sql(sql.format(T="frame")).fetchall()
    with zarrsql.connect() as con:
        got = con.sql(sql.format(T=f"read_zarr('{tmp_path / 'levels.zarr'}')")).fetchall()
    assert len(got) == len(want)
    assert [r[0] for r in got] == [r[0] for r in want]  # the ORDER BY values
    cells = {tuple(r) for r in plain.sql("SELECT * FROM frame").fetchall()}
    assert all(tuple(r) in cells for r in got)
    assert len(set(got)) == len(got)
