"""TLS failures are not transient: reported at once, naming the URL and the way out.

Two real servers on 127.0.0.1: the plain-HTTP test server (tests/remote/httpserver.py) asked
for https://, and the same server behind TLS with a certificate from a throwaway CA the
client does not trust (tests/remote/azure_server.py makes it). Trusting that CA through
`storage_options` ('ssl': the CA file), or switching the check off ('ssl': 'false'), reads the
store, and what it reads equals xarray's read of the same files.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.remote import httpserver
from tests.remote.azure_server import make_tls_files
from tests.remote.conftest import stop_http
from zarrsql.errors import ParameterError, StoreReadError
from zarrsql.metadata.tree import clear_cache

AIR_V2 = "fixtures/v2/air_temperature.zarr"
SUMMARY = "SELECT count(*), sum(air), min(lat), max(lon) FROM read_zarr('{url}'{extra})"


@pytest.fixture(scope="module")
def tls(served_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    """The test server speaking HTTPS with a certificate signed by a CA nobody trusts, and
    that CA's certificate."""
    ca, cert, key = make_tls_files(tmp_path_factory.mktemp("tls"))
    server = httpserver.FaultyServer(served_root)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="tls-http", daemon=True).start()
    yield server, ca
    stop_http(server)


@pytest.fixture
def tls_server(tls: tuple[httpserver.FaultyServer, Path]) -> Iterator[tuple[httpserver.FaultyServer, Path]]:
    tls[0].reset()
    clear_cache()
    yield tls
    tls[0].reset()


def _https(server: httpserver.FaultyServer, path: str) -> str:
    return server.url(path).replace("http://", "https://", 1)


def _expected(served_root: Path) -> tuple[int, float, float, float]:
    with xr.open_zarr(served_root / AIR_V2) as ds:
        air = ds["air"].values
        return air.size, float(np.nansum(air)), float(ds.lat.min()), float(ds.lon.max())


def _close(got: tuple, want: tuple) -> bool:
    return got[0] == want[0] and np.allclose(got[1:], want[1:], rtol=1e-9)


def test_https_to_a_plain_http_server_fails_at_once(con: zarrsql.Connection, http: httpserver.FaultyServer) -> None:
    url = _https(http, AIR_V2)
    q = SUMMARY.format(url=url, extra=", storage_options := MAP {'retries': '3'}")
    with zarrsql.trace() as t, pytest.raises(StoreReadError) as info:
        con.execute(q).fetchall()
    text = str(info.value)
    assert f"'{url}/" in text, text
    assert "TLS handshake failed" in text, text
    assert "use http:// instead of https://" in text, text
    assert "not retried" in text, text
    assert "try again later" not in text, text
    assert t.requests == 1  # one attempt, though 'retries' allows four
    with pytest.raises((StoreReadError, duckdb.Error), match="TLS handshake failed"):
        con.sql(q).fetchall()


def test_the_same_url_over_http_reads(
    con: zarrsql.Connection, http: httpserver.FaultyServer, served_root: Path
) -> None:
    """Control: the advice works."""
    got = con.execute(SUMMARY.format(url=http.url(AIR_V2), extra="")).fetchone()
    assert _close(got, _expected(served_root)), got


def test_an_untrusted_certificate_fails_at_once_naming_the_options(
    con: zarrsql.Connection, tls_server: tuple[httpserver.FaultyServer, Path]
) -> None:
    server, _ = tls_server
    url = _https(server, AIR_V2)
    with zarrsql.trace() as t, pytest.raises(StoreReadError) as info:
        con.execute(SUMMARY.format(url=url, extra="")).fetchall()
    text = str(info.value)
    assert f"'{url}/" in text, text
    assert "certificate is not trusted" in text, text
    assert "unable to get local issuer certificate" in text, text  # OpenSSL's own reason
    assert "storage_options := MAP {'ssl': '/path/to/ca.pem'}" in text, text
    assert "'ssl': 'false'" in text, text
    assert "try again later" not in text, text
    assert t.requests == 1
    assert server.count() == 0  # no HTTP request got through the handshake


def test_the_ca_named_in_storage_options_is_trusted(
    con: zarrsql.Connection, tls_server: tuple[httpserver.FaultyServer, Path], served_root: Path
) -> None:
    server, ca = tls_server
    extra = f", storage_options := MAP {{'ssl': '{ca}'}}"
    got = con.execute(SUMMARY.format(url=_https(server, AIR_V2), extra=extra)).fetchone()
    assert _close(got, _expected(served_root)), got
    assert server.count("GET") > 0


def test_ssl_false_skips_the_certificate_check(
    con: zarrsql.Connection, tls_server: tuple[httpserver.FaultyServer, Path], served_root: Path
) -> None:
    server, _ = tls_server
    got = (
        zarrsql.read_zarr(_https(server, AIR_V2), connection=con, storage_options={"ssl": "false"})
        .aggregate("count(*), sum(air), min(lat), max(lon)")
        .fetchall()[0]
    )
    assert _close(got, _expected(served_root)), got


def test_a_ca_file_that_is_not_there_is_a_parameter_error(
    con: zarrsql.Connection, tls_server: tuple[httpserver.FaultyServer, Path], tmp_path: Path
) -> None:
    server, _ = tls_server
    missing = tmp_path / "nope.pem"
    with pytest.raises(ParameterError, match="storage option 'ssl'.*is not a file"):
        con.execute(
            SUMMARY.format(url=_https(server, AIR_V2), extra=f", storage_options := MAP {{'ssl': '{missing}'}}")
        )
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(ParameterError, match="no PEM certificate"):
        con.execute(
            SUMMARY.format(url=_https(server, AIR_V2), extra=f", storage_options := MAP {{'ssl': '{not_pem}'}}")
        )


def test_a_dropped_tls_connection_stays_transient() -> None:
    """Only a failed handshake is final: a TLS connection cut mid-stream is worth a retry."""
    from zarrsql.store.failures import Failure, classify

    assert classify(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")) is Failure.TRANSIENT
    assert classify(ssl.SSLCertVerificationError(1, "certificate verify failed")) is Failure.TLS
    assert classify(ssl.SSLError(1, "wrong version number")) is Failure.TLS
