"""The AnnData stores of `tests/anndata_fixtures.py`, written once per test session.

This folder has no `__init__.py` on purpose: as a package named `anndata` under `tests/`
(which the root conftest puts on `sys.path`) it would shadow the real `anndata` package.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from anndata_fixtures import write_stores
from store_sets import Stores


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return Stores(write_stores(tmp_path_factory.mktemp("anndata_stores")), "AnnData")


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def fmt(request: pytest.FixtureRequest) -> int:
    """The Zarr format of the store under test."""
    return request.param


StorePath = Callable[[str, int], str]
