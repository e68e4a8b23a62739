"""Stores on Azure Blob Storage (`az://`, `abfs://`), against Azurite on 127.0.0.1, read with adlfs.

Azurite is an npm package, not a pip one: see tests/remote/azure_server.py for where the tests
look for it. Without it they skip, unless `ZARRSQL_EXPECT_AZURITE=1` (CI) makes that a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import zarrsql
from tests.remote import azure_server
from tests.remote.azure_server import ACCOUNT, ACCOUNT_KEY, Azurite
from tests.remote.conftest import ERA5_TABLE, S3_STORES, STORE_CASES
from zarrsql.errors import StoreNotFoundError, StoreReadError
from zarrsql.store import open_store

CONTAINER = "zarrsql-fixtures"
PRIVATE = "private"
ERA5 = "fixtures/era5_like.zarr"
#: Variables through which the environment could hand adlfs or azure-identity credentials.
_AZURE_ENV_PREFIXES = ("AZURE_", "IDENTITY_", "MSI_")


def _missing(reason: str) -> None:
    """Skip, or fail where the environment promises the Azure test setup (CI)."""
    if os.environ.get(azure_server.ENV_EXPECT) == "1":
        pytest.fail(f"{azure_server.ENV_EXPECT}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def _adlfs() -> None:
    try:
        import adlfs  # noqa: F401
        import azure.storage.blob  # noqa: F401
    except ImportError as err:
        _missing(f"adlfs and azure-storage-blob are needed for the az:// tests ({err}): pip install 'zarrsql[azure]'")


def _azurite_or_skip() -> str:
    path = azure_server.find_azurite()
    if path is None:
        _missing(azure_server.INSTALL_HINT)
    return path


def _environment_without_azure() -> dict[str, str]:
    """The environment minus credential variables: tests choose their credentials themselves."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_AZURE_ENV_PREFIXES)}


def _close_adlfs_clients() -> None:
    """Close the SDK clients of cached adlfs filesystems while fsspec's loop still runs (left
    to the interpreter's exit, their aiohttp sessions are closed from a dying thread)."""
    from adlfs import AzureBlobFileSystem
    from fsspec.asyn import sync

    for fs in list(AzureBlobFileSystem._cache.values()):
        if fs.loop is None or fs.loop.is_closed():  # made for a caller's event loop (asynchronous=True)
            _close_on_a_loop_of_its_own(fs)
            continue
        client = getattr(fs, "service_client", None)
        if client is not None:
            sync(fs.loop, client.close)
        credential = getattr(fs, "credential", None)
        if credential is not None and hasattr(credential, "close"):
            sync(fs.loop, credential.close)
    AzureBlobFileSystem.clear_instance_cache()


def _close_on_a_loop_of_its_own(fs) -> None:
    """Close an asynchronous adlfs filesystem's clients on a new event loop; left open, their
    finalizers at exit ask for a loop the filesystem never had and print a traceback."""
    import asyncio

    for part in (getattr(fs, "service_client", None), getattr(fs, "credential", None)):
        if part is not None and hasattr(part, "close"):
            with contextlib.suppress(Exception):
                asyncio.run(part.close())
    for finalizer in list(weakref.finalize._registry):  # adlfs's own closers of them, now done
        held = finalizer.peek()
        if held is not None and held[0] is fs:
            finalizer.detach()


@pytest.fixture(scope="session")
def azurite(served_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite whose public container holds `S3_STORES`, and whose private one holds a copy of
    the v2 store at `air.zarr`."""
    executable = _azurite_or_skip()
    saved, kept = dict(os.environ), _environment_without_azure()
    os.environ.clear()
    os.environ.update(kept)
    server = azure_server.start(executable, tmp_path_factory.mktemp("azurite"))
    try:
        azure_server.upload(server.connection_string(), CONTAINER, [(s, served_root / s) for s in S3_STORES])
        azure_server.upload(
            server.connection_string(),
            PRIVATE,
            [("air.zarr", served_root / "fixtures/v2/air_temperature.zarr")],
            public=None,
        )
        yield server
    finally:
        _close_adlfs_clients()
        server.stop()
        os.environ.clear()
        os.environ.update(saved)


def _opts(**items: str) -> str:
    return "storage_options := MAP {" + ", ".join(f"'{k}': '{v}'" for k, v in items.items()) + "}"


def _local(con, served_root: Path, store: str, extra: str = ""):
    return con.sql(f"SELECT * FROM read_zarr('{served_root / store}'{', ' + extra if extra else ''})").to_arrow_table()


@pytest.mark.parametrize(("store", "extra"), STORE_CASES)
def test_azure_read_equals_local_read(con, azurite, served_root, fresh_cache, store, extra):
    opts = _opts(connection_string=azurite.connection_string())
    remote = con.sql(
        f"SELECT * FROM read_zarr('az://{CONTAINER}/{store}', {', '.join(x for x in (extra, opts) if x)})"
    ).to_arrow_table()
    local = _local(con, served_root, store, extra)
    assert remote.num_rows > 0
    assert remote.equals(local)


@pytest.mark.parametrize("scheme", ["abfs", "abfss"])
def test_abfs_urls_read_like_az(con, azurite, served_root, fresh_cache, scheme):
    store = "plain/v2_air_temperature.zarr"
    opts = _opts(connection_string=azurite.connection_string())
    remote = con.sql(f"SELECT * FROM read_zarr('{scheme}://{CONTAINER}/{store}', {opts})").to_arrow_table()
    assert remote.num_rows > 0
    assert remote.equals(_local(con, served_root, store))


def test_public_container_reads_with_a_keyless_connection_string(azurite, served_root):
    """A connection string with only the account and its endpoint: requests carry no signature."""
    anonymous = azurite.connection_string(key=None)
    store = open_store(f"az://{CONTAINER}/{ERA5}", {"connection_string": anonymous})
    # the user chose how to connect: zarrsql adds nothing, and adlfs made no credential
    assert store.fs_options == {"connection_string": anonymous}
    assert store.fs.credential is None
    assert store.fs.service_client.credential is None
    assert store.get("zarr.json") == (served_root / ERA5 / "zarr.json").read_bytes()
    assert store.list_dir("") == sorted(p.name for p in (served_root / ERA5).iterdir())
    # the same request on the private container is refused: the reads above were anonymous
    private = open_store(f"az://{PRIVATE}/air.zarr", {"connection_string": anonymous})
    with pytest.raises(StoreReadError, match="access denied"):
        private.get(".zgroup")


def test_anonymous_is_the_default_only_without_credentials(monkeypatch):
    """An account name alone means a public container: anonymous, no DefaultAzureCredential
    (whose probes of the CLI and the metadata endpoint would fail the read, slowly). Opening
    a store sends no request, so this needs no server."""
    for name in list(os.environ):
        if name.startswith(_AZURE_ENV_PREFIXES):
            monkeypatch.delenv(name)
    url = f"az://{CONTAINER}/{ERA5}"
    bare = open_store(url, {"account_name": ACCOUNT})
    assert bare.fs_options == {"account_name": ACCOUNT, "anon": True}
    assert bare.fs.credential is None
    keyed = open_store(url, {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY})
    assert "anon" not in keyed.fs_options
    assert keyed.fs.account_key == ACCOUNT_KEY
    assert open_store(url, {"account_name": ACCOUNT, "anon": "false"}).fs_options["anon"] is False
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", "sv=2024-01-01&sig=x")
    assert "anon" not in open_store(url, {"account_name": ACCOUNT}).fs_options


@pytest.fixture(scope="session")
def azurite_tls(azurite, served_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Azurite, Path]]:
    """A second Azurite, on HTTPS (adlfs makes `https://` URLs from `account_host`), with a
    public container holding the ERA5-like store; and the CA certificate that signed it."""
    folder = tmp_path_factory.mktemp("azurite-tls")
    ca, cert, key = azure_server.make_tls_files(folder / "tls")
    server = azure_server.start(_azurite_or_skip(), folder / "data", tls=(cert, key))
    try:
        azure_server.upload(server.connection_string(), CONTAINER, [(ERA5, served_root / ERA5)], ca=ca)
        yield server, ca
    finally:
        server.stop()


#: Run in a child process, whose aiohttp trusts the test CA (SSL_CERT_FILE is read when aiohttp
#: makes its default TLS context, on import: too late to set in this process).
_ANONYMOUS_READ = """
import json, sys
import zarrsql
from zarrsql.store import open_store
url, options, query = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
store = open_store(url, options)
con = zarrsql.connect()
rows = con.sql(query).fetchall()
print(json.dumps({"fs_options": store.fs_options, "credential": repr(store.fs.credential), "rows": rows}))
"""


def test_public_container_reads_with_only_account_name_and_host(azurite_tls, con, served_root):
    """What a user of public data writes: the account's name and host, no key of any kind."""
    server, ca = azurite_tls
    url = f"az://{CONTAINER}/{ERA5}"
    options = {"account_name": ACCOUNT, "account_host": server.host}
    bounded = {**options, "timeout": "20", "retries": "0"}  # a credential probe fails in 20 s, not minutes
    sql = "SELECT count(*), sum(\"2m_temperature\") FROM read_zarr('{}', " + ERA5_TABLE + "{})"
    child = subprocess.run(
        [sys.executable, "-c", _ANONYMOUS_READ, url, json.dumps(bounded), sql.format(url, ", " + _opts(**bounded))],
        env={**_environment_without_azure(), "SSL_CERT_FILE": str(ca)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["fs_options"] == {**options, "anon": True}
    assert out["credential"] == "None"
    expected = con.sql(sql.format(served_root / ERA5, "")).fetchall()
    assert expected[0][0] > 0
    assert [tuple(r) for r in out["rows"]] == expected


def test_listing_functions_walk_an_unconsolidated_container(con, azurite, served_root, fresh_cache):
    opts = _opts(connection_string=azurite.connection_string())
    remote = con.sql(
        f"SELECT * FROM read_zarr_tables('az://{CONTAINER}/plain/era5_like.zarr', {opts}) ORDER BY table_name"
    ).fetchall()
    local = con.sql(f"SELECT * FROM read_zarr_tables('{served_root / ERA5}') ORDER BY table_name").fetchall()
    assert len(local) > 1
    assert remote == local


def test_second_query_makes_only_validation_requests(con, azurite, fresh_cache):
    url = f"az://{CONTAINER}/{ERA5}"
    opts = _opts(connection_string=azurite.connection_string())
    query = f"SELECT count(*) FROM read_zarr('{url}', {ERA5_TABLE}, {opts})"
    with zarrsql.trace() as first:
        con.sql(query).fetchall()
    with zarrsql.trace() as second:
        con.sql(query).fetchall()
    # count(*) reads no data chunk: the first query reads metadata and coordinates; the
    # second only checks that the consolidated document and coordinate chunks are unchanged
    assert first.bytes_read > 0
    assert 0 < second.requests < first.requests
    assert second.bytes_read == 0


def test_the_account_key_reaches_the_server(con, azurite, served_root, fresh_cache):
    url = f"az://{PRIVATE}/air.zarr"
    rows = con.sql(f"SELECT count(*) FROM read_zarr('{url}', {_opts(connection_string=azurite.connection_string())})")
    local = con.sql(f"SELECT count(*) FROM read_zarr('{served_root / 'fixtures/v2/air_temperature.zarr'}')")
    expected = local.fetchall()
    assert expected[0][0] > 0
    assert rows.fetchall() == expected


def test_a_wrong_key_is_access_denied_naming_the_url(con, azurite, fresh_cache):
    url = f"az://{PRIVATE}/air.zarr"
    wrong = azurite.connection_string(key="d3Jvbmcga2V5LCByaWdodCBzaGFwZQ==")  # base64, as a key must be
    with pytest.raises(zarrsql.ZarrSQLError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{url}', {_opts(connection_string=wrong)})").fetchall()
    assert isinstance(info.value, StoreReadError)
    message = str(info.value)
    assert "access denied" in message
    assert url in message
    assert "HTTP 403" in message


@pytest.mark.parametrize("where", [f"{CONTAINER}/missing.zarr", "no-such-container/air.zarr"])
def test_a_missing_store_is_not_found_naming_the_url(con, azurite, fresh_cache, where):
    url = f"az://{where}"
    with pytest.raises(zarrsql.ZarrSQLError) as info:
        con.execute(
            f"SELECT count(*) FROM read_zarr('{url}', {_opts(connection_string=azurite.connection_string())})"
        ).fetchall()
    assert isinstance(info.value, StoreNotFoundError)
    assert url in str(info.value)


class _Unavailable(BaseHTTPRequestHandler):
    """Answers every request with 503, counting them."""

    hits = 0
    lock = threading.Lock()

    def _refuse(self) -> None:
        with _Unavailable.lock:
            _Unavailable.hits += 1
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_PUT = _refuse

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


def test_zarrsql_retries_are_the_only_retries(fresh_cache):
    """The storage SDK would retry a 503 three times, 15 s apart, inside one zarrsql attempt:
    past any sensible timeout, and reported as one. With its policy off, the server sees
    exactly zarrsql's attempts and the error names the status."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/{ACCOUNT}"
        options = {
            "connection_string": f"AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};",
            "retries": "2",
            "retry_backoff": "0.01",
            "timeout": "10",
        }
        store = open_store(f"az://{CONTAINER}/{ERA5}", options)
        _Unavailable.hits = 0
        started = time.monotonic()
        with zarrsql.trace() as trace, pytest.raises(StoreReadError) as info:
            store.get("zarr.json")
        elapsed = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert _Unavailable.hits == trace.requests == 3
    assert "HTTP 503" in str(info.value)
    assert "after 3 attempts" in str(info.value)
    assert elapsed < 5


# -- writing ----------------------------------------------------------------------------------
_WRITE = """
import sys
import zarrsql
url, connection_string = sys.argv[1], sys.argv[2]
for mode, rows, scale in (("w-", 3, 1.0), ("w", 2, 0.5)):
    zarrsql.to_zarr(
        f"SELECT t, x, (t * 10 + x) * {scale} AS v FROM range({rows}) a(t), range(4) b(x)",
        url, dims=["t", "x"], storage_options={"connection_string": connection_string}, mode=mode,
    )
zarrsql.to_zarr("SELECT 2 AS t, x, -1.0 AS v FROM range(4) b(x)", url, dims=["t", "x"], mode="a", append_dim="t",
                storage_options={"connection_string": connection_string})
print("written")
"""


def test_a_store_written_to_azure_reads_back_in_xarray_and_the_process_exits_cleanly(azurite) -> None:
    """Writing, replacing and appending through adlfs's asynchronous clients: xarray reads the
    result, and the writer's process ends without adlfs's "Loop is not running" tracebacks."""
    import numpy as np
    import xarray as xr

    connection_string = azurite.connection_string()
    azure_server.upload(connection_string, "written", [], public=None)
    url = "az://written/grid.zarr"
    done = subprocess.run(
        [sys.executable, "-c", _WRITE, url, connection_string],
        capture_output=True,
        text=True,
        timeout=120,
        env=_environment_without_azure(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "written"
    assert done.stderr == ""
    from adlfs import AzureBlobFileSystem
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
    from zarr.storage import FsspecStore

    # read through a synchronous adlfs instance, which the session fixture closes
    reader = AsyncFileSystemWrapper(AzureBlobFileSystem(connection_string=connection_string), asynchronous=True)
    ds = xr.open_zarr(FsspecStore(reader, path="written/grid.zarr", read_only=True))
    t, x = np.meshgrid(np.arange(2), np.arange(4), indexing="ij")
    np.testing.assert_array_equal(ds["v"].values, np.vstack([(t * 10 + x) * 0.5, np.full((1, 4), -1.0)]))
    np.testing.assert_array_equal(ds["t"].values, np.arange(3))
