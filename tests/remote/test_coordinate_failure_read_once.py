"""A coordinate chunk that fails to read is met once per statement, not once per rewrite
(session 25, leftover of session 24).

A remote table's coordinates are read on first use. The rewrites that answer a statement
from its coordinates (`engine/answers.py`: `count(*)`, `min(latitude)`) or compute its groups
in the scan (`engine/grouped.py`) used them first, met the failure, declined, and the
statement as written read the same chunk again and failed again (with every retry again):
`count(*) ... WHERE latitude > 10` read the corrupt chunk four times, `min(latitude)` three.
The failure is now the statement's error at once: such a statement reads the chunk no more
often than one that no rewrite handles and that reads the same coordinate, and fails with
the same message. Declining for any other reason still runs the statement as written.

Oracles: the real HTTP server's request log (tests/remote/httpserver.py) for the reads, and
numpy on the values written for the results.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.remote import httpserver
from tests.remote.conftest import stop_http
from zarrsql.metadata.tree import clear_cache

LATITUDE = np.linspace(50.0, 0.0, 6)  # chunks of 3: the second one (20, 10, 0) is broken
VALUES = np.arange(2 * 6 * 4, dtype="f4").reshape(2, 6, 4)
BROKEN = "latitude/c/1"


def _write(root: Path, name: str, shape: tuple[int, int, int]) -> None:
    n_time, n_lat, n_lon = shape
    ds = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), np.arange(np.prod(shape), dtype="f4").reshape(shape))},
        coords={
            "time": np.datetime64("2020-01-01", "ns") + np.arange(n_time) * np.timedelta64(1, "D"),
            "latitude": np.linspace(50.0, 0.0, n_lat),
            "longitude": np.arange(float(n_lon)),
        },
    )
    encoding = {"latitude": {"chunks": (3,)}, "t2m": {"chunks": shape}}
    ds.to_zarr(root / name, encoding=encoding, zarr_format=3, consolidated=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpserver.FaultyServer]:
    root = tmp_path_factory.mktemp("coordinate_failure")
    _write(root, "good.zarr", VALUES.shape)
    _write(root, "bad.zarr", VALUES.shape)
    (root / "bad.zarr" / BROKEN).write_bytes(b"not a zstd frame")
    # as many cells as the grouped rewrite asks for before it computes groups (1 << 20)
    _write(root, "big_bad.zarr", (1024, 32, 32))
    (root / "big_bad.zarr" / BROKEN).write_bytes(b"not a zstd frame")
    s = httpserver.start(root)
    yield s
    stop_http(s)


@pytest.fixture
def http(server: httpserver.FaultyServer) -> Iterator[httpserver.FaultyServer]:
    server.reset()
    clear_cache()
    yield server
    server.reset()


def _reads_of_broken_chunk(s: httpserver.FaultyServer, store: str) -> int:
    """GETs of the broken chunk, once the reads a statement began have all arrived (a
    background read of the coordinates may still be under way when the statement fails)."""
    path = f"/{store}/{BROKEN}"
    seen, still = -1, time.monotonic()
    deadline = still + 10
    while time.monotonic() < deadline:
        n = s.count("GET", lambda p: p == path)
        if n != seen or s.in_flight:
            seen, still = n, time.monotonic()
        elif time.monotonic() - still > 0.5:
            break
        time.sleep(0.05)
    return seen


def _failure(
    s: httpserver.FaultyServer, query: str, store: str, options: str = "", fault: str | None = None
) -> tuple[BaseException, int]:
    """The error of `query` over `store` on a fresh connection and cache (the broken chunk
    answered with the HTTP status `fault` on every request, if given), and its reads of the
    broken chunk."""
    s.reset()
    clear_cache()
    if fault is not None:
        s.inject(f"/{store}/{BROKEN}", fault, times=None)
    url = s.url(store)
    args = f"'{url}'" + (f", storage_options := MAP {{{options}}}" if options else "")
    with zarrsql.connect() as con, pytest.raises(zarrsql.ZarrSQLError) as caught:
        con.execute(query.format(t=f"read_zarr({args})")).fetchall()
    return caught.value, _reads_of_broken_chunk(s, store)


#: Read by no rewrite (no aggregate, no LIMIT), but reading the same coordinate as the others.
BASELINE = "SELECT latitude FROM {t} WHERE latitude > 10"
REWRITTEN = [
    "SELECT count(*) FROM {t} WHERE latitude > 10",  # answers: a condition on the coordinate
    "SELECT min(latitude), max(latitude) FROM {t}",  # answers: an aggregate of the coordinate
    "SELECT count(latitude) FROM {t}",  # answers: count(c) is where c IS NOT NULL
    "SELECT latitude, avg(t2m) FROM {t} WHERE latitude > 10 GROUP BY latitude",  # grouped: its estimate
]


@pytest.mark.parametrize("query", REWRITTEN)
def test_a_broken_coordinate_chunk_is_read_as_often_as_without_the_rewrites(http, query) -> None:
    baseline, baseline_reads = _failure(http, BASELINE, "bad.zarr")
    assert isinstance(baseline, zarrsql.DecodeError)
    assert baseline_reads >= 1
    error, reads = _failure(http, query, "bad.zarr")
    assert type(error) is type(baseline)
    assert str(error) == str(baseline)  # the same clear message, naming the chunk
    assert BROKEN in str(error)
    assert "Traceback" not in str(error)
    assert reads <= baseline_reads, f"{reads} reads of the broken chunk, {baseline_reads} without the rewrites"


def test_the_grouped_rewrite_s_own_coordinate_table(http) -> None:
    """Enough cells for the grouped rewrite to build its axis table (no WHERE to estimate)."""
    baseline, baseline_reads = _failure(http, BASELINE, "big_bad.zarr")
    error, reads = _failure(http, "SELECT latitude, sum(t2m) FROM {t} GROUP BY latitude", "big_bad.zarr")
    assert str(error) == str(baseline)
    assert reads <= baseline_reads


def test_a_server_error_spends_the_retries_once(http) -> None:
    """HTTP 503 on every attempt: each read spends `retries` + 1 requests."""
    options = "'retries': '1', 'retry_backoff': '0'"
    baseline, baseline_reads = _failure(http, BASELINE, "good.zarr", options, fault="503")
    assert isinstance(baseline, zarrsql.StoreReadError)
    assert "503" in str(baseline)
    assert baseline_reads >= 2  # an attempt and its retry
    for query in REWRITTEN:
        error, reads = _failure(http, query, "good.zarr", options, fault="503")
        assert type(error) is type(baseline)
        assert str(error) == str(baseline)
        assert reads <= baseline_reads


def test_declining_for_another_reason_still_runs_the_statement(http) -> None:
    """A condition on a data variable, or an aggregate of one over a small table, is declined
    by both rewrites: the scan answers; over the broken store, one that needs no coordinate
    still succeeds."""
    good, bad = http.url("good.zarr"), http.url("bad.zarr")
    with zarrsql.connect() as con:
        counted = con.execute(f"SELECT count(*) FROM read_zarr('{good}') WHERE t2m > 5").fetchall()
        summed = con.execute(f"SELECT count(*), sum(t2m) FROM read_zarr('{bad}')").fetchall()
    assert counted == [(int((VALUES > 5).sum()),)]
    assert summed == [(VALUES.size, float(VALUES.astype(np.float64).sum()))]


def test_a_healthy_store_is_still_answered(http) -> None:
    url = http.url("good.zarr")
    cells_per_latitude = VALUES.shape[0] * VALUES.shape[2]
    with zarrsql.connect() as con:
        count = con.execute(f"SELECT count(*) FROM read_zarr('{url}') WHERE latitude > 10").fetchall()
        low_high = con.execute(f"SELECT min(latitude), max(latitude) FROM read_zarr('{url}')").fetchall()
        groups = con.execute(
            f"SELECT latitude, avg(t2m) FROM read_zarr('{url}') WHERE latitude > 10 GROUP BY latitude ORDER BY 1"
        ).fetchall()
    assert count == [(int((LATITUDE > 10).sum()) * cells_per_latitude,)]
    assert low_high == [(LATITUDE.min(), LATITUDE.max())]
    kept = np.flatnonzero(LATITUDE > 10)[::-1]  # ascending latitude
    expected = [(LATITUDE[i], float(VALUES[:, i, :].astype(np.float64).mean())) for i in kept]
    assert [(lat, pytest.approx(mean)) for lat, mean in groups] == expected


@pytest.mark.parametrize("query", [BASELINE, "SELECT latitude, t2m FROM {t} LIMIT 3", *REWRITTEN])
def test_the_broken_chunk_is_read_once(http, query) -> None:
    """A scan that outputs a coordinate starts reading the coordinates in the background while
    its first unit is fetched; that read's failure is kept for the use that needs the values,
    which raises it instead of reading the chunk again."""
    error, reads = _failure(http, query, "bad.zarr")
    assert isinstance(error, zarrsql.DecodeError)
    assert BROKEN in str(error)
    assert reads == 1
