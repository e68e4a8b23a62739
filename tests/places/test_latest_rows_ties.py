"""`ORDER BY <one dimension> LIMIT n` whose first rows are all ties: the first cells in
storage order, read from the chunks that hold them.

With one ORDER BY key, every cell at the first value sorts equal, and SQL leaves open which
of them the statement returns. Bounding the ordered dimension alone kept every chunk when it
is not chunked (`ORDER BY latitude LIMIT 10` over a store chunked by time read it all), so the
connection also keeps the first positions of another axis. Oracle: the rows must be a valid
answer of the same statement as plain DuckDB runs it over xarray's frame of the store: real
cells, each once, whose key values are the ones DuckDB's own answer holds.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from tests.places.test_latest_rows import _frame, _write, era5_like

#: time 50 x latitude 9 (stored descending) x longitude 8, in chunks of 7 x 9 x 3: latitude
#: is not chunked, so every work unit holds every latitude; 8 x 1 x 3 = 24 units.
SHAPE, CHUNKS = (50, 9, 8), (7, 9, 3)
UNITS = 24
KEYS = ["time", "latitude", "longitude"]


@pytest.fixture(scope="module")
def era5(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pd.DataFrame]:
    ds = era5_like(SHAPE, 3)
    return _write(ds, Path(tmp_path_factory.mktemp("ties")) / "era5.zarr", CHUNKS), _frame(ds)


def _run(path: str, frame: pd.DataFrame, sql: str) -> tuple[list[tuple], list[tuple], zarrsql.Trace]:
    with zarrsql.connect() as con, zarrsql.trace() as tr:
        got = con.sql(sql.format(T=f"read_zarr('{path}')")).fetchall()
    plain = duckdb.connect()
    plain.register("frame", frame)
    return got, plain.sql(sql.format(T="frame")).fetchall(), tr


def _check_valid(got: list[tuple], want: list[tuple], frame: pd.DataFrame, key: int) -> None:
    """`got` is an answer of the statement: as many rows as DuckDB's, the same ORDER BY values
    in the same order, and each a real cell of the store (its t2m the frame's), none twice."""
    assert len(got) == len(want)
    assert [r[key] for r in got] == [r[key] for r in want]
    cells = {(r.time.to_pydatetime(), r.latitude, r.longitude): r.t2m for r in frame.itertuples()}
    assert len({r[:3] for r in got}) == len(got)
    for row in got:
        assert cells[(row[0], row[1], row[2])] == row[3]


@pytest.mark.parametrize(
    ("sql", "key", "most"),
    [
        # 400 cells per latitude: -80 (the last, stored descending) in every unit
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY latitude LIMIT 10", 1, 3),
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY latitude DESC LIMIT 10", 1, 3),
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY latitude LIMIT 30 OFFSET 25", 1, 3),
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY 2 DESC LIMIT 100", 1, 3 * 3),
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY latitude NULLS FIRST LIMIT 1", 1, 1),
        # 450 cells per longitude, in one chunk of three: the first times
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY longitude DESC LIMIT 60", 2, 1),
        # one time slab holds 72 cells in 3 units: its first latitude's first 5 longitudes, 2 units
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY time DESC LIMIT 5", 0, 2),
        # more rows than one latitude holds: every unit
        ("SELECT time, latitude, longitude, t2m FROM {T} ORDER BY latitude LIMIT 401", 1, UNITS),
    ],
)
def test_tied_first_rows_are_cells_of_few_units(era5, sql, key, most):
    path, frame = era5
    got, want, tr = _run(path, frame, sql)
    _check_valid(got, want, frame, key)
    assert tr.work_units_read <= most
    assert tr.work_units_planned == UNITS


def test_a_second_key_still_gives_duckdbs_own_rows(era5):
    """With the ties ordered by a further key, the bound stays on the ordered dimension alone."""
    path, frame = era5
    sql = "SELECT time, latitude, longitude, t2m FROM {T} ORDER BY latitude, t2m DESC LIMIT 10"
    got, want, tr = _run(path, frame, sql)
    assert got == want
    assert tr.work_units_read == UNITS


def test_an_axis_that_is_not_monotonic_is_not_bounded(tmp_path):
    """Longitudes stored out of order: no comparison selects its first positions, so the other
    axes stay whole and the answer is still valid."""
    rng = np.random.default_rng(1)
    ds = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), rng.random((20, 4, 6)).astype("float32"))},
        coords={
            "time": np.array([5, 3, 9, 1, 7, 2, 8, 0, 6, 4, 15, 13, 19, 11, 17, 12, 18, 10, 16, 14]),
            "latitude": np.array([10.0, 20.0, 30.0, 40.0], dtype="float32"),
            "longitude": np.array([3.0, 1.0, 2.0, 6.0, 5.0, 4.0], dtype="float32"),
        },
    )
    path = tmp_path / "shuffled.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, encoding={"t2m": {"chunks": (5, 4, 2)}}, consolidated=False)
    frame = ds.to_dataframe().reset_index()
    sql = "SELECT time, latitude, longitude, t2m FROM {T} ORDER BY latitude LIMIT 3"
    with zarrsql.connect() as con, zarrsql.trace() as tr:
        got = con.sql(sql.format(T=f"read_zarr('{path}')")).fetchall()
    plain = duckdb.connect()
    plain.register("frame", frame)
    want = plain.sql(sql.format(T="frame")).fetchall()
    assert len(got) == len(want) == 3
    assert {r[1] for r in got} == {r[1] for r in want} == {10.0}
    cells = {(int(r.time), r.latitude, r.longitude): r.t2m for r in frame.itertuples()}
    assert all(cells[(r[0], r[1], r[2])] == r[3] for r in got)
    assert tr.work_units_read == tr.work_units_planned


@pytest.mark.parametrize(
    ("coords", "longitude", "sql"),
    [
        ([5.0, 5.0, 1.0, 2.0], None, "SELECT x, y, v FROM {T} ORDER BY x LIMIT {n}"),
        ([0.0, 30.0, 60.0, 90.0, 180.0, 270.0, 330.0, 360.0], 180, "SELECT x, y, v FROM {T} ORDER BY x LIMIT {n}"),
        ([0.0, 30.0, 60.0, 90.0, 180.0, 270.0, 330.0, 360.0], 360, "SELECT x, y, v FROM {T} ORDER BY x DESC LIMIT {n}"),
    ],
    ids=["repeated at the first position", "0 and 360 as -180", "0 and 360 under 0..360"],
)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_ties_counted_for_the_first_value_in_order(
    tmp_path: Path, coords: list[float], longitude: int | None, sql: str, n: int
) -> None:
    """The number of positions holding the first value in the statement's order set how many
    cells the bound on the other axis keeps; it was counted for storage position 0, which may
    hold another, repeated value (found by a hunter): `LIMIT 3` gave 2 rows. Oracle: plain
    DuckDB over xarray's frame, the ORDER BY values and the row count equal, every row a cell."""
    ds = xr.Dataset(
        {"v": (("x", "y"), np.arange(len(coords) * 3.0).reshape(len(coords), 3))},
        coords={"x": np.array(coords), "y": np.array([-10.0, 0.0, 10.0])},
    )
    ds["x"].attrs["units"] = "degrees_east"  # a longitude, for longitude :=
    path = tmp_path / "rep.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3, consolidated=False)
    frame = ds.to_dataframe().reset_index()
    if longitude == 180:
        frame["x"] = ((frame["x"] + 180.0) % 360.0) - 180.0
    elif longitude == 360:
        frame["x"] = frame["x"] % 360.0
    call = f"read_zarr('{path}'" + (f", longitude := {longitude})" if longitude else ")")
    got = zarrsql.connect().sql(sql.format(T=call, n=n)).fetchall()
    plain = duckdb.connect()
    plain.register("frame", frame)
    want = plain.sql(sql.format(T="frame", n=n)).fetchall()
    assert len(got) == len(want) == n
    assert [r[0] for r in got] == [r[0] for r in want]
    cells = {(r.x, r.y): r.v for r in frame.itertuples()}
    assert all(cells[(x, y)] == v for x, y, v in got)
