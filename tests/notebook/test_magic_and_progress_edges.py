"""Edges of the notebook helpers: the `%zarrsql` line magic takes its SQL as written (no
IPython `$name` / `{expr}` expansion, like the cell magic), and a progress widget of a
statement that failed or was interrupted shows so (red, the units planned as its total)
instead of a complete green bar.

Expected rows come from xarray; expected unit counts from zarr-python (chunks of the array).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import nbclient
import nbformat
import numpy as np
import pytest
import xarray as xr
import zarr
from IPython.core.interactiveshell import InteractiveShell

from cli_runner import cli_env

WIDGET = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "zarrsql")
    return ip


@pytest.fixture(scope="module")
def label_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Labels holding IPython's expansion syntax, `$x` and `{n}`, as plain text."""
    path = tmp_path_factory.mktemp("labels") / "labels.zarr"
    labels = np.array(["cost $x", "{n} items", "5", "cost 5", "3 items"], dtype=object)
    xr.Dataset({"label": (("i",), labels)}, coords={"i": np.arange(labels.size)}).to_zarr(path, mode="w")
    return path


def _oracle(store: Path, wanted: tuple[str, ...]) -> list[int]:
    labels = xr.open_zarr(store)["label"].values
    return [i for i, label in enumerate(labels) if label in wanted]


@pytest.mark.parametrize("form", ["line", "cell"])
def test_dollar_and_braces_in_string_literals_are_not_expanded(
    shell: InteractiveShell, label_store: Path, form: str
) -> None:
    wanted = ("cost $x", "{n} items")
    shell.user_ns.update(x=5, n=3)  # what IPython would put in place of $x and {n}
    sql = f"SELECT i FROM read_zarr('{label_store}') WHERE label IN ('cost $x', '{{n}} items') ORDER BY i"
    source = f"found = %zarrsql {sql}" if form == "line" else f"%%zarrsql -o found\n{sql}"
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec
    assert shell.user_ns["found"]["i"].tolist() == _oracle(label_store, wanted)


def test_the_line_and_cell_magics_agree_on_the_options_line(shell: InteractiveShell, label_store: Path) -> None:
    """`-o NAME` and `NAME <<` are read from the line as written, in both forms."""
    sql = f"SELECT count(*) AS n FROM read_zarr('{label_store}') WHERE label LIKE '%$%'"
    assert shell.run_cell(f"%zarrsql kept_line << {sql}").success
    assert shell.run_cell(f"%%zarrsql kept_cell <<\n{sql}").success
    expected = sum("$" in str(label) for label in xr.open_zarr(label_store)["label"].values)
    assert int(shell.user_ns["kept_line"]["n"][0]) == int(shell.user_ns["kept_cell"]["n"][0]) == expected


def _chunks(store: Path) -> int:
    return int(zarr.open_array(str(store / "v"), mode="r").nchunks)


def _env() -> dict[str, str]:
    env = cli_env()
    env.pop("CI", None)  # CI turns progress off: these runs check what it shows
    env.pop("ZARRSQL_PROGRESS", None)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *sys.path])
    return env


def _bars(nb: Any, cell: int) -> list[dict[str, Any]]:
    """The progress models (FloatProgress) of the widgets a cell displayed, from the
    notebook's saved widget state (tqdm's widget: an HBox of label, bar, label)."""
    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    bars = []
    for output in nb.cells[cell].outputs:
        view = output.get("data", {}).get(WIDGET)
        if view is None:
            continue
        children = state[view["model_id"]]["state"]["children"]
        models = [state[child.removeprefix("IPY_MODEL_")] for child in children]
        bars += [m["state"] for m in models if m["model_name"] == "FloatProgressModel"]
    return bars


@pytest.fixture(scope="module")
def executed(slow_store: Path) -> Any:
    """One notebook: a query that completes, one that fails after its scan, one interrupted
    (the kernel's interrupt, as the notebook's button sends it), each followed by a pause in
    which the display closes (its `GRACE` is 0.3 s; the last display, of the interrupted
    statement, is given longer). Each cell may run 6 s, but the heavy join, which needs
    minutes, is interrupted after 4 s."""
    import ipywidgets  # noqa: F401  (tqdm.auto draws a widget only with it)

    store = f"read_zarr('{slow_store}')"
    heavy = f"SELECT count(*) FROM {store} a, range(3000) r WHERE a.v * 3000 > r.range"
    failing = f"SELECT sum(CASE WHEN t = {_chunks(slow_store) - 1} THEN error('boom') ELSE v END) FROM {store}"
    pause, last_pause = "import time; time.sleep(1.0)", "import time; time.sleep(1.5)"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from zarrsql.notebook import progress\nprogress.DELAY, progress.TICK = 0.0, 0.05\n%load_ext zarrsql"
        ),
        nbformat.v4.new_code_cell(f"%zarrsql SELECT sum(v) FROM {store}"),
        nbformat.v4.new_code_cell(pause),
        nbformat.v4.new_code_cell(f"%zarrsql {failing}"),
        nbformat.v4.new_code_cell(pause),
        nbformat.v4.new_code_cell(f"%zarrsql {heavy}"),
        nbformat.v4.new_code_cell(last_pause),
    ]

    def seconds(cell: Any) -> int:
        return 4 if heavy in cell.source else 6

    nbclient.NotebookClient(
        nb, timeout_func=seconds, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True
    ).execute(env=_env())
    return nb


def _errors(nb: Any, cell: int) -> list[str]:
    return [o["ename"] + ": " + o["evalue"] for o in nb.cells[cell].outputs if o["output_type"] == "error"]


def test_a_completed_statement_shows_a_complete_bar(executed: Any, slow_store: Path) -> None:
    assert _errors(executed, 1) == []
    [bar] = _bars(executed, 1)
    assert bar["value"] == bar["max"] == _chunks(slow_store)
    assert bar["bar_style"] == "success"


def test_a_failed_statement_shows_a_failed_bar(executed: Any, slow_store: Path) -> None:
    assert any("boom" in e for e in _errors(executed, 3)), executed.cells[3].outputs
    [bar] = _bars(executed, 3)
    assert bar["max"] == _chunks(slow_store)  # the units planned, whatever was read
    assert bar["bar_style"] == "danger"


def test_an_interrupted_statement_shows_a_failed_bar_with_the_true_total(executed: Any, slow_store: Path) -> None:
    assert _errors(executed, 5), "the heavy statement ended before the interrupt"
    [bar] = _bars(executed, 5)
    assert bar["max"] == _chunks(slow_store)
    assert bar["value"] <= bar["max"]
    assert bar["bar_style"] == "danger"
