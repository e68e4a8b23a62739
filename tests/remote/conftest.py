"""Servers for the remote-store tests: a fault-injecting HTTP server over tests/fixtures and an
S3 API server (moto's server mode) holding copies of fixture stores. Both run on 127.0.0.1,
started by the tests; nothing leaves the machine."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import zarrsql
from tests.remote import httpserver
from zarrsql.metadata.tree import clear_cache

BUCKET = "zarrsql-fixtures"
ERA5_TABLE = "table_name := 'time_latitude_longitude'"
#: (store, read_zarr arguments) copied into every object store's bucket: v3 and v2 with
#: consolidated metadata, and both without it (walked with list calls).
STORE_CASES = [
    ("fixtures/era5_like.zarr", ERA5_TABLE),
    ("fixtures/v2/air_temperature.zarr", ""),
    ("plain/era5_like.zarr", ERA5_TABLE),
    ("plain/v2_air_temperature.zarr", ""),
]
S3_STORES = tuple(store for store, _ in STORE_CASES)


def _unconsolidate(src: Path, dst: Path) -> None:
    """A copy of a store without consolidated metadata (as bioformats2raw or Icechunk write)."""
    shutil.copytree(src, dst)
    (dst / ".zmetadata").unlink(missing_ok=True)
    root = dst / "zarr.json"
    if root.exists():
        doc = json.loads(root.read_text())
        doc.pop("consolidated_metadata", None)
        root.write_text(json.dumps(doc))


@pytest.fixture(scope="session")
def served_root(fixtures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture stores, plus `plain/` copies of two of them without consolidated metadata."""
    root = tmp_path_factory.mktemp("served")
    shutil.copytree(fixtures_dir, root / "fixtures")
    _unconsolidate(fixtures_dir / "era5_like.zarr", root / "plain" / "era5_like.zarr")
    _unconsolidate(fixtures_dir / "v2" / "air_temperature.zarr", root / "plain" / "v2_air_temperature.zarr")
    return root


def close_sessions(classes: Iterable[type]) -> None:
    """Close the aiohttp sessions of the cached filesystems of `classes` while fsspec's event
    loop still runs: left to the interpreter's exit, their sockets are torn down from a thread
    that exit is killing."""
    import gc

    from fsspec.asyn import sync

    for cls in classes:
        for fs in list(cls._cache.values()):
            session = getattr(fs, "_session", None)
            if session is not None and not session.closed:
                sync(fs.loop, session.close)
        cls.clear_instance_cache()
    gc.collect()


def stop_http(server: httpserver.FaultyServer) -> None:
    """Close fsspec's HTTP sessions (they would outlive the server and warn), then stop it."""
    from fsspec.implementations.http import HTTPFileSystem

    close_sessions([HTTPFileSystem])
    server.stop()


@pytest.fixture(scope="session")
def _http(served_root: Path) -> Iterator[httpserver.FaultyServer]:
    server = httpserver.start(served_root)
    yield server
    stop_http(server)


@pytest.fixture
def http(_http: httpserver.FaultyServer) -> Iterator[httpserver.FaultyServer]:
    """The HTTP server, with no faults, no latency and an empty request log."""
    _http.reset()
    clear_cache()  # each test starts cold: its request counts are its own
    yield _http
    _http.reset()


@pytest.fixture
def con() -> Iterator[zarrsql.Connection]:
    c = zarrsql.connect()
    yield c
    c.close()


def _no_aws_environment() -> None:
    """Tests decide credentials themselves: no AWS_* variables, no shared files."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            del os.environ[name]
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull + "-none"
    os.environ["AWS_CONFIG_FILE"] = os.devnull + "-none"


def start_moto() -> tuple[Any, str]:
    """An S3 (and IAM) API server on a free port of 127.0.0.1, and its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def fresh_bucket(bucket: str) -> Iterator[dict[str, str]]:
    """Storage options of a new `bucket` on a local S3 API server of its own, with the
    environment's AWS_* variables set aside meanwhile (a generator for a fixture)."""
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]
    server, endpoint = start_moto()
    moto_client("s3", endpoint, "k", "s").create_bucket(Bucket=bucket)
    try:
        yield {"endpoint_url": endpoint, "key": "k", "secret": "s"}
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved)


def moto_client(service: str, endpoint: str, key: str, secret: str) -> Any:
    """A boto3 client of `service` on the server at `endpoint`, signing with `key`/`secret`."""
    import boto3

    return boto3.client(
        service, endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key, aws_secret_access_key=secret
    )


@pytest.fixture(scope="session")
def s3(served_root: Path) -> Iterator[str]:
    """The endpoint URL of an S3 API server whose bucket holds `S3_STORES`."""
    saved = dict(os.environ)
    _no_aws_environment()
    server, endpoint = start_moto()
    client = moto_client("s3", endpoint, "fixture", "fixture")
    client.create_bucket(Bucket=BUCKET, ACL="public-read")  # a public bucket, as ERA5's and CMIP6's are
    for store in S3_STORES:
        root = served_root / store
        for f in root.rglob("*"):
            if f.is_file():
                client.put_object(
                    Bucket=BUCKET,
                    Key=f"{store}/{f.relative_to(root).as_posix()}",
                    Body=f.read_bytes(),
                    ACL="public-read",
                )
    yield endpoint
    server.stop()
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()
