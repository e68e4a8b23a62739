"""`%zarrsql` / `%%zarrsql` see the notebook's variables, as `zarrsql.sql` called in a cell
does: `FROM frame` reads the notebook's DataFrame `frame`, alone or joined with a store, on
the default connection and on one named with `-c` (a zarrsql or a DuckDB connection), in an
IPython shell and in a real Jupyter kernel.

Expected rows come from pandas: the store as xarray reads it, merged with the DataFrame.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import duckdb
import nbclient
import nbformat
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from IPython.core.interactiveshell import InteractiveShell

import zarrsql
from cli_runner import cli_env

#: The notebook's DataFrame: labels for three of the tiny store's four time steps (t = 0..3).
FRAME = pd.DataFrame({"t": [0, 2, 3], "label": ["first", "third", "fourth"]})


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "zarrsql")
    return ip


def _join_sql(store: Path, frame: str) -> str:
    return (
        f"SELECT label, count(*) AS n, sum(v) AS s FROM read_zarr('{store}') JOIN {frame} USING (t) "
        "GROUP BY label ORDER BY label"
    )


def _join_oracle(store: Path) -> pd.DataFrame:
    cells = xr.open_zarr(store, consolidated=False)["v"].to_dataframe().reset_index()
    merged = cells.merge(FRAME, on="t")
    merged["v"] = merged["v"].astype("f8")
    return merged.groupby("label").agg(n=("v", "size"), s=("v", "sum")).reset_index().sort_values("label")


def _assert_join(result: pd.DataFrame, store: Path) -> None:
    expected = _join_oracle(store)
    assert result["label"].tolist() == expected["label"].tolist()
    assert result["n"].tolist() == expected["n"].tolist()
    np.testing.assert_allclose(result["s"].to_numpy(), expected["s"].to_numpy(), rtol=1e-6)


@pytest.mark.parametrize("connection", ["default", "zarrsql", "duckdb"])
@pytest.mark.parametrize("form", ["line", "cell"])
def test_a_store_joins_a_dataframe_of_the_notebook(
    shell: InteractiveShell, tiny_store: Path, form: str, connection: str
) -> None:
    shell.user_ns["frame"] = FRAME
    option = ""
    if connection != "default":
        shell.user_ns["named"] = zarrsql.connect() if connection == "zarrsql" else duckdb.connect()
        option = "-c named "
    sql = _join_sql(tiny_store, "frame")
    source = f"%zarrsql {option}{sql}" if form == "line" else f"%%zarrsql {option}\n{sql}"
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec
    _assert_join(result.result, tiny_store)


def test_a_dataframe_alone_is_read_by_name(shell: InteractiveShell) -> None:
    shell.user_ns["frame"] = FRAME
    result = shell.run_cell("%zarrsql SELECT count(*) AS n, max(t) AS top FROM frame")
    assert result.success, result.error_in_exec
    assert (int(result.result["n"][0]), int(result.result["top"][0])) == (len(FRAME), FRAME["t"].max())


def test_the_magics_own_names_do_not_hide_the_notebooks(shell: InteractiveShell) -> None:
    """`sql`, `con` and `line` name values inside the magic; in the SQL they are the notebook's."""
    for name, rows in (("sql", 2), ("con", 3), ("line", 4)):
        shell.user_ns[name] = pd.DataFrame({"x": range(rows)})
        result = shell.run_cell(f"%zarrsql SELECT count(*) AS n FROM {name}")
        assert result.success, result.error_in_exec
        assert int(result.result["n"][0]) == rows


def test_a_name_the_notebook_lacks_is_not_found(shell: InteractiveShell) -> None:
    """The magic's own values (its `options`) are not tables: DuckDB reports the name as missing."""
    shell.user_ns.pop("options", None)
    result = shell.run_cell("%zarrsql SELECT * FROM options")
    assert not result.success
    assert isinstance(result.error_in_exec, duckdb.CatalogException)
    assert "options" in str(result.error_in_exec)


def _kernel_env() -> dict[str, str]:
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *sys.path])
    return env


def test_a_jupyter_kernel_joins_a_store_with_its_dataframe(tiny_store: Path) -> None:
    sql = _join_sql(tiny_store, "frame")
    setup = (
        "import duckdb, pandas as pd, zarrsql\n%load_ext zarrsql\n"
        f"frame = pd.DataFrame({FRAME.to_dict(orient='list')!r})\n"
        "zcon, dcon = zarrsql.connect(), duckdb.connect()"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(setup),
        nbformat.v4.new_code_cell(f"%zarrsql by_line << {sql}"),
        nbformat.v4.new_code_cell(f"%%zarrsql by_cell <<\n{sql}"),
        nbformat.v4.new_code_cell(f"%%zarrsql -c zcon by_zcon <<\n{sql}"),
        nbformat.v4.new_code_cell(f"%%zarrsql -c dcon -o by_dcon\n{sql}"),
        nbformat.v4.new_code_cell(
            "import json\nprint(json.dumps({k: globals()[k].to_dict(orient='list') "
            "for k in ('by_line', 'by_cell', 'by_zcon', 'by_dcon')}))"
        ),
    ]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute(env=_kernel_env())
    (printed,) = [o["text"] for o in nb.cells[-1].outputs if o.get("name") == "stdout"]
    results: dict[str, Any] = json.loads(printed)
    for name, columns in results.items():
        assert set(columns) == {"label", "n", "s"}, name
        _assert_join(pd.DataFrame(columns), tiny_store)
