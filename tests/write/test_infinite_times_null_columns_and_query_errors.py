"""Writers and three edges of their input (session 24, writers hunt W2-W4):

- a TIMESTAMP or DATE 'infinity' / '-infinity' has no datetime64 value: both layouts refuse
  it (the table layout used to store DuckDB's largest count, which read back as NULL in
  zarrsql and as the year 294247 in xarray; the grid layout wrote a TIMESTAMP_NS infinity as
  2262-04-11);
- a query that fails while its rows are written is one `WriteError` on every path (grid new
  store, grid append, table, Icechunk session), chained from DuckDB's error, quoting DuckDB's
  message but never the SQL zarrsql runs around the relation; the store is left as it was;
- a bare `NULL AS v` (DuckDB 2 types it `null`) appends as every cell missing to a grid
  variable that can mark one, and is refused elsewhere with a hint that works
  (`NULL::DOUBLE AS v`), as the append's "missing variable" hint now says.

Oracles: DuckDB for what the relation holds (`isfinite`, the values), xarray and
zarr-python reading the store back.
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.write import grid as grid_writer

DUCKDB_2 = int(duckdb.__version__.split(".")[0]) >= 2
#: DuckDB 1.5 types a bare NULL as INTEGER (it then appends as an integer column would).
needs_null_type = pytest.mark.skipif(not DUCKDB_2, reason="DuckDB before 2.0 types a bare NULL as INTEGER")


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _tree(path) -> dict[str, bytes]:
    """Every file of a local store, by relative path: a store "left as it was" has the same."""
    files = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                files[os.path.relpath(full, path)] = f.read()
    return files


# ----------------------------------------------------------------------------- infinite times
INFINITE = [
    (sql_type, value)
    for sql_type in ("TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "DATE")
    for value in ("infinity", "-infinity")
]


def _with_infinity(sql_type: str, value: str) -> str:
    """Three rows, the second of them `value` (a time, or 'infinity' / '-infinity')."""
    return (
        f"SELECT k, CASE WHEN k = 1 THEN '{value}'::{sql_type} "
        f"ELSE (TIMESTAMP '2024-01-01' + k * INTERVAL 1 DAY)::{sql_type} END AS ts FROM range(3) r(k)"
    )


@pytest.mark.parametrize(("sql_type", "value"), INFINITE)
def test_the_table_layout_refuses_an_infinite_time(con, tmp_path, sql_type, value) -> None:
    query = _with_infinity(sql_type, value)
    assert con.sql(f"SELECT count(*) FILTER (WHERE NOT isfinite(ts)) FROM ({query})").fetchall() == [(1,)]
    out = tmp_path / "t.zarr"
    with pytest.raises(zarrsql.UnwritableColumnError, match=f"'{value}'") as caught:
        zarrsql.to_zarr(query, str(out), layout="table", connection=con)
    assert "isfinite" in str(caught.value)  # the fix: filter them out
    assert not out.exists()


@pytest.mark.parametrize("value", ["infinity", "-infinity"])
def test_a_table_append_of_an_infinite_time_leaves_the_table_unchanged(con, tmp_path, value) -> None:
    out = tmp_path / "t.zarr"
    zarrsql.to_zarr(_with_infinity("TIMESTAMP", "2020-01-01"), str(out), layout="table", connection=con)
    before = _tree(out)
    with pytest.raises(zarrsql.UnwritableColumnError, match=f"'{value}'"):
        zarrsql.to_zarr(_with_infinity("TIMESTAMP", value), str(out), layout="table", mode="a", connection=con)
    assert _tree(out) == before


def test_finite_times_in_the_table_layout_still_read_back(con, tmp_path) -> None:
    query = (
        "SELECT k, TIMESTAMP '2024-01-01' + k * INTERVAL 36 HOUR AS ts, DATE '1999-12-31' + k::INT AS d "
        "FROM range(3) r(k)"
    )
    out = tmp_path / "t.zarr"
    zarrsql.to_zarr(query, str(out), layout="table", connection=con)
    expected = con.sql(f"SELECT ts, d FROM ({query}) ORDER BY k").df()
    ds = xr.open_zarr(out)
    np.testing.assert_array_equal(ds.ts.values.astype("datetime64[us]"), expected.ts.values.astype("datetime64[us]"))
    np.testing.assert_array_equal(ds.d.values.astype("datetime64[D]"), expected.d.values.astype("datetime64[D]"))


@pytest.mark.parametrize("value", ["infinity", "-infinity"])
@pytest.mark.parametrize("dims", [["k"], ["ts"]])
def test_the_grid_refuses_a_nanosecond_infinity(con, tmp_path, value, dims) -> None:
    """As a variable and as a coordinate: TIMESTAMP_NS's infinity fits datetime64[ns] (2262-04-11)."""
    query = _with_infinity("TIMESTAMP_NS", value)
    out = tmp_path / "g.zarr"
    with pytest.raises(zarrsql.WriteError, match=f"'{value}'"):
        zarrsql.to_zarr(query, str(out), dims=dims, connection=con)
    assert not out.exists()


# ----------------------------------------------------------------------------- failing queries
GOOD = "SELECT i AS t, i * 1.0 AS v FROM range(10) r(i)"
#: Fails (a CAST of 'x<i>') from the row i = 12 on, after the rows before it were read.
BAD = "SELECT i AS t, CASE WHEN i < 12 THEN i ELSE ('x' || i)::BIGINT END::DOUBLE AS v FROM range({a}, {b}) r(i)"
BAD_INT = "SELECT i AS t, CASE WHEN i < 12 THEN i ELSE ('x' || i)::BIGINT END AS v FROM range({a}, {b}) r(i)"


def _layout(layout: str) -> dict[str, object]:
    return {"dims": ["t"]} if layout == "grid" else {"layout": layout}


def _check_query_error(caught: pytest.ExceptionInfo[zarrsql.WriteError], store: str) -> None:
    """One error on every path: DuckDB's message, none of zarrsql's SQL, chained from DuckDB's."""
    text = str(caught.value)
    assert text.startswith(f"the query failed while its rows were written to '{store}'")
    assert "Could not convert string 'x12'" in text
    assert "__zarrsql" not in text
    assert "LINE 1" not in text
    _check_chained(caught.value)


def _check_chained(err: BaseException) -> None:
    """Raised from DuckDB's error: as itself, or carried out of the Arrow stream by an OSError."""
    assert isinstance(err.__cause__, (duckdb.Error, OSError))
    assert "Conversion Error" in str(err.__cause__)


@pytest.mark.parametrize("bad", [BAD, BAD_INT], ids=["double", "bigint"])
@pytest.mark.parametrize("layout", ["grid", "table"])
def test_a_new_store_of_a_failing_query_is_a_write_error(con, tmp_path, layout, bad) -> None:
    out = str(tmp_path / "n.zarr")
    with pytest.raises(zarrsql.WriteError) as caught:
        zarrsql.to_zarr(
            bad.format(a=0, b=1000),
            out,
            connection=con,
            **_layout(layout),
        )
    _check_query_error(caught, out)
    assert not os.path.exists(out)


def test_a_failure_in_a_later_batch_of_a_streamed_grid_is_a_write_error(con, tmp_path, monkeypatch) -> None:
    """The streamed write (sorted by chunk through zarrsql's own SQL) of a grid too large to be
    held whole: made "large" by lowering the threshold, failing past the first batch."""
    monkeypatch.setattr(grid_writer, "IN_MEMORY_BYTES", 0)
    out = str(tmp_path / "n.zarr")
    bad = "SELECT i AS t, CASE WHEN i < 200000 THEN i ELSE ('x' || i)::BIGINT END::DOUBLE AS v FROM range(300000) r(i)"
    with pytest.raises(zarrsql.WriteError) as caught:
        zarrsql.to_zarr(bad, out, dims=["t"], connection=con)
    assert "Could not convert string 'x200000'" in str(caught.value)
    assert "__zarrsql" not in str(caught.value)
    assert "LINE 1" not in str(caught.value)
    _check_chained(caught.value)
    assert not os.path.exists(out)


@pytest.mark.parametrize("bad", [BAD, BAD_INT], ids=["double", "bigint"])
def test_a_grid_append_of_a_failing_query_is_a_write_error_and_rolled_back(con, tmp_path, bad) -> None:
    out = str(tmp_path / "g.zarr")
    good = GOOD if bad is BAD else GOOD.replace("i * 1.0", "i")
    zarrsql.to_zarr(good, out, dims=["t"], connection=con)
    before, expected = _tree(out), xr.open_zarr(out).load()
    with pytest.raises(zarrsql.WriteError) as caught:
        zarrsql.to_zarr(bad.format(a=10, b=1000), out, mode="a", append_dim="t", connection=con)
    _check_query_error(caught, out)
    assert _tree(out) == before
    xr.testing.assert_identical(xr.open_zarr(out).load(), expected)


def test_a_table_append_of_a_failing_query_is_the_same_write_error(con, tmp_path) -> None:
    out = str(tmp_path / "t.zarr")
    zarrsql.to_zarr(GOOD, out, layout="table", connection=con)
    before = _tree(out)
    with pytest.raises(zarrsql.WriteError) as caught:
        zarrsql.to_zarr(BAD.format(a=10, b=1000), out, layout="table", mode="a", connection=con)
    _check_query_error(caught, out)
    assert _tree(out) == before


@pytest.mark.parametrize("mode", ["w-", "a"])
def test_a_failing_query_into_an_icechunk_session_leaves_it_unchanged(con, tmp_path, mode) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    if mode == "a":
        session = repo.writable_session("main")
        zarrsql.to_zarr(GOOD, session, dims=["t"], connection=con)
        session.commit("first")
    session = repo.writable_session("main")
    extra = {"mode": "a", "append_dim": "t"} if mode == "a" else {}
    with pytest.raises(zarrsql.WriteError) as caught:
        zarrsql.to_zarr(BAD.format(a=10, b=1000), session, dims=["t"], connection=con, **extra)
    assert "Could not convert string 'x12'" in str(caught.value)
    assert "__zarrsql" not in str(caught.value)
    assert "LINE 1" not in str(caught.value)
    _check_chained(caught.value)
    assert not session.has_uncommitted_changes


# ----------------------------------------------------------------------------- bare NULL columns
def _grid(con, out, query: str = "SELECT i AS t, i * 1.0 AS v, i * 2.0 AS w FROM range(3) r(i)", dims=("t",)):
    """A new grid store of `query` at `out`, as xarray reads it."""
    zarrsql.to_zarr(query, out, dims=list(dims), connection=con)
    return xr.open_zarr(out).load()


def test_the_missing_variable_hint_works_as_given(con, tmp_path) -> None:
    out = str(tmp_path / "g.zarr")
    before = _grid(con, out)
    with pytest.raises(zarrsql.AppendSchemaError, match="'v', which the relation lacks") as caught:
        zarrsql.to_zarr("SELECT 3 AS t, 1.0 AS w", out, mode="a", append_dim="t", connection=con)
    hint = 'NULL::DOUBLE AS "v"'
    assert hint in str(caught.value)
    zarrsql.to_zarr(f"SELECT 3 AS t, {hint}, 1.0 AS w", out, mode="a", append_dim="t", connection=con)
    after = xr.open_zarr(out).load()
    np.testing.assert_array_equal(after.v.values, [*before.v.values, np.nan])
    np.testing.assert_array_equal(after.w.values, [*before.w.values, 1.0])


def test_a_bare_null_appends_as_missing_cells_of_a_float_variable(con, tmp_path) -> None:
    """On DuckDB 1.5 the bare NULL is an INTEGER, which a float array takes too: same result."""
    out = str(tmp_path / "g.zarr")
    before = _grid(con, out)
    zarrsql.to_zarr("SELECT 3 AS t, NULL AS v, 1.0 AS w", out, mode="a", append_dim="t", connection=con)
    after = xr.open_zarr(out).load()
    assert after.v.dtype == before.v.dtype
    np.testing.assert_array_equal(after.v.values, [*before.v.values, np.nan])
    back = con.sql(f"SELECT v FROM read_zarr('{out}') ORDER BY t").fetchall()
    assert back == [(0.0,), (1.0,), (2.0,), (None,)]


@needs_null_type
def test_a_bare_null_appends_as_missing_times(con, tmp_path) -> None:
    out = str(tmp_path / "g.zarr")
    before = _grid(con, out, "SELECT i AS t, TIMESTAMP '2024-01-01' + i * INTERVAL 1 DAY AS ts FROM range(3) r(i)")
    zarrsql.to_zarr("SELECT 3 AS t, NULL AS ts", out, mode="a", append_dim="t", connection=con)
    after = xr.open_zarr(out).load()
    np.testing.assert_array_equal(after.ts.values[:3], before.ts.values)
    assert np.isnat(after.ts.values[3])


@needs_null_type
def test_a_bare_null_is_refused_by_a_complete_integer_variable(con, tmp_path) -> None:
    out = str(tmp_path / "g.zarr")
    _grid(con, out, "SELECT i AS t, i AS n FROM range(3) r(i)")
    before = _tree(out)
    with pytest.raises(zarrsql.AppendSchemaError, match="missing cells"):
        zarrsql.to_zarr("SELECT 3 AS t, NULL AS n", out, mode="a", append_dim="t", connection=con)
    with pytest.raises(zarrsql.AppendSchemaError, match="every cell needs a value") as caught:
        zarrsql.to_zarr("SELECT 3 AS t", out, mode="a", append_dim="t", connection=con)
    assert "NULL::" not in str(caught.value)  # no hint that would be refused in turn
    assert _tree(out) == before


@needs_null_type
@pytest.mark.parametrize("layout", ["grid", "table", "xarray"])
def test_a_new_store_asks_for_the_bare_null_s_type(con, tmp_path, layout) -> None:
    out = str(tmp_path / "n.zarr")

    def write(query: str) -> xr.Dataset | None:
        if layout == "xarray":
            return zarrsql.to_xarray(con.sql(query), dims=["t"])
        zarrsql.to_zarr(query, out, connection=con, **_layout(layout))
        return None

    with pytest.raises(zarrsql.UnwritableColumnError, match="bare NULL") as caught:
        write("SELECT 1 AS t, NULL AS v")
    hint = 'NULL::DOUBLE AS "v"'
    assert hint in str(caught.value)
    assert not os.path.exists(out)
    result = write(f"SELECT 1 AS t, {hint}")  # the hint, followed, writes the column with no value
    if layout == "xarray":
        assert result is not None
        assert np.isnan(result.v.values).all()
    elif layout == "grid":
        assert np.isnan(xr.open_zarr(out).v.values).all()
    else:  # a nullable column: its mask marks the row NULL
        assert zarr.open_group(out, mode="r")["v/mask"][...].tolist() == [True]


# ----------------------------------------------------------------------------- type mismatches
@pytest.mark.parametrize(("select", "sort"), [("x::VARCHAR AS x", "text"), ("to_timestamp(x) AS x", "times")])
def test_a_dimension_of_another_type_is_refused_by_its_type(con, tmp_path, select, sort) -> None:
    out = str(tmp_path / "g.zarr")
    _grid(con, out, "SELECT i AS t, x, i * 1.0 AS v FROM range(3) r(i), range(2) s(x)", dims=("t", "x"))
    before = _tree(out)
    query = f"SELECT 3 AS t, {select}, 1.0 AS v FROM range(2) s(x)"
    with pytest.raises(zarrsql.AppendSchemaError, match=f"dimension 'x' holds {sort} in the relation") as caught:
        zarrsql.to_zarr(query, out, mode="a", append_dim="t", connection=con)
    assert 'CAST("x" AS BIGINT)' in str(caught.value)
    assert _tree(out) == before


def test_a_hugeint_appended_to_a_bigint_column_names_hugeint(con, tmp_path) -> None:
    out = str(tmp_path / "t.zarr")
    zarrsql.to_zarr("SELECT i AS n FROM range(3) r(i)", out, layout="table", connection=con)
    assert zarr.open_group(out, mode="r")["n"].dtype == np.dtype(np.int64)
    before = _tree(out)
    with pytest.raises(zarrsql.AppendSchemaError, match="HUGEINT") as caught:
        zarrsql.to_zarr("SELECT sum(i) AS n FROM range(3) r(i)", out, layout="table", mode="a", connection=con)
    assert 'CAST("n" AS BIGINT)' in str(caught.value)
    assert _tree(out) == before
