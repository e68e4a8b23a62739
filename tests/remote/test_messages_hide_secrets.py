"""Error messages never repeat the secrets a store URL carries, and a GCS 403 is "access denied".

docs/remote.md: "No error message repeats ... the signatures and tokens that URLs carry", and
its error table promises HTTP 401/403 as `StoreReadError` "access denied" with the URL, the
status and where credentials go, on every store. A pre-signed URL carries its credential and
signature in the query string; `https://user:password@host/...` carries a password (aiohttp
sends it as Basic authentication). Messages name such URLs with every query value and the
password shown as `***`.

The URLs a message should name are built here with `urllib.parse` (the oracle), never taken
from zarrsql; the secrets are literals of this file, so finding none of them in a message,
in Python or on the CLI's stderr, is the test. Servers are the ones tests/remote uses: the
fault-injecting HTTP server and fake-gcs-server behind its failing proxy.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
import xarray as xr

import zarrsql
from tests.cli_runner import assert_one_error, run_cli
from tests.remote import gcs_server
from tests.remote.conftest import ERA5_TABLE, close_sessions
from zarrsql.errors import ParameterError, StoreNotFoundError, StoreReadError
from zarrsql.store.failures import Failure, classify

ERA5 = "fixtures/era5_like.zarr"
PLAIN_ERA5 = "plain/era5_like.zarr"  # no consolidated metadata: a GCS store is listed
CHUNK = f"{ERA5}/2m_temperature/c/1/0/0"
#: A pre-signed URL's query (S3's credential and signature, an Azure SAS signature, a token).
SIGNED_QUERY = (
    "X-Amz-Credential=AKIAEXAMPLEKEYID&X-Amz-Signature=0123456789abcdefSIGNATURE&sig=AZURESASSIG&token=TOKENVALUE"
)
PASSWORD = "pa55-w0rd-SECRET"
SECRETS = ("AKIAEXAMPLEKEYID", "0123456789abcdefSIGNATURE", "AZURESASSIG", "TOKENVALUE", PASSWORD)
NO_RETRIES = "storage_options := MAP {'retries': '0'}"


def _hides_secrets(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} in: {text}"


def _shown(url: str) -> str:
    """`url` as the docs say a message names it, built with urllib: each query (and fragment)
    value and the password replaced by `***`."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}:***@" if parts.password is not None else ""
    shown = f"{parts.scheme}://{user}{host}{parts.path}"
    if parts.query:
        shown += "?" + "&".join(f"{name}=***" for name, _ in parse_qsl(parts.query))
    if parts.fragment:
        shown += "#" + "&".join(f"{name}=***" for name, _ in parse_qsl(parts.fragment))
    return shown


def _with_password(http_url: str) -> str:
    return http_url.replace("http://", f"http://alice:{PASSWORD}@", 1)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a query string or fragment: refused before any request, without its values ---------------
@pytest.mark.parametrize("mark", ["?", "#"])
def test_a_signed_store_url_is_refused_without_its_signature(con, http, mark):
    url = http.url(ERA5) + mark + SIGNED_QUERY
    with pytest.raises(ParameterError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{url}')").fetchall()
    message = str(info.value)
    _hides_secrets(message)
    assert _shown(url) in message  # the names stay: they say what kind of URL it was
    assert "query string or fragment" in message
    assert http.count() == 0  # refused before any request


def test_the_cli_prints_a_signed_url_without_its_signature(http):
    url = http.url(ERA5) + "?" + SIGNED_QUERY
    out = run_cli("tables", url)
    assert_one_error(out, _shown(url))
    _hides_secrets(out.stderr)


# -- a password in the URL: used for the requests, hidden in every message ---------------------
def test_a_password_in_the_url_still_reaches_the_server(con, http, served_root):
    rows = con.execute(f"SELECT count(*) FROM read_zarr('{_with_password(http.url(ERA5))}', {ERA5_TABLE})").fetchall()
    sizes = xr.open_zarr(served_root / ERA5).sizes
    assert rows == [(sizes["time"] * sizes["latitude"] * sizes["longitude"],)]
    basic = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert http.headers_seen
    assert all(h.get("Authorization") == basic for h in http.headers_seen)


def test_a_missing_store_is_named_without_the_password(con, http):
    url = _with_password(http.url("fixtures/no_such_store.zarr"))
    with pytest.raises(StoreNotFoundError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{url}')").fetchall()
    _hides_secrets(str(info.value))
    assert _shown(url) in str(info.value)


def test_a_404_on_the_root_document_through_the_cli_hides_the_password(http):
    url = _with_password(http.url("fixtures/no_such_store.zarr"))
    out = run_cli("tables", url)
    assert_one_error(out, _shown(url))
    _hides_secrets(out.stderr)
    assert http.count("GET", lambda p: p.endswith("/zarr.json")) >= 1  # it did ask: a real 404


def test_access_denied_names_the_url_without_the_password(con, http):
    http.inject(f"{ERA5}/zarr.json", "403", times=None)
    url = _with_password(http.url(ERA5))
    with pytest.raises(StoreReadError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{url}', {ERA5_TABLE})").fetchall()
    message = str(info.value)
    _hides_secrets(message)
    assert "access denied" in message
    assert "HTTP 403" in message
    assert _shown(url) + "/zarr.json" in message


def test_an_unreachable_host_is_named_without_the_password(con):
    url = f"http://alice:{PASSWORD}@127.0.0.1:{_closed_port()}/x.zarr"
    with pytest.raises(StoreReadError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{url}', {NO_RETRIES})").fetchall()
    _hides_secrets(str(info.value))
    assert _shown(url) in str(info.value)


def test_an_option_the_client_refuses_is_named_without_the_password(con, http):
    url = _with_password(http.url(ERA5))
    with pytest.raises(ParameterError) as info:  # refused when the store opens, before any request
        con.execute(
            f"SELECT count(*) FROM read_zarr('{url}', storage_options := MAP {{'no_such_option': 'x'}})"
        ).fetchall()
    _hides_secrets(str(info.value))
    assert "no_such_option" in str(info.value)
    assert http.count() == 0


def test_a_bad_option_at_opening_is_named_without_the_signature(con):
    url = "gs://bucket/x.zarr?" + SIGNED_QUERY
    options = "storage_options := MAP {'token': '{\"type\": \"authorized_user\"}'}"  # no refresh_token
    with pytest.raises(ParameterError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{url}', {options})").fetchall()
    _hides_secrets(str(info.value))
    assert _shown(url) in str(info.value)


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("no_such.json", "kerchunk"), ("no_such.h5", "hdf5"), ("no_such", "icechunk")],
)
def test_other_formats_name_a_remote_file_without_the_password(con, http, name, fmt):
    url = _with_password(http.url(f"fixtures/{name}"))
    with pytest.raises(zarrsql.ZarrSQLError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{url}', format := '{fmt}')").fetchall()
    _hides_secrets(str(info.value))
    assert _shown(url) in str(info.value)


# -- GCS: a 403 is access denied, as a 401 is -------------------------------------------------
@pytest.fixture(scope="module")
def gcs_proxy(served_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[gcs_server.Proxy]:
    """fake-gcs-server holding the ERA5 store (with and without consolidated metadata), behind
    the proxy that fails requests on demand."""
    server = gcs_server.start(tmp_path_factory.mktemp("gcs-denied"))
    proxy = None
    try:
        server.create_bucket("denied")
        for store in (ERA5, PLAIN_ERA5):
            assert server.upload_tree("denied", store, served_root / store) > 0
        proxy = gcs_server.Proxy(server.endpoint)
        yield proxy
    finally:
        try:
            import gcsfs.core

            close_sessions({gcsfs.core.GCSFileSystem, *gcsfs.core.GCSFileSystem.__subclasses__()})
        finally:
            if proxy is not None:
                proxy.stop()
            server.stop()


@pytest.mark.parametrize("status", [403, 401])
@pytest.mark.parametrize(
    ("store", "kind", "name"),
    [
        (ERA5, "media", f"{ERA5}/zarr.json"),  # the root document
        (ERA5, "media", CHUNK),  # a chunk
        (PLAIN_ERA5, "list", f"{PLAIN_ERA5}/"),  # a listing
    ],
)
def test_gcs_refusal_is_access_denied_with_status_and_hint(con, gcs_proxy, fresh_cache, status, store, kind, name):
    gcs_proxy.reset()
    gcs_proxy.fail(kind, name, status)
    options = f"storage_options := MAP {{'endpoint_url': '{gcs_proxy.endpoint}', 'retries': '3'}}"
    with pytest.raises(StoreReadError) as info:
        con.execute(
            f"SELECT avg(\"2m_temperature\") FROM read_zarr('gs://denied/{store}', {ERA5_TABLE}, {options})"
        ).fetchall()
    message = str(info.value)
    assert "access denied" in message
    assert f"HTTP {status}" in message
    assert f"gs://denied/{name}".rstrip("/") in message
    assert "credentials" in message  # where they go
    assert "injected by the test proxy" not in message  # the server's body is not the message
    assert gcs_proxy.count(kind, name) == 1  # never retried


def test_an_oserror_saying_forbidden_elsewhere_is_not_a_refusal():
    """Only gcsfs's own "Forbidden" OSError is read as a 403: text alone decides nothing."""

    def not_gcsfs() -> None:
        raise OSError("Forbidden: a message of some other library")

    with pytest.raises(OSError, match="^Forbidden: ") as info:
        not_gcsfs()
    assert classify(info.value) is Failure.FATAL
