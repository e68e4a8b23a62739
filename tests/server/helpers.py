"""Helpers of the Flight SQL server tests: stores written by xarray and anndata, and ADBC /
raw Flight clients for a server on 127.0.0.1.

Expected values come from the writers' own data (numpy arrays, anndata's frames) or from the
same query run in process on a zarrsql connection, never from the server's answers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import zarrsql

ROWS_TIME, ROWS_LAT, ROWS_LON = 24, 10, 12


@dataclass(frozen=True)
class Stores:
    """The stores the servers mount: `air` (xarray, as `era5`), `cells` (AnnData, as `cells`),
    `big` (one large 2-D array, as `big`) and the arrays they were written from."""

    air: Path
    cells: Path
    big: Path
    air_values: np.ndarray
    lat: np.ndarray
    x_dense: np.ndarray
    cell_types: list[str]
    big_shape: tuple[int, int]


def _write_air(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import xarray as xr

    rng = np.random.default_rng(17)
    air = rng.normal(280.0, 10.0, (ROWS_TIME, ROWS_LAT, ROWS_LON))
    lat = np.linspace(60.0, 15.0, ROWS_LAT)
    ds = xr.Dataset(
        {"air": (("time", "lat", "lon"), air)},
        coords={
            "time": np.datetime64("2020-01-01") + np.arange(ROWS_TIME).astype("timedelta64[D]"),
            "lat": lat,
            "lon": np.arange(ROWS_LON, dtype=np.float64) * 2.5,
        },
    )
    ds.to_zarr(path, encoding={"air": {"chunks": (6, 5, 6)}})
    return air, lat


def _write_cells(path: Path) -> tuple[np.ndarray, list[str]]:
    import pandas as pd
    import scipy.sparse as sp

    import anndata as ad

    rng = np.random.default_rng(5)
    x = sp.random(40, 15, density=0.2, format="csr", random_state=3, dtype=np.float32)
    types = list(rng.choice(["B", "T", "NK"], 40))
    obs = pd.DataFrame({"cell_type": pd.Categorical(types), "n_genes": rng.integers(0, 100, 40)})
    obs.index = [f"c{i}" for i in range(40)]
    var = pd.DataFrame(index=[f"g{i}" for i in range(15)])
    ad.AnnData(X=x, obs=obs, var=var).write_zarr(path)
    return x.toarray(), types


def _write_big(path: Path, shape: tuple[int, int]) -> None:
    import xarray as xr

    value = np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape)
    ds = xr.Dataset(
        {"value": (("y", "x"), value)},
        coords={"y": np.arange(shape[0], dtype=np.int64), "x": np.arange(shape[1], dtype=np.int64)},
    )
    ds.to_zarr(path, encoding={"value": {"chunks": (250, shape[1])}})


def write_stores(root: Path) -> Stores:
    """Write the three stores under `root`."""
    big_shape = (2000, 1000)  # 2M rows of (y, x, value): 48 MB as Arrow
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the writers' own notices (consolidated metadata, ...)
        air, lat = _write_air(root / "air.zarr")
        x_dense, types = _write_cells(root / "cells.zarr")
        _write_big(root / "big.zarr", big_shape)
    return Stores(root / "air.zarr", root / "cells.zarr", root / "big.zarr", air, lat, x_dense, types, big_shape)


def mounted(stores: Stores) -> zarrsql.Connection:
    """A zarrsql connection with the three stores mounted as era5, cells and big."""
    con = zarrsql.connect()
    zarrsql.mount(con, stores.air, "era5")
    zarrsql.mount(con, stores.cells, "cells")
    zarrsql.mount(con, stores.big, "big")
    return con


def adbc_connect(handle: Any, token: str | None = "server", **options: str) -> Any:
    """An ADBC DB-API connection to `handle`; token "server" sends the server's own token."""
    import adbc_driver_flightsql.dbapi as flightsql
    from adbc_driver_flightsql import DatabaseOptions

    kwargs = dict(options)
    sent = handle.token if token == "server" else token
    if sent is not None:
        kwargs[DatabaseOptions.AUTHORIZATION_HEADER.value] = f"Bearer {sent}"
    scheme = "grpc+tls" if handle.location.startswith("grpc+tls") else "grpc"
    return flightsql.connect(f"{scheme}://127.0.0.1:{handle.port}", db_kwargs=kwargs, autocommit=True)


def flight_client(handle: Any, token: str | None = "server") -> tuple[Any, Any]:
    """A raw pyarrow.flight client and the call options carrying the token."""
    import pyarrow.flight as flight

    client = flight.connect(f"grpc://127.0.0.1:{handle.port}")
    sent = handle.token if token == "server" else token
    headers = [(b"authorization", f"Bearer {sent}".encode())] if sent is not None else []
    return client, flight.FlightCallOptions(headers=headers)


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll `condition` until true or `seconds` pass (a freed stream is released by gRPC's
    thread after the client leaves, not at once)."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
