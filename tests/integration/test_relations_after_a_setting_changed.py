"""A relation (or a view made from one) that zarrsql answered or bounded runs again at each
fetch under the session's settings of that moment, as DuckDB runs any relation again. Its
answer or bound was worked out under the settings of the moment it was made: after `SET
default_order`, `default_null_order`, `TimeZone` or `default_collation` changed, it gave
neither the old rows nor the new ones (the cells of the 3 lowest values sorted the other
way, a count of the old zone's hours). It now fails and says which setting moved; the same
statement run again gives DuckDB's rows under the new settings, and setting it back makes
the relation answer again. The oracle is plain DuckDB over a frame made by xarray.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql


def _write(path: Path, ds: xr.Dataset) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3)
    frame = ds.to_dataframe().reset_index()
    frame["time"] = frame["time"].astype("datetime64[us]")
    return frame


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, pd.DataFrame]]:
    """`grid`: (time, lat) with NULL cells, chunked by time; `stations`: a string dimension
    (whose top-n zarrsql does not bound, so only its count is rewritten)."""
    rng = np.random.default_rng(8)
    root = tmp_path_factory.mktemp("settings")
    time = pd.date_range("2000-03-25", periods=48, freq="h")
    v = rng.standard_normal((48, 6))
    v[rng.random(v.shape) < 0.1] = np.nan  # NULL cells, written as the fill value
    grid = xr.Dataset({"v": (("time", "lat"), v)}, coords={"time": time, "lat": 58.0 + np.arange(6)})
    grid = grid.chunk({"time": 12})
    stations = xr.Dataset(
        {"w": (("time", "station"), rng.standard_normal((48, 4)))},
        coords={"time": time, "station": np.array(["Oslo", "oslo", "Bergen", "bergen"])},
    )
    return {
        "grid": (str(root / "grid.zarr"), _write(root / "grid.zarr", grid)),
        "stations": (str(root / "stations.zarr"), _write(root / "stations.zarr", stations)),
    }


CASES = [
    ("grid", "SELECT time, lat, v FROM {T} ORDER BY v LIMIT 3", "SET default_order = 'DESC'", "default_order"),
    (
        "grid",
        "SELECT v FROM {T} WHERE lat > 58 ORDER BY v DESC LIMIT 3",  # NULLs tie: the values alone
        "SET default_null_order = 'NULLS_FIRST'",
        "default_null_order",
    ),
    ("grid", "SELECT time, v FROM {T} ORDER BY time, lat LIMIT 3", "SET default_order = 'DESC'", "default_order"),
    (
        "grid",
        "SELECT count(*) FROM {T} WHERE time < TIMESTAMPTZ '2000-03-26 00:00:00+00'",
        "SET TimeZone = 'Asia/Kolkata'",
        "TimeZone",
    ),
    (
        "stations",
        "SELECT count(*) FROM {T} WHERE station = 'oslo'",
        "SET default_collation = 'nocase'",
        "default_collation",
    ),
]


def _plain(frame: pd.DataFrame, settings: list[str]) -> duckdb.DuckDBPyConnection:
    plain = duckdb.connect()
    plain.execute("SET TimeZone = 'UTC'")
    for setting in settings:
        plain.execute(setting)
    plain.register("frame", frame)
    return plain


@pytest.mark.parametrize("as_view", [False, True], ids=["relation", "view"])
@pytest.mark.parametrize(("kind", "sql", "setting", "name"), CASES)
def test_a_setting_changed_under_a_kept_relation(
    stores: dict[str, tuple[str, pd.DataFrame]], kind: str, sql: str, setting: str, name: str, as_view: bool
) -> None:
    path, frame = stores[kind]
    con = zarrsql.connect()
    con.execute("SET TimeZone = 'UTC'")
    before = _plain(frame, []).sql(sql.format(T="frame")).fetchall()
    relation = con.sql(sql.format(T=f"read_zarr('{path}')"))
    assert relation.fetchall() == before
    if as_view:
        relation.create_view("kept")
    con.execute(setting)
    with pytest.raises(duckdb.Error, match=f"session's {name} .*run the statement again"):
        con.sql("SELECT * FROM kept").fetchall() if as_view else relation.fetchall()
    after = _plain(frame, [setting]).sql(sql.format(T="frame")).fetchall()
    assert after != before  # the setting changes the rows
    assert con.sql(sql.format(T=f"read_zarr('{path}')")).fetchall() == after  # run again: the new rows
    con.execute(f"RESET {name}" if name != "TimeZone" else "SET TimeZone = 'UTC'")
    assert (con.sql("SELECT * FROM kept").fetchall() if as_view else relation.fetchall()) == before
