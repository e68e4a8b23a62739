"""What differs between fsspec's filesystems, one table row per URL scheme.

`FsspecStore` is written once for every filesystem; each way a family of them (S3, GCS,
Azure, HTTP, the rest) needs its own handling is a field of its `Backend`: how it is opened,
how its library's own retries are switched off (so that zarrsql's `retries` are the only
ones), the storage-option defaults, how a key is read and validated, whether it can list, and
what the error hints say. A scheme missing from `BACKENDS` (memory://, ...) gets `GENERIC`.
"""

from __future__ import annotations

import os
import types
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from zarrsql.store.base import ByteRange
from zarrsql.store.options import (
    NetworkOptions,
    azure_defaults,
    gcs_defaults,
    http_defaults,
    s3_defaults,
    s3_pool,
    split_settings,
)

#: Bytes aiohttp buffers per response before it pauses reading the socket.
READ_BUFFER = 1 << 21


@dataclass(frozen=True, slots=True)
class Fetched:
    """A GET's answer: the bytes asked for, how many came over the network (more when a server
    ignored a range and sent the whole value), and the key's info record when the response
    carried one (a validator for the next `token`)."""

    data: bytes
    transferred: int
    info: dict[str, Any] | None = None


def _nothing(_: Any) -> None:
    return None


def _no_pool(_: dict[str, Any], __: int) -> None:
    return None


def _open_fsspec(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **options)
    return fs, root


def _open_gcs(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """gcsfs's filesystem for `url` and the path below it, each request made once.

    Since gcsfs 2026.3 its default class first asks Google's storage control API, over gRPC,
    whether a bucket is zonal or hierarchical, and asks again before every read while the
    answer is unknown (a failed lookup is not cached). Two cases never get an answer, so there
    the plain JSON-API class is used, which is all that reading a store needs: a server that is
    not Google's (an emulator, a proxy: `endpoint_url`, STORAGE_EMULATOR_HOST), which has no
    such API and whose failed call is retried for 60 s; and anonymous access, which may read a
    public bucket's objects but not its layout, so that every chunk would cost a hidden extra
    round trip. With credentials the lookup succeeds once per bucket and the default class
    (which also reads zonal buckets) is kept.
    """
    import gcsfs
    from gcsfs.core import GCSFileSystem

    plain = _gcs_elsewhere(options) or options.get("token") == "anon"
    cls = GCSFileSystem if plain else gcsfs.GCSFileSystem
    fs = cls(**{**cls._get_kwargs_from_urls(url), **options})
    _one_gcs_attempt(fs)
    return fs, cls._strip_protocol(url)


def _gcs_elsewhere(options: dict[str, Any]) -> bool:
    """Whether gs:// requests go to a host other than Google's (gcsfs's own precedence)."""
    from urllib.parse import urlsplit

    endpoint = str(options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST") or "")
    if endpoint in ("", "default"):
        return False
    host = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}").hostname or ""
    return not (host == "googleapis.com" or host.endswith(".googleapis.com"))


def _one_gcs_attempt(fs: Any) -> None:
    """Make every gcsfs request a single attempt, so that zarrsql's `retries` are the only ones.

    gcsfs retries 5xx, 408, 429 and connection errors inside each request, 6 attempts with
    sleeps from 1 s doubling to 16 s: longer than zarrsql's `timeout` for the whole request,
    and unseen by `zarrsql.trace()`. The count is fixed by a decorator when gcsfs's class is
    defined (setting `fs.retries`, as for s3fs, changes nothing), so the undecorated method is
    bound to this instance instead.
    """
    request = getattr(type(fs)._request, "__wrapped__", None)
    if request is not None:
        fs._request = types.MethodType(request, fs)


def _one_s3_attempt(fs: Any) -> None:
    fs.retries = 1  # s3fs's own retry loop: zarrsql's `retries` is the only one


def _one_azure_attempt(fs: Any) -> None:
    """Switch off the Azure storage SDK's retry policy for an adlfs filesystem.

    The SDK retries a 5xx or a dropped connection 3 times, about 15 s apart, inside what
    zarrsql counts as one attempt: the attempt hits `timeout` and the error reports a timeout
    instead of the server's status. adlfs passes no client options through, so the policy
    object, which every container and blob client of the filesystem shares, is changed in place.
    """
    config = getattr(getattr(fs, "service_client", None), "_config", None)
    policy = getattr(config, "retry_policy", None)
    if policy is not None and hasattr(policy, "total_retries"):
        policy.total_retries = 0


async def _cat(fs: Any, path: str, byte_range: ByteRange | None) -> Fetched:
    start, end = (None, None) if byte_range is None else byte_range.bounds()
    data = bytes(await fs._cat_file(path, start=start, end=end))
    return Fetched(data, len(data))


def _range_header(byte_range: ByteRange) -> str:
    if byte_range.start < 0:
        return f"bytes={byte_range.start}"  # a suffix: the last `length` bytes
    return f"bytes={byte_range.start}-{byte_range.start + byte_range.length - 1}"


async def _http_get(fs: Any, path: str, byte_range: ByteRange | None) -> Fetched:
    """GET a key with the validator its response carries (saving the HEAD that would follow).

    A range is asked for with a Range header; a server that ignores it answers 200 with the
    whole value, which is then cut here (and was fetched whole: counted so).
    """
    from aiohttp import ClientResponseError

    session = await fs.set_session()
    kwargs = dict(fs.kwargs)
    if byte_range is not None:
        kwargs["headers"] = {**kwargs.get("headers", {}), "Range": _range_header(byte_range)}
    # a chunk is read in pieces of up to 2 MiB, not aiohttp's 64 KiB: fewer pauses of the
    # socket and fewer wake-ups of the event loop per chunk (about 10% off a bulk scan)
    async with session.get(fs.encode_url(path), **{"read_bufsize": READ_BUFFER, **kwargs}) as r:
        if r.status >= 400:
            raise ClientResponseError(r.request_info, r.history, status=r.status, message=r.reason or "")
        data = await r.read()  # a body shorter than its Content-Length raises here
        whole = r.status != 206
        info = {"ETag": r.headers.get("ETag"), "Last-Modified": r.headers.get("Last-Modified")}
        info["size"] = r.headers.get("Content-Length") if whole else r.headers.get("Content-Range", "/").split("/")[-1]
    if byte_range is not None and whole:
        start, end = byte_range.bounds()
        return Fetched(data[start:end], len(data), info)
    return Fetched(data, len(data), info)


async def _s3_get(fs: Any, path: str, byte_range: ByteRange | None) -> Fetched:
    """One GET of an object, with the validator its response carries.

    s3fs's own `_cat_file` first asks for the object's size (a HEAD, or an answer from its
    listings cache, which may be stale) whenever it may split a large read, so every chunk
    would cost two dependent round trips, one of them unseen by `trace()`. A single
    `get_object` is one request; its ETag, date and size are the validator `token` asks for,
    so reading a document also saves the HEAD that validation would make.
    """
    from s3fs.core import _error_wrapper, version_id_kw  # type: ignore[import-untyped]

    bucket, key, version = fs.split_path(path)
    ranged = {} if byte_range is None else {"Range": _range_header(byte_range)}

    async def read() -> tuple[dict[str, Any], bytes]:
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **version_id_kw(version), **ranged)
        try:
            return response, await response["Body"].read()
        finally:
            response["Body"].close()

    response, data = await _error_wrapper(read, retries=fs.retries)
    size = response.get("ContentLength") if byte_range is None else None
    if byte_range is not None:
        size = str(response.get("ContentRange") or "/").rsplit("/", 1)[-1] or None
    info = {"ETag": response.get("ETag", ""), "LastModified": response.get("LastModified", ""), "size": size}
    return Fetched(bytes(data), len(data), info)


async def _s3_head(fs: Any, path: str) -> dict[str, Any]:
    """One HEAD of an object: s3fs's `_info` follows a missing key with a LIST (is it a
    folder?), a second request for every document a validation finds absent."""
    from s3fs.core import version_id_kw  # type: ignore[import-untyped]

    bucket, key, version = fs.split_path(path)
    out = await fs._call_s3("head_object", Bucket=bucket, Key=key, **version_id_kw(version))
    return {"ETag": out.get("ETag", ""), "LastModified": out.get("LastModified", ""), "size": out.get("ContentLength")}


#: Statuses of a server that answers GET but not HEAD: its validators come from a GET instead.
_NO_HEAD = frozenset({405, 501})


async def _http_head(fs: Any, path: str) -> dict[str, Any]:
    """One HEAD request; fsspec's own `_info` turns every failure into 'not found'. A server
    that refuses HEAD (as xarray through fsspec would not notice) is asked with a GET of the
    first byte, whose headers carry the same validators; its body is not read."""
    from aiohttp import ClientResponseError

    session = await fs.set_session()
    url = fs.encode_url(path)
    async with session.head(url, allow_redirects=True, **dict(fs.kwargs)) as r:
        if r.status in _NO_HEAD:
            pass
        elif r.status >= 400:
            raise ClientResponseError(r.request_info, r.history, status=r.status, message=r.reason or "")
        else:
            return _validators(r.headers, r.headers.get("Content-Length"))
    kwargs = dict(fs.kwargs)
    headers = {**(kwargs.pop("headers", None) or {}), "Range": "bytes=0-0"}
    async with session.get(url, allow_redirects=True, headers=headers, **kwargs) as r:
        if r.status >= 400:
            raise ClientResponseError(r.request_info, r.history, status=r.status, message=r.reason or "")
        total = r.headers.get("Content-Range", "").rpartition("/")[2]
        return _validators(r.headers, total if r.status == 206 and total.isdigit() else r.headers.get("Content-Length"))


def _validators(headers: Any, size: str | None) -> dict[str, Any]:
    return {"ETag": headers.get("ETag"), "Last-Modified": headers.get("Last-Modified"), "size": size}


async def _info(fs: Any, path: str) -> dict[str, Any]:
    return await fs._info(path)  # type: ignore[no-any-return]


async def _fresh_info(fs: Any, path: str) -> dict[str, Any]:
    return await fs._info(path, refresh=True)  # type: ignore[no-any-return]


async def _gcs_object(fs: Any, path: str) -> dict[str, Any]:
    # one GET of the object's metadata: gcsfs's `_info` also lists the path as a folder
    # (in parallel, and again for a missing key), requests trace() would not see
    return await fs._get_object(path)  # type: ignore[no-any-return]


async def _ls(fs: Any, path: str) -> list[str]:
    return await fs._ls(path, detail=False)  # type: ignore[no-any-return]


async def _fresh_ls(fs: Any, path: str) -> list[str]:
    return await fs._ls(path, detail=False, refresh=True)  # type: ignore[no-any-return]


_GENERIC_TRUST = "If you trust this server, add its CA certificate to the trusted ones (SSL_CERT_FILE)"


@dataclass(frozen=True)
class Backend:
    """One family of filesystems (see the module docstring).

    `extra` is the pip extra that installs its filesystem. `one_attempt(fs)` switches off the
    library's own retries, on every instance made. `set_defaults(options)` fills in the
    storage options zarrsql sets unless the user did; `size_pool(options, concurrency)` makes
    the library's connection pool hold `concurrency` connections. `get`/`info`/`ls` are the async
    requests for a key's bytes (and validator), its info record and a folder's names.
    `plain_http_hint`: a failed TLS handshake may mean the port speaks plain HTTP.
    """

    extra: str = "remote"
    can_list: bool = True
    open: Callable[[str, dict[str, Any]], tuple[Any, str]] = _open_fsspec
    one_attempt: Callable[[Any], None] = _nothing
    set_defaults: Callable[[dict[str, Any]], None] = _nothing
    size_pool: Callable[[dict[str, Any], int], None] = _no_pool
    get: Callable[[Any, str, ByteRange | None], Awaitable[Fetched]] = _cat
    info: Callable[[Any, str], Awaitable[dict[str, Any]]] = _info
    ls: Callable[[Any, str], Awaitable[list[str]]] = _ls
    credentials_hint: str = "check the URL and the credentials in storage_options"
    trust_hint: str = _GENERIC_TRUST
    plain_http_hint: bool = False


GENERIC = Backend()

_S3 = Backend(
    extra="s3",
    one_attempt=_one_s3_attempt,
    set_defaults=s3_defaults,
    size_pool=s3_pool,
    get=_s3_get,
    info=_s3_head,
    ls=_fresh_ls,
    credentials_hint=(
        "give credentials: storage_options := MAP {'key': ..., 'secret': ...}, the AWS_* "
        "environment variables, or a DuckDB secret (CREATE SECRET (TYPE s3, ...))"
    ),
    trust_hint=(
        "If you trust this endpoint, give its CA certificate: storage_options := MAP "
        "{'client_kwargs': '{\"verify\": \"/path/to/ca.pem\"}'} (or set AWS_CA_BUNDLE)"
    ),
)
_GCS = Backend(extra="gcs", open=_open_gcs, set_defaults=gcs_defaults, info=_gcs_object, ls=_fresh_ls)
_AZURE = Backend(
    extra="azure",
    one_attempt=_one_azure_attempt,
    set_defaults=azure_defaults,
    info=_fresh_info,
    ls=_fresh_ls,
    credentials_hint=(
        "give credentials: storage_options := MAP {'connection_string': ...}, {'account_name': ..., "
        "'account_key': ...} or {'account_name': ..., 'sas_token': ...}, or the AZURE_STORAGE_* "
        "environment variables; 'anon': 'false' signs in as the Azure CLI or the machine's identity does"
    ),
)
_HTTP = Backend(
    extra="http",
    can_list=False,
    set_defaults=http_defaults,
    get=_http_get,
    info=_http_head,
    credentials_hint=(
        "check the URL; a server that needs authentication takes "
        "storage_options := MAP {'headers': '{\"Authorization\": ...}'}"
    ),
    trust_hint=(
        "If you trust this server, give its CA certificate: storage_options := MAP {'ssl': "
        "'/path/to/ca.pem'} (or set SSL_CERT_FILE before Python starts); 'ssl': 'false' skips "
        "the check altogether, for a server and network you trust"
    ),
)

#: The backend of each URL scheme zarrsql knows; any other scheme is `GENERIC`.
BACKENDS: dict[str, Backend] = {
    "s3": _S3,
    "s3a": _S3,
    "gs": _GCS,
    "gcs": _GCS,
    "az": _AZURE,
    "abfs": _AZURE,
    "abfss": _AZURE,
    "http": _HTTP,
    "https": replace(_HTTP, plain_http_hint=True),
}


def backend_for(scheme: str) -> Backend:
    return BACKENDS.get(scheme.lower(), GENERIC)


def split_options(protocol: str, storage_options: Mapping[str, Any]) -> tuple[NetworkOptions, dict[str, Any]]:
    """zarrsql's settings and the keywords for the fsspec filesystem of `protocol`, with the
    defaults its backend sets."""
    ours, theirs = split_settings(storage_options)
    backend = backend_for(protocol)
    backend.set_defaults(theirs)
    backend.size_pool(theirs, ours.concurrency)
    return ours, theirs
