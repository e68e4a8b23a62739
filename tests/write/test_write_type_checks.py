"""Types the writers once got wrong without a word: a TIMESTAMPTZ dimension in a session zone
other than UTC, integers wrapped into a narrower stored dtype, NULL text written as 'None',
times truncated into a coarser (or overflowing a finer) stored unit, HUGEINT rounded to
float64, a DATE column with NULLs, unsigned integers refused, unsorted appended steps, and
chunks or format silently ignored on an append. Each is now written exactly or refused.

Expected values come from numpy, pandas, xarray and zarr (the arrays as stored), or are the
literals the query's own definition implies (said where used).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.errors import AppendSchemaError, ParameterError, UnwritableColumnError


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _files(store: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(store)), p.read_bytes()) for p in store.rglob("*") if p.is_file())


# -- 1. TIMESTAMPTZ dimensions, session zone not UTC ------------------------------------------
HOURS = 8
TZ_ROWS = "SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' + range * INTERVAL 1 HOUR AS t, {y} range::DOUBLE AS v "
TZ_ROWS += "FROM range({a}, {b})"


def _utc_hours(a: int, b: int) -> np.ndarray:
    return pd.date_range("2024-01-01", periods=b - a, freq="h").values + np.timedelta64(a, "h")


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Berlin", "UTC"])
def test_a_timestamptz_dimension_on_the_streaming_path_keeps_its_cells(
    con: zarrsql.Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str
) -> None:
    """The streaming path joins rows to coordinate positions in DuckDB; the join must not
    depend on the session's TimeZone (v[i, i] = i, every other cell NaN)."""
    import zarrsql.write.grid as grid

    monkeypatch.setattr(grid, "IN_MEMORY_BYTES", 0)  # every output streams sorted by chunk
    con.execute(f"SET TimeZone='{zone}'")
    out = tmp_path / "o.zarr"
    rel = con.sql(TZ_ROWS.format(y="range::DOUBLE AS y,", a=0, b=HOURS))
    zarrsql.to_zarr(rel, out, dims=["t", "y"], chunks=3, connection=con)
    opened = xr.open_zarr(out).load()
    np.testing.assert_array_equal(opened.t.values, _utc_hours(0, HOURS))
    expected = np.full((HOURS, HOURS), np.nan)
    np.fill_diagonal(expected, np.arange(HOURS, dtype=float))
    np.testing.assert_array_equal(opened.v.values, expected)


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York"])
def test_a_timestamptz_append_in_another_zone_lands_in_its_steps(
    con: zarrsql.Connection, tmp_path: Path, zone: str
) -> None:
    con.execute(f"SET TimeZone='{zone}'")
    out = tmp_path / "o.zarr"
    zarrsql.to_zarr(con.sql(TZ_ROWS.format(y="", a=0, b=3)), out, dims=["t"], connection=con)
    zarrsql.to_zarr(con.sql(TZ_ROWS.format(y="", a=3, b=6)), out, mode="a", append_dim="t", connection=con)
    opened = xr.open_zarr(out).load()
    np.testing.assert_array_equal(opened.t.values, _utc_hours(0, 6))
    np.testing.assert_array_equal(opened.v.values, np.arange(6, dtype=float))


# -- 2. integers that do not fit the stored dtype -----------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "sql"),
    [
        ("int8", "300"),
        ("uint8", "-1"),
        ("int32", "(2::BIGINT ** 40)::BIGINT"),
        ("int16", "40000::UINTEGER"),
    ],
)
def test_a_grid_append_refuses_integers_the_stored_dtype_cannot_hold(
    con: zarrsql.Connection, tmp_path: Path, dtype: str, sql: str
) -> None:
    out = tmp_path / "s.zarr"
    xr.Dataset({"c": (("t",), np.array([1, 2], dtype=dtype))}, coords={"t": [0, 1]}).to_zarr(out)
    before = _files(out)
    info = np.iinfo(dtype)
    with pytest.raises(AppendSchemaError, match=rf"'c'.*{dtype}.*{info.min}.*{info.max}"):
        zarrsql.to_zarr(f"SELECT 2 AS t, {sql} AS c", out, mode="a", append_dim="t", connection=con)
    assert _files(out) == before


def test_a_grid_append_takes_wide_integers_whose_values_fit(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    xr.Dataset({"c": (("t",), np.array([1, 2], dtype="int8"))}, coords={"t": [0, 1]}).to_zarr(out)
    zarrsql.to_zarr("SELECT 2 AS t, (-128)::BIGINT AS c UNION ALL SELECT 3, 127::HUGEINT::BIGINT", out, mode="a",
                    append_dim="t", connection=con)  # fmt: skip
    opened = xr.open_zarr(out).load()
    assert opened.c.dtype == np.int8
    np.testing.assert_array_equal(opened.c.values, np.array([1, 2, -128, 127], dtype=np.int8))


def test_a_grid_append_refuses_coordinates_the_stored_dtype_cannot_hold(
    con: zarrsql.Connection, tmp_path: Path
) -> None:
    out = tmp_path / "s.zarr"
    xr.Dataset({"v": (("t",), [1.0, 2.0])}, coords={"t": np.array([0, 1], dtype="int8")}).to_zarr(out)
    before = _files(out)
    with pytest.raises(AppendSchemaError, match=r"'t'.*int8"):
        zarrsql.to_zarr("SELECT 300 AS t, 3.0 AS v", out, mode="a", append_dim="t", connection=con)
    assert _files(out) == before


# -- 3. text with missing cells in a grid append --------------------------------------------
def test_a_grid_append_refuses_text_with_missing_cells_as_a_new_store_does(
    con: zarrsql.Connection, tmp_path: Path
) -> None:
    out = tmp_path / "g.zarr"
    zarrsql.to_zarr("SELECT * FROM (VALUES (0, 'a', 'x'), (0, 'b', 'y')) t(t, station, name)", out,
                    dims=["t", "station"], connection=con)  # fmt: skip
    before = _files(out)
    with pytest.raises(UnwritableColumnError, match="'name'.*COALESCE"):  # a NULL cell
        zarrsql.to_zarr("SELECT 1 AS t, station, NULL::VARCHAR AS name FROM (VALUES ('a'), ('b')) s(station)", out,
                        mode="a", append_dim="t", connection=con)  # fmt: skip
    with pytest.raises(UnwritableColumnError, match="'name'.*COALESCE"):  # no row for station b
        zarrsql.to_zarr("SELECT 1 AS t, 'a' AS station, 'z' AS name", out, mode="a", append_dim="t", connection=con)
    assert _files(out) == before
    zarrsql.to_zarr("SELECT 1 AS t, station, 'z' AS name FROM (VALUES ('a'), ('b')) s(station)", out, mode="a",
                    append_dim="t", connection=con)  # fmt: skip
    assert xr.open_zarr(out).name.values.tolist() == [["x", "y"], ["z", "z"]]


# -- 4. table appends into a time column of another unit -------------------------------------
@pytest.mark.parametrize(
    ("first", "appended", "problem"),
    [
        ("DATE '2024-01-01'", "TIMESTAMP '2024-01-05 13:45:00'", "exactly"),
        ("TIMESTAMP_S '2024-01-01'", "TIMESTAMP '2024-01-01 00:00:00.75'", "exactly"),
        ("TIMESTAMP_MS '2024-01-01'", "TIMESTAMP_NS '2024-01-01 00:00:00.000000001'", "exactly"),
        ("TIMESTAMP_NS '2024-01-01'", "TIMESTAMP '3000-01-01'", "range"),
        ("TIMESTAMP_NS '2024-01-01'", "DATE '1500-01-01'", "range"),
    ],
)
def test_a_table_append_refuses_times_the_stored_unit_cannot_hold(
    con: zarrsql.Connection, tmp_path: Path, first: str, appended: str, problem: str
) -> None:
    out = tmp_path / "s.zarr"
    zarrsql.to_zarr(f"SELECT {first} AS d", out, layout="table", connection=con)
    before = _files(out)
    with pytest.raises(AppendSchemaError, match=rf"'d'.*{problem}"):
        zarrsql.to_zarr(f"SELECT {appended} AS d", out, layout="table", mode="a", connection=con)
    assert _files(out) == before


@pytest.mark.parametrize(
    ("first", "appended", "unit", "expected"),
    [
        ("DATE '2024-01-01'", "TIMESTAMP '2024-01-05 00:00:00'", "D", "2024-01-05"),
        ("TIMESTAMP '2024-01-01'", "DATE '2024-01-05'", "us", "2024-01-05"),
        ("TIMESTAMP_S '2024-01-01'", "TIMESTAMP '2024-01-01 00:00:07'", "s", "2024-01-01T00:00:07"),
        ("TIMESTAMP_NS '2024-01-01'", "TIMESTAMP '2262-04-11 00:00:00'", "ns", "2262-04-11"),
        ("TIMESTAMP_S '2024-01-01'", "TIMESTAMP '1969-12-31 23:59:59'", "s", "1969-12-31T23:59:59"),
    ],
)
def test_a_table_append_takes_times_the_stored_unit_holds_exactly(
    con: zarrsql.Connection, tmp_path: Path, first: str, appended: str, unit: str, expected: str
) -> None:
    out = tmp_path / "s.zarr"
    zarrsql.to_zarr(f"SELECT {first} AS d", out, layout="table", connection=con)
    zarrsql.to_zarr(f"SELECT {appended} AS d", out, layout="table", mode="a", connection=con)
    stored = zarr.open_array(out / "d")[:]
    assert stored.dtype == np.dtype(f"datetime64[{unit}]")
    assert stored[1] == np.datetime64(expected, unit)


# -- 5. HUGEINT (and DECIMAL without a scale) in a grid -----------------------------------------
@pytest.mark.parametrize(
    "sql",
    [
        "9007199254740993::HUGEINT",  # 2**53 + 1
        "9007199254740993::DECIMAL(38,0)",
        "(2::HUGEINT ** 100)::HUGEINT + 1",
        "340282366920938463463374607431768211455::UHUGEINT",  # past HUGEINT's range as a double too
    ],
)
def test_a_grid_refuses_integers_float64_cannot_hold(con: zarrsql.Connection, tmp_path: Path, sql: str) -> None:
    out = tmp_path / "h.zarr"
    with pytest.raises(UnwritableColumnError, match=r"'v'.*CAST"):
        zarrsql.to_zarr(f"SELECT 0 AS i, {sql} AS v", out, dims=["i"], connection=con)
    assert not out.exists()


def test_a_grid_keeps_hugeints_and_decimals_float64_holds(con: zarrsql.Connection, tmp_path: Path) -> None:
    """sum() of integers is a HUGEINT; small sums and scaled DECIMALs stay float64 (documented)."""
    out = tmp_path / "h.zarr"
    zarrsql.to_zarr("SELECT i, sum(i * 1000) AS total, (i + 0.25)::DECIMAL(38,2) AS price, "
                    "(2::HUGEINT ** 53)::HUGEINT AS big FROM range(3) r(i) GROUP BY i ORDER BY i", out, dims=["i"],
                    connection=con)  # fmt: skip
    opened = xr.open_zarr(out).load()
    assert opened.total.dtype == np.float64
    np.testing.assert_array_equal(opened.total.values, np.arange(3) * 1000.0)
    np.testing.assert_array_equal(opened.price.values, np.arange(3) + 0.25)
    np.testing.assert_array_equal(opened.big.values, np.full(3, 2.0**53))


# -- 6. a DATE column with NULLs in a table ---------------------------------------------------
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_table_date_column_with_nulls_is_a_nullable_group(
    con: zarrsql.Connection, tmp_path: Path, zarr_format: int
) -> None:
    out = tmp_path / "t.zarr"
    zarrsql.to_zarr("SELECT CASE WHEN range = 1 THEN NULL ELSE DATE '2024-01-01' + range::INTEGER END AS d "
                    "FROM range(3) ORDER BY range", out, layout="table", zarr_format=zarr_format,
                    connection=con)  # fmt: skip
    group = zarr.open_group(out, mode="r")
    assert group["d"].attrs["encoding-type"] == "nullable"
    mask, values = group["d/mask"][:], group["d/values"][:]
    np.testing.assert_array_equal(mask, [False, True, False])
    oracle = pd.Series(values).where(~mask)  # NULL where the mask says so
    expected = pd.Series(pd.to_datetime(["2024-01-01", None, "2024-01-03"]))
    pd.testing.assert_series_equal(oracle.astype("datetime64[ns]"), expected, check_names=False)
    read = [r[0] for r in con.sql(f"SELECT d FROM read_zarr('{out}')").fetchall()]
    assert read == [None if pd.isna(v) else v.to_pydatetime() for v in oracle]


# -- 7. safe integer casts in table appends; chunks and format on a grid append ----------------
def test_a_table_append_takes_unsigned_integers_that_cast_safely(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "i.zarr"
    zarrsql.to_zarr("SELECT 1::BIGINT AS f", out, layout="table", connection=con)
    zarrsql.to_zarr("SELECT 4294967295::UINTEGER AS f", out, layout="table", mode="a", connection=con)
    stored = zarr.open_array(out / "f")[:]
    assert stored.dtype == np.int64
    np.testing.assert_array_equal(stored, [1, 4294967295])
    with pytest.raises(AppendSchemaError, match="'f'.*uint64"):  # UBIGINT does not fit BIGINT
        zarrsql.to_zarr("SELECT 18446744073709551615::UBIGINT AS f", out, layout="table", mode="a", connection=con)


def _append_grid(con: zarrsql.Connection, sql: str, out: Path, **kwargs: object) -> None:
    """The grid append entry point with the `chunks` / `zarr_format` given to `to_zarr`."""
    from zarrsql.write.grid_append import append_grid
    from zarrsql.write.source import source_of

    append_grid(source_of(sql, con), str(out), None, "n", None, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [({"chunks": 1}, "chunks"), ({"chunks": {"n": 2}}, "chunks"), ({"zarr_format": 2}, "zarr_format")],
)
def test_a_grid_append_refuses_chunks_or_format_other_than_the_stores(
    con: zarrsql.Connection, tmp_path: Path, kwargs: dict, text: str
) -> None:
    out = tmp_path / "g.zarr"
    zarrsql.to_zarr("SELECT range AS n, range * 1.0 AS x FROM range(3)", out, dims=["n"], connection=con)
    before = _files(out)
    with pytest.raises(ParameterError, match=text):
        _append_grid(con, "SELECT 5 AS n, 1.0 AS x", out, **kwargs)
    assert _files(out) == before
    _append_grid(con, "SELECT 5 AS n, 1.0 AS x", out, chunks=3, zarr_format=3)  # the store's own: taken
    np.testing.assert_array_equal(xr.open_zarr(out).n.values, [0, 1, 2, 5])


# -- unsorted appended steps --------------------------------------------------------------------
@pytest.mark.parametrize("descending", [True, False])
def test_unsorted_appended_steps_are_stored_in_the_stores_direction(
    con: zarrsql.Connection, tmp_path: Path, descending: bool
) -> None:
    sign = -1 if descending else 1
    out = tmp_path / "d.zarr"
    zarrsql.to_zarr(f"SELECT {sign} * range AS t, range * 1.0 AS v FROM range(3) ORDER BY range", out, dims=["t"],
                    connection=con)  # fmt: skip
    zarrsql.to_zarr(f"SELECT {sign} * k AS t, k * 1.0 AS v FROM (VALUES (4), (3), (5)) x(k)", out, mode="a",
                    append_dim="t", connection=con)  # fmt: skip
    zarrsql.to_zarr(f"SELECT {sign} * 6 AS t, 6.0 AS v", out, mode="a", append_dim="t", connection=con)
    opened = xr.open_zarr(out).load()
    np.testing.assert_array_equal(opened.t.values, sign * np.arange(7))
    np.testing.assert_array_equal(opened.v.values, np.arange(7, dtype=float))  # v = |t| by construction
