"""Statements zarrsql prints again from DuckDB's parse tree keep the meaning of their constants.

The rewrites (metadata answers, float32 twins, top-n bounds, join keys, grouping by the scan)
change a statement's parse tree and have DuckDB print it again (`parsetree.printable`).
DuckDB 1.5 keeps a constant as a typed value and prints the value: the DOUBLE `1e-1` came
back as `0.1`, a DECIMAL, which DuckDB compares with a FLOAT column in FLOAT, so on 1.5
`lat > 0.1e0` lost the float32 0.1 and `lat = 1e-1` found it; `1.` came back as the INTEGER
`1`. And on 1.5 an `IN` list reaches the scan as Arrow's `is_in`, which told -0.0 from 0.0
(`arrow_filters.zeros_alike`).

Oracles: DuckDB running the same statement over a table of its own holding a copy of the same
data (so no Arrow filter of its own is involved), DuckDB itself on the statement as written,
and numpy (`np.isin`, where -0.0 equals 0.0). Every test runs on DuckDB 2.x and on 1.5.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine import parsetree

#: float32 coordinates: both zeros, the float32s nearest to 0.1, 0.15, 0.2 and 23.1 (each a
#: little above or below the double of that name), whole numbers. Chunks of 2: 5 work units.
LAT = np.array([-1.0, -0.0, 0.0, 0.1, 0.15, 0.2, 1.0, 10.0, 23.1, 50.5], dtype="float32")
#: float64 coordinates with both zeros (a DOUBLE IN list on them gets no twin: DuckDB pushes it).
X64 = np.array([-1.5, -0.0, 0.0, 1.5, 2.5], dtype="float64")
#: Spellings of a constant: DOUBLEs with exponents, DOUBLE casts, DECIMALs (`1.` and `00.10`
#: are DECIMALs DuckDB 1.5 printed as another type).
LITERALS = [
    "1e-1",
    "0.1e0",
    "1E1",
    "2.310000e+01",
    "23.1e0",
    "-1e0",
    "CAST('0.1' AS DOUBLE)",
    "0.1::DOUBLE",
    "CAST(23.1 AS DOUBLE)",
    "0.1",
    "23.1",
    "1.",
    "00.10",
]
#: The table a zarrsql table is joined with: FLOAT keys, two of the coordinates.
KEYS = "CREATE TABLE k AS SELECT CAST(lat AS FLOAT) AS lat FROM (VALUES (0.1), (23.1)) AS keys(lat)"
#: A condition on `lat` per operator, the literal at `{v}` (the other constants are DOUBLEs,
#: so every statement is rewritten with twins).
CONDITIONS = {
    "=": "lat = {v}",
    "<": "lat < {v}",
    "<=": "lat <= {v}",
    ">": "lat > {v}",
    ">=": "lat >= {v}",
    "<>": "lat <> {v}",
    "IN": "lat IN ({v}, 2e-1)",
    "BETWEEN": "lat BETWEEN {v} AND 2.31e1",
    "BETWEEN upper": "lat BETWEEN -5e-1 AND {v}",
}


def _write(path: Path, dim: str, values: np.ndarray, chunks: int) -> None:
    data = np.arange(values.size, dtype="int32")
    ds = xr.Dataset({"v": ((dim,), data)}, coords={dim: values})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=2, encoding={"v": {"chunks": (chunks,)}, dim: {"chunks": (chunks,)}})


def _oracle(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection holding each Arrow table as a table of its own (copied in)."""
    con = duckdb.connect()
    for name, table in tables.items():
        con.register("arrow_copy", table)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM arrow_copy")
        con.unregister("arrow_copy")
    return con


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("reprinted")
    _write(folder / "lat.zarr", "lat", LAT, 2)
    _write(folder / "x64.zarr", "x", X64, 2)
    rows = np.arange(LAT.size, dtype="int32")
    oracle = _oracle(
        {
            "t": pa.table({"lat": pa.array(LAT), "v": pa.array(rows)}),
            "x64": pa.table({"x": pa.array(X64), "v": pa.array(np.arange(X64.size, dtype="int32"))}),
        }
    )
    oracle.execute(KEYS)
    return {
        "lat": f"read_zarr('{folder / 'lat.zarr'}')",
        "x64": f"read_zarr('{folder / 'x64.zarr'}')",
        "oracle": oracle,
    }


def _run(con: Any, sql: str, params: list | None = None) -> tuple[list[str], list[str], list[tuple]]:
    relation = con.execute(sql, params) if params is not None else con.sql(sql)
    columns = [d[0] for d in relation.description]
    types = [str(d[1]) for d in relation.description]
    return columns, types, sorted(relation.fetchall(), key=repr)


@pytest.mark.parametrize("literal", LITERALS)
@pytest.mark.parametrize("operator", list(CONDITIONS))
def test_rows_are_duckdbs(stores: dict[str, Any], literal: str, operator: str) -> None:
    where = CONDITIONS[operator].format(v=literal)
    expected = _run(stores["oracle"], f"SELECT v FROM t WHERE {where}")
    with zarrsql.connect() as con:
        assert _run(con, f"SELECT v FROM {stores['lat']} WHERE {where}") == expected


@pytest.mark.parametrize("literal", LITERALS)
@pytest.mark.parametrize("operator", list(CONDITIONS))
def test_counts_answered_from_coordinates_are_duckdbs(stores: dict[str, Any], literal: str, operator: str) -> None:
    where = CONDITIONS[operator].format(v=literal)
    expected = _run(stores["oracle"], f"SELECT count(*) FROM t WHERE {where}")
    with zarrsql.connect() as con, zarrsql.trace() as trace:
        got = _run(con, f"SELECT count(*) FROM {stores['lat']} WHERE {where}")
    assert got == expected
    assert trace.scans == 0  # answered from the coordinates, not scanned


@pytest.mark.parametrize("literal", LITERALS)
def test_select_items_keep_their_names_types_and_values(stores: dict[str, Any], literal: str) -> None:
    """The whole statement is printed again (for its twins): its constants keep their type, and
    an item holding one keeps the name DuckDB gives it."""
    sql = "SELECT v, {v}, lat * {v}, {v} AS named FROM {t} WHERE lat >= {v} AND lat < 1e2"
    expected = _run(stores["oracle"], sql.format(v=literal, t="t"))
    with zarrsql.connect() as con:
        assert _run(con, sql.format(v=literal, t=stores["lat"])) == expected


@pytest.mark.parametrize("literal", LITERALS)
def test_top_n_keeps_constant_types(stores: dict[str, Any], literal: str) -> None:
    sql = "SELECT v, lat * {v}, {v} AS c FROM {t} ORDER BY lat DESC LIMIT 3"
    expected = _run(stores["oracle"], sql.format(v=literal, t="t"))
    with zarrsql.connect() as con, zarrsql.trace() as trace:
        got = _run(con, sql.format(v=literal, t=stores["lat"]))
    assert got == expected
    assert trace.work_units_read < trace.work_units_planned  # the bound was added


@pytest.mark.parametrize("literal", LITERALS)
def test_join_keys_keep_constant_types(stores: dict[str, Any], literal: str) -> None:
    sql = "SELECT z.v, z.lat * {v}, {v} AS c FROM {t} AS z JOIN k ON z.lat = k.lat WHERE z.lat >= {v}"
    expected = _run(stores["oracle"], sql.format(v=literal, t="t"))
    with zarrsql.connect() as con:
        con.execute(KEYS)
        with zarrsql.trace() as trace:
            got = _run(con, sql.format(v=literal, t=stores["lat"]))
    assert got == expected
    assert trace.work_units_read < trace.work_units_planned  # the zarr side was pruned on k's keys


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, duckdb.DuckDBPyConnection]:
    """2,097,152 cells (grouping by the scan wants at least 2**20 rows): latitudes of two
    decimals, one of them the float32 0.1, times 2048 positions."""
    lat = np.round(np.linspace(-0.5, 0.5, 1024), 2).astype("float32")
    lat[600] = np.float32(0.1)
    x = np.arange(2048, dtype="int32")
    v = (np.arange(lat.size * x.size) % 7).astype("int8").reshape(lat.size, x.size)
    path = tmp_path_factory.mktemp("grid") / "g.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.Dataset({"v": (("lat", "x"), v)}, coords={"lat": lat, "x": x}).to_zarr(
            path, zarr_format=2, encoding={"v": {"chunks": (256, 2048)}}
        )
    cells_lat, cells_x = np.meshgrid(lat, x, indexing="ij")
    oracle = _oracle({"t": pa.table({"lat": cells_lat.ravel(), "x": cells_x.ravel(), "v": v.ravel()})})
    return f"read_zarr('{path}')", oracle


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT lat, count(*) AS n, sum(v) AS s FROM {t} WHERE lat > 1e-1 OR lat < -2e-2 GROUP BY lat",
        "SELECT lat * 1e1 AS k, count(*) AS n, sum(v) AS s FROM {t} WHERE lat <> 1e-1 GROUP BY lat * 1e1",
        "SELECT lat * 1e1, count(*) AS n, sum(v) * 1e-1 AS s FROM {t} WHERE lat <= 4.5e-1 GROUP BY ALL",
    ],
)
def test_groups_computed_by_the_scan_keep_constant_types(grid: tuple[str, Any], sql: str) -> None:
    source, oracle = grid
    expected = _run(oracle, sql.format(t="t"))
    with zarrsql.connect() as con, zarrsql.trace() as trace:
        got = _run(con, sql.format(t=source))
    assert got == expected
    assert trace.rows_aggregated > 0  # grouped by the scan, not by DuckDB


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT 1e-1, 0.1e0, 1E1, 2.310000e+01, -0e0, 1e-320, 1e16",
        "SELECT 1e400 AS big, -1e400 AS small, x FROM (SELECT 1e0 AS x) WHERE x < 1e400 AND x > -1e400",
        "SELECT 0.1, 00.10, 1., .5, 1.000, 123456789012345678901234567890.5, 1e-1 AS named",
        "SELECT typeof(1e-1), CAST(1e-1 AS VARCHAR), 1e-1 + 1, [1e-1, 2e0], {'a': 1e-1}",
        "SELECT x * 1e-1 FROM (SELECT CAST(0.1 AS FLOAT) AS x) WHERE x > 0.1e0 AND x IN (1e-1, x)",
        "SELECT * FROM (SELECT 1e-1, 2.5e0) UNION ALL SELECT 3e-1, 1.",
    ],
)
def test_a_statement_printed_again_means_what_it_meant(statement: str) -> None:
    """Against DuckDB on the statement as written: the same names, types and values."""
    con = duckdb.connect()
    printed = parsetree.deserialize(con, parsetree.serialize(con, statement, keep=False))
    assert _run(con, printed) == _run(con, statement)


#: (statement's condition, parameters, the values `np.isin` looks the coordinates up among).
ZEROS = [
    ("{d} IN (?, ?)", [-0.0, 1.5], [-0.0, 1.5]),
    ("{d} IN (?, ?)", [0.0, 1.5], [0.0, 1.5]),
    ("{d} IN (?, ?, ?)", [-0.0, 0.0, 2.5], [-0.0, 0.0, 2.5]),
    ("{d} = ?", [-0.0], [-0.0]),
    ("{d} = ?", [0.0], [0.0]),
    ("{d} IN (-0e0, 1e0)", None, [-0.0, 1.0]),
    ("{d} IN (0e0, 1.5)", None, [0.0, 1.5]),
    ("{d} IN (0.0, 10.0)", None, [0.0, 10.0]),
    ("{d} IN (CAST('-0.0' AS FLOAT), 1.5)", None, [-0.0, 1.5]),
    ("{d} IN (CAST(? AS FLOAT), 1.0)", [-0.0], [-0.0, 1.0]),
    ("{d} BETWEEN -0e0 AND 0e0", None, [0.0]),
]


@pytest.mark.parametrize(("store", "dim", "values"), [("lat", "lat", LAT), ("x64", "x", X64)])
@pytest.mark.parametrize(("condition", "params", "lookup"), ZEROS)
@pytest.mark.parametrize("select", ["v", "count(*)"])
def test_either_zero_finds_both(
    stores: dict[str, Any],
    store: str,
    dim: str,
    values: np.ndarray,
    condition: str,
    params: list | None,
    lookup: list[float],
    select: str,
) -> None:
    """-0.0 equals 0.0 (numpy, DuckDB), on a float32 dimension (a twin `IN` in FLOAT beside a
    DOUBLE list) and on a float64 one (the list itself pushed to the scan)."""
    where = condition.format(d=dim)
    kept = np.flatnonzero(np.isin(values.astype(np.float64), lookup))
    expected = [(len(kept),)] if select == "count(*)" else [(int(i),) for i in kept]
    table = "t" if store == "lat" else "x64"
    assert _run(stores["oracle"], f"SELECT {select} FROM {table} WHERE {where}", params)[2] == expected
    with zarrsql.connect() as con:
        assert _run(con, f"SELECT {select} FROM {stores[store]} WHERE {where}", params)[2] == expected
