"""A comparison with NaN that every number passes (`v <= 'nan'`, `NOT (v > 'nan')`) drops the
NULL rows, as DuckDB answers it; the comparisons around it keep theirs.

DuckDB 1.5 hands such a condition to an Arrow scan as the bare condition `true`, without the
column it named, so its NULL rows pass (plain DuckDB 1.5 over any Arrow dataset does the same;
a documented limit of 1.5 in docs/user-guide.md, "On DuckDB 1.5"). The same `true` stands in
conditions whose column holds no NULL (a coordinate), where it is right, so the scan cannot
refuse it. DuckDB 2 scans through its own protocol and answers it. Oracle: plain DuckDB over a
native table of the raw values, the sentinel cells NULL.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import zarr

import zarrsql

V1_5 = duckdb.__version__.startswith("1.")
FILL = -9999.0
VALUES = np.array([1.0, FILL, 2.0, FILL, np.nan, -3.5], dtype="float32")
FLAGS = np.array([True, False, True, True, False, False])

LOST = ["v <= 'nan'::FLOAT", "NOT (v > 'nan'::FLOAT)", "'nan'::FLOAT >= v", "v <= 'nan'::FLOAT AND x > 0"]
KEPT = [
    "v < 'nan'::FLOAT",
    "v >= 'nan'::FLOAT",
    "v <= 'inf'::FLOAT",
    "v >= '-inf'::FLOAT",
    "v <= 'nan'::FLOAT OR x > 2",
    "flag = true",
    "flag = true AND v > 0",
    "v IS NOT NULL",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("nan")) / "s.zarr"
    g = zarr.open_group(path, mode="w", zarr_format=3)
    n = len(VALUES)
    x = g.create_array("x", shape=(n,), chunks=(3,), dtype="int64", fill_value=0, dimension_names=["x"])
    x[:] = np.arange(n)
    v = g.create_array(
        "v",
        shape=(n,),
        chunks=(3,),
        dtype="float32",
        fill_value=0,
        dimension_names=["x"],
        attributes={"_FillValue": FILL},
    )
    v[:] = VALUES
    flag = g.create_array("flag", shape=(n,), chunks=(3,), dtype="bool", fill_value=False, dimension_names=["x"])
    flag[:] = FLAGS
    return str(path)


def _oracle(where: str, nan_as_null: bool) -> list[tuple]:
    nulls = (VALUES == FILL) | (np.isnan(VALUES) if nan_as_null else False)
    table = pa.table({"x": np.arange(len(VALUES)), "flag": FLAGS, "v": pa.array(VALUES, mask=nulls)})
    con = duckdb.connect()
    con.register("arrow_table", table)
    # a native table: DuckDB 1.5 over the Arrow table itself loses the NULL check too
    con.execute("CREATE TABLE t AS SELECT * FROM arrow_table")
    return sorted(con.execute(f"SELECT x FROM t WHERE {where}").fetchall())


def _query(store: str, where: str, nan_as_null: bool) -> str:
    args = "" if nan_as_null else ", nan_as_null := false"
    return f"SELECT x FROM read_zarr('{store}'{args}) WHERE {where}"


@pytest.mark.skipif(V1_5, reason="DuckDB 1.5 pushes these as a bare `true` (its own limit, documented)")
@pytest.mark.parametrize("nan_as_null", [True, False])
@pytest.mark.parametrize("where", LOST)
def test_a_comparison_every_number_passes_drops_the_nulls(store: str, where: str, nan_as_null: bool) -> None:
    with zarrsql.connect() as con:
        assert sorted(con.execute(_query(store, where, nan_as_null)).fetchall()) == _oracle(where, nan_as_null)
    assert 1 not in [r[0] for r in _oracle(where, nan_as_null)]  # the NULL row is not DuckDB's


@pytest.mark.parametrize("nan_as_null", [True, False])
@pytest.mark.parametrize("where", KEPT)
def test_other_conditions_keep_their_rows(store: str, where: str, nan_as_null: bool) -> None:
    with zarrsql.connect() as con:
        got = sorted(con.execute(_query(store, where, nan_as_null)).fetchall())
    assert got == _oracle(where, nan_as_null)
