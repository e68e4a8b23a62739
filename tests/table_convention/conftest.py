"""The table-convention stores of `stores.py`, written once per test session (both formats)."""

from __future__ import annotations

import pytest

from store_sets import Stores
from tests.table_convention.stores import write_stores


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return Stores(write_stores(tmp_path_factory.mktemp("table_convention")), "table-convention")


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def fmt(request: pytest.FixtureRequest) -> int:
    """The Zarr format of the store under test."""
    return request.param
