"""Where a statement names a store, and what pushed filters keep (session 23, four defects).

1. NaN coordinates read with `nan_as_null := false`: DuckDB compares floats by its own rules
   (NaN equals NaN, every NaN alike, and is greater than every other value). On DuckDB 1.5 the
   filters DuckDB pushes into zarrsql's Arrow dataset (`x > 2`, a join's `is_in(x, {...}) and
   x >= min`) were applied with Arrow's IEEE rules, which lost the NaN rows.
2. A join or IN subquery on a UBIGINT dimension with keys past 2**63: on DuckDB 1.5 the keys
   zarrsql pushed as `u IN (...)` failed in DuckDB's hand-over to Arrow (OverflowError).
3. A `'x.zarr'` string in the table positions DuckDB reads a Parquet file in (DESCRIBE,
   SUMMARIZE, TABLE, PIVOT, COPY ... TO, after a comment) failed with a catalog error.
4. `SHOW TABLES` followed by a comment or `; -- comment` failed with a parser error.

Oracles: numpy over the coordinates xarray reads (with DuckDB's float rules written out),
`np.isin` for keys, plain DuckDB over a Parquet copy of xarray's `to_dataframe()` for the table
positions, and plain DuckDB on the same SHOW statements. Every test runs on DuckDB 2.x and 1.5;
1 and 2 failed on 1.5 only, 3 and 4 on both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.joins import MAX_TUPLE_KEYS

#: Float coordinates: NaN and -NaN (another bit pattern), infinity, both zeros, in chunks of 2.
X = np.array([-3.0, -2.0, -1.0, 0.0, 0.5, np.nan, 1.0, 2.0, 3.0, 4.0, -np.float64(np.nan), np.inf, -0.0, 5.0])
X_CHUNK = 2
#: UBIGINT coordinates on both sides of 2**63 (BIGINT's end), in chunks of 50: 6 work units.
HALF = 150
U = np.concatenate([np.arange(HALF, dtype="uint64"), np.uint64(2**63) + np.arange(HALF, dtype="uint64")])
U_CHUNK = 50


def _write(path: Path, dim: str, values: np.ndarray, chunk: int) -> None:
    ds = xr.Dataset({"v": ((dim,), np.arange(values.size, dtype="float64"))}, coords={dim: values})
    encoding = {name: {"chunks": (chunk,), "_FillValue": None} for name in (dim, "v")}
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=False, encoding=encoding)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("surface")
    _write(folder / "x.zarr", "x", X, X_CHUNK)
    _write(folder / "u.zarr", "u", U, U_CHUNK)
    table = folder / "a.zarr"
    xr.Dataset({"v": (("x",), np.array([1.5, 2.5, 4.0]))}, coords={"x": np.array([10, 20, 30], dtype="int64")}).to_zarr(
        table, mode="w", consolidated=False
    )
    frame = xr.open_zarr(table, consolidated=False).to_dataframe().reset_index()  # noqa: F841 - read by DuckDB
    plain = duckdb.connect()
    plain.execute(f"COPY (SELECT x, v FROM frame) TO '{folder / 'a.parquet'}' (FORMAT parquet)")
    return {
        "folder": folder,
        "x": str(folder / "x.zarr"),
        "x_values": xr.open_zarr(folder / "x.zarr", consolidated=False)["x"].values,
        "u": str(folder / "u.zarr"),
        "u_values": xr.open_zarr(folder / "u.zarr", consolidated=False)["u"].values,
        "table": str(table),
        "parquet": str(folder / "a.parquet"),
    }


# -- 1. NaN by DuckDB's rules in filters pushed to the scan ---------------------------------


def _greater(x: np.ndarray, c: float) -> np.ndarray:
    """DuckDB's `x > c` for a number `c`: NaN is greater than every number."""
    return (x > c) | np.isnan(x)


#: WHERE clauses on the float coordinate, and DuckDB's answer for each cell (its float rules:
#: NaN = NaN, NaN greater than every other value, -0.0 = 0.0).
NAN_CONDITIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "x > 2": lambda x: _greater(x, 2),
    "x >= 0": lambda x: _greater(x, 0) | (x == 0),
    "NOT (x < 2)": lambda x: _greater(x, 2) | (x == 2),
    "x > 'inf'": np.isnan,
    "x >= 'inf'": lambda x: np.isnan(x) | (x == np.inf),
    "x BETWEEN 0 AND 'inf'": lambda x: (x >= 0) & ~np.isnan(x),
    "x < 2": lambda x: x < 2,
    "x <= 0": lambda x: x <= 0,
    "x <> 3": lambda x: (x != 3) | np.isnan(x),
    "x = 'NaN'": np.isnan,
    "x IN (3, 'NaN')": lambda x: (x == 3) | np.isnan(x),
    "x IN (0, 'NaN')": lambda x: (x == 0) | np.isnan(x),
    "x IN (SELECT x FROM {M} WHERE isnan(x) OR x > 3)": lambda x: _greater(x, 3),
}


def _units_holding(mask: np.ndarray, chunk: int) -> int:
    return len(set(np.flatnonzero(mask) // chunk))


@pytest.mark.parametrize("where", list(NAN_CONDITIONS))
def test_pushed_float_conditions_follow_duckdbs_nan_rules(stores: dict[str, Any], where: str) -> None:
    """On 1.5 `x > 2` lost the NaN cells (Arrow's `>`), `x IN (.., 'NaN')` the -NaN cell
    (Arrow's `is_in` matches NaN by its bits): the rows are now DuckDB's."""
    source = f"read_zarr('{stores['x']}', nan_as_null := false)"
    expected = sorted(np.flatnonzero(NAN_CONDITIONS[where](stores["x_values"])).astype(float).tolist())
    with zarrsql.connect() as con:
        got = sorted(v for (v,) in con.sql(f"SELECT v FROM {source} WHERE {where.format(M=source)}").fetchall())
    assert got == expected


def test_pushed_comparison_keeps_nan_and_still_prunes(stores: dict[str, Any]) -> None:
    """The NaN rows are kept without giving up pruning: the units read are those holding a
    matching cell (a unit holding NaN, or a number above 2.5), no more."""
    x = stores["x_values"]
    mask = _greater(x, 2.5)
    with zarrsql.connect() as con, zarrsql.trace() as t:
        rows = con.sql(f"SELECT v FROM read_zarr('{stores['x']}', nan_as_null := false) WHERE x > 2.5").fetchall()
    assert sorted(v for (v,) in rows) == np.flatnonzero(mask).astype(float).tolist()
    assert t.work_units_read == _units_holding(mask, X_CHUNK) < len(x) // X_CHUNK


def test_equi_join_on_a_float_coordinate_matches_nan_with_nan(stores: dict[str, Any]) -> None:
    """A self-join on `x`: DuckDB 1.5 pushes the join's keys (`is_in(x, {..}) and x >= min`)
    into the probe side's scan, where Arrow dropped every NaN. NaN and -NaN match each other."""
    x = stores["x_values"]
    same = (x[:, None] == x[None, :]) | (np.isnan(x)[:, None] & np.isnan(x)[None, :])
    expected = sorted((float(i), float(j)) for i, j in zip(*np.nonzero(same), strict=True))
    source = f"read_zarr('{stores['x']}', nan_as_null := false)"
    with zarrsql.connect() as con:
        got = sorted(con.sql(f"SELECT a.v, b.v FROM {source} a JOIN {source} b ON a.x = b.x").fetchall())
    assert got == expected


# -- 2. UBIGINT keys past 2**63 -------------------------------------------------------------


def _keys_table(con: Any, keys: list[int]) -> None:
    con.execute("CREATE OR REPLACE TABLE k AS SELECT unnest(?::UBIGINT[]) AS u", [keys])


def _matching(stores: dict[str, Any], keys: list[int]) -> tuple[list[tuple], np.ndarray]:
    mask = np.isin(stores["u_values"], np.array(keys, dtype="uint64"))
    return [(int(mask.sum()), float(np.flatnonzero(mask).sum()))], mask


@pytest.mark.parametrize("shape", ["join", "in"])
def test_ubigint_keys_on_both_sides_of_2_63_prune(stores: dict[str, Any], shape: str) -> None:
    """Two keys, one past BIGINT's range: pushed as equalities on 1.5, the units read are the
    two holding them."""
    keys = [1, 2**63 + 1]
    expected, mask = _matching(stores, keys)
    source = f"read_zarr('{stores['u']}')"
    sql = {
        "join": f"SELECT count(*), sum(v) FROM {source} JOIN k USING (u)",
        "in": f"SELECT count(*), sum(v) FROM {source} WHERE u IN (SELECT u FROM k)",
    }[shape]
    with zarrsql.connect() as con:
        _keys_table(con, keys)
        with zarrsql.trace() as t:
            got = con.sql(sql).fetchall()
    assert got == expected
    assert t.work_units_read == _units_holding(mask, U_CHUNK) == 2


def test_many_ubigint_keys_past_2_63_join(stores: dict[str, Any]) -> None:
    """More keys than `MAX_TUPLE_KEYS` (too many equalities), on both sides of 2**63: the
    join runs (on 1.5 its pushed filter is a range) and finds the rows numpy finds."""
    per_side = MAX_TUPLE_KEYS // 2 + 6
    keys = [2 * k for k in range(per_side)] + [2**63 + 2 * k + 1 for k in range(per_side)]
    expected, _ = _matching(stores, keys)
    with zarrsql.connect() as con:
        _keys_table(con, keys)
        got = con.sql(f"SELECT count(*), sum(v) FROM read_zarr('{stores['u']}') JOIN k USING (u)").fetchall()
    assert got == expected


# -- 3. a store's string in every table position --------------------------------------------

#: Statements naming a table `{T}` where plain DuckDB reads a Parquet file's string.
TABLE_POSITIONS = [
    "DESCRIBE {T}",
    "DESCRIBE TABLE {T}",
    "SUMMARIZE {T}",
    "SHOW {T}",
    "TABLE {T}",
    "SELECT * FROM (TABLE {T})",
    "PIVOT {T} ON x USING sum(v)",
    "UNPIVOT {T} ON v INTO NAME name VALUE value",
    "SELECT * FROM /* a comment */ {T}",
    "SELECT * FROM -- a comment\n{T}",
    "SELECT r.range, t.* FROM range(2) r, /* c */ {T} t",
    "SELECT count(*) FROM (SELECT 1) s JOIN {T} t ON true, {T} u",
]


@pytest.mark.parametrize("statement", TABLE_POSITIONS)
def test_store_string_reads_where_duckdb_reads_a_parquet_file(stores: dict[str, Any], statement: str) -> None:
    """Each statement gives what plain DuckDB gives over a Parquet copy, or fails where it
    fails (`SHOW 'x'` on DuckDB 2 reads the string as a dotted name)."""
    try:
        expected: Any = sorted(duckdb.connect().sql(statement.format(T=f"'{stores['parquet']}'")).fetchall(), key=repr)
    except duckdb.Error:
        expected = duckdb.Error
    with zarrsql.connect() as con:  # a fresh connection: no view left by another statement
        if expected is duckdb.Error:
            with pytest.raises(duckdb.Error):
                con.sql(statement.format(T=f"'{stores['table']}'")).fetchall()
            return
        got = sorted(con.sql(statement.format(T=f"'{stores['table']}'")).fetchall(), key=repr)
    assert got == expected


def test_copy_of_a_store_string_to_parquet(stores: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with zarrsql.connect() as con:
        con.execute(f"COPY '{stores['table']}' TO '{out}' (FORMAT parquet)")
    plain = duckdb.connect()
    expected = sorted(plain.sql(f"SELECT * FROM '{stores['parquet']}'").fetchall())
    assert sorted(plain.sql(f"SELECT * FROM '{out}'").fetchall()) == expected


@pytest.mark.parametrize("source", ["'{store}'", "(SELECT * FROM '{store}')"])
def test_copy_to_zarr_still_writes_zarr(stores: dict[str, Any], tmp_path: Path, source: str) -> None:
    """A string after TO is the writer's target, not a table to claim (before and after)."""
    out = tmp_path / "copy.zarr"
    with zarrsql.connect() as con:
        con.execute(f"COPY {source.format(store=stores['table'])} TO '{out}'")
    written = xr.open_zarr(out, consolidated=False).to_dataframe().reset_index()
    original = xr.open_zarr(stores["table"], consolidated=False).to_dataframe().reset_index()
    assert sorted(zip(written["x"], written["v"], strict=True)) == sorted(
        zip(original["x"], original["v"], strict=True)
    )


# -- 4. SHOW TABLES with comments -----------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "SHOW TABLES -- list them",
        "SHOW ALL TABLES -- all",
        "SHOW TABLES; -- done",
        "SHOW TABLES\n-- a note",
        "/* first */ SHOW /* between */ TABLES /* last */",
        "SHOW TABLES;;",
    ],
)
def test_show_tables_with_comments_lists_what_plain_duckdb_lists(stores: dict[str, Any], statement: str) -> None:
    plain = duckdb.connect()
    plain.execute("CREATE TABLE mine(i INT)")
    expected = [row[:1] for row in plain.sql(statement).fetchall()]
    with zarrsql.connect() as con:
        con.execute("CREATE TABLE mine(i INT)")
        con.sql(f"SELECT count(*) FROM '{stores['table']}'").fetchall()  # leaves an internal view
        assert [row[:1] for row in con.sql(statement).fetchall()] == expected
