"""The working folder the docs' examples run in: the stores they read, under the names they use.

The guides give paths relative to the repository root (`tests/fixtures/air_temperature.zarr`)
or to a folder holding `anndata_stores/` (docs/anndata.md). Each Markdown file runs in a
fresh folder of its own with both there, so an example that writes a file (`early.zarr`,
`analysis.duckdb`) cannot disturb another file's examples or the shared fixture cache.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

ANNDATA_NAME = re.compile(r"anndata_stores/v(?P<fmt>[23])/(?P<name>(?:corrupt/)?\w+\.zarr)")


def doc_files() -> list[Path]:
    """README.md and every docs/*.md, as they are when the tests are collected."""
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def anndata_stores_named(texts: list[str]) -> set[tuple[int, str]]:
    """The AnnData stores the docs name, as (format, name under v<format>/)."""
    return {(int(m["fmt"]), m["name"]) for text in texts for m in ANNDATA_NAME.finditer(text)}


@pytest.fixture(scope="session")
def anndata_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Only the AnnData stores some doc reads, written by tests/anndata_fixtures.py."""
    import anndata_fixtures

    root = tmp_path_factory.mktemp("docs_anndata") / "anndata_stores"
    wanted = anndata_stores_named([p.read_text(encoding="utf-8") for p in doc_files()])
    plain = {(fmt, name) for fmt, name in wanted if not name.startswith("corrupt/")}
    corrupt_formats = {fmt for fmt, name in wanted if name.startswith("corrupt/")}
    plain |= {(fmt, "csr.zarr") for fmt in corrupt_formats}  # the corrupt copies start from it
    for fmt, name in sorted(plain):
        anndata_fixtures.write_store(root, fmt, name)
    for fmt in sorted(corrupt_formats):
        anndata_fixtures.write_corrupt_copies(root, fmt)
    return root


@pytest.fixture(scope="session")
def table_convention_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stores of tests/table_convention/stores.py (docs/table-convention.md reads the v3 ones)."""
    from tests.table_convention.stores import write_stores

    root = tmp_path_factory.mktemp("docs_table_convention")
    write_stores(root)
    return root / "v3"


@pytest.fixture
def docs_workdir(
    tmp_path: Path,
    fixtures_dir: Path,
    anndata_root: Path,
    table_convention_root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[], Path]:
    """A fresh folder, made the current one, holding the stores the docs name.

    `tests/fixtures` (scripts/generate_fixtures.py), `anndata_stores` (tests/anndata_fixtures.py)
    and the table-convention stores `examples.zarr`, `sites.zarr`, ... at the top (named as
    docs/table-convention.md names them).
    """
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "fixtures").symlink_to(fixtures_dir, target_is_directory=True)
    (tmp_path / "anndata_stores").symlink_to(anndata_root, target_is_directory=True)
    for store in sorted(table_convention_root.iterdir()):
        (tmp_path / store.name).symlink_to(store, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")  # examples that plot save PNG files; no display
    # examples write into `tempfile.mkdtemp()` folders, as a reader's would; under the test's
    # own folder they go when the test does, instead of piling up in the system's /tmp
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))
    return lambda: tmp_path
