"""Stores on Google Cloud Storage, against fake-gcs-server on 127.0.0.1 (tests/remote/gcs_server.py),
read with gcsfs.

The bucket holds the same stores as the S3 tests (`S3_STORES`), uploaded over the emulator's
JSON API. Most tests reach the emulator through `gcs_server.Proxy`, which logs every request
and can answer some with a fault, so request counts come from what the server saw.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import zarrsql
from tests.remote import gcs_server
from tests.remote.conftest import BUCKET, ERA5_TABLE, S3_STORES, STORE_CASES, close_sessions
from zarrsql.errors import StoreReadError
from zarrsql.store import open_store
from zarrsql.store.backends import split_options

ERA5 = "fixtures/era5_like.zarr"
CHUNK = f"{ERA5}/2m_temperature/c/1/0/0"


@pytest.fixture(scope="session")
def gcs(served_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[gcs_server.GcsServer]:
    """A GCS emulator whose public bucket `BUCKET` holds `S3_STORES`."""
    server = gcs_server.start(tmp_path_factory.mktemp("gcs"))
    try:
        server.create_bucket(BUCKET)
        for store in S3_STORES:
            assert server.upload_tree(BUCKET, store, served_root / store) > 0
        yield server
    finally:
        try:
            import gcsfs.core

            close_sessions({gcsfs.core.GCSFileSystem, *gcsfs.core.GCSFileSystem.__subclasses__()})
        finally:
            server.stop()


@pytest.fixture(scope="session")
def _proxy(gcs: gcs_server.GcsServer) -> Iterator[gcs_server.Proxy]:
    proxy = gcs_server.Proxy(gcs.endpoint)
    yield proxy
    proxy.stop()


@pytest.fixture
def proxy(_proxy: gcs_server.Proxy, fresh_cache) -> Iterator[gcs_server.Proxy]:
    """The logging proxy in front of the emulator: no faults, an empty log, a cold cache."""
    _proxy.reset()
    yield _proxy
    _proxy.reset()


@pytest.fixture(autouse=True)
def _no_google_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests decide credentials themselves: no key file named in the environment, no gcloud
    application-default file, no gcsfs token cache in the home directory, no emulator host."""
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("HOME", str(tmp_path))


def _opts(endpoint: str, **more: str) -> str:
    items = {"endpoint_url": endpoint, **more}
    return "storage_options := MAP {" + ", ".join(f"'{k}': '{v}'" for k, v in items.items()) + "}"


def _args(location: str, *extra: str) -> str:
    return ", ".join([f"'{location}'", *(x for x in extra if x)])


@pytest.mark.parametrize(("store", "extra"), STORE_CASES)
def test_gcs_read_equals_local_read_anonymously(con, gcs, served_root: Path, fresh_cache, store, extra):
    remote = con.sql(f"SELECT * FROM read_zarr({_args(f'gs://{BUCKET}/{store}', extra, _opts(gcs.endpoint))})")
    local = con.sql(f"SELECT * FROM read_zarr({_args(str(served_root / store), extra)})")
    remote, local = remote.to_arrow_table(), local.to_arrow_table()
    assert remote.num_rows > 0
    assert remote.equals(local)


def test_public_bucket_needs_no_credentials(proxy, served_root: Path):
    import gcsfs.core

    store = open_store(f"gs://{BUCKET}/{ERA5}", {"endpoint_url": proxy.endpoint})
    assert store.fs_options["token"] == "anon"  # nothing configured anywhere: anonymous requests
    assert store.fs.credentials.credentials is None
    # not gcsfs's default class, whose gRPC bucket-type probe an emulator cannot answer
    assert type(store.fs) is gcsfs.core.GCSFileSystem
    assert store.get("zarr.json") == (served_root / ERA5 / "zarr.json").read_bytes()
    assert proxy.count("media", f"{ERA5}/zarr.json") == 1
    assert proxy.authorization == [None]  # no Authorization header went out


def test_credentials_in_storage_options_reach_the_server(proxy, served_root: Path):
    """A token given in storage_options is used instead of anonymous access. (A key file would
    make gcsfs ask Google for an access token, so a ready access token stands in for one.)"""
    from google.oauth2.credentials import Credentials

    store = open_store(f"gs://{BUCKET}/{ERA5}", {"endpoint_url": proxy.endpoint, "token": Credentials("t-zarrsql")})
    assert store.get("zarr.json") == (served_root / ERA5 / "zarr.json").read_bytes()
    assert proxy.authorization == ["Bearer t-zarrsql"]


def test_anonymous_access_uses_the_plain_json_api_filesystem():
    """gcsfs's default class asks Google for the bucket's layout before each read until it gets
    an answer, which an anonymous caller never gets: anonymous stores use the plain class. With
    credentials the default class (zonal buckets included) is kept."""
    import gcsfs
    import gcsfs.core
    from google.oauth2.credentials import Credentials

    anonymous = open_store("gs://public-bucket/x.zarr", {})  # Google's endpoint; opening sends nothing
    assert anonymous.fs_options["token"] == "anon"
    assert type(anonymous.fs) is gcsfs.core.GCSFileSystem
    signed_in = open_store("gs://private-bucket/x.zarr", {"token": Credentials("t-zarrsql")})
    assert type(signed_in.fs) is gcsfs.GCSFileSystem


def test_configured_credentials_turn_anonymous_access_off(monkeypatch, tmp_path: Path):
    assert split_options("gs", {})[1]["token"] == "anon"
    assert split_options("gcs", {})[1]["token"] == "anon"
    assert split_options("gs", {"token": "google_default"})[1]["token"] == "google_default"
    assert "token" not in split_options("s3", {})[1]  # GCS's rule only
    key = tmp_path / "key.json"
    key.write_text("{}")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    assert "token" not in split_options("gs", {})[1]  # gcsfs finds them itself
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    adc = tmp_path / "gcloud" / "application_default_credentials.json"  # CLOUDSDK_CONFIG's
    adc.parent.mkdir()
    adc.write_text("{}")  # what `gcloud auth application-default login` writes
    assert "token" not in split_options("gs", {})[1]
    adc.unlink()
    (tmp_path / ".gcs_tokens").write_bytes(b"")  # gcsfs's own cache of browser logins, in HOME
    assert "token" not in split_options("gs", {})[1]


def test_storage_emulator_host_stands_in_for_endpoint_url(monkeypatch, gcs, served_root: Path, fresh_cache):
    """gcsfs's other way to reach an emulator: the environment variable, no storage options."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint)
    store = open_store(f"gs://{BUCKET}/{ERA5}", {"timeout": "5"})  # a regression to the gRPC probe: fails in seconds
    assert "endpoint_url" not in store.fs_options
    assert store.get("zarr.json") == (served_root / ERA5 / "zarr.json").read_bytes()


def test_listing_functions_walk_an_unconsolidated_bucket(con, proxy, served_root: Path):
    for store in ("plain/era5_like.zarr", "plain/v2_air_temperature.zarr"):
        query = "SELECT * FROM read_zarr_tables({}) ORDER BY table_name"
        remote = con.sql(query.format(_args(f"gs://{BUCKET}/{store}", _opts(proxy.endpoint)))).fetchall()
        local = con.sql(query.format(_args(str(served_root / store)))).fetchall()
        assert remote == local
        assert len(remote) > 0
    assert proxy.count("list") >= 2  # no consolidated document: the stores were listed


def test_second_query_makes_only_validation_requests(con, proxy):
    query = f"SELECT count(*) FROM read_zarr({_args(f'gs://{BUCKET}/{ERA5}', ERA5_TABLE, _opts(proxy.endpoint))})"
    with zarrsql.trace() as first:
        con.sql(query).fetchall()
    assert first.requests == proxy.count() > 0  # trace() counts what the server saw
    proxy.reset()
    with zarrsql.trace() as second:
        con.sql(query).fetchall()
    # count(*) reads no chunk: the first query reads metadata and coordinates; the second
    # only checks the validators of the consolidated document and the coordinate chunks
    assert 0 < second.requests < first.requests
    assert second.bytes_read == 0
    assert second.requests == proxy.count() == proxy.count("meta")


@pytest.mark.parametrize(
    "url",
    [
        f"gs://{BUCKET}/fixtures/no_such_store.zarr",  # no object under the prefix
        "gs://zarrsql-no-such-bucket/x.zarr",  # no bucket either
    ],
)
def test_missing_store_is_an_error_naming_the_url(con, gcs, fresh_cache, url):
    with pytest.raises(zarrsql.ZarrSQLError) as info:
        con.execute(f"SELECT * FROM read_zarr({_args(url, _opts(gcs.endpoint))})").fetchall()
    assert isinstance(info.value, zarrsql.StoreNotFoundError)
    assert url in str(info.value)


def test_missing_object_is_fill_or_an_error_naming_its_url(con, gcs, fresh_cache):
    url = f"gs://{BUCKET}/plain/era5_like.zarr"
    store = open_store(url, {"endpoint_url": gcs.endpoint})
    assert store.get("2m_temperature/c/9/9/9") is None  # a chunk never written is fill, not an error
    assert store.token("2m_temperature/c/9/9/9") is None
    args = _args(url, "array_path := 'no_such_array'", _opts(gcs.endpoint))
    with pytest.raises(zarrsql.ZarrSQLError) as info:  # an array that is not there is an error
        con.execute(f"SELECT * FROM read_zarr({args})").fetchall()
    assert url in str(info.value)
    assert "no_such_array" in str(info.value)


# -- failures and validation ------------------------------------------------------------------------


@pytest.mark.parametrize("status", [503, 502])  # gcsfs raises its own HttpError, and requests' ProxyError for 502
def test_transient_5xx_is_retried_by_zarrsql_and_counted(con, proxy, served_root: Path, status):
    url = f"gs://{BUCKET}/{ERA5}"
    query = f"SELECT * FROM read_zarr({_args(url, ERA5_TABLE, _opts(proxy.endpoint, retry_backoff='0'))})"
    con.sql(query).fetchall()  # warm the metadata
    proxy.reset()
    proxy.fail("media", CHUNK, status, times=2)
    with zarrsql.trace() as t:
        remote = con.sql(query).to_arrow_table()
    local = con.sql(f"SELECT * FROM read_zarr({_args(str(served_root / ERA5), ERA5_TABLE)})").to_arrow_table()
    assert remote.equals(local)
    assert proxy.count("media", CHUNK) == 3  # two failures, then the bytes
    assert t.requests == proxy.count()  # each attempt is zarrsql's, none hidden in gcsfs


def test_persistent_5xx_fails_naming_url_status_and_attempts(con, proxy):
    proxy.fail("media", CHUNK, 500)
    options = _opts(proxy.endpoint, retries="2", retry_backoff="0", timeout="5")
    started = time.monotonic()
    with pytest.raises(StoreReadError) as info:
        con.execute(f"SELECT * FROM read_zarr({_args(f'gs://{BUCKET}/{ERA5}', ERA5_TABLE, options)})").fetchall()
    text = str(info.value)
    assert f"gs://{BUCKET}/{CHUNK}" in text
    assert "HTTP 500" in text
    assert "3 attempts" in text
    assert proxy.count("media", CHUNK) == 3
    assert time.monotonic() - started < 5  # no backoff of gcsfs's own (1 s, 2 s, 4 s, ...)


def test_a_rewritten_object_gets_a_new_validator_after_a_listing(gcs, served_root: Path, fresh_cache):
    """Validators come from the server, not from gcsfs's cache of the last listing."""
    prefix = "rewritten/era5_like.zarr"
    gcs.upload_tree(BUCKET, prefix, served_root / "plain/era5_like.zarr")
    store = open_store(f"gs://{BUCKET}/{prefix}", {"endpoint_url": gcs.endpoint})
    assert "zarr.json" in store.list_dir("")
    before = store.token("zarr.json")
    doc = json.loads(store.get("zarr.json"))
    doc["attributes"] = {"rewritten": True}
    new = json.dumps(doc).encode()
    gcs.upload(BUCKET, f"{prefix}/zarr.json", new)
    assert store.token("zarr.json") != before
    assert store.get("zarr.json") == new


# -- writing ----------------------------------------------------------------------------------
def _grid(n_t: int, n_x: int, scale: float) -> str:
    return f"SELECT t, x, (t * 10 + x) * {scale} AS v FROM range({n_t}) a(t), range({n_x}) b(x)"


@pytest.mark.timeout(45)  # gcsfs's default class spends 60 s asking an emulator what kind the bucket is
def test_a_store_written_to_a_gcs_endpoint_reads_back_in_xarray_and_is_replaced_whole(gcs) -> None:
    import numpy as np
    import xarray as xr
    import zarr
    from gcsfs.core import GCSFileSystem

    gcs.create_bucket("written")
    options = {"endpoint_url": gcs.endpoint, "token": "anon"}
    url = "gs://written/grid.zarr"
    zarrsql.to_zarr(_grid(3, 4, 1.0), url, dims=["t", "x"], storage_options=options)
    zarrsql.to_zarr(_grid(2, 5, 0.5), url, dims=["t", "x"], storage_options=options, mode="w")

    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    plain = GCSFileSystem(endpoint_url=gcs.endpoint, token="anon")  # gcsfs's JSON-API class, as a user would
    wrapped = AsyncFileSystemWrapper(plain, asynchronous=True)
    ds = xr.open_zarr(zarr.storage.FsspecStore(wrapped, path="written/grid.zarr", read_only=True))
    t, x = np.meshgrid(np.arange(2), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(ds["v"].values, (t * 10 + x) * 0.5)
    np.testing.assert_array_equal(ds["x"].values, np.arange(5))
    keys = plain.find("written")
    assert keys and all(k.startswith("written/grid.zarr/") for k in keys)  # no staging prefix left
    assert not any(k.startswith("written/grid.zarr/v/c/2/") for k in keys)  # the old third row is gone
