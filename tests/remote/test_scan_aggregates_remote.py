"""GROUP BY computed by the scan over HTTP: the same groups as xarray on the files, and every
unit's chunks asked for at once (no first unit fetched alone, as a LIMIT's scan does).

The server is the repository's fault-injecting HTTP server with latency added to every
request; its timeline says when each request arrived and was answered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from tests.remote import httpserver
from tests.remote.conftest import stop_http
from zarrsql.engine import grouped
from zarrsql.metadata.tree import clear_cache

LATENCY = 0.05


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    root = tmp_path_factory.mktemp("grouped")
    rng = np.random.default_rng(3)
    v = rng.normal(280, 10, (48, 9, 8)).astype("f4")
    v[5, 2, 1] = np.nan
    ds = xr.Dataset(
        {"v": (("time", "lat", "lon"), v)},
        coords={
            "time": pd.date_range("2001-01-01", periods=48, freq="6h"),
            "lat": np.linspace(60.0, -60.0, 9),
            "lon": np.arange(0.0, 360.0, 45.0),
        },
    )
    ds.to_zarr(root / "grid.zarr", mode="w", encoding={"v": {"chunks": (8, 9, 8)}}, consolidated=True)
    s = httpserver.start(root)
    yield s, root
    stop_http(s)


@pytest.fixture
def http(server, monkeypatch) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    monkeypatch.setattr(grouped, "MIN_ROWS", 0)  # a small store: computed by the scan all the same
    s, root = server
    s.reset()
    clear_cache()
    yield s, root
    deadline = time.monotonic() + 10
    while s.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    s.reset()


def test_groups_over_http_equal_xarray_and_every_chunk_is_asked_for_at_once(http) -> None:
    s, root = http
    s.latency = LATENCY
    with zarrsql.connect() as con, zarrsql.trace() as t:
        rel = con.sql(f"SELECT lat, avg(v), count(v) FROM read_zarr('{s.url('grid.zarr')}') GROUP BY lat")
        got = {lat: (mean, n) for lat, mean, n in rel.fetchall()}
    assert "__zarrsql_grouped_" in rel.sql_query()
    assert t.rows_aggregated == 48 * 9 * 8
    v = xr.open_zarr(root / "grid.zarr")["v"]
    means = v.mean(("time", "lon"), skipna=True).to_series()
    counts = v.count(("time", "lon")).to_series()
    assert set(got) == {float(x) for x in means.index}
    for lat, (mean, n) in got.items():
        assert mean == pytest.approx(float(means[lat]), rel=1e-6)
        assert n == int(counts[lat])
    data = [(a, b) for m, p, a, b in s.timeline if m == "GET" and p.startswith("/grid.zarr/v/c/")]
    assert len(data) == 6  # each chunk of v once
    # all six asked for before the first was answered: one round, not a first unit alone
    assert max(a for a, _ in data) < min(b for _, b in data)


def test_a_failing_chunk_fails_the_statement_by_its_url(http) -> None:
    s, _ = http
    s.inject("/grid.zarr/v/c/2/0/0", "503", times=None)
    args = f"'{s.url('grid.zarr')}', storage_options := MAP {{'retries': '0'}}"
    with zarrsql.connect() as con, pytest.raises(zarrsql.StoreReadError) as info:
        con.sql(f"SELECT lon, max(v) FROM read_zarr({args}) GROUP BY lon").fetchall()
    assert s.url("grid.zarr/v/c/2/0/0") in str(info.value)
    assert "Traceback" not in str(info.value)
    gets = [p for m, p in s.log if m == "GET" and p == "/grid.zarr/v/c/2/0/0"]
    assert len(gets) == 1  # one attempt: the statement is not run a second time after the rewrite failed
