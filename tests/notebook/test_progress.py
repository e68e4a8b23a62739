"""Progress of long scans: a widget in an executed notebook, a bar on a terminal, nothing
when piped, one display shared by the scans of a statement, and the option that turns it off.

Expected unit counts come from zarr-python (the number of chunks of the stores' arrays)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
import warnings
from pathlib import Path

import nbclient
import nbformat
import pytest
import zarr

import zarrsql
from cli_runner import cli_env
from zarrsql.notebook import progress

WIDGET = "application/vnd.jupyter.widget-view+json"
FAST = "from zarrsql.notebook import progress; progress.DELAY = 0.0; progress.TICK = 0.05"


def _chunks(store: Path) -> int:
    return zarr.open_array(str(store / "v"), mode="r").nchunks


def _env(**extra: str) -> dict[str, str]:
    env = cli_env()
    env.pop("CI", None)  # CI turns progress off: these runs check that it shows
    env.pop("ZARRSQL_PROGRESS", None)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *sys.path])
    env.update(extra)
    return env


def _settled() -> None:
    """Wait for a display of an earlier scan to close (sessions end GRACE after their scans)."""
    deadline = time.monotonic() + 10
    while progress.MONITOR._session is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert progress.MONITOR._session is None


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress shows as on a terminal (pytest's stderr is not one), quickly."""
    progress.install()
    _settled()
    monkeypatch.setattr(progress, "display_kind", lambda: "terminal")
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "TICK", 0.05)


@pytest.fixture
def second_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.notebook.conftest import write_grid

    return write_grid(tmp_path_factory.mktemp("nb2") / "second.zarr", 120, 100)


def test_the_scans_of_one_statement_share_one_display(
    terminal: None, slow_store: Path, second_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = list(progress.MONITOR.shown)
    con = zarrsql.connect()
    sql = f"SELECT (SELECT sum(v) FROM read_zarr('{slow_store}')) + (SELECT sum(v) FROM read_zarr('{second_store}'))"
    con.sql(sql).fetchall()
    _settled()
    new = [b for b in progress.MONITOR.shown if b not in before]
    assert len(new) == 1
    expected = _chunks(slow_store) + _chunks(second_store)
    assert new[0].bar.total == expected
    assert new[0].bar.n == expected
    assert "zarrsql" in capsys.readouterr().err


def test_a_quick_query_shows_nothing(
    terminal: None, monkeypatch: pytest.MonkeyPatch, tiny_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress, "DELAY", 1.0)
    before = list(progress.MONITOR.shown)
    zarrsql.connect().sql(f"SELECT sum(v) FROM read_zarr('{tiny_store}')").fetchall()
    _settled()
    assert progress.MONITOR.shown == before
    assert capsys.readouterr().err == ""


def test_the_option_turns_it_off(terminal: None, slow_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = list(progress.MONITOR.shown)
    zarrsql.set_option("progress", False)
    try:
        assert zarrsql.get_option("progress") is False
        zarrsql.connect().sql(f"SELECT sum(v) FROM read_zarr('{slow_store}')").fetchall()
        _settled()
    finally:
        zarrsql.set_option("progress", True)
    assert progress.MONITOR.shown == before
    assert capsys.readouterr().err == ""


def test_set_option_refuses_unknown_names_and_values() -> None:
    with pytest.raises(zarrsql.ParameterError, match="no option 'progres'.*progress"):
        zarrsql.set_option("progres", True)
    with pytest.raises(zarrsql.ParameterError, match="True or False"):
        zarrsql.set_option("progress", "no")


def test_the_environment_variable_sets_the_default() -> None:
    code = "import zarrsql; print(zarrsql.get_option('progress'))"
    for value, shown in (("0", "False"), ("1", "True")):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=_env(ZARRSQL_PROGRESS=value)
        )
        assert out.stdout.strip() == shown, out.stderr


def _in_pty(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run `args` with a pseudo-terminal (100x24) as its stdin, stdout and stderr."""
    import fcntl
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # the child: become the command
        os.execve(args[0], args, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    out = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


CLI = FAST + "; import sys; from zarrsql.cli import main; sys.exit(main(sys.argv[1:]))"


#: The command-line query's join repeats each of the store's rows this many times, so that its
#: scan lasts several ticks (a bare count of the store ends, process and all, within one).
REPEAT = 200
#: Its answer, from the store's shape: every row passes (v >= 0).
ROWS = 400 * 100 * 100 * REPEAT


def _query_args(store: Path) -> list[str]:
    sql = f"SELECT count(*) AS n FROM t_y_x a, range({REPEAT}) r WHERE a.v + r.range >= r.range"
    return [sys.executable, "-c", CLI, "query", str(store), sql]


def test_the_command_line_draws_a_bar_on_a_terminal(slow_store: Path) -> None:
    status, text = _in_pty(_query_args(slow_store), _env())
    assert status == 0, text
    assert f"/{_chunks(slow_store)} [" in text  # tqdm's "done/total [elapsed<left, rate]"
    assert "zarrsql:" in text
    assert "units/s" in text
    assert str(ROWS) in text  # and the result still comes


def test_the_command_line_bar_follows_the_option(slow_store: Path) -> None:
    status, text = _in_pty(_query_args(slow_store), _env(ZARRSQL_PROGRESS="0"))
    assert status == 0, text
    assert "units/s" not in text
    assert str(ROWS) in text


def test_the_command_line_shows_nothing_when_piped(slow_store: Path) -> None:
    out = subprocess.run(_query_args(slow_store), capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert str(ROWS) in out.stdout


def test_an_executed_notebook_shows_the_widget(slow_store: Path, tiny_store: Path) -> None:
    import ipywidgets  # noqa: F401  (tqdm.auto draws a widget only with it)

    heavy = f"SELECT count(*) FROM read_zarr('{slow_store}') a, range(240) r WHERE a.v * 240 > r.range"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from zarrsql.notebook import progress\nprogress.DELAY, progress.TICK = 0.2, 0.05\n"
            "import zarrsql\ncon = zarrsql.connect()"
        ),
        nbformat.v4.new_code_cell(f"con.sql(\"SELECT sum(v) FROM read_zarr('{tiny_store}')\").fetchall()"),
        nbformat.v4.new_code_cell(f'import time\nt0 = time.time()\ncon.sql("{heavy}").fetchall()'),
        nbformat.v4.new_code_cell("time.time() - t0"),
    ]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute(env=_env())
    quick, slow = nb.cells[1].outputs, nb.cells[2].outputs
    assert not any(WIDGET in o.get("data", {}) for o in quick)  # under DELAY: nothing
    assert float(nb.cells[3].outputs[0]["data"]["text/plain"]) > 0.2 + 0.1  # long enough to show
    widgets = [o for o in slow if WIDGET in o.get("data", {})]
    assert len(widgets) == 1, slow
    assert "zarrsql" in widgets[0]["data"]["text/plain"]
    assert any(o["output_type"] == "execute_result" for o in slow)


def test_a_sparse_scan_reports_its_blocks(terminal: None, tmp_path: Path) -> None:
    """AnnData's sparse X reads as one row per stored entry, in blocks: progress counts them."""
    import scipy.sparse as sp

    import anndata as ad

    matrix = sp.random(300, 40, density=0.2, format="csr", random_state=0, dtype="f4")
    with warnings.catch_warnings(), ad.settings.override(zarr_write_format=3):
        warnings.simplefilter("ignore")  # anndata's notices about future defaults
        ad.AnnData(X=matrix).write_zarr(tmp_path / "cells.zarr")
    before = progress.MONITOR.shown[-1:]
    sql = f"SELECT count(*), sum(X) FROM read_zarr('{tmp_path / 'cells.zarr'}', table_name := 'obs_var')"
    n, total = zarrsql.connect().sql(sql).fetchall()[0]
    _settled()
    assert n == matrix.nnz
    assert total == pytest.approx(float(matrix.sum()), rel=1e-5)
    assert progress.MONITOR.shown[-1:] != before  # a display opened, for this scan
    assert progress.MONITOR.shown[-1].bar.n >= 1
