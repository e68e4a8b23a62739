"""`%load_ext zarrsql` magics, and jupysql's `%sql` on a zarrsql connection, in a real
IPython shell. Expected values come from numpy on the arrays xarray reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import zarrsql
from cli_runner import cli_env


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "zarrsql")
    return ip


def _values(store: Path) -> np.ndarray:
    return xr.open_zarr(store, consolidated=False)["v"].values


def test_line_magic_on_the_default_connection(shell: InteractiveShell, tiny_store: Path) -> None:
    result = shell.run_line_magic("zarrsql", f"SELECT count(*) AS n, sum(v) AS s FROM read_zarr('{tiny_store}')")
    values = _values(tiny_store)
    assert int(result["n"][0]) == values.size
    np.testing.assert_allclose(result["s"][0], values.astype("f8").sum(), rtol=1e-6)


def test_cell_magic_on_a_named_connection_keeps_the_result(shell: InteractiveShell, tiny_store: Path) -> None:
    shell.user_ns["mycon"] = zarrsql.connect()
    sql = f"SELECT t, max(v) AS top FROM read_zarr('{tiny_store}') GROUP BY t ORDER BY t"
    shown = shell.run_cell_magic("zarrsql", "-c mycon -o per_t", sql)
    kept = shell.user_ns["per_t"]
    assert kept is shown
    np.testing.assert_allclose(kept["top"].to_numpy(), _values(tiny_store).max(axis=(1, 2)), rtol=1e-6)


def test_double_angle_keeps_without_displaying(shell: InteractiveShell, tiny_store: Path) -> None:
    out = shell.run_cell_magic("zarrsql", "quiet <<", f"SELECT min(v) AS lo FROM read_zarr('{tiny_store}')")
    assert out is None
    np.testing.assert_allclose(shell.user_ns["quiet"]["lo"][0], _values(tiny_store).min(), rtol=1e-6)
    result = shell.run_cell(f"%zarrsql same << SELECT max(v) AS hi FROM read_zarr('{tiny_store}')")
    assert result.success
    assert result.result is None
    np.testing.assert_allclose(shell.user_ns["same"]["hi"][0], _values(tiny_store).max(), rtol=1e-6)


def test_a_statement_without_rows_returns_none(shell: InteractiveShell, tiny_store: Path) -> None:
    shell.user_ns["ddl"] = zarrsql.connect()
    assert (
        shell.run_cell_magic("zarrsql", "-c ddl", f"CREATE VIEW tv AS SELECT * FROM read_zarr('{tiny_store}')") is None
    )
    assert (
        int(shell.run_line_magic("zarrsql", "-c ddl SELECT count(*) AS n FROM tv")["n"][0]) == _values(tiny_store).size
    )


def test_usage_errors_name_the_problem(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="needs SQL"):
        shell.run_line_magic("zarrsql", "")
    with pytest.raises(UsageError, match="no variable named 'nope'"):
        shell.run_line_magic("zarrsql", "-c nope SELECT 1")
    shell.user_ns["notacon"] = 3
    with pytest.raises(UsageError, match="not a connection"):
        shell.run_line_magic("zarrsql", "-c notacon SELECT 1")
    with pytest.raises(UsageError, match="unknown option"):
        shell.run_line_magic("zarrsql", "-x SELECT 1")


JUPYSQL = r"""
import json, sys
# jupysql 0.11 imports Spark Connect when pyspark is installed and survives only its absence
# (pyspark 4 without zstandard fails otherwise); this test is about DuckDB, not Spark
sys.modules["pyspark.sql.connect.dataframe"] = None
from IPython.core.interactiveshell import InteractiveShell
import zarrsql
from sql.connection import ConnectionManager
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "sql")
ip.user_ns["zcon"] = zarrsql.connect()
ip.run_line_magic("sql", "zcon")
rows = list(ip.run_line_magic("sql", f"SELECT count(*) AS n, sum(v) AS s FROM read_zarr('{sys.argv[1]}')"))
frame = ip.user_ns["zcon"].execute("SELECT 1 AS one").pl()
print("RESULT", json.dumps({"dialect": ConnectionManager.current.dialect, "rows": [list(r) for r in rows],
                  "pl": frame["one"].to_list()}))
"""


def test_jupysql_treats_a_zarrsql_connection_as_duckdb(tiny_store: Path) -> None:
    """In a fresh interpreter: this suite's `tests/sql` package would shadow jupysql's `sql`."""
    out = subprocess.run(
        [sys.executable, "-c", JUPYSQL, str(tiny_store)], capture_output=True, text=True, env=cli_env(), timeout=120
    )
    assert out.returncode == 0, out.stderr
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")] or [out.stdout + out.stderr]
    assert line.startswith("RESULT "), line
    seen = json.loads(line.removeprefix("RESULT "))
    assert seen["dialect"] == "duckdb"  # recognised as native DuckDB (it checks for `df` and `pl`)
    values = _values(tiny_store)
    ((n, s),) = seen["rows"]
    assert n == values.size
    np.testing.assert_allclose(s, values.astype("f8").sum(), rtol=1e-6)
    assert seen["pl"] == [1]
