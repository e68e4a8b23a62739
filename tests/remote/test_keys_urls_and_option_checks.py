"""Remote keys, store URLs and storage options, against the real servers (tests/remote/).

- Over http(s) the keys of a Zarr store are names: an array or group named 'a#b', 'q?x' or
  'p%41' is asked for as itself (its path segments percent-encoded), not cut at a fragment or
  a query nor decoded, so it reads what xarray and zarr-python read from the same store on disk
  (before, the server was asked for '/s.zarr/a', '/s.zarr/q', '/s.zarr/pA/...', whose 404 read
  as fill: all NULL, no error). The file names of a reference set's targets stay URL text.
- A URL that names a store's own metadata document (zarr.json, .zmetadata) is refused as a
  local path is, pointing at the folder, with no request made.
- Storage options are checked when the store opens, before any request, on http(s) and gs://
  as on s3://; an S3 `endpoint_url` that is not a URL is refused by name.
- A redirect loop is described as one.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from tests.remote import httpserver
from tests.remote.conftest import BUCKET, stop_http
from zarrsql.errors import ParameterError, StoreNotFoundError, StoreReadError
from zarrsql.metadata.tree import clear_cache

#: Names that carry what a URL reads as syntax ('#' a fragment, '?' a query, '%41' an escape
#: of 'A', '%2F' of '/') beside ordinary ones that must keep working ('sp ace', 'ü', 'x+y;z').
NAMES = ["a#b", "q?x", "p%41", "a%2Fb", "50%", "sp ace", "ü", "x+y;z", "plain"]
T = np.arange(6)


def _dataset() -> xr.Dataset:
    return xr.Dataset({name: (("t",), np.arange(6.0) * (i + 1) + 0.5) for i, name in enumerate(NAMES)}, coords={"t": T})


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stores whose arrays and groups carry URL syntax in their names, and a reference set."""
    root = tmp_path_factory.mktemp("names")
    encoding = {name: {"chunks": (2,)} for name in NAMES}
    _dataset().to_zarr(root / "v3.zarr", zarr_format=3, consolidated=True, encoding=encoding)
    _dataset().to_zarr(root / "v2.zarr", zarr_format=2, consolidated=True, encoding=encoding)
    _dataset().to_zarr(root / "plain.zarr", zarr_format=3, consolidated=False, encoding=encoding)
    for group in ("g#1", "g?2"):
        _dataset().to_zarr(root / "groups.zarr", group=group, zarr_format=3, consolidated=True, encoding=encoding)
    _filtered(root / "filtered.zarr")
    _reference_set(root)
    return root


def _filtered(path: Path) -> None:
    """Arrays with a Delta filter, which zarr-python decodes (not zarrsql's own decoder)."""
    from zarr.codecs.numcodecs import Delta

    with warnings.catch_warnings():  # "not in the Zarr version 3 specification": meant here
        warnings.simplefilter("ignore", UserWarning)
        group = zarr.open_group(path, mode="w", zarr_format=3)
        for name in ("d#1", "d%41"):
            array = group.create_array(
                name, shape=(6,), chunks=(2,), dtype="f8", filters=[Delta(dtype="<f8")], dimension_names=["t"]
            )
            array[:] = np.arange(6.0) ** 2
        zarr.consolidate_metadata(path)


#: The values the reference set's two targets hold (little-endian float64).
REFERENCED = np.arange(4.0) + 0.25


def _reference_set(root: Path) -> None:
    """A kerchunk set whose chunks are files named by URL text: 'data%20file.bin' is the file
    'data file.bin', and 'data.bin?sig=abc' the file 'data.bin' with a signature's query."""
    (root / "data file.bin").write_bytes(REFERENCED[:2].tobytes())
    (root / "data.bin").write_bytes(REFERENCED[2:].tobytes())
    zarray = {
        "zarr_format": 2,
        "shape": [4],
        "chunks": [2],
        "dtype": "<f8",
        "compressor": None,
        "filters": None,
        "fill_value": None,
        "order": "C",
    }
    refs = {
        ".zgroup": json.dumps({"zarr_format": 2}),
        "v/.zarray": json.dumps(zarray),
        "v/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["i"]}),
        "v/0": ["{server}/data%20file.bin"],
        "v/1": ["{server}/data.bin?sig=abc"],
    }
    (root / "refs.template").write_text(json.dumps({"version": 1, "refs": refs}))


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[httpserver.FaultyServer]:
    served = httpserver.start(root)
    template = (root / "refs.template").read_text()
    (root / "refs.json").write_text(template.replace("{server}", served.url("").rstrip("/")))
    yield served
    _close_zarr_python_sessions()
    stop_http(served)


def _close_zarr_python_sessions() -> None:
    """Close the sessions of the filesystems made for zarr-python (`asynchronous=True`) on
    zarr-python's own event loop, where they were opened; `stop_http` closes the others."""
    from fsspec.implementations.http import HTTPFileSystem
    from zarr.core.sync import sync

    for key, fs in list(HTTPFileSystem._cache.items()):
        session = getattr(fs, "_session", None)
        if fs.asynchronous and session is not None:
            if not session.closed:
                sync(session.close())
            del HTTPFileSystem._cache[key]


@pytest.fixture
def http(server: httpserver.FaultyServer) -> Iterator[httpserver.FaultyServer]:
    server.reset()
    clear_cache()
    yield server
    server.reset()


def _column(con: zarrsql.Connection, url: str, name: str, extra: str = "") -> list[float]:
    rows = con.execute(f"SELECT \"{name}\" FROM read_zarr('{url}'{extra}) ORDER BY t").fetchall()
    return [r[0] for r in rows]


def _gets(server: httpserver.FaultyServer) -> set[str]:
    return {path for method, path in server.log if method == "GET"}


# ----------------------------------------------------------------------------- keys are names
@pytest.mark.parametrize(("store", "chunk"), [("v3.zarr", "c/0"), ("v2.zarr", "0")])
def test_arrays_named_with_url_syntax_read_what_xarray_reads_locally(con, http, root: Path, store, chunk):
    oracle = xr.open_zarr(root / store, consolidated=True)
    for name in NAMES:
        assert _column(con, http.url(store), name) == oracle[name].values.tolist(), name
        assert f"/{store}/{name}/{chunk}" in _gets(http), name  # asked for by its own name


def test_a_group_named_with_url_syntax_reads_what_xarray_reads_locally(con, http, root: Path):
    for group in ("g#1", "g?2"):
        oracle = xr.open_zarr(root / "groups.zarr", group=group, consolidated=True)
        for name in ("a#b", "p%41"):
            got = _column(con, http.url("groups.zarr"), name, f", group_path := '{group}'")
            assert got == oracle[name].values.tolist(), (group, name)
    assert "/groups.zarr/g#1/a#b/c/0" in _gets(http)


def test_a_named_array_of_a_store_without_consolidated_metadata_reads_and_validates(con, http, root: Path):
    """The array's own document is read by name, then validated by name (HEAD) on the next
    query: neither is a request for a name cut short, which would 404."""
    oracle = xr.open_zarr(root / "plain.zarr", consolidated=False)
    for _ in range(2):
        for name in ("q?x", "a#b", "p%41"):
            got = _column(con, http.url("plain.zarr"), name, f", array_path := '{name}'")
            assert got == oracle[name].values.tolist(), name
    heads = {path for method, path in http.log if method == "HEAD"}
    assert {"/plain.zarr/q?x/zarr.json", "/plain.zarr/a#b/zarr.json", "/plain.zarr/p%41/zarr.json"} <= heads
    asked = {path for _, path in http.log}
    assert not asked & {"/plain.zarr/q", "/plain.zarr/a", "/plain.zarr/pA/zarr.json", "/plain.zarr/pA/c/0"}


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3 specification")
def test_an_array_zarr_python_decodes_is_asked_for_by_its_name(con, http, root: Path):
    for name in ("d#1", "d%41"):
        oracle = zarr.open_array(root / "filtered.zarr", path=name, mode="r")[:]
        rows = con.execute(
            f"SELECT \"{name}\" FROM read_zarr('{http.url('filtered.zarr')}', array_path := '{name}') ORDER BY t"
        ).fetchall()
        assert [r[0] for r in rows] == oracle.tolist(), name


def test_a_query_given_as_params_reaches_a_named_store(con, http, root: Path):
    """A store URL cannot carry a query (each key is appended to it), as before; a query every
    request needs (a signature) goes in 'params', and names are still encoded beside it."""
    with pytest.raises(ParameterError, match="query string"):
        con.execute(f"SELECT count(*) FROM read_zarr('{http.url('v3.zarr')}?sig=abc')").fetchall()
    oracle = xr.open_zarr(root / "v3.zarr", consolidated=True)
    extra = """, storage_options := MAP {'params': '{"sig": "abc"}'}"""
    assert _column(con, http.url("v3.zarr"), "q?x", extra) == oracle["q?x"].values.tolist()


def test_reference_targets_stay_url_text(con, http):
    """The file names of a reference set's targets are URL text, as fsspec reads them: an
    escape is the character it stands for and a '?' starts the target's query."""
    rows = con.execute(f"SELECT v FROM read_zarr('{http.url('refs.json')}') ORDER BY i").fetchall()
    assert [r[0] for r in rows] == REFERENCED.tolist()
    assert {"/data file.bin", "/data.bin"} <= _gets(http)


# ----------------------------------------------------------------------------- a document's URL
def _local_refusal(path: Path) -> str:
    with pytest.raises(StoreNotFoundError) as info:
        zarrsql.connect().execute(f"SELECT count(*) FROM read_zarr('{path}')").fetchall()
    return str(info.value)


@pytest.mark.parametrize(("store", "document"), [("v3.zarr", "zarr.json"), ("v2.zarr", ".zmetadata")])
def test_an_http_url_naming_a_metadata_document_is_refused_as_a_local_path_is(con, http, root, store, document):
    local = _local_refusal(root / store / document)
    assert f"'{document}' is a Zarr metadata document" in local  # the oracle: what the local path says
    with zarrsql.trace() as t, pytest.raises(StoreNotFoundError) as info:
        con.execute(f"SELECT count(*) FROM read_zarr('{http.url(f'{store}/{document}')}')").fetchall()
    message = str(info.value)
    assert f"'{document}' is a Zarr metadata document" in message
    assert f"point at the folder that holds it, '{http.url(store)}'" in message
    assert t.requests == 0
    assert http.log == []


def test_an_s3_url_naming_zarr_json_is_refused_as_a_local_path_is(con, s3, served_root: Path):
    store = "fixtures/era5_like.zarr"
    assert "is a Zarr metadata document" in _local_refusal(served_root / store / "zarr.json")
    url = f"s3://{BUCKET}/{store}/zarr.json"
    with zarrsql.trace() as t, pytest.raises(StoreNotFoundError) as info:
        con.execute(
            f"SELECT count(*) FROM read_zarr('{url}', storage_options := MAP {{'endpoint_url': '{s3}'}})"
        ).fetchall()
    assert f"point at the folder that holds it, 's3://{BUCKET}/{store}'" in str(info.value)
    assert t.requests == 0


# ----------------------------------------------------------------------------- option checks
def _read_with(con: zarrsql.Connection, url: str, options: dict[str, str]) -> Any:
    given = ", ".join(f"'{k}': '{v}'" for k, v in options.items())
    return con.execute(f"SELECT count(*) FROM read_zarr('{url}', storage_options := MAP {{{given}}})").fetchall()


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("header", '{"Authorization": "Bearer SECRET-1"}', "use 'headers'"),
        ("retry", "5", "use 'retries'"),
        ("anon", "true", "'headers'"),
        ("key", "SECRET-2", "'headers'"),
        ("token", "SECRET-3", "'headers'"),
    ],
)
def test_an_http_option_not_taken_is_refused_by_name_before_any_request(con, http, name, value, hint):
    with zarrsql.trace() as t, pytest.raises(ParameterError) as info:
        _read_with(con, http.url("v3.zarr"), {name: value})
    message = str(info.value)
    assert f"storage option '{name}' is not an option of http(s):// stores" in message
    assert hint in message
    assert "SECRET" not in message  # a value may be a secret: never repeated
    assert t.requests == 0
    assert http.log == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Authorization: Bearer x", "'headers' must be a JSON object of header names and values"),
        ('{"X-Count": 1}', "'headers' must map each header's name to its value as text"),
    ],
)
def test_http_headers_that_are_not_a_json_object_of_text_are_refused(con, http, value, expected):
    with zarrsql.trace() as t, pytest.raises(ParameterError, match=expected):
        _read_with(con, http.url("v3.zarr"), {"headers": value})
    assert t.requests == 0


def test_http_options_that_work_still_work(con, http, root: Path):
    options = {"headers": '{"X-Zarrsql-Test": "yes"}', "cookies": '{"c": "1"}', "max_redirects": "3", "ssl": "false"}
    size = xr.open_zarr(root / "v3.zarr", consolidated=True).sizes["t"]
    assert _read_with(con, http.url("v3.zarr"), options) == [(size,)]
    assert all(seen.get("X-Zarrsql-Test") == "yes" for seen in http.headers_seen)


@pytest.mark.parametrize(
    ("name", "hint"),
    [("retry", "use 'retries'"), ("anon", "use 'token': 'anon'"), ("key", "use 'token': '/path/to/key.json'")],
)
def test_a_gcs_option_gcsfs_would_ignore_is_refused_by_name(con, name, hint):
    options = {"endpoint_url": "http://127.0.0.1:9", name: "x"}  # nothing listens: no request may be made
    with zarrsql.trace() as t, pytest.raises(ParameterError) as info:
        _read_with(con, "gs://bucket/x.zarr", options)
    assert f"storage option '{name}' is not an option of gs:// stores; {hint}" in str(info.value)
    assert t.requests == 0


def test_gcs_options_gcsfs_takes_still_open_the_store():
    from zarrsql.store import open_store

    store = open_store(
        "gs://bucket/x.zarr", {"endpoint_url": "http://127.0.0.1:9", "project": "p", "consistency": "md5"}
    )
    assert store.fs.project == "p"


@pytest.mark.parametrize("endpoint", ["not a url", "localhost:9000", "ftp://127.0.0.1:9000"])
def test_an_s3_endpoint_that_is_not_an_http_url_is_refused_by_name(con, endpoint):
    with zarrsql.trace() as t, pytest.raises(ParameterError) as info:
        _read_with(con, "s3://bucket/x.zarr", {"endpoint_url": endpoint})
    assert "storage option 'endpoint_url' must be the URL of the S3 server" in str(info.value)
    assert endpoint not in str(info.value)
    assert t.requests == 0


# ----------------------------------------------------------------------------- redirect loop
class _Loop(BaseHTTPRequestHandler):
    """Answers every request with a redirect to itself."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET


def test_a_redirect_loop_is_described_as_one(con, http):
    """(`http`: its module's teardown closes the session this test opens.)"""
    loop = ThreadingHTTPServer(("127.0.0.1", 0), _Loop)
    threading.Thread(target=loop.serve_forever, daemon=True).start()
    try:
        with pytest.raises(StoreReadError) as info:
            _read_with(con, f"http://127.0.0.1:{loop.server_address[1]}/s.zarr", {"retries": "0"})
    finally:
        loop.shutdown()
        loop.server_close()
    assert "the server redirected too many times" in str(info.value)
    assert "TooManyRedirects: 0" not in str(info.value)
