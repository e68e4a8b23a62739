"""Icechunk repositories written by xarray (`to_zarr(session.store)`) for tests/icechunk/.

`versions` holds one repository on local disk with the history every version selector needs:
`main` has two commits (a write, then an append along time), the tag `v1` marks the first,
`as_of_v1` is a time between the two commits, and the branch `dev` starts at the first commit
and rewrites a variable. Beside it, `plain` is the same first dataset written by xarray to a
plain Zarr folder with the same encoding, for comparing the work a query does.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

#: Chunks of every variable: 4 x 2 x 2 work units over the first version.
CHUNKS = {"time": 6, "lat": 5, "lon": 6}


def dataset(n_time: int, start: int = 0) -> xr.Dataset:
    """A small ERA5-like dataset: hourly times, float32 temperature, a float64 variable."""
    rng = np.random.default_rng(start + 7)
    times = np.datetime64("2024-01-01T00:00") + np.arange(start, start + n_time) * np.timedelta64(1, "h")
    shape = (n_time, 10, 12)
    return xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), (250 + 40 * rng.random(shape)).astype("float32")),
            "tp": (("time", "lat", "lon"), rng.random(shape)),
        },
        coords={"time": times, "lat": np.linspace(50.0, 41.0, 10), "lon": np.arange(12) * 1.5},
    )


def encoding(ds: xr.Dataset) -> dict[str, dict[str, tuple[int, ...]]]:
    return {name: {"chunks": tuple(CHUNKS[d] for d in ds[name].dims)} for name in ds.data_vars}


@dataclass(frozen=True)
class Versions:
    path: Path
    plain: Path
    first: str  # snapshot ids
    second: str
    dev: str
    as_of: datetime.datetime


def open_repo(path: Path):
    import icechunk

    return icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))


def write_versions(repo, plain: Path | None = None) -> tuple[str, str, str, datetime.datetime]:
    """Commit the history described in the module docstring; returns the snapshot ids and
    the as-of time between main's two commits."""
    first_ds = dataset(24)
    session = repo.writable_session("main")
    first_ds.to_zarr(session.store, zarr_format=3, consolidated=False, encoding=encoding(first_ds))
    first = session.commit("first 24 hours")
    time.sleep(0.02)
    as_of = datetime.datetime.now(datetime.UTC)
    time.sleep(0.02)
    session = repo.writable_session("main")
    dataset(12, start=24).to_zarr(session.store, append_dim="time", consolidated=False)
    second = session.commit("12 more hours")
    repo.create_tag("v1", first)
    repo.create_branch("dev", first)
    session = repo.writable_session("dev")
    changed = first_ds.assign(t2m=first_ds.t2m + 100)
    changed[["t2m"]].to_zarr(session.store, mode="r+", consolidated=False)
    dev = session.commit("warmer on dev")
    if plain is not None:
        first_ds.to_zarr(plain, zarr_format=3, consolidated=False, encoding=encoding(first_ds))
    return first, second, dev, as_of


def xarray_version(path: Path, **version) -> xr.Dataset:
    """xarray's reading of one version, through Icechunk's own session (the oracle)."""
    session = open_repo(path).readonly_session(**version)
    return xr.open_zarr(session.store, consolidated=False).load()


def frame(ds: xr.Dataset):
    return ds.to_dataframe().reset_index()[["time", "lat", "lon", "t2m", "tp"]]
