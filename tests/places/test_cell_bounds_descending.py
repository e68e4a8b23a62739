"""`cell_bounds := true` on a descending axis whose bounds are stored in the axis' own order
(CF, and cf_xarray's `add_bounds`): lower is the smaller edge, upper the larger, so a filter
on `lat_lower` keeps the right cells and an area weight is positive. Oracle: numpy's min and
max over the bounds variable as xarray reads it."""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

import zarrsql


def test_descending_bounds_give_lower_below_upper(tmp_path) -> None:
    lat = np.array([85.0, 75.0, 65.0, 55.0, 45.0])
    bnds = np.stack([lat + 5, lat - 5], axis=1)  # (90, 80), (80, 70), ...: the axis' own order
    ds = xr.Dataset(
        {"v": (("lat",), np.arange(5.0)), "lat_bnds": (("lat", "nv"), bnds)},
        coords={"lat": ("lat", lat, {"bounds": "lat_bnds"})},
    )
    path = str(tmp_path / "desc.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path)
        back = xr.open_zarr(path)
    lower, upper = back.lat_bnds.values.min(axis=1), back.lat_bnds.values.max(axis=1)
    con = zarrsql.connect()
    rows = con.sql(f"SELECT lat, lat_lower, lat_upper FROM read_zarr('{path}', cell_bounds := true) ORDER BY lat DESC")
    assert rows.fetchall() == list(zip(back.lat.values.tolist(), lower.tolist(), upper.tolist(), strict=True))
    kept = con.sql(f"SELECT lat FROM read_zarr('{path}', cell_bounds := true) WHERE lat_lower >= 60 ORDER BY lat DESC")
    assert [r[0] for r in kept.fetchall()] == back.lat.values[lower >= 60].tolist()
    weights = con.sql(
        f"SELECT sin(radians(lat_upper)) - sin(radians(lat_lower)) FROM read_zarr('{path}', cell_bounds := true)"
    ).fetchall()
    assert all(w[0] > 0 for w in weights)
