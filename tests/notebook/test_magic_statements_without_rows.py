"""What `%%zarrsql` shows for statements without rows, the same on every DuckDB version: None
for one that gives nothing (PREPARE, CHECKPOINT, EXPORT, ...: docs/notebooks.md), DuckDB's
one-row `Count` of the rows written for one that writes (INSERT, UPDATE, DELETE, COPY, a
COPY to Zarr too). DuckDB 1.x's `sql()` returns None for the writers and 2.x a `Success` or
`Count` relation for all of them, which the magic used to show as it came.

Expected counts come from plain DuckDB's `execute` of the same statement on a copy of the
table, and from xarray (the cells of the store copied); files written are read back with
pandas and xarray.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from IPython.core.interactiveshell import InteractiveShell

import zarrsql

#: The table the writing statements change, as SQL both connections run.
TABLE = "CREATE TABLE t AS SELECT range AS a FROM range(10)"


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> InteractiveShell:
    """A shell whose `con` is a fresh zarrsql connection holding `t`, in a scratch folder."""
    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "zarrsql")
    ip.user_ns["con"] = con = zarrsql.connect()
    con.execute(TABLE)
    return ip


def _magic(shell: InteractiveShell, sql: str) -> object:
    result = shell.run_cell(f"%%zarrsql -c con\n{sql}")
    assert result.success, result.error_in_exec
    return result.result


@pytest.mark.parametrize(
    "sql",
    [
        "PREPARE p AS SELECT 41 + 1 AS answer",
        "CHECKPOINT",
        "CALL checkpoint()",
        "EXPORT DATABASE 'exported'",
        "SET threads = 2",
        "CREATE VIEW w AS SELECT * FROM t",
    ],
)
def test_a_statement_without_rows_gives_nothing(shell: InteractiveShell, sql: str) -> None:
    assert _magic(shell, sql) is None


def test_a_prepared_statement_runs_after_it_gives_nothing(shell: InteractiveShell) -> None:
    assert _magic(shell, "PREPARE p AS SELECT 41 + 1 AS answer") is None
    shown = _magic(shell, "EXECUTE p")
    assert isinstance(shown, pd.DataFrame)
    assert shown["answer"].tolist() == duckdb.sql("SELECT 41 + 1 AS answer").df()["answer"].tolist()


def _oracle_count(statements: list[str]) -> int:
    """The count plain DuckDB's `execute` gives for the last of `statements`, after the others."""
    con = duckdb.connect()
    con.execute(TABLE)
    for sql in statements[:-1]:
        con.execute(sql)
    ((count,),) = con.execute(statements[-1]).fetchall()
    return int(count)


@pytest.mark.parametrize(
    "statements",
    [
        ["INSERT INTO t SELECT range FROM range(3)"],
        ["UPDATE t SET a = a + 1 WHERE a < 4"],
        ["DELETE FROM t WHERE a % 2 = 0"],
        ["PREPARE ins AS INSERT INTO t VALUES (1), (2)", "EXECUTE ins"],
    ],
)
def test_a_statement_that_writes_rows_gives_their_count(shell: InteractiveShell, statements: list[str]) -> None:
    for sql in statements[:-1]:
        _magic(shell, sql)
    shown = _magic(shell, statements[-1])
    assert isinstance(shown, pd.DataFrame)
    assert list(shown.columns) == ["Count"]
    assert shown["Count"].tolist() == [_oracle_count(statements)]


def test_copy_to_csv_gives_the_rows_written(shell: InteractiveShell, tmp_path: Path) -> None:
    shown = _magic(shell, "COPY (SELECT * FROM t WHERE a > 2) TO 'out.csv'")
    written = pd.read_csv(tmp_path / "out.csv")
    expected = _oracle_count(["COPY (SELECT * FROM t WHERE a > 2) TO 'oracle.csv'"])
    assert isinstance(shown, pd.DataFrame)
    assert list(shown.columns) == ["Count"]
    assert shown["Count"].tolist() == [len(written)] == [expected]


def test_copy_to_zarr_gives_the_rows_written(shell: InteractiveShell, tiny_store: Path, tmp_path: Path) -> None:
    shown = _magic(shell, f"COPY (SELECT * FROM read_zarr('{tiny_store}')) TO 'copy.zarr' (FORMAT zarr)")
    source = xr.open_zarr(tiny_store, consolidated=False)["v"]
    copied = xr.open_zarr(tmp_path / "copy.zarr")["v"]
    np.testing.assert_array_equal(copied.transpose(*source.dims).values, source.values)
    assert isinstance(shown, pd.DataFrame)
    assert list(shown.columns) == ["Count"]
    assert shown["Count"].tolist() == [source.size]


def test_a_call_with_rows_and_an_empty_success_column_still_show(shell: InteractiveShell) -> None:
    """Only a CALL's empty `Success` result is DuckDB's "done": rows, or a query's own
    `Success` column without rows, are shown as they are."""
    version = _magic(shell, "CALL pragma_version()")
    assert isinstance(version, pd.DataFrame)
    assert version["library_version"].tolist() == duckdb.sql("CALL pragma_version()").df()["library_version"].tolist()
    empty = _magic(shell, "SELECT true AS Success WHERE false")
    assert isinstance(empty, pd.DataFrame)
    assert list(empty.columns) == ["Success"]
    assert len(empty) == 0
