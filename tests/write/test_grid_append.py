"""Grid appends (`mode="a"`, `append_dim`): steps appended one by one open as xarray's pivot
of all the rows; every refused append leaves the store as it was."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql
from tests.write.frames import PATHS, pivot, use_path, weather

DIMS = ["time", "lat", "lon"]


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return weather(n_time=11).to_dataframe().reset_index()


def _steps(con: zarrsql.Connection, frame: pd.DataFrame, times: slice) -> object:
    wanted = frame.time.unique()[times]
    picked = frame[frame.time.isin(wanted)]  # noqa: F841 (read by DuckDB by name)
    return con.sql("SELECT * FROM picked")


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_appends_open_as_one_pivot(
    con: zarrsql.Connection,
    frame: pd.DataFrame,
    tmp_path: Path,
    zarr_format: int,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks of 4 along time and steps of 3, 5, 1, 2: appends rewrite the chunk that
    straddles the old end, keeping its old cells. The first append creates the store."""
    use_path(monkeypatch, path)  # how the first append creates the store
    out = tmp_path / "steps.zarr"
    cuts = [0, 3, 8, 9, 11]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        zarrsql.to_zarr(_steps(con, frame, slice(a, b)), out, dims=DIMS, mode="a", append_dim="time",
                        chunks={"time": 4}, zarr_format=zarr_format, connection=con)  # fmt: skip
    opened = xr.open_zarr(out).load()
    xr.testing.assert_equal(opened, pivot(frame, DIMS))
    assert opened.counts.dtype == np.int32
    assert not os.path.exists(out / ".zarrsql-write.lock")


def test_dims_default_to_the_stores(con: zarrsql.Connection, frame: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "d.zarr"
    zarrsql.to_zarr(_steps(con, frame, slice(0, 5)), out, dims=DIMS, connection=con)
    zarrsql.to_zarr(_steps(con, frame, slice(5, 11)), out, mode="a", append_dim="time", connection=con)
    xr.testing.assert_equal(xr.open_zarr(out).load(), pivot(frame, DIMS))


def test_a_sparse_append_leaves_nan(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "sparse.zarr"
    zarrsql.to_zarr("SELECT i AS t, j AS y, (i * 10 + j)::DOUBLE AS v FROM range(3) a(i), range(4) b(j)", out,
                    dims=["t", "y"], chunks=(2, 4), connection=con)  # fmt: skip
    zarrsql.to_zarr("SELECT 3 AS t, 1 AS y, 31.0 AS v", out, mode="a", append_dim="t", connection=con)
    values = xr.open_zarr(out).v.values
    expected = np.array([[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23], [np.nan, 31, np.nan, np.nan]])
    np.testing.assert_array_equal(values, expected)


@pytest.fixture
def base(con: zarrsql.Connection, tmp_path: Path) -> Path:
    out = tmp_path / "base.zarr"
    zarrsql.to_zarr("SELECT i AS t, j AS y, i * 10 + j AS n, 1.5 AS f FROM range(3) a(i), range(2) b(j)", out,
                    dims=["t", "y"], chunks=(2, 2), connection=con)  # fmt: skip
    return out


@pytest.mark.parametrize(
    ("sql", "text"),
    [
        ("SELECT 2 AS t, 0 AS y, 0 AS n, 0.0 AS f", "value 2 is already in the store"),
        ("SELECT -1 AS t, 0 AS y, 0 AS n, 0.0 AS f", "does not follow the store's last 't' 2"),
        ("SELECT 5 AS t, 7 AS y, 0 AS n, 0.0 AS f", "dimension 'y' has the value 7"),
        ("SELECT 5 AS t, 0 AS y, 0 AS n", "the variable 'f', which the relation lacks"),
        ("SELECT 5 AS t, 0 AS y, 0 AS n, 0.0 AS f, 1 AS extra", "column 'extra' is not a variable"),
        ("SELECT 5 AS t, 0 AS y, 0 AS n, 0.0 AS f", r"column 'n' \(int and would have missing cells\)"),
        ("SELECT 5 AS t, y, 'a' AS n, 0.0 AS f FROM range(2) r(y)", "column 'n' (string) does not fit"),
        ("SELECT 5 AS t, y, y AS n, TIMESTAMP '2020-01-01' AS f FROM range(2) r(y)", "column 'f' (time)"),
    ],
)
def test_a_refused_append_leaves_the_store_unchanged(con: zarrsql.Connection, base: Path, sql: str, text: str) -> None:
    before = xr.open_zarr(base).load()
    files = sorted(p.relative_to(base) for p in base.rglob("*"))
    with pytest.raises(
        zarrsql.WriteError, match=text.replace("(string)", r"\(string\)").replace("(time)", r"\(time\)")
    ):
        zarrsql.to_zarr(sql, base, dims=["t", "y"], mode="a", append_dim="t", connection=con)
    xr.testing.assert_identical(xr.open_zarr(base).load(), before)
    assert sorted(p.relative_to(base) for p in base.rglob("*")) == files


def test_append_dim_must_be_a_dimension(con: zarrsql.Connection, base: Path) -> None:
    with pytest.raises(zarrsql.ParameterError, match="append_dim 'n' is not one of the dims"):
        zarrsql.to_zarr("SELECT 5 AS t, 0 AS y, 0 AS n, 0.0 AS f", base, dims=["t", "y"], mode="a", append_dim="n",
                        connection=con)  # fmt: skip


def test_a_descending_dimension_appends_downwards(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "down.zarr"
    zarrsql.to_zarr("SELECT 10 - i AS t, i * 1.0 AS v FROM range(3) a(i) ORDER BY t DESC", out, dims=["t"],
                    connection=con)  # fmt: skip
    with pytest.raises(zarrsql.WriteError, match="must be below it"):
        zarrsql.to_zarr("SELECT 11 AS t, 0.0 AS v", out, mode="a", append_dim="t", connection=con)
    zarrsql.to_zarr("SELECT 7 AS t, 3.0 AS v", out, mode="a", append_dim="t", connection=con)
    opened = xr.open_zarr(out)
    np.testing.assert_array_equal(opened.t.values, [10, 9, 8, 7])
    np.testing.assert_array_equal(opened.v.values, [0.0, 1.0, 2.0, 3.0])


def test_one_stored_step_takes_either_direction(con: zarrsql.Connection, tmp_path: Path) -> None:
    """One step has no direction: steps below it make a falling axis (as a descending latitude
    written one band at a time), steps above it a rising one; both on each side are refused.
    Before, a one-step axis was taken as rising and steps below it were refused. The oracle is
    xarray opening the store: the cells land where xarray puts them."""
    down, up = tmp_path / "down.zarr", tmp_path / "up.zarr"
    for out in (down, up):
        zarrsql.to_zarr("SELECT 50 AS lat, 1.0 AS v", out, dims=["lat"], connection=con)
    zarrsql.to_zarr("SELECT 40 AS lat, 2.0 AS v UNION ALL SELECT 30, 3.0", down, mode="a", append_dim="lat",
                    connection=con)  # fmt: skip
    zarrsql.to_zarr("SELECT 20 AS lat, 4.0 AS v", down, mode="a", append_dim="lat", connection=con)
    opened = xr.open_zarr(down)
    np.testing.assert_array_equal(opened.lat.values, [50, 40, 30, 20])
    np.testing.assert_array_equal(opened.v.sel(lat=30).values, 3.0)
    zarrsql.to_zarr("SELECT 60 AS lat, 2.0 AS v", up, mode="a", append_dim="lat", connection=con)
    np.testing.assert_array_equal(xr.open_zarr(up).lat.values, [50, 60])
    both = tmp_path / "both.zarr"
    zarrsql.to_zarr("SELECT 50 AS lat, 1.0 AS v", both, dims=["lat"], connection=con)
    with pytest.raises(zarrsql.WriteError, match="must be above it"):
        zarrsql.to_zarr("SELECT 40 AS lat, 2.0 AS v UNION ALL SELECT 60, 3.0", both, mode="a", append_dim="lat",
                        connection=con)  # fmt: skip
    np.testing.assert_array_equal(xr.open_zarr(both).lat.values, [50])


def test_append_to_a_store_xarray_wrote(con: zarrsql.Connection, frame: pd.DataFrame, tmp_path: Path) -> None:
    """xarray's own time units (`hours since 2020-01-01 ...`) and encodings are kept: the new
    steps are encoded in them, and the store opens as the pivot of all rows."""
    out = tmp_path / "by_xarray.zarr"
    full = pivot(frame, DIMS)
    full.isel(time=slice(0, 6)).to_zarr(out)
    units = zarr.open_array(out / "time").attrs["units"]
    zarrsql.to_zarr(_steps(con, frame, slice(6, 11)), out, mode="a", append_dim="time", connection=con)
    xr.testing.assert_equal(xr.open_zarr(out).load(), full)
    assert zarr.open_array(out / "time").attrs["units"] == units
