"""What differs between fsspec's filesystems, one table row per URL scheme.

`FsspecStore` is written once for every filesystem; each way a family of them (S3, GCS,
Azure, HTTP, the rest) needs its own handling is a field of its `Backend`: how it is opened,
how its library's own retries are switched off (so that zarrsql's `retries` are the only
ones), the storage-option defaults, how a key is read and validated, whether it can list, and
what the error hints say. A scheme missing from `BACKENDS` (memory://, ...) gets `GENERIC`.

Options are checked when a store opens (`option_checks`).

Keys of a Zarr store over http(s) are names: each path segment is percent-encoded into the
request's URL (`NAMED_KEYS`), so that an array named 'a#b', 'q?x' or 'p%41' is asked for as
itself, not cut at a fragment or query, nor decoded. Other http(s) keys are URL text, as the
file names of a reference set's targets are ('file%20x.nc', a signed 'f.nc?X-Amz-Signature=...').
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import re
import types
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlsplit

from zarrsql.errors import ParameterError
from zarrsql.store.base import ByteRange
from zarrsql.store.option_checks import NAMED_KEYS, check_gcs_options, check_http_options, check_s3_options
from zarrsql.store.options import (
    NetworkOptions,
    azure_defaults,
    gcs_defaults,
    http_defaults,
    s3_defaults,
    s3_pool,
    split_settings,
)
from zarrsql.store.redaction import redacted_text

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


def _same(options: dict[str, Any]) -> dict[str, Any]:
    return options


def make_filesystem(url: str, options: dict[str, Any], **made: Any) -> tuple[Any, str]:
    """The fsspec filesystem for `url` and the path below it, built as zarrsql builds it for
    reads and writes alike: its backend's class for these options (`Backend.fs_class`, else
    the one fsspec registers for the scheme) with its keywords; `made` adds the instance's
    own (`asynchronous`, `skip_instance_cache`)."""
    backend = backend_for(url.split("://", 1)[0])
    if backend.fs_class is None:
        import fsspec

        fs, root = fsspec.core.url_to_fs(url, **made, **options)
        return fs, root
    cls: Any = backend.fs_class(options)
    fs = cls(**made, **{**cls._get_kwargs_from_urls(url), **backend.keywords(options)})
    return fs, cls._strip_protocol(url)


#: The token words gcsfs knows (`GoogleCredentials.connect`): anything else is a file or a token.
_GCS_TOKEN_METHODS = ("google_default", "cache", "cloud", "anon", "browser")


def _gcs_token(token: Any) -> Any:
    """The `token` option as gcsfs takes it without asking Google about it first.

    A method name or an existing file goes as it is. A value that looks like a path (a
    separator, a `.json` ending, a leading `~`) but names no file is a mistyped key file:
    refused here, rather than sent to Google as a token. One that looks like a mistyped method
    name is refused likewise. Any other text is a raw access token, handed to gcsfs as
    credentials: given as text, gcsfs first asks Google's tokeninfo endpoint about it with the
    token in the URL, which its errors then repeat.
    """

    if not isinstance(token, str) or token in _GCS_TOKEN_METHODS or os.path.isfile(os.path.expanduser(token)):
        return token
    if any(c in token for c in "/\\") or token.startswith("~") or token.lower().endswith(".json"):
        raise ParameterError(
            "storage option 'token' looks like the path of a key file, but no such file exists (the value is not "
            "repeated here, as it may be a secret); check the path, or give the key's JSON, a raw access token, "
            f"or one of {', '.join(repr(m) for m in _GCS_TOKEN_METHODS)}"
        )
    near = difflib.get_close_matches(token.lower().replace("-", "_"), _GCS_TOKEN_METHODS, n=1, cutoff=0.75)
    if near:
        raise ParameterError(
            f"storage option 'token' is not one of gcsfs's methods ({', '.join(repr(m) for m in _GCS_TOKEN_METHODS)}); "
            f"did you mean {near[0]!r}?"
        )
    from google.oauth2.credentials import Credentials

    return Credentials(token)


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
    fs, root = make_filesystem(url, options)
    _one_gcs_attempt(fs)
    return fs, root


def gcs_class(options: dict[str, Any]) -> type:
    """gcsfs's filesystem class for these options: the plain JSON-API class for a server that
    is not Google's or for anonymous access, else gcsfs's default (`_open_gcs` says why).
    Writers use it too: the default class's lookup against an emulator takes 60 s each time."""
    import gcsfs
    from gcsfs.core import GCSFileSystem

    plain = _gcs_elsewhere(options) or options.get("token") == "anon"
    return GCSFileSystem if plain else gcsfs.GCSFileSystem  # type: ignore[no-any-return]


def gcs_keywords(options: dict[str, Any]) -> dict[str, Any]:
    """gcsfs's keywords for the storage options: a raw `token` as credentials (`_gcs_token`)."""
    return {**options, "token": _gcs_token(options["token"])} if "token" in options else options


def _gcs_elsewhere(options: dict[str, Any]) -> bool:
    """Whether gs:// requests go to a host other than Google's (gcsfs's own precedence)."""

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


async def _close_gcs(fs: Any) -> None:
    """Close an asynchronous gcsfs filesystem's HTTP session on the loop that used it (gcsfs's
    own closer, run when the instance is collected, closes it from another loop and fails)."""
    session = getattr(fs, "_session", None)
    if session is not None and not session.closed:
        await session.close()


async def _close_azure(fs: Any) -> None:
    """Close an asynchronous adlfs filesystem's SDK clients on the loop that used them, and
    drop adlfs's own closers of them: those run at the interpreter's exit on a loop that has
    stopped by then, and print "Loop is not running" tracebacks."""
    for part in (getattr(fs, "service_client", None), getattr(fs, "credential", None)):
        close = getattr(part, "close", None)
        if close is not None:
            closed = close()
            if inspect.isawaitable(closed):
                await closed
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        held = finalizer.peek()
        if held is not None and held[0] is fs:
            finalizer.detach()


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


#: Characters a name keeps as they are in a URL's path segment: RFC 3986's sub-delimiters, ':'
#: and '@', which yarl (aiohttp's URLs) leaves alone too, so that an ordinary name ('a b', 'ü',
#: 'x+y') is asked for by the URL it always was; '%', '?', '#' and the rest are percent-encoded.
_SEGMENT_SAFE = "!$&'()*+,;=:@"


def _http_root(url: str) -> str:
    """An http(s) URL as a store's root: its scheme lowercase, no trailing '/' (store/remote.py)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme.lower()}://{rest.rstrip('/')}"


@functools.cache
def _named_keys_class() -> type:
    """fsspec's HTTPFileSystem, with the keys below one URL (`NAMED_KEYS`) encoded as names.

    Every request fsspec, zarrsql's backend and zarr-python make goes through `encode_url`, so
    that one method is the whole difference. The instances live in HTTPFileSystem's own cache
    (one per store URL and options): whatever clears or closes fsspec's HTTP filesystems (at
    exit, in tests) reaches them too.
    """
    import yarl
    from fsspec.implementations.http import HTTPFileSystem

    class NamedKeysHTTPFileSystem(HTTPFileSystem):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.names_below = _http_root(kwargs.pop(NAMED_KEYS))
            super().__init__(*args, **kwargs)

        def encode_url(self, url: str) -> Any:
            if not url.startswith(self.names_below + "/"):
                return super().encode_url(url)
            names = url[len(self.names_below) + 1 :].split("/")
            root = super().encode_url(self.names_below)  # as given: its escapes are the user's
            return yarl.URL(f"{root}/{'/'.join(quote(n, safe=_SEGMENT_SAFE) for n in names)}", encoded=True)

    NamedKeysHTTPFileSystem._cache = HTTPFileSystem._cache
    return NamedKeysHTTPFileSystem


def _http_class(options: dict[str, Any]) -> type:
    """The HTTP filesystem class: names below a Zarr store's URL encoded (`NAMED_KEYS`), else
    fsspec's own, whose keys are URL text."""
    if NAMED_KEYS in options:
        return _named_keys_class()
    from fsspec.implementations.http import HTTPFileSystem

    return HTTPFileSystem  # type: ignore[no-any-return]


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
            raise ClientResponseError(
                r.request_info, r.history, status=r.status, message=r.reason or "", headers=r.headers
            )
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
            raise ClientResponseError(
                r.request_info, r.history, status=r.status, message=r.reason or "", headers=r.headers
            )
        else:
            return _validators(r.headers, r.headers.get("Content-Length"))
    kwargs = dict(fs.kwargs)
    headers = {**(kwargs.pop("headers", None) or {}), "Range": "bytes=0-0"}
    async with session.get(url, allow_redirects=True, headers=headers, **kwargs) as r:
        if r.status >= 400:
            raise ClientResponseError(
                r.request_info, r.history, status=r.status, message=r.reason or "", headers=r.headers
            )
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
    `check_options(options)` refuses options the filesystem does not take, by name (before
    the defaults are set); `keywords(options)` are the keywords its class is built with.
    `root_word`: what the first part of a URL's path names (bucket, container), which a
    store's URL must give; None where a URL may name its server alone. `fs_class(options)`:
    the filesystem class for these options where it is not the one fsspec registers for the
    scheme (None: fsspec's), so writers build the filesystem reads use. `close_async(fs)`
    closes an asynchronous instance's clients (None: nothing to close).
    """

    extra: str = "remote"
    can_list: bool = True
    open: Callable[[str, dict[str, Any]], tuple[Any, str]] = make_filesystem
    one_attempt: Callable[[Any], None] = _nothing
    set_defaults: Callable[[dict[str, Any]], None] = _nothing
    size_pool: Callable[[dict[str, Any], int], None] = _no_pool
    get: Callable[[Any, str, ByteRange | None], Awaitable[Fetched]] = _cat
    info: Callable[[Any, str], Awaitable[dict[str, Any]]] = _info
    ls: Callable[[Any, str], Awaitable[list[str]]] = _ls
    credentials_hint: str = "check the URL and the credentials in storage_options"
    trust_hint: str = _GENERIC_TRUST
    plain_http_hint: bool = False
    check_options: Callable[[Mapping[str, Any]], None] = _nothing
    root_word: str | None = None
    keywords: Callable[[dict[str, Any]], dict[str, Any]] = _same
    fs_class: Callable[[dict[str, Any]], type] | None = None
    close_async: Callable[[Any], Coroutine[Any, Any, None]] | None = None


GENERIC = Backend()

_S3 = Backend(
    extra="s3",
    check_options=check_s3_options,
    root_word="bucket",
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
_GCS = Backend(
    extra="gcs",
    open=_open_gcs,
    fs_class=gcs_class,
    close_async=_close_gcs,
    set_defaults=gcs_defaults,
    info=_gcs_object,
    ls=_fresh_ls,
    root_word="bucket",
    keywords=gcs_keywords,
    check_options=check_gcs_options,
)
_AZURE = Backend(
    extra="azure",
    root_word="container",
    one_attempt=_one_azure_attempt,
    close_async=_close_azure,
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
    check_options=check_http_options,
    fs_class=_http_class,
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


#: Parts of an option's name that mark its value as a secret (`scrubbed`).
_SECRET_NAME_PARTS = ("key", "secret", "token", "password", "credential", "sas", "connection_string", "authorization")
#: Secrets that travel inside URLs and connection strings, whatever option carried them.
_SECRET_IN_TEXT = re.compile(
    r"((?:[?&](?:access_token|token|sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential|"
    r"x-goog-signature|x-goog-credential|key)=)|(?:AccountKey|SharedAccessSignature)=)[^&;\s'\"]+",
    re.IGNORECASE,
)


def _secret_values(options: Mapping[str, Any], *, all_values: bool = False) -> list[str]:
    """The text values in `options` (at any depth) whose name marks them secret."""
    found: list[str] = []
    for name, value in options.items():
        secret = all_values or any(part in str(name).lower() for part in _SECRET_NAME_PARTS)
        if isinstance(value, Mapping):
            found += _secret_values(value, all_values=secret)
        elif secret and isinstance(value, str) and len(value) >= 4 and value not in _GCS_TOKEN_METHODS:
            found.append(value)
    return found


def scrubbed(text: str, options: Mapping[str, Any]) -> str:
    """`text` (an error from a filesystem) without the secrets of `options` in it, nor those
    that URLs (their signatures, tokens and passwords) and connection strings carry: what a
    message may show."""
    for value in sorted(_secret_values(options), key=len, reverse=True):
        text = text.replace(value, "***")
    return redacted_text(_SECRET_IN_TEXT.sub(lambda m: m.group(1) + "***", text))


def backend_for(scheme: str) -> Backend:
    return BACKENDS.get(scheme.lower(), GENERIC)


def split_options(protocol: str, storage_options: Mapping[str, Any]) -> tuple[NetworkOptions, dict[str, Any]]:
    """zarrsql's settings and the keywords for the fsspec filesystem of `protocol`, with the
    defaults its backend sets."""
    ours, theirs = split_settings(storage_options)
    backend = backend_for(protocol)
    backend.check_options(theirs)
    backend.set_defaults(theirs)
    backend.size_pool(theirs, ours.concurrency)
    return ours, theirs
