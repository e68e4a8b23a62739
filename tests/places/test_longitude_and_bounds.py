"""`longitude := 180 | 360` and `cell_bounds := true` (zarrsql issue 14, items 4 and 5).

Oracles: xarray's own idiom for moving longitudes (`assign_coords(lon=(lon + 180) % 360 -
180)`), numpy masks over the presented values for boxes that cross the seam, and xarray's
decoding of the CF bounds variables (time bounds included).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

LON_360 = np.arange(0, 360, 7.5, dtype="float32")  # 48 values, 8 per chunk
LON_180 = (((LON_360 + 180) % 360) - 180).astype("float32")
LAT = np.array([45.0, 15.0, -15.0, -45.0])
TIME = pd.date_range("2021-03-01", periods=4, freq="6h")


def _dataset(lon: np.ndarray) -> xr.Dataset:
    rng = np.random.default_rng(7)
    ds = xr.Dataset(
        {"t": (("time", "lat", "lon"), rng.normal(size=(len(TIME), len(LAT), len(lon))).astype("float32"))},
        coords={"time": TIME, "lat": LAT, "lon": lon},
    )
    ds["lon"].attrs.update(units="degrees_east", bounds="lon_bnds")
    ds["lat"].attrs.update(units="degrees_north", bounds="lat_bnds")
    ds["time"].attrs.update(bounds="time_bnds")
    ds["lon_bnds"] = (("lon", "nv"), np.stack([lon - 3.75, lon + 3.75], 1))
    ds["lat_bnds"] = (("lat", "nv"), np.stack([LAT + 15, LAT - 15], 1))
    ds["time_bnds"] = (("time", "nv"), np.stack([TIME, TIME + pd.Timedelta("6h")], 1))
    return ds


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("lon")
    out = {}
    for name, lon in (("east", LON_360), ("centred", np.sort(LON_180))):
        path = base / f"{name}.zarr"
        _dataset(lon).chunk({"time": 2, "lat": 2, "lon": 8}).to_zarr(path, consolidated=True)
        out[name] = str(path)
    plain = xr.Dataset({"v": (("x",), np.arange(3.0))}, coords={"x": [1.0, 2.0, 3.0]})
    plain.to_zarr(base / "plain.zarr", consolidated=True)
    out["plain"] = str(base / "plain.zarr")
    return out


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _frame(rel) -> pd.DataFrame:
    return rel.df().sort_values(["time", "lat", "lon"]).reset_index(drop=True)


@pytest.mark.parametrize(("store", "setting"), [("east", 180), ("centred", 360), ("east", 360), ("centred", 180)])
def test_presented_longitudes_equal_xarrays_reassignment(stores, con, store, setting) -> None:
    ds = xr.open_zarr(stores[store])
    lon = ds.lon.values
    moved = (((lon + 180) % 360) - 180) if setting == 180 else (lon % 360)
    expected = ds[["t"]].assign_coords(lon=moved).to_dataframe().reset_index()
    got = _frame(con.sql(f"SELECT time, lat, lon, t FROM read_zarr('{stores[store]}', longitude := {setting})"))
    expected = expected.sort_values(["time", "lat", "lon"]).reset_index(drop=True)
    assert got["lon"].between(-180 if setting == 180 else 0, 180 if setting == 180 else 360, inclusive="left").all()
    pd.testing.assert_frame_equal(got, expected[["time", "lat", "lon", "t"]], check_dtype=False)


def _present(lon: np.ndarray, setting: int) -> np.ndarray:
    return ((((lon + 180) % 360) - 180) if setting == 180 else (lon % 360)).astype(lon.dtype)


def _box_case(con, path: str, setting: int, lo: float, hi: float) -> None:
    """A box [lo, hi] on the presented longitudes (lo > hi: it wraps through the seam)."""
    stored = xr.open_zarr(path).lon.values  # storage order, as xarray reads it
    presented = _present(stored, setting)
    keep = (presented >= lo) & (presented <= hi) if lo <= hi else (presented >= lo) | (presented <= hi)
    sql = f"SELECT lon, count(*) AS n FROM read_zarr('{path}', longitude := {setting}) "
    where = f"WHERE lon >= {lo} AND lon <= {hi}" if lo <= hi else f"WHERE lon >= {lo} OR lon <= {hi}"
    with zarrsql.trace() as t:
        got = con.sql(sql + where + " GROUP BY lon ORDER BY lon").fetchall()
    assert [r[0] for r in got] == sorted(float(v) for v in presented[keep])
    assert all(r[1] == len(TIME) * len(LAT) for r in got)
    # pruning: exactly the chunks (8 stored longitudes each) holding a kept value are read
    lon_chunks = len({i // 8 for i in np.flatnonzero(keep)})
    if HAS_SOURCES:  # DuckDB 2.x pushes the WHERE into the scan (1.5 filters after reading)
        assert t.work_units_read == lon_chunks * 2 * 2  # time and lat: 2 chunks each


@pytest.mark.parametrize(
    ("setting", "lo", "hi"),
    [(180, -20.0, 20.0), (180, 170.0, -170.0), (360, 350.0, 10.0), (360, 90.0, 100.0), (180, -180.0, -172.5)],
)
def test_boxes_across_the_seam_select_and_prune_by_the_presented_values(stores, con, setting, lo, hi) -> None:
    for store in ("east", "centred"):
        _box_case(con, stores[store], setting, lo, hi)


@settings(max_examples=20, deadline=None)
@given(
    setting=st.sampled_from([180, 360]),
    lo=st.floats(-200, 380, allow_nan=False).map(lambda v: round(v * 2) / 2),
    hi=st.floats(-200, 380, allow_nan=False).map(lambda v: round(v * 2) / 2),
)
def test_random_boxes_never_lose_a_row(stores, setting, lo, hi) -> None:
    with zarrsql.connect() as c:
        _box_case(c, stores["east"], setting, lo, hi)


def test_bad_longitude_settings_are_named(stores, con) -> None:
    with pytest.raises(zarrsql.ParameterError, match=r"longitude := must be 180 .* got 90"):
        con.sql(f"SELECT * FROM read_zarr('{stores['east']}', longitude := 90)").fetchall()
    with pytest.raises(zarrsql.ParameterError, match=r"table 'x' has none .*'x'"):
        zarrsql.read_zarr(stores["plain"], longitude=180, connection=con).fetchall()


def test_cell_bounds_equal_xarrays_bounds_variables(stores, con) -> None:
    ds = xr.open_zarr(stores["east"])
    got = con.sql(
        f"SELECT DISTINCT time, time_lower, time_upper, lat, lat_lower, lat_upper, lon, lon_lower, lon_upper "
        f"FROM read_zarr('{stores['east']}', cell_bounds := true)"
    ).df()
    assert len(got) == len(TIME) * len(LAT) * len(LON_360)
    for dim in ("time", "lat", "lon"):
        values, bnds = ds[dim].values, ds[f"{dim}_bnds"].values
        if dim == "time":
            values, bnds = (
                values.astype("datetime64[ns]").astype("int64"),
                bnds.astype("datetime64[ns]").astype("int64"),
            )
        # lower and upper are the smaller and the larger edge (lat's are stored descending)
        by_value = {v: (min(b), max(b)) for v, b in zip(values.tolist(), bnds.tolist(), strict=True)}
        sub = got[[dim, f"{dim}_lower", f"{dim}_upper"]].drop_duplicates()
        if dim == "time":
            sub = sub.apply(lambda c: c.astype("datetime64[ns]").astype("int64"))
        assert len(sub) == len(by_value)
        for v, lo, hi in sub.itertuples(index=False):
            assert (lo, hi) == pytest.approx(by_value[v])
    types = {
        r[0]: r[1]
        for r in con.sql(f"DESCRIBE SELECT * FROM read_zarr('{stores['east']}', cell_bounds := true)").fetchall()
    }
    assert types["time_lower"].startswith("TIMESTAMP")
    assert types["time_upper"].startswith("TIMESTAMP")


def test_cell_bounds_move_with_presented_longitudes(stores, con) -> None:
    rows = con.sql(
        f"SELECT DISTINCT lon, lon_lower, lon_upper FROM read_zarr('{stores['east']}', cell_bounds := true, "
        "longitude := 180) ORDER BY lon"
    ).fetchall()
    assert [r[0] for r in rows] == sorted(LON_180.tolist())
    assert all(lo == pytest.approx(v - 3.75) and hi == pytest.approx(v + 3.75) for v, lo, hi in rows)


def test_cell_bounds_filter_and_error(stores, con) -> None:
    n = con.sql(
        f"SELECT count(*) FROM read_zarr('{stores['east']}', cell_bounds := true) WHERE lat_lower > 0"
    ).fetchall()[0][0]
    assert n == len(TIME) * int(((LAT - 15) > 0).sum()) * len(LON_360)
    with pytest.raises(zarrsql.ParameterError, match=r"no coordinate of table 'x' has a `bounds` attribute"):
        zarrsql.read_zarr(stores["plain"], cell_bounds=True, connection=con).fetchall()
