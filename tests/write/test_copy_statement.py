"""`COPY (SELECT ...) TO 'out.zarr' (FORMAT zarr, ...)` on a zarrsql connection and in
`zarrsql query`: the same store as `to_zarr`, checked with xarray; other COPY formats are
DuckDB's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql
from cli_runner import assert_one_error, run_cli
from tests.write.frames import pivot, weather

DIMS = ["time", "lat", "lon"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("copy") / "weather.zarr"
    weather().to_zarr(path)
    return str(path)


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def test_copy_with_every_grid_option(con: zarrsql.Connection, store: str, tmp_path: Path) -> None:
    out = tmp_path / "out.zarr"
    rows = con.execute(
        f"COPY (SELECT time, lat, lon, air FROM read_zarr('{store}') WHERE lat > 40) TO '{out}' "
        "(FORMAT zarr, DIMS (time, lat, lon), LAYOUT grid, CHUNKS (4, 2, 5), MODE 'w-', ZARR_FORMAT 3, "
        "CONSOLIDATED true)"
    ).fetchall()
    expected = xr.open_zarr(store).air.where(lambda a: a.lat > 40, drop=True).load()
    assert rows == [(expected.size,)]
    opened = xr.open_zarr(out).load()
    xr.testing.assert_equal(opened.air, expected.drop_attrs())
    assert zarr.open_array(out / "air").chunks == (4, 2, 5)


def test_copy_of_a_store_read_takes_its_dims(con: zarrsql.Connection, store: str, tmp_path: Path) -> None:
    out = tmp_path / "dims.zarr"
    con.sql(f"COPY (SELECT * FROM read_zarr('{store}')) TO '{out}'")  # a .zarr target is Zarr
    xr.testing.assert_equal(xr.open_zarr(out).load(), xr.open_zarr(store).load().drop_attrs())


def test_copy_of_a_table_and_append(con: zarrsql.Connection, tmp_path: Path) -> None:
    frame = weather(n_time=6).to_dataframe().reset_index()
    first, second = frame[frame.time < frame.time.iloc[0] + pd.Timedelta("12h")], frame  # noqa: F841
    rest = frame[~frame.index.isin(first.index)]  # noqa: F841
    out = tmp_path / "t"
    con.execute("CREATE TABLE head AS SELECT * FROM first")
    con.execute(f"COPY head TO '{out}' (FORMAT 'zarr', DIMS (time, lat, lon))")
    con.execute(f"COPY (SELECT * FROM rest) TO '{out}' (FORMAT zarr, MODE append, APPEND_DIM time)")
    xr.testing.assert_equal(xr.open_zarr(out).load(), pivot(frame, DIMS))
    con.execute(f"COPY (SELECT * FROM first) TO '{out}' (FORMAT zarr, DIMS (time, lat, lon), MODE overwrite)")
    xr.testing.assert_equal(xr.open_zarr(out).load(), pivot(first, DIMS))


@pytest.mark.parametrize(
    ("options", "error", "text"),
    [
        ("(FORMAT zarr, DIMS (x), SHAPE 3)", zarrsql.ParameterError, "no option SHAPE"),
        ("(FORMAT zarr, DIMS (x), MODE sideways)", zarrsql.ParameterError, "MODE is create, overwrite or append"),
        ("(FORMAT zarr, DIMS (x), CHUNKS (0))", zarrsql.ParameterError, "chunks must be a positive int"),
        ("(FORMAT zarr, DIMS (x, x))", zarrsql.ParameterError, "dims names a column twice"),
        ("(FORMAT zarr, DIMS (x), LAYOUT cube)", zarrsql.ParameterError, "layout must be 'grid' or 'table'"),
    ],
)
def test_bad_options_are_refused(
    con: zarrsql.Connection, tmp_path: Path, options: str, error: type[Exception], text: str
) -> None:
    out = tmp_path / "bad.zarr"
    with pytest.raises(error, match=text.replace("(", r"\(")):
        con.execute(f"COPY (SELECT 1 AS x, 2 AS v) TO '{out}' {options}")
    assert not out.exists()


def test_a_copy_statement_runs_alone(con: zarrsql.Connection, tmp_path: Path) -> None:
    with pytest.raises(zarrsql.ParameterError, match="statement of its own"):
        con.execute(f"SELECT 1; COPY (SELECT 1 AS x) TO '{tmp_path / 'a.zarr'}' (FORMAT zarr, DIMS (x))")


def test_other_copy_formats_are_duckdbs(con: zarrsql.Connection, tmp_path: Path) -> None:
    con.execute(f"COPY (SELECT 1 AS x) TO '{tmp_path / 'a.parquet'}' (FORMAT parquet)")
    assert pd.read_parquet(tmp_path / "a.parquet").x.tolist() == [1]


def test_copy_in_zarrsql_query(store: str, tmp_path: Path) -> None:
    out = tmp_path / "cli.zarr"
    sql = f"COPY (SELECT * FROM read_zarr('{store}') WHERE lon = 0) TO '{out}' (FORMAT zarr, DIMS (time, lat, lon))"
    done = run_cli("query", store, sql)
    assert done.returncode == 0, done.stderr
    expected = xr.open_zarr(store).load().sel(lon=[0.0]).drop_attrs()
    xr.testing.assert_equal(xr.open_zarr(out).load(), expected)
    again = run_cli("query", store, sql)
    assert_one_error(again, "already exists", 'mode="w"')
    np.testing.assert_array_equal(xr.open_zarr(out).lon.values, [0.0])


def test_copy_with_layout_table(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "rows.zarr"
    con.execute(f"COPY (SELECT i AS id, i % 3 = 0 AS flag FROM range(5) t(i)) TO '{out}' (FORMAT zarr, LAYOUT table)")
    con.execute(f"COPY (SELECT 5::BIGINT AS id, true AS flag) TO '{out}' (FORMAT zarr, LAYOUT table, MODE append)")
    rows = zarrsql.read_zarr(out, connection=con).order("id").fetchall()
    assert rows == [(i, i % 3 == 0) for i in range(5)] + [(5, True)]
