"""The tutorials of docs/tutorials/ run headless, top to bottom, and leave their figures.

Each notebook is executed by nbclient on a kernel of this very interpreter (a kernelspec
written into a temporary JUPYTER_PATH, so no `python3` kernel needs to be registered and no
other Python is picked up from PATH). A cell that raises fails the test. The executed copy
and its figures (PNG files the notebook saves, matplotlib on the Agg backend) go to a
temporary folder, or to `$ZARRSQL_TUTORIALS_OUT` when set (to keep them, e.g. in CI).
The notebooks check their own numbers against xarray, anndata and numpy with `assert`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

from tests.conftest import REPO_ROOT

TUTORIALS = sorted((REPO_ROOT / "docs" / "tutorials").glob("*.ipynb"))
KERNEL = "zarrsql-tutorials"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: the figures each tutorial saves (a new tutorial must save at least one)
FIGURES = {
    "climate": {"climatology", "global_anomaly", "point_series", "july_2003_anomaly", "point_histogram"},
    "single-cell": {"marker_heatmap", "counts_per_cell"},
    "microscopy": {"intensity_histogram", "overview_level1", "nucleus_region"},
}


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JUPYTER_PATH holding one kernelspec: ipykernel on `sys.executable`."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "zarrsql tutorials", "language": "python"}), encoding="utf-8"
    )
    return root


def _out_dir(tmp_path: Path) -> Path:
    out = Path(os.environ.get("ZARRSQL_TUTORIALS_OUT") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("notebook", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(notebook: Path, kernel_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _out_dir(tmp_path)
    figures = out / f"{notebook.stem}_files"
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("ZARRSQL_TUTORIAL_FIGURES", str(figures))
    scratch = tmp_path / "tmp"  # the notebook's tempfile.mkdtemp() folders go with the test's own
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    nb = run_notebook(notebook, out)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code), "a code cell did not run"
    stderr = "".join(o.get("text", "") for c in code for o in c.outputs if o.get("name") == "stderr")
    assert "Warning" not in stderr, f"{notebook.name} warns; fix the call:\n{stderr}"
    _check_figures(notebook.stem, figures, code)


def run_notebook(notebook: Path, out: Path):  # noqa: ANN201 - an nbformat.NotebookNode
    """Execute `notebook` in `out` on the tutorials' kernel; the executed copy is saved there
    even when a cell fails (nbclient raises CellExecutionError on the first one)."""
    nb = nbformat.read(notebook, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name=KERNEL, resources={"metadata": {"path": str(out)}}, allow_errors=False
    )
    try:
        client.execute()
    finally:
        nbformat.write(nb, out / notebook.name)
    return nb


def test_a_failing_cell_fails(kernel_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_path))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("assert x == 2, 'wrong x'")]
    path = tmp_path / "broken.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "out").mkdir()
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="wrong x"):
        run_notebook(path, tmp_path / "out")
    assert (tmp_path / "out" / "broken.ipynb").exists()


def _check_figures(stem: str, figures: Path, code: list) -> None:
    from matplotlib.image import imread

    saved = {p.stem: p for p in figures.glob("*.png")}
    assert saved, f"{stem} saved no figure under {figures}"
    assert set(saved) >= FIGURES.get(stem, set()), f"{stem} saved {sorted(saved)}"
    for name, path in saved.items():
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE), f"{name}.png is not a PNG"
        pixels = imread(path)  # matplotlib's own PNG decoder: the file is a readable image
        assert pixels.ndim == 3, (name, pixels.shape)
        assert min(pixels.shape[:2]) > 50, (name, pixels.shape)
        assert pixels.std() > 0, f"{name}.png is blank"
    shown = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(shown) == len(saved), "every saved figure is displayed in the executed notebook"
