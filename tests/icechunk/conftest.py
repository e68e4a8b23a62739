"""The Icechunk repositories of `tests/icechunk_fixtures.py`, written once per test session.

This folder has no `__init__.py` on purpose: as a package named `icechunk` under `tests/`
(which the root conftest puts on `sys.path`) it would shadow the real `icechunk` package.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from icechunk_fixtures import Versions, Virtual, write_versions, write_virtual


@pytest.fixture(scope="session")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Versions:
    import icechunk

    root = tmp_path_factory.mktemp("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(root / "repo")))
    first, second, dev, as_of = write_versions(repo, root / "plain.zarr")
    return Versions(root / "repo", root / "plain.zarr", first, second, dev, as_of)


@pytest.fixture(scope="session")
def virtual(tmp_path_factory: pytest.TempPathFactory) -> Virtual:
    return write_virtual(tmp_path_factory.mktemp("virtual"))


@pytest.fixture(scope="session")
def s3_repo() -> Iterator[tuple[str, dict[str, str]]]:
    """The history of `versions` in a repository on a local S3 API server (moto): its URL and
    the storage options that reach it."""
    from tests.remote.conftest import moto_client, start_moto

    import icechunk

    server, endpoint = start_moto()
    moto_client("s3", endpoint, "fixture", "fixture").create_bucket(Bucket="icechunk-repos")
    storage = icechunk.s3_storage(
        bucket="icechunk-repos",
        prefix="era5/repo",
        endpoint_url=endpoint,
        region="us-east-1",
        allow_http=True,
        force_path_style=True,
        access_key_id="fixture",
        secret_access_key="fixture",
    )
    write_versions(icechunk.Repository.create(storage))
    options = {"endpoint_url": endpoint, "key": "fixture", "secret": "fixture", "region": "us-east-1"}
    yield "s3://icechunk-repos/era5/repo", options
    server.stop()
