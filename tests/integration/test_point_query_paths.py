"""Loops of small statements: the path each takes and what it starts, against oracles.

A point query (`WHERE station = 'ST00010'` on a string coordinate) reads one station's
thousand rows of a table of a million: DuckDB aggregates them in less time than the GROUP BY
computed by the scan (engine/grouped.py) spends on its own statements, so the statement runs
as written. A loop of such statements reuses the reader's threads instead of starting new
ones for each scan (scan/workers.py), and a string coordinate rewritten between two
statements is read anew. Expected values come from xarray and numpy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine import grouped

#: Stations x hours: more cells than `grouped.MIN_ROWS`, so that only the point query's
#: estimate keeps the GROUP BY computed by the scan away (asserted below).
STATIONS, HOURS = 1200, 1000


def _dataset(prefix: str = "ST", seed: int = 3) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    names = np.array([f"{prefix}{i:05d}" for i in range(STATIONS)], dtype=object)  # Zarr v3's string type
    hours = pd.date_range("2020-01-01", periods=HOURS, freq="h")
    values = rng.normal(0, 1, (STATIONS, HOURS)).astype("float32")
    return xr.Dataset({"v": (("station", "time"), values)}, coords={"station": names, "time": hours})


@pytest.fixture(scope="module")
def stations(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, xr.Dataset]:
    path = tmp_path_factory.mktemp("points") / "stations.zarr"
    ds = _dataset()
    ds.to_zarr(path, zarr_format=3, consolidated=False, encoding={"v": {"chunks": (100, 250)}})
    return path, ds


def _expected(ds: xr.Dataset, names: list[str]) -> tuple[float, int]:
    cells = ds["v"].sel(station=names).values.astype("float64")
    return float(cells.mean()), int(cells.size)


def test_the_table_is_large_enough_for_the_scan_to_aggregate() -> None:
    assert STATIONS * HOURS >= grouped.MIN_ROWS  # else the tests below would prove nothing


@pytest.mark.parametrize(
    ("condition", "names"),
    [
        ("station = 'ST00010'", ["ST00010"]),
        ("'ST01199' = station", ["ST01199"]),
        ("station IN ('ST00003', 'ST00777')", ["ST00003", "ST00777"]),
        ("station = 'ST00010' AND time >= TIMESTAMP '2020-01-02'", None),
    ],
)
def test_a_point_query_on_a_string_coordinate_runs_as_written(
    stations: tuple[Path, xr.Dataset], condition: str, names: list[str] | None
) -> None:
    path, ds = stations
    with zarrsql.connect() as con, zarrsql.trace() as t:
        (avg, count), *_ = con.sql(f"SELECT avg(v), count(*) FROM read_zarr('{path}') WHERE {condition}").fetchall()
    if names is None:
        cells = ds["v"].sel(station="ST00010", time=slice("2020-01-02", None)).values.astype("float64")
        want = (float(cells.mean()), int(cells.size))
    else:
        want = _expected(ds, names)
    assert count == want[1]
    assert avg == pytest.approx(want[0], rel=1e-9)
    assert t.rows_aggregated == 0  # DuckDB aggregated the rows the scan handed it


def test_a_condition_on_many_stations_is_still_aggregated_by_the_scan(stations: tuple[Path, xr.Dataset]) -> None:
    path, ds = stations
    with zarrsql.connect() as con, zarrsql.trace() as t:
        (avg, count), *_ = con.sql(
            f"SELECT avg(v), count(*) FROM read_zarr('{path}') WHERE station >= 'ST00100'"
        ).fetchall()
    want = _expected(ds, [f"ST{i:05d}" for i in range(100, STATIONS)])
    assert count == want[1]
    assert avg == pytest.approx(want[0], rel=1e-9)
    assert t.rows_aggregated == want[1]  # the scan computed it: the estimate is no reason to decline


@pytest.fixture
def reader_threads_started(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many reader threads (named `zarrsql_<n>`) started since the fixture began."""
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        if thread.name.startswith("zarrsql_"):
            started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    return lambda: len(started)


def test_a_loop_of_statements_reuses_the_reader_threads(
    stations: tuple[Path, xr.Dataset], reader_threads_started: Callable[[], int]
) -> None:
    path, ds = stations
    picked = [f"ST{i:05d}" for i in range(0, STATIONS, 60)]
    with zarrsql.connect() as con:
        con.sql(f"SELECT v FROM read_zarr('{path}') WHERE station = 'ST00001'").fetchall()  # the threads start
        before = reader_threads_started()
        got = [
            sorted(v for (v,) in con.sql(f"SELECT v FROM read_zarr('{path}') WHERE station = '{name}'").fetchall())
            for name in picked
        ]
    for name, values in zip(picked, got, strict=True):
        np.testing.assert_array_equal(values, np.sort(ds["v"].sel(station=name).values))
    # each of the 20 scans used to start its own threads; a late idle mark may start one more
    assert reader_threads_started() - before <= 2


@pytest.mark.parametrize("min_rows", [0, grouped.MIN_ROWS], ids=["computed-by-the-scan", "run-as-written"])
def test_a_string_coordinate_rewritten_between_statements_is_read_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, min_rows: int
) -> None:
    monkeypatch.setattr(grouped, "MIN_ROWS", min_rows)
    path = tmp_path / "changing.zarr"
    first, second = _dataset("ST", seed=1), _dataset("XY", seed=2)
    first.to_zarr(path, zarr_format=3, consolidated=False, encoding={"v": {"chunks": (100, 250)}})
    statement = (
        f"SELECT station, avg(v), count(*) FROM read_zarr('{path}') "
        "WHERE station IN ('ST00005', 'XY00005') GROUP BY station"
    )
    with zarrsql.connect() as con:
        (name, avg, count), *rest = con.sql(statement).fetchall()
        assert (name, count, rest) == ("ST00005", HOURS, [])
        assert avg == pytest.approx(_expected(first, ["ST00005"])[0], rel=1e-9)
        time.sleep(0.01)  # a new modification time for every file rewritten
        second.to_zarr(path, mode="w", zarr_format=3, consolidated=False, encoding={"v": {"chunks": (100, 250)}})
        (name, avg, count), *rest = con.sql(statement).fetchall()
    assert (name, count, rest) == ("XY00005", HOURS, [])
    assert avg == pytest.approx(_expected(second, ["XY00005"])[0], rel=1e-9)


def _blocked(release: threading.Event, ran: list[Any], label: Any) -> Any:
    release.wait(10)
    ran.append(label)
    return label


def test_stopping_one_scan_cancels_its_own_tasks_only() -> None:
    """Two scans share the threads: shutting one down cancels its tasks not started, while
    the other's run, each scan's in the order it submitted them, at most `max_workers` at once."""
    from zarrsql.scan.workers import Workers

    release, ran = threading.Event(), []
    stopped, going = Workers(max_workers=1), Workers(max_workers=1)
    running = stopped.submit(_blocked, release, ran, "a0")
    queued = [stopped.submit(_blocked, release, ran, f"a{i}") for i in range(1, 4)]
    others = [going.submit(_blocked, release, ran, f"b{i}") for i in range(3)]
    deadline = time.monotonic() + 10
    while not running.running() and time.monotonic() < deadline:  # a thread has taken it
        time.sleep(0.001)
    stopped.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        stopped.submit(_blocked, release, ran, "late")
    release.set()
    assert running.result(10) == "a0"  # a task running when its scan stopped finishes
    assert all(f.cancelled() for f in queued)
    assert [f.result(10) for f in others] == ["b0", "b1", "b2"]
    assert [x for x in ran if x.startswith("b")] == ["b0", "b1", "b2"]
    assert "a1" not in ran
