"""Every fenced Python and SQL example of README.md and docs/*.md runs and shows what it says.

tests/docs/markdown.py has the convention. One test per Markdown file, since a file's
examples build on each other; a failing file lists every example that disagrees with the
code, not only the first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import zarrsql
from tests.docs.conftest import doc_files
from tests.docs.markdown import ExampleFailure, blocks, run_block

FILES = doc_files()


def run_file(path: Path) -> tuple[int, list[str]]:
    """Run the file's examples in order in one namespace; (how many ran, the failures)."""
    namespace: dict[str, Any] = {"__name__": "__doc_example__", "zarrsql": zarrsql}
    namespace["con"] = zarrsql.connect()
    failures, ran = [], 0
    try:
        for block in blocks(path):
            if not block.runnable:
                continue
            ran += 1
            try:
                run_block(block, namespace)
            except ExampleFailure as failure:
                failures.append(str(failure))
    finally:
        for value in list(namespace.values()):
            if isinstance(value, zarrsql.Connection):
                value.close()
    return ran, failures


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_doc_examples(path: Path, docs_workdir: Callable[[], Path]) -> None:
    ran, failures = run_file(path)
    assert not failures, f"{len(failures)} of {ran} examples in {path.name} disagree with the code:\n\n" + "\n\n".join(
        failures
    )
