"""A remote table's coordinates are read when a scan first needs them, not by the bind.

Over the network every dependent read costs a round trip. A query that outputs no coordinate
and filters on none (`avg(v)`) never reads them; one that outputs them reads them beside its
first unit, in the same round; one that filters on them reads them before planning, as the
bind used to. Where a coordinate's column type depends on its values (labels, a 360_day
time), the bind still reads them. Oracles: xarray on the same store read from disk, and the
server's own request log and timeline.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from tests.remote import httpserver
from tests.remote.conftest import stop_http
from zarrsql.metadata.tree import clear_cache

COORDS = ("time", "lat", "lon")
#: Seconds added to each request where a test tells rounds apart: long against a loaded machine.
LATENCY = 0.05


def _write(root: Path) -> None:
    rng = np.random.default_rng(7)
    hours = pd.date_range("2001-01-01", periods=40, freq="6h")
    lat = np.linspace(60.0, -60.0, 9)  # descending
    lon = np.arange(0.0, 360.0, 45.0)
    v = rng.normal(280, 10, (40, 9, 8)).astype("f4")
    v[3, 4, 5] = np.nan
    ds = xr.Dataset({"v": (COORDS, v)}, coords={"time": hours, "lat": lat, "lon": lon})
    ds["lon"].attrs["units"] = "degrees_east"
    enc = {"v": {"chunks": (10, 9, 8)}, "time": {"chunks": (16,)}}  # a coordinate in three chunks
    ds.to_zarr(root / "grid.zarr", mode="w", encoding=enc, consolidated=True)
    stations = xr.Dataset(
        {"x": (("station", "step"), rng.normal(size=(5, 6)))},
        coords={"station": [f"s{i}" for i in range(5)], "step": np.arange(6)},
    )
    with warnings.catch_warnings():  # zarr-python: fixed-length strings have no v3 spec yet
        warnings.simplefilter("ignore")
        stations.to_zarr(root / "stations.zarr", mode="w", consolidated=True)
    days = xr.Dataset({"y": (("time",), np.arange(12.0))}, coords={"time": np.arange(12.0)})
    days["time"].attrs.update(units="days since 2000-01-01", calendar="360_day")
    days.to_zarr(root / "days360.zarr", mode="w", consolidated=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    root = tmp_path_factory.mktemp("deferred")
    _write(root)
    s = httpserver.start(root)
    yield s, root
    stop_http(s)


@pytest.fixture
def http(server: tuple[httpserver.FaultyServer, Path]) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    s, root = server
    s.reset()
    clear_cache()  # every test opens cold: its requests are its own
    yield s, root
    # a LIMIT leaves fetches of units it did not need on their way: let them end, so that
    # they are not logged as the next test's
    deadline = time.monotonic() + 10
    while s.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    s.reset()


def _coordinate_gets(s: httpserver.FaultyServer, store: str) -> list[str]:
    return [p for m, p in s.log if m == "GET" and any(p.startswith(f"/{store}/{c}/c/") for c in COORDS)]


def _data_gets(s: httpserver.FaultyServer, store: str, var: str) -> list[tuple[str, float, float]]:
    return [(p, a, b) for m, p, a, b in s.timeline if m == "GET" and p.startswith(f"/{store}/{var}/c/")]


def test_an_aggregate_of_a_variable_never_reads_the_coordinates(http) -> None:
    s, root = http
    con = zarrsql.connect()
    got = con.sql(f"SELECT avg(v), count(v), count(*) FROM read_zarr('{s.url('grid.zarr')}')").fetchall()
    v = xr.open_zarr(root / "grid.zarr")["v"].values
    assert got[0][0] == pytest.approx(float(np.nanmean(v.astype(np.float64))), rel=1e-12)
    assert got[0][1:] == (int(np.isfinite(v).sum()), v.size)
    assert _coordinate_gets(s, "grid.zarr") == []
    assert len(_data_gets(s, "grid.zarr", "v")) == 4  # every chunk of v, once


def test_coordinates_a_scan_outputs_are_read_beside_its_first_unit(http) -> None:
    s, root = http
    s.latency = LATENCY
    con = zarrsql.connect()
    rows = con.sql(f"SELECT time, lat, lon, v FROM read_zarr('{s.url('grid.zarr')}') LIMIT 100").df()
    expected = xr.open_zarr(root / "grid.zarr")["v"].to_dataframe().reset_index().iloc[:100]
    np.testing.assert_array_equal(rows["time"].to_numpy(), expected["time"].to_numpy())
    np.testing.assert_array_equal(rows["lat"].to_numpy(), expected["lat"].to_numpy())
    np.testing.assert_array_equal(rows["lon"].to_numpy(), expected["lon"].to_numpy())
    np.testing.assert_array_equal(rows["v"].to_numpy(dtype="f4", na_value=np.nan), expected["v"].to_numpy())
    coords = [(p, a) for m, p, a, _ in s.timeline if m == "GET" and p.split("/")[2] in COORDS]
    assert sorted({p.split("/")[2] for p, _ in coords}) == sorted(COORDS)
    data = _data_gets(s, "grid.zarr", "v")
    # asked for beside the first unit's chunks, before any of them was answered: the bind
    # did not spend a round trip of its own on them
    assert all(arrived < min(b for _, _, b in data) for _, arrived in coords)
    assert min(a for _, a, _ in data) - max(arrived for _, arrived in coords) < 0.8 * LATENCY


def test_a_predicate_on_a_coordinate_reads_them_before_planning(http) -> None:
    s, root = http
    s.latency = LATENCY
    con = zarrsql.connect()
    url = s.url("grid.zarr")
    got = con.sql(
        f"SELECT count(v), sum(v) FROM read_zarr('{url}') WHERE lat > 0 AND time >= '2001-01-05' AND lon < 100"
    ).fetchall()
    ds = xr.open_zarr(root / "grid.zarr")
    times, lat, lon = ds["time"].values, ds["lat"].values, ds["lon"].values
    keep = (times >= np.datetime64("2001-01-05"))[:, None, None] & (lat > 0)[None, :, None] & (lon < 100)[None, None, :]
    sub = ds["v"].values[keep].astype(np.float64)
    assert got[0][0] == int(np.isfinite(sub).sum())
    assert got[0][1] == pytest.approx(float(np.nansum(sub)), rel=1e-9)
    coords = [a for m, p, a, _ in s.timeline if m == "GET" and p.split("/")[2] in COORDS]
    data = _data_gets(s, "grid.zarr", "v")
    assert coords
    assert data
    # the plan needed their values: no data chunk was asked for before they were answered,
    # a round trip (the server's latency) after they were asked for
    assert min(a for _, a, _ in data) - max(coords) >= 0.8 * LATENCY
    kept_chunks = {i // 10 for i in np.flatnonzero(times >= np.datetime64("2001-01-05"))}
    assert len(data) == len(kept_chunks) < 4  # only the time chunks from 2001-01-05 on


@pytest.mark.parametrize(("store", "var", "expected_coords"), [("stations.zarr", "x", 1), ("days360.zarr", "y", 1)])
def test_a_coordinate_whose_type_depends_on_its_values_is_read_by_the_bind(
    http, store: str, var: str, expected_coords: int
) -> None:
    """Labels take their dictionary from the values; a 360_day time decodes only when every
    value is a real date: both are needed for the schema, so the bind reads them."""
    s, root = http
    con = zarrsql.connect()
    rel = con.sql(f"SELECT * FROM read_zarr('{s.url(store)}')")
    name = "station" if store == "stations.zarr" else "time"
    bound = [p for m, p in s.log if m == "GET" and p.startswith(f"/{store}/{name}/c/")]
    assert len(bound) == expected_coords  # before anything ran
    df = rel.df()
    ds = xr.open_zarr(root / store, decode_times=False)
    assert len(df) == ds[var].size
    if store == "stations.zarr":
        assert sorted(df["station"].astype(str).unique()) == [f"s{i}" for i in range(5)]
    else:  # 360_day days 0..11 are real dates: decoded as timestamps
        assert str(df["time"].iloc[0])[:10] == "2000-01-01"


def test_longitude_presentation_reads_the_coordinates_at_the_bind(http) -> None:
    s, _ = http
    con = zarrsql.connect()
    rel = con.sql(f"SELECT max(lon) FROM read_zarr('{s.url('grid.zarr')}', longitude := 180)")
    assert _coordinate_gets(s, "grid.zarr")  # presented values are made when the table opens
    assert rel.fetchall() == [(135.0,)]  # 0..315 by 45, folded into [-180, 180)


def test_a_coordinate_that_cannot_be_read_fails_by_name_when_it_is_needed(http) -> None:
    s, _ = http
    s.inject("/grid.zarr/lat/c/0", "503", times=None)
    con = zarrsql.connect()
    args = f"'{s.url('grid.zarr')}', storage_options := MAP {{'retries': '0'}}"  # one attempt, at once
    # a count needs no coordinate: answered although one cannot be read
    assert con.execute(f"SELECT count(*) FROM read_zarr({args})").fetchall() == [(40 * 9 * 8,)]
    for query in (f"SELECT lat, v FROM read_zarr({args})", f"SELECT v FROM read_zarr({args}) WHERE lat > 0"):
        with pytest.raises(zarrsql.StoreReadError) as info:
            con.execute(query).fetchall()
        assert s.url("grid.zarr/lat/c/0") in str(info.value)
        assert "HTTP 503" in str(info.value)
        assert "Traceback" not in str(info.value)
