"""The progress option counts for every scan started after it is set, and one display belongs
to one statement: a statement that starts right after another (within the grace period in
which a display waits for more scans) gets a display of its own, or none with the option
off, in a terminal and in the cells of a real Jupyter kernel.

Expected unit counts come from zarr-python (the number of chunks of the store's array).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbclient
import nbformat
import pytest
import zarr

import zarrsql
from cli_runner import cli_env
from zarrsql.notebook import progress

WIDGET = "application/vnd.jupyter.widget-view+json"


def _chunks(store: Path) -> int:
    return int(zarr.open_array(str(store / "v"), mode="r").nchunks)


def _closed() -> None:
    """Wait until every display has closed (a session ends GRACE after its scans, or at the
    next tick once a later statement began)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        progress.MONITOR._session is not None or getattr(progress.MONITOR, "_live", None)
    ):
        time.sleep(0.02)
    assert progress.MONITOR._session is None


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Progress shows as on a terminal (pytest's stderr is not one), at once; on at the end."""
    progress.install()
    _closed()
    monkeypatch.setattr(progress, "display_kind", lambda: "terminal")
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "TICK", 0.05)
    yield
    zarrsql.set_option("progress", True)


def _new_displays(run: Any) -> list[tuple[int, int]]:
    """(units read, total) of each display that `run()` opened, once all have closed."""
    before = list(progress.MONITOR.shown)
    run()
    _closed()
    return [(bar.bar.n, bar.bar.total) for bar in progress.MONITOR.shown if bar not in before]


def test_a_scan_started_after_the_option_is_off_shows_nothing(
    terminal: None, slow_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    con = zarrsql.connect()
    sql = f"SELECT sum(v) FROM read_zarr('{slow_store}')"

    def run() -> None:
        con.sql(sql).fetchall()  # shows, and its display waits GRACE for more scans
        zarrsql.set_option("progress", False)
        con.sql(sql).fetchall()  # starts within that wait: must join nothing

    # one display, of the first statement's units only (not the second's added to its total)
    assert _new_displays(run) == [(_chunks(slow_store), _chunks(slow_store))]
    capsys.readouterr()


def test_each_statement_has_its_own_display(terminal: None, slow_store: Path) -> None:
    con = zarrsql.connect()
    sql = f"SELECT sum(v) FROM read_zarr('{slow_store}')"
    units = _chunks(slow_store)
    assert _new_displays(lambda: [con.sql(sql).fetchall() for _ in range(2)]) == [(units, units), (units, units)]


def _env() -> dict[str, str]:
    env = cli_env()
    env.pop("CI", None)  # CI turns progress off: these runs check what it shows
    env.pop("ZARRSQL_PROGRESS", None)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *sys.path])
    return env


def _widgets(nb: Any, cell: int) -> int:
    """The progress widgets the cell displayed (a bar is displayed in the cell it opens in)."""
    return sum(WIDGET in output.get("data", {}) for output in nb.cells[cell].outputs)


#: The last cell: once every display has closed, the (units read, total) of each bar opened.
#: Read in the kernel, not from the saved widget state: a bar that closes between two cells
#: sends its last update with the finished cell as parent, which nbclient no longer records.
SHOWN = """import json, time
deadline = time.monotonic() + 20
while time.monotonic() < deadline and (progress.MONITOR._session or getattr(progress.MONITOR, "_live", None)):
    time.sleep(0.02)
print(json.dumps([[bar.bar.n, bar.bar.total] for bar in progress.MONITOR.shown]))"""


def test_notebook_cells_each_get_their_own_display_and_follow_the_option(slow_store: Path) -> None:
    """Cells run back to back, each right after the last one's scan ended: 1 shows; 2 turns the
    option off and shows nothing (nor adds to 1's); 3 and 4 show, each its own statement."""
    import ipywidgets  # noqa: F401  (tqdm.auto draws a widget only with it)

    query = f"%zarrsql SELECT sum(v) FROM read_zarr('{slow_store}')"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from zarrsql.notebook import progress\nprogress.DELAY, progress.TICK = 0.0, 0.05\n"
            "import zarrsql\n%load_ext zarrsql"
        ),
        nbformat.v4.new_code_cell(query),
        nbformat.v4.new_code_cell(f"zarrsql.set_option('progress', False)\n{query}"),
        nbformat.v4.new_code_cell(f"zarrsql.set_option('progress', True)\n{query}"),
        nbformat.v4.new_code_cell(query),
        nbformat.v4.new_code_cell(SHOWN),
    ]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute(env=_env())
    (printed,) = [o["text"] for o in nb.cells[-1].outputs if o.get("name") == "stdout"]
    units = _chunks(slow_store)
    # one bar for each of cells 1, 3 and 4, each of its own statement's units only
    assert json.loads(printed) == [[units, units]] * 3
    assert [_widgets(nb, cell) for cell in (1, 2, 3, 4)] == [1, 0, 1, 1]
