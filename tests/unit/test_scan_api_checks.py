"""`open_scan`'s checks of what a script (or an engine) hands it, and what its `Scan` counts.

A misspelt parameter, a malformed predicate or projection is a `ParameterError` naming the
problem, never a silently different read or a raw Python error; constants compared with NULL
follow SQL's three-valued logic. Expected rows come from xarray or from DuckDB over
xarray's table, never from zarrsql.
"""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import ParameterError
from zarrsql.plan.predicate import And, Cmp, InSet, IsNull, Not, Or
from zarrsql.scan import open_scan


def _write(ds: xr.Dataset, path: Path, **encoding: dict) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, mode="w", encoding=encoding)
    return path


def _frame(path: Path) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_zarr(path).to_dataframe().reset_index()


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    """v on (x, t): x a DOUBLE coordinate, t a TIMESTAMP one."""
    ds = xr.Dataset(
        {"v": (("x", "t"), np.arange(12.0).reshape(4, 3))},
        coords={"x": [1.5, 2.5, 3.5, 4.5], "t": pd.date_range("2000-01-01", periods=3)},
    )
    return _write(ds, tmp_path / "grid.zarr", v={"chunks": (2, 3)})


def _rows(scan: zarrsql.scan.Scan) -> int:
    return sum(len(next(iter(part.values()))[0]) for part in scan.arrays())


def _sql_count(path: Path, where: str) -> int:
    con = duckdb.connect()
    con.register("frame", _frame(path))
    return int(con.execute(f"SELECT count(*) FROM frame WHERE {where}").fetchall()[0][0])


# --- the source mapping -------------------------------------------------------------------


def test_misspelt_parameter_is_refused_with_the_right_name(grid: Path) -> None:
    with pytest.raises(ParameterError, match="'bound' is not a read_zarr parameter; did you mean bounds"):
        open_scan({"store": str(grid), "bound": [["x", None, "2"]]})


def test_spelt_parameter_is_read(grid: Path) -> None:
    x = xr.open_zarr(grid).x.values
    kept = int((x <= 2).sum()) * xr.open_zarr(grid).sizes["t"]
    assert _rows(open_scan({"store": str(grid), "bounds": [["x", None, "2"]]}, columns=["v"])) == kept


def test_mapping_without_store_is_refused(grid: Path) -> None:
    with pytest.raises(ParameterError, match="no 'store'"):
        open_scan({"table_name": "x_t"})


@pytest.mark.parametrize("source", ["data.zarr", 42, None])
def test_source_of_another_kind_is_refused(source: object) -> None:
    with pytest.raises(ParameterError, match=r"open_scan\(\) reads a mapping of read_zarr parameters"):
        open_scan(source)  # type: ignore[arg-type]


# --- predicates -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        (Cmp("x", "==", 1.5), r"Cmp\(column='x', op='=='.*did you mean '='"),
        (Cmp("x", "<>", 1.5), r"op must be one of .*did you mean '!='"),
        (Cmp("x", ">", "1"), r"'x' is a float64 column, so its constant must be a number.*got str '1'"),
        (Cmp("x", ">", True), r"must be a number.*got bool True"),
        (InSet("x", (1.5, "2.5")), r"InSet\(column='x'.*got str '2.5'"),
        (InSet("x", [1.5]), r"values must be a tuple"),  # type: ignore[arg-type]
        (Cmp("t", ">", datetime.datetime(2000, 1, 2)), r"int of microseconds since 1970-01-01"),
        (Cmp("t", ">", np.datetime64("2000-01-02")), r"int of microseconds since 1970-01-01"),
        (Or(()), r"Or\(children=\(\)\): Or needs a non-empty tuple"),
        (And(()), r"And needs a non-empty tuple"),
        (Not(Or(())), r"Or needs a non-empty tuple"),
        (And((Cmp("x", ">", 1.0), "x < 3")), r"every operand must be a predicate node, got str"),  # type: ignore[arg-type]
        ("x > 1", r"a predicate must be a tree of zarrsql.plan.predicate nodes.*got str 'x > 1'"),
        (Cmp("v", ">", 1.0), r"may name dimension and coordinate columns only.*'v' is not one"),
    ],
)
def test_malformed_predicate_is_refused_naming_its_node(grid: Path, predicate: object, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        open_scan({"store": str(grid)}, predicate=predicate)  # type: ignore[arg-type]


def test_timestamp_constant_in_microseconds_is_read(grid: Path) -> None:
    when = np.datetime64("2000-01-02", "us")
    micros = int(when.astype("int64"))
    t = xr.open_zarr(grid).t.values
    expected = int((t > when).sum()) * xr.open_zarr(grid).sizes["x"]
    assert _rows(open_scan({"store": str(grid)}, columns=["v"], predicate=Cmp("t", ">", micros))) == expected


@pytest.mark.parametrize("constant", [2, 2.0, np.float64(2.0), np.int32(2)])
def test_numbers_of_any_kind_compare_with_a_double_column(grid: Path, constant: object) -> None:
    expected = _sql_count(grid, "x > 2")
    assert _rows(open_scan({"store": str(grid)}, columns=["v"], predicate=Cmp("x", ">", constant))) == expected


@pytest.mark.parametrize(
    ("predicate", "where"),
    [
        (Cmp("x", "=", None), "x = NULL"),
        (Not(Cmp("x", "=", None)), "NOT (x = NULL)"),
        (Not(Cmp("x", "<", None)), "NOT (x < NULL)"),
        (Or((Cmp("x", "=", None), Cmp("x", "=", 1.5))), "x = NULL OR x = 1.5"),
        (InSet("x", (1.5, None)), "x IN (1.5, NULL)"),
        (Not(InSet("x", (1.5, None))), "NOT (x IN (1.5, NULL))"),
        (Not(InSet("x", (None,))), "NOT (x IN (NULL))"),
        (And((IsNull("x", negated=True), Not(InSet("x", (1.5,))))), "x IS NOT NULL AND NOT (x IN (1.5))"),
    ],
)
def test_null_constants_follow_sql(grid: Path, predicate: object, where: str) -> None:
    expected = _sql_count(grid, where)
    scan = open_scan({"store": str(grid)}, columns=["v"], predicate=predicate)  # type: ignore[arg-type]
    assert _rows(scan) == expected
    assert sum(b.num_rows for b in scan.batches()) == expected


# --- projections ----------------------------------------------------------------------------


def test_no_columns_counts_rows_through_batches_and_is_refused_by_arrays(grid: Path) -> None:
    scan = open_scan({"store": str(grid)}, columns=[])
    assert sum(b.num_rows for b in scan.batches()) == int(np.prod(list(xr.open_zarr(grid).sizes.values())))
    with pytest.raises(ParameterError, match=r"Scan.arrays\(\) needs at least one column.*batch.num_rows"):
        scan.arrays()


def test_columns_as_one_string_is_refused(grid: Path) -> None:
    with pytest.raises(ParameterError, match=r"columns must be a list of column names, e.g. \['xv'\]"):
        open_scan({"store": str(grid)}, columns="xv")


def test_column_named_twice_is_refused(grid: Path) -> None:
    with pytest.raises(ParameterError, match="column 'v' is named more than once"):
        open_scan({"store": str(grid)}, columns=["v", "x", "v"])


# --- what a scan reads and counts -----------------------------------------------------------


@pytest.fixture
def tall(tmp_path: Path) -> Path:
    """200 x 200 values in chunks of 20 rows: ten units of 4000 rows."""
    ds = xr.Dataset({"a": (("x", "y"), np.arange(40000.0).reshape(200, 200))})
    return _write(ds, tmp_path / "tall.zarr", a={"chunks": (20, 200)})


def test_limit_met_by_the_first_unit_decodes_no_other(tall: Path) -> None:
    rows_per_chunk = 20 * xr.open_zarr(tall).sizes["y"]
    list(open_scan({"store": str(tall)}, columns=["a"]).batches())  # coordinates read and cached
    with zarrsql.trace() as t:
        got = sum(b.num_rows for b in open_scan({"store": str(tall)}, limit=rows_per_chunk).batches())
    assert got == rows_per_chunk
    assert t.chunks_decoded == 1
    assert t.work_units_read == 1


def test_limit_zero_reads_nothing(tall: Path) -> None:
    with zarrsql.trace() as t:
        assert list(open_scan({"store": str(tall)}, limit=0).batches()) == []
    assert t.chunks_decoded == 0


def test_arrays_counts_its_work_units(tall: Path) -> None:
    units = 200 // xr.open_zarr(tall).a.encoding["chunks"][0]  # one unit per chunk of rows
    with zarrsql.trace() as t:
        rows = _rows(open_scan({"store": str(tall)}, columns=["a"]))
    assert rows == 200 * 200
    assert t.work_units_read == units
    assert t.rows == rows


def test_the_core_reads_every_parameter_read_zarr_takes() -> None:
    """The SQL macros' parameter list and the core's are kept apart (the engine must not load
    the core at import); they name the same parameters."""
    from zarrsql.engine.functions import READ_PARAMS
    from zarrsql.scan.request import PARAMETERS

    assert {p.strip('"') for p in READ_PARAMS} | {"store"} == set(PARAMETERS)
    assert len(PARAMETERS) == len(set(PARAMETERS))
