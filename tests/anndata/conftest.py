"""The AnnData stores of `tests/anndata_fixtures.py`, written once per test session.

This folder has no `__init__.py` on purpose: as a package named `anndata` under `tests/`
(which the root conftest puts on `sys.path`) it would shadow the real `anndata` package.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from anndata_fixtures import write_stores


class Stores:
    """`stores("csr.zarr", 3)` → the path of that store in Zarr format 3 (a str for SQL)."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    def __call__(self, name: str, fmt: int = 3) -> str:
        key = f"v{fmt}/{name}"
        if key not in self.paths:
            raise FileNotFoundError(f"no AnnData fixture {key!r}; known: {sorted(self.paths)}")
        return str(self.paths[key])


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return Stores(write_stores(tmp_path_factory.mktemp("anndata_stores")))


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def fmt(request: pytest.FixtureRequest) -> int:
    """The Zarr format of the store under test."""
    return request.param


StorePath = Callable[[str, int], str]
