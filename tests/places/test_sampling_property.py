"""Nearest-cell sampling on random grids and random points, against xarray's `.sel(method=
"nearest", tolerance=...)` on vectorized indexers (zarrsql issue 14, the hypothesis part)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarrsql


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.floats(0.25, 5.0), min_size=2, max_size=9),
    descending=st.booleans(),
    points=st.lists(st.floats(-10.0, 60.0), min_size=1, max_size=8),
    tolerance=st.one_of(st.none(), st.floats(0.1, 3.0)),
)
def test_random_points_match_xarrays_nearest_cells(tmp_path_factory, steps, descending, points, tolerance) -> None:
    lat = np.round(np.cumsum([0.0, *steps]), 2)  # uneven, strictly increasing
    lat = lat[::-1].copy() if descending else lat
    ds = xr.Dataset({"v": (("time", "lat"), np.arange(3 * len(lat), dtype="float64").reshape(3, len(lat)))},
                    coords={"time": np.arange(3), "lat": lat})  # fmt: skip
    path = tmp_path_factory.mktemp("prop") / "g.zarr"
    ds.chunk({"lat": 3}).to_zarr(path, consolidated=True)
    frame = pd.DataFrame({"id": np.arange(len(points)), "lat": points})
    with zarrsql.connect() as con:
        got = zarrsql.sample(str(path), frame, tolerance=tolerance, connection=con).df()
    for p, target in enumerate(points):
        rows = got[got.id == p]
        try:
            cell = ds.v.sel(lat=target, method="nearest", tolerance=tolerance)
        except KeyError:  # beyond the tolerance: one row of NULLs, never a far cell
            assert len(rows) == 1
            assert rows[["lat", "v"]].isna().all().all()
            continue
        assert rows.lat.unique().tolist() == [float(cell.lat)]
        np.testing.assert_array_equal(rows.sort_values("time").v.to_numpy(), cell.values)
