"""Small data and the xarray pivot oracle shared by the writer tests (never imports zarrsql)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr


def pivot(df: pd.DataFrame, dims: Sequence[str]) -> xr.Dataset:
    """xarray's own pivot of the rows, coordinates in order of first appearance (xarray sorts
    them; the writers keep the relation's order, so the oracle is reindexed to it)."""
    ds = df.set_index(list(dims)).to_xarray()
    return ds.reindex({d: pd.unique(df[d]) for d in dims})


def weather(n_time: int = 9, n_lat: int = 7, n_lon: int = 5, seed: int = 0) -> xr.Dataset:
    """A small CF dataset: 6-hourly time, descending latitude, float, int and time variables."""
    rng = np.random.default_rng(seed)
    shape = (n_time, n_lat, n_lon)
    time = pd.date_range("2020-01-01", periods=n_time, freq="6h")
    lat = np.linspace(60.0, 30.0, n_lat)  # descending, as ERA5 stores it
    lon = np.arange(n_lon, dtype=np.float32) * 2.5
    air = rng.normal(280.0, 10.0, shape)
    air[0, 0, 0] = np.nan
    counts = rng.integers(0, 1000, shape).astype(np.int32)
    seen = np.broadcast_to(time.values[:, None, None], shape).copy()
    seen[1, 2, 3] = np.datetime64("NaT")
    ds = xr.Dataset(
        {
            "air": (("time", "lat", "lon"), air, {"long_name": "air temperature", "units": "K"}),
            "counts": (("time", "lat", "lon"), counts),
            "seen": (("time", "lat", "lon"), seen),
        },
        coords={"time": time, "lat": lat, "lon": lon},
        attrs={"title": "weather"},
    )
    return ds


#: The grid writer's three ways (zarrsql.write.grid and .pivot): a small result read once and
#: pivoted in memory, a larger one read twice into memory, and the stream sorted by chunk.
PATHS = {
    "one read": {},
    "two reads": {"ONE_READ_BYTES": 0},
    "sorted by chunk": {"ONE_READ_BYTES": 0, "IN_MEMORY_BYTES": 0},
}


def use_path(monkeypatch: object, name: str) -> None:
    """Send the writers down one of `PATHS` by lowering its size thresholds."""
    from zarrsql.write import grid, pivot

    for key, value in PATHS[name].items():
        monkeypatch.setattr(pivot if key == "ONE_READ_BYTES" else grid, key, value)  # type: ignore[attr-defined]
