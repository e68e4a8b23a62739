"""A NetCDF file or a kerchunk reference set replaced at the same URL between two queries of
one process (a hunt of session 27).

A remote HDF5 file's scan was kept by its URL alone: after the server's file was replaced, the
next query read the new file's bytes at the old file's offsets (other numbers, silently, or a
decode error). A remote JSON reference set was read again, but its chunk tokens were its URL,
so the chunks decoded for the old set were served again. The file's version (its ETag or
modification time and size) now keys the scan, and a set's digest its tokens. Oracle: xarray
reading the file as it is now.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from tests.kerchunk_refs import kerchunk_refs
from tests.remote.httpserver import FaultyServer, start


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, FaultyServer]]:
    server = start(tmp_path)
    try:
        yield tmp_path, server
    finally:
        server.stop()


def _write_netcdf(path: Path, seed: int, *, moved: bool, compressed: bool) -> float:
    """A NetCDF file, written aside and renamed into place; `moved` writes another variable first,
    which moves the data's chunks within the file. Returns xarray's sum of `t2m`."""
    rng = np.random.default_rng(seed)
    ds = xr.Dataset(
        {"t2m": (("time", "lat"), rng.standard_normal((24, 60)))},
        coords={"time": pd.date_range("2024-01-01", periods=24, freq="h"), "lat": np.arange(60.0)},
    )
    filters = {"zlib": True} if compressed else {}
    encoding = {"t2m": {"chunksizes": (6, 30), **filters}}
    if moved:
        ds = xr.Dataset({"first": (("time", "lat"), np.ones((24, 60))), **ds.data_vars}, coords=ds.coords)
        encoding["first"] = {"chunksizes": (6, 30)}
    aside = path.with_suffix(".tmp")
    ds.to_netcdf(aside, engine="h5netcdf", encoding=encoding)
    os.replace(aside, path)
    return float(xr.open_dataset(path, engine="h5netcdf")["t2m"].sum())


def _sum(con: zarrsql.Connection, url: str) -> float:
    return con.sql(f"SELECT sum(t2m) FROM read_zarr('{url}', table_name := 'time_lat')").fetchall()[0][0]


@pytest.mark.parametrize("compressed", [False, True])
def test_a_netcdf_file_replaced_on_the_server_is_read_as_it_is_now(served, compressed: bool) -> None:
    root, server = served
    first = _write_netcdf(root / "a.nc", 1, moved=False, compressed=compressed)
    con = zarrsql.connect()
    url = server.url("a.nc")
    assert _sum(con, url) == pytest.approx(first)
    time.sleep(1.1)  # a modification time of its own, for servers that state only that
    second = _write_netcdf(root / "a.nc", 2, moved=True, compressed=compressed)
    assert second != pytest.approx(first)
    assert _sum(con, url) == pytest.approx(second)


def test_a_reference_set_rewritten_on_the_server_reads_its_new_references(served) -> None:
    root, server = served
    sums = {}
    for name, seed in (("a.nc", 1), ("b.nc", 2)):
        sums[name] = _write_netcdf(root / name, seed, moved=False, compressed=False)

    def point_at(name: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            refs = kerchunk_refs(root / name, inline_threshold=0)
        text = (
            json.dumps(refs)
            .replace(f"file://{root / name}", server.url(name))
            .replace(str(root / name), server.url(name))
        )
        (root / "refs.tmp").write_text(text)
        os.replace(root / "refs.tmp", root / "refs.json")

    con = zarrsql.connect()
    point_at("a.nc")
    assert _sum(con, server.url("refs.json")) == pytest.approx(sums["a.nc"])
    point_at("b.nc")
    assert _sum(con, server.url("refs.json")) == pytest.approx(sums["b.nc"])
