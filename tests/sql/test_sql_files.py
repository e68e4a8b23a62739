"""Run every `*.test` file of this folder on a fresh zarrsql connection."""

from __future__ import annotations

from pathlib import Path

import pytest

import zarrsql
from tests.sql.runner import run_file

FILES = sorted(Path(__file__).parent.glob("*.test"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_sql_file(path: Path, fixtures_dir: Path) -> None:
    with zarrsql.connect() as con:
        run_file(path, con, fixtures_dir)
