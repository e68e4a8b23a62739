"""The conformance suite on fsspec stores: memory://, the local HTTP test server and an S3 API
server (moto), each on 127.0.0.1 and started here (tests/remote/conftest.py does the same)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.remote import httpserver
from tests.remote.conftest import moto_client, start_moto, stop_http

from zarrsql.store import ChangeWatching, Prefetching, RangeReading, Store, ZarrPythonAccess, open_store
from zarrsql.store.remote import FsspecStore

from .conformance import (
    FILES,
    ChangeWatchingTests,
    PrefetchingTests,
    RangeReadingTests,
    StoreTests,
    ZarrPythonAccessTests,
)
from .test_local_store import write_folder

FSSPEC_CAPABILITIES = frozenset({RangeReading, Prefetching, ChangeWatching, ZarrPythonAccess})
BUCKET = "conformance"


class FsspecStoreTests(StoreTests, RangeReadingTests, PrefetchingTests, ChangeWatchingTests, ZarrPythonAccessTests):
    capabilities = FSSPEC_CAPABILITIES


class TestMemoryStore(FsspecStoreTests):
    def open_with(self, root: Path, files: dict[str, bytes]) -> Store:
        import fsspec

        url = f"memory://conformance-{uuid.uuid4().hex}"
        fs = fsspec.filesystem("memory")
        for key, data in files.items():
            fs.pipe(f"{url}/{key}", data)
        return open_store(url)

    def put(self, store: Store, key: str, data: bytes) -> None:
        assert isinstance(store, FsspecStore)
        store.fs.pipe(f"{store.root}/{key}", data)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpserver.FaultyServer]:
    server = httpserver.start(tmp_path_factory.mktemp("served"))
    yield server
    from fsspec.implementations.http import HTTPFileSystem

    _close_zarr_python_sessions(HTTPFileSystem)
    stop_http(server)


def _close_zarr_python_sessions(cls: type) -> None:
    """Close the sessions of the filesystems made for zarr-python (`asynchronous=True`) on
    zarr-python's own event loop, where they were opened; `close_sessions` does the others."""
    from zarr.core.sync import sync

    for key, fs in list(cls._cache.items()):  # type: ignore[attr-defined]
        session = getattr(fs, "_session", None)
        if fs.asynchronous and session is not None:
            if not session.closed:
                sync(session.close())
            del cls._cache[key]  # type: ignore[attr-defined]


class TestHTTPStore(FsspecStoreTests):
    @pytest.fixture
    def store(self, served: httpserver.FaultyServer) -> Store:
        self.served = served
        return self.open_with(served.root, FILES)

    def open_with(self, root: Path, files: dict[str, bytes]) -> Store:
        name = uuid.uuid4().hex  # the served folder is shared: each test its own store in it
        write_folder(root / name, files)
        return open_store(self.served.url(name))

    def put(self, store: Store, key: str, data: bytes) -> None:
        name = store.url.rsplit("/", 1)[-1]
        Path(self.served.root, name, *key.split("/")).write_bytes(data)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server, endpoint = start_moto()
    moto_client("s3", endpoint, "conformance", "conformance").create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


class TestS3Store(FsspecStoreTests):
    @pytest.fixture
    def store(self, s3_endpoint: str) -> Store:
        self.endpoint = s3_endpoint
        return self.open_with(Path(), FILES)

    def _client(self) -> Any:
        return moto_client("s3", self.endpoint, "conformance", "conformance")

    def open_with(self, root: Path, files: dict[str, bytes]) -> Store:
        prefix = uuid.uuid4().hex
        client = self._client()
        for key, data in files.items():
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=data)
        options = {"endpoint_url": self.endpoint, "key": "conformance", "secret": "conformance"}
        return open_store(f"s3://{BUCKET}/{prefix}", options)

    def put(self, store: Store, key: str, data: bytes) -> None:
        prefix = store.url.rsplit("/", 1)[-1]
        self._client().put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=data)
