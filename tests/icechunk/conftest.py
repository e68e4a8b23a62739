"""The Icechunk repositories of `tests/icechunk_fixtures.py`, written once per test session.

This folder has no `__init__.py` on purpose: as a package named `icechunk` under `tests/`
(which the root conftest puts on `sys.path`) it would shadow the real `icechunk` package.
"""

from __future__ import annotations

import pytest

from icechunk_fixtures import Versions, write_versions


@pytest.fixture(scope="session")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Versions:
    import icechunk

    root = tmp_path_factory.mktemp("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(root / "repo")))
    first, second, dev, as_of = write_versions(repo, root / "plain.zarr")
    return Versions(root / "repo", root / "plain.zarr", first, second, dev, as_of)
