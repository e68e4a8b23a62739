"""The table-convention stores of `stores.py`, written once per test session (both formats)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.table_convention.stores import write_stores


class Stores:
    """`stores("examples.zarr", 3)` → the path of that store in Zarr format 3 (a str for SQL)."""

    def __init__(self, paths: dict[str, Path]) -> None:
        self.paths = paths

    def __call__(self, name: str, fmt: int = 3) -> str:
        key = f"v{fmt}/{name}"
        if key not in self.paths:
            raise FileNotFoundError(f"no table-convention fixture {key!r}; known: {sorted(self.paths)}")
        return str(self.paths[key])


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return Stores(write_stores(tmp_path_factory.mktemp("table_convention")))


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def fmt(request: pytest.FixtureRequest) -> int:
    """The Zarr format of the store under test."""
    return request.param
