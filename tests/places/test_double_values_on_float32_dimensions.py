"""A float32 dimension compared with a DOUBLE value (a Python float parameter, `5e1`,
`x::DOUBLE`) prunes like a DECIMAL literal does (`engine/widened.py`), and its rows are
DuckDB's: each statement is compared with plain DuckDB over xarray's frame of the store,
for values between float32s, on them, beyond float32's range, infinite and NaN, alone, in
an OR and under NOT."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

#: float32 coordinates: ascending, with the extremes and infinities a threshold can fall beside.
X = np.array(
    [-np.inf, -3.4028235e38, -1.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.5, 58.5, 1e30, 3.4028235e38, np.inf], dtype="float32"
)
THRESHOLDS = [
    0.1,  # a double between two float32s (0.1f is 0.10000000149...)
    float(np.float32(0.1)),  # exactly the float32 0.1f
    0.5,
    -1.5,
    58.5,
    1e300,
    -1e300,
    float("inf"),
    float("-inf"),
    float("nan"),
    3.4028235677973366e38,  # the largest float32, as a double
    3.4028236e38,  # just above it
]
CONDITIONS = [
    "x > ?",
    "x >= ?",
    "x < ?",
    "x <= ?",
    "x = ?",
    "? < x",
    "? >= x",
    "x BETWEEN ? AND 2.5",
    "x IN (?, 58.5)",
    "x IN (?, NULL)",
    "x NOT IN (?, 1.0)",
    "x = ? OR x = 58.5",  # an OR: its branches' twins, a constant branch its own
    "x < ? OR x > 1e30",
    "(x > ? AND v > 2) OR x = -1.5",
    "x > ? OR v = 3",  # a branch without a twin: none for the OR
    "NOT (x < ?)",  # NOT of a comparison: the complement's twin
    "NOT (x >= ?)",
    "NOT (x = ?)",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, duckdb.DuckDBPyConnection]:
    ds = xr.Dataset({"v": (("x",), np.arange(X.size, dtype="float64"))}, coords={"x": X})
    path = tmp_path_factory.mktemp("widened") / "w.zarr"
    ds.chunk({"x": 2}).to_zarr(path, consolidated=True)
    plain = duckdb.connect()
    plain.register("frame", xr.open_zarr(path).to_dataframe().reset_index())
    plain.execute("CREATE TABLE cells AS SELECT x, v FROM frame")
    assert [r[0] for r in plain.sql("SELECT typeof(x) FROM cells LIMIT 1").fetchall()] == ["FLOAT"]
    return str(path), plain


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("value", THRESHOLDS, ids=repr)
def test_python_float_parameters_give_duckdbs_rows(store, condition, value) -> None:
    path, plain = store
    sql = "SELECT x, v FROM {src} WHERE " + condition + " ORDER BY v"
    expected = plain.execute(sql.format(src="cells"), [value]).fetchall()
    with zarrsql.connect() as con:
        got = con.execute(sql.format(src=f"read_zarr('{path}')"), [value]).fetchall()
    assert got == expected


@pytest.mark.parametrize("literal", ["5e-1", "CAST(0.1 AS DOUBLE)", "1e300", "'nan'::DOUBLE", "-1e300::DOUBLE"])
@pytest.mark.parametrize("op", [">", ">=", "<", "<=", "="])
def test_double_literals_give_duckdbs_rows(store, literal, op) -> None:
    path, plain = store
    sql = f"SELECT x, v FROM {{src}} WHERE x {op} {literal} ORDER BY v"
    expected = plain.sql(sql.format(src="cells")).fetchall()
    with zarrsql.connect() as con:
        assert con.sql(sql.format(src=f"read_zarr('{path}')")).fetchall() == expected


@pytest.mark.skipif(not HAS_SOURCES, reason="pruning by pushed filters needs DuckDB's Python sources (DuckDB 2)")
@pytest.mark.parametrize(
    ("condition", "args"),
    [
        ("x > ?", [50.0]),
        ("x BETWEEN ? AND ?", [0.2, 0.6]),
        ("x = $v", {"v": 58.5}),
        ("x = ? OR x = ?", [0.5, 58.5]),
        ("x < ? OR x = 2.5", [-1.0]),
        ("NOT (x < ?)", [50.0]),
    ],
)
def test_a_python_float_parameter_prunes(store, condition, args) -> None:
    path, plain = store
    wanted = plain.execute(f"SELECT v FROM cells WHERE {condition}", args).fetchall()
    units = {int(v) // 2 for (v,) in wanted}  # the chunks of 2 holding a matching cell
    with zarrsql.connect() as con, zarrsql.trace() as t:
        got = con.execute(f"SELECT v FROM read_zarr('{path}') WHERE {condition}", args).fetchall()
    assert sorted(got) == sorted(wanted)
    assert t.work_units_read == len(units) < t.work_units_planned


@pytest.mark.parametrize(
    "condition",
    ["x <= CAST(0.25 AS DOUBLE)", "x = 58.5::DOUBLE", "x BETWEEN 0.05::FLOAT8 AND 0.6::DOUBLE", "1e30::DOUBLE < x"],
)
def test_a_cast_to_double_prunes_on_either_duckdb(store, condition) -> None:
    """DuckDB 1.5 spells the cast's type otherwise (`cast_type`, not `type_expr`): its twin
    was never made there, so every chunk was read."""
    path, plain = store
    wanted = plain.sql(f"SELECT v FROM cells WHERE {condition}").fetchall()
    units = {int(v) // 2 for (v,) in wanted}
    with zarrsql.connect() as con, zarrsql.trace() as t:
        got = con.sql(f"SELECT v FROM read_zarr('{path}') WHERE {condition}").fetchall()
    assert sorted(got) == sorted(wanted)
    assert t.work_units_read == len(units) < t.work_units_planned
