"""Fixtures for virtual stores: NetCDF4 files written by xarray (h5netcdf, zlib + shuffle,
chunked), kerchunk reference sets of them (JSON v1 and v0, Parquet), H5Col tables written
with h5py, and the same files behind a local HTTP server and a local S3 server.

Everything is written once per session into a temporary folder; the oracles are xarray's
`open_dataset(..., engine="h5netcdf")` on the original files and h5py on the H5Col datasets.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("h5py")
pytest.importorskip("kerchunk")

import xarray as xr  # noqa: E402
from kerchunk.df import refs_to_dataframe  # noqa: E402

from tests.kerchunk_refs import kerchunk_refs  # noqa: E402
from tests.virtual import h5col_files  # noqa: E402
from zarrsql.metadata.tree import clear_cache  # noqa: E402

BUCKET = "zarrsql-virtual"
#: The table read_zarr makes of the NetCDF file's (time, latitude, longitude) variables.
TABLE = "time_latitude_longitude"


def era_dataset() -> xr.Dataset:
    """A small ERA5-like dataset: descending latitude, float32 fields, a packed int16 field
    with a fill value, NaN holes, and two different chunkings (so a work unit spans two
    chunks of `t2m`, whose adjacent byte ranges are read as one request)."""
    rng = np.random.default_rng(7)
    time = pd.date_range("2021-03-01", periods=48, freq="h")
    lat = np.linspace(60.0, 30.0, 7)
    lon = np.arange(0.0, 36.0, 3.0)
    shape = (len(time), len(lat), len(lon))
    t2m = rng.normal(280, 6, shape).astype("f4")
    t2m[3, 2, 5] = np.nan
    u10 = rng.normal(0, 4, shape).astype("f4")
    sp = rng.normal(1000, 20, shape)
    sp[10, 1, 1] = np.nan
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m, {"units": "K"}),
            "u10": (("time", "latitude", "longitude"), u10, {"units": "m s-1"}),
            "sp": (("time", "latitude", "longitude"), sp, {"units": "hPa"}),
        },
        coords={"time": time, "latitude": lat, "longitude": lon},
    )
    return ds


def write_era(path: Path) -> None:
    ds = era_dataset()
    common = {"zlib": True, "shuffle": True, "complevel": 4}
    encoding = {
        "t2m": {**common, "chunksizes": (12, 7, 12)},
        "u10": {**common, "chunksizes": (24, 7, 12)},
        "sp": {
            **common,
            "chunksizes": (24, 7, 12),
            "dtype": "int16",
            "scale_factor": 0.01,
            "add_offset": 1000.0,
            "_FillValue": -32767,
        },
    }
    ds.to_netcdf(path, engine="h5netcdf", encoding=encoding)


@dataclass(frozen=True)
class VirtualFiles:
    root: Path
    nc: Path
    json_v1: Path
    json_v0: Path
    json_inline: Path
    parquet: Path
    obs: Path
    obs_stale: Path
    obs_json: Path


def _refs(path: Path, **kwargs: Any) -> dict[str, Any]:
    return kerchunk_refs(path, **kwargs)


def _retarget(refs: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """The same references pointing at `new` instead of `old` (for the served copies)."""
    out = dict(refs)
    out["refs"] = {
        k: [new, *v[1:]] if isinstance(v, list) and v and v[0] == old else v for k, v in refs["refs"].items()
    }
    return out


@pytest.fixture(scope="session")
def virtual(tmp_path_factory: pytest.TempPathFactory) -> VirtualFiles:
    root = tmp_path_factory.mktemp("virtual")
    nc = root / "era.nc"
    write_era(nc)
    v1 = _refs(nc)
    (root / "era.json").write_text(json.dumps(v1))
    (root / "era_v0.json").write_text(json.dumps(v1["refs"]))  # version 0: the mapping alone
    (root / "era_inline.json").write_text(json.dumps(_refs(nc, inline_threshold=10**7)))
    refs_to_dataframe(v1, str(root / "era.parq"), record_size=2)  # several records per array
    obs, stale = root / "obs.h5", root / "obs_stale.h5"
    h5col_files.write_obs(obs)
    h5col_files.write_obs(stale, stale=True)
    (root / "obs.json").write_text(json.dumps(_refs(obs)))
    return VirtualFiles(
        root,
        nc,
        root / "era.json",
        root / "era_v0.json",
        root / "era_inline.json",
        root / "era.parq",
        obs,
        stale,
        root / "obs.json",
    )


@pytest.fixture(scope="session")
def era_oracle(virtual: VirtualFiles) -> pd.DataFrame:
    """What xarray reads from the NetCDF file, as one row per (time, latitude, longitude)."""
    with xr.open_dataset(virtual.nc, engine="h5netcdf") as ds:
        frame = ds[["t2m", "u10", "sp"]].to_dataframe(dim_order=["time", "latitude", "longitude"])
    return frame.reset_index()


@pytest.fixture
def fresh() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


# ----------------------------------------------------------------------------- servers
@pytest.fixture(scope="session")
def served(virtual: VirtualFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An HTTP server over a folder holding the NetCDF file and reference sets whose chunks
    point at the file's HTTP URL."""
    from tests.remote import httpserver
    from tests.remote.conftest import stop_http

    root = tmp_path_factory.mktemp("served_virtual")
    shutil.copy(virtual.nc, root / "era.nc")
    server = httpserver.start(root)
    url = server.url("/era.nc")
    refs = _retarget(json.loads(virtual.json_v1.read_text()), str(virtual.nc), url)
    (root / "era_http.json").write_text(json.dumps(refs))
    refs_to_dataframe(refs, str(root / "era_http.parq"), record_size=2)
    (root / "era_local.json").write_text(virtual.json_v1.read_text())  # a remote set of local files
    yield server
    stop_http(server)


@pytest.fixture(scope="session")
def s3_virtual(virtual: VirtualFiles) -> Iterator[str]:
    """The endpoint of an S3 server whose bucket holds the NetCDF file, a reference set
    pointing at it by its s3:// URL, and the H5Col file."""
    import os

    from tests.remote.conftest import moto_client, start_moto

    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith("AWS_")]:  # anonymous: no credentials
        del os.environ[name]
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull + "-none"
    os.environ["AWS_CONFIG_FILE"] = os.devnull + "-none"
    server, endpoint = start_moto()
    client = moto_client("s3", endpoint, "fixture", "fixture")
    client.create_bucket(Bucket=BUCKET, ACL="public-read")
    refs = _retarget(json.loads(virtual.json_v1.read_text()), str(virtual.nc), f"s3://{BUCKET}/era.nc")
    for key, body in (
        ("era.nc", virtual.nc.read_bytes()),
        ("obs.h5", virtual.obs.read_bytes()),
        ("era.json", json.dumps(refs).encode()),
    ):
        client.put_object(Bucket=BUCKET, Key=key, Body=body, ACL="public-read")
    (virtual.root / "era_s3.json").write_text(json.dumps(refs))  # a local set of files on S3
    yield endpoint
    server.stop()
    os.environ.clear()
    os.environ.update(saved)
