"""A store behind an fsspec URL: http(s), s3, gs, az (async filesystems), memory and others.

Requests run on fsspec's own event loop (`fsspec.asyn.sync`), never `asyncio.run`, so the
store works inside Jupyter and from any reader thread. Each request is one attempt of at most
`timeout` seconds; a transient failure (see `failures.py`) is retried `retries` times with
doubling backoff; a 404 is a missing key (None), a 401/403 is never retried. Every attempt
counts as a request in `zarrsql.trace()`, validation requests (HEAD) included.

`get_many` fetches keys concurrently, at most `concurrency` requests in flight per store,
which is what hides the round-trip latency of object storage. `prefetch` starts fetches
without waiting for them: the reader names the chunks of the next work units while only a
core's worth of threads decode, so requests stay in flight without tens of decoding threads
fighting the event loop for the GIL; a later `get_many` of those keys takes the answers.
Plain HTTP cannot list keys, so `can_list` is False there and a store without consolidated metadata reads one array at a
time (metadata/tree.py). A chunk that is missing while the store's metadata document has
changed since the tree was read means the store changed under the query: an error, not fill.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import ssl
import threading
import time
import types
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zarrsql import counters
from zarrsql.errors import ParameterError, StoreNotFoundError, StoreReadError
from zarrsql.store.base import check_key
from zarrsql.store.failures import Failure, classify, describe, tls_error
from zarrsql.store.options import split_options

#: Seconds between two "did the store change?" checks triggered by missing chunks: bounds the
#: extra HEAD requests on stores that legitimately leave many chunks unwritten.
CHANGE_CHECK_INTERVAL = 1.0
#: Longest wait between two attempts, whatever the backoff doubled to.
MAX_BACKOFF = 2.0
#: Seconds a validator seen on a GET stands in for a HEAD (once): about a round trip's worth
#: of staleness, which a HEAD has too. It saves the HEAD that follows reading a document.
FETCHED_TOKEN_AGE = 2.0
#: Bytes aiohttp buffers per response before it pauses reading the socket.
READ_BUFFER = 1 << 21
#: Validators kept from GETs (oldest dropped): chunk reads must not grow it without bound.
MAX_FETCHED_TOKENS = 1024

_EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "http": "http",
    "https": "http",
}


def _protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


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


class FsspecStore:
    """Reads keys below a URL through fsspec (see the module docstring for the rules)."""

    remote = True

    def __init__(self, url: str, storage_options: dict[str, Any]) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.protocol = _protocol(self.url)
        self.network, self.fs_options = split_options(self.protocol, storage_options)
        try:
            if self.protocol in ("gs", "gcs"):
                self.fs, self.root = _open_gcs(self.url, self.fs_options)
            else:
                self.fs, self.root = fsspec.core.url_to_fs(self.url, **self.fs_options)
        except ImportError as err:
            extra = _EXTRAS.get(self.protocol, "remote")
            raise StoreNotFoundError(
                f"cannot open '{url}': the filesystem for {self.protocol}:// is not installed ({err}); "
                f"install it with: pip install 'zarrsql[{extra}]'"
            ) from err
        except (ValueError, TypeError) as err:
            raise ParameterError(f"cannot open '{url}' with these storage_options: {err}") from err
        self.root = self.root.rstrip("/")
        if self.protocol in ("s3", "s3a"):
            self.fs.retries = 1  # s3fs's own retry loop: zarrsql's `retries` is the only one
        elif self.protocol in ("az", "abfs", "abfss"):
            _azure_single_attempt(self.fs)
        self.can_list = self.protocol not in ("http", "https")
        self.concurrency = self.network.concurrency
        self.metadata_ttl = self.network.metadata_ttl
        self.is_async = bool(getattr(self.fs, "async_impl", False))
        digest = hashlib.sha1(json.dumps(self.fs_options, sort_keys=True, default=repr).encode()).hexdigest()[:16]
        self.cache_key = f"{self.url}#{digest}"
        self.watch: tuple[str, str | None] | None = None  # (metadata key, its token) set by the tree
        self._sem: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self._last_change_check = 0.0
        self._pool: ThreadPoolExecutor | None = None
        self._fetched: dict[str, tuple[str, float]] = {}  # key -> (validator from its GET, when)
        #: Started fetches: key -> [future of its bytes, prefetches still wanting it, taken yet].
        self._ahead: dict[str, list[Any]] = {}

    def async_fs(self) -> Any:
        """This store's filesystem as an instance made for async use (what zarr-python needs)."""
        if self.fs.async_impl:
            if self.fs.asynchronous:
                return self.fs
            fs = type(self.fs)(asynchronous=True, **self.fs_options)
            if self.protocol in ("az", "abfs", "abfss"):
                _azure_single_attempt(fs)
            return fs
        from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

        return AsyncFileSystemWrapper(self.fs, asynchronous=True)

    # -- keys --------------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        check_key(key)
        return f"{self.root}/{key}" if key else self.root

    def where(self, key: str) -> str:
        """The URL of `key`, as error messages name it."""
        return f"{self.url}/{key}" if key else self.url

    # -- running requests -----------------------------------------------------------------------
    def _run(self, make: Callable[[], Awaitable[Any]]) -> Any:
        from fsspec.asyn import sync

        async def main() -> Any:
            return await make()

        return sync(self.fs.loop, main)

    async def _attempts(self, key: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """`call()` with the timeout and retry rules; None for a missing key."""
        if self._sem is None:  # created on the loop thread, the only one that touches it
            self._sem = asyncio.Semaphore(self.concurrency)
        attempt = 0
        while True:
            attempt += 1
            counters.count(requests=1)
            try:
                async with self._sem:
                    return await asyncio.wait_for(call(), self.network.timeout)
            except Exception as err:  # backends raise their own types: classified, never guessed
                wait = self._after_failure(key, err, attempt)
                if wait is None:
                    return None
            await asyncio.sleep(wait)

    def _after_failure(self, key: str, err: Exception, attempt: int) -> float | None:
        """What a failed attempt leads to: None for a missing key, else the seconds to wait
        before the next attempt; raises `StoreReadError` when there is no next attempt."""
        kind = classify(err)
        if kind is Failure.MISSING:
            return None
        if kind is Failure.TRANSIENT and attempt <= self.network.retries:
            return min(MAX_BACKOFF, self.network.retry_backoff * 2 ** (attempt - 1))
        raise self._error(key, err, kind, attempt) from err

    def _error(self, key: str, err: BaseException, kind: Failure, attempts: int) -> StoreReadError:
        where, cause = self.where(key), describe(err, self.network.timeout)
        if kind is Failure.DENIED:
            return StoreReadError(f"access denied reading '{where}' ({cause}); {self._credentials_hint()}")
        if kind is Failure.TLS:
            return StoreReadError(f"cannot read '{where}': {self._tls_message(err)}")
        if kind is Failure.TRANSIENT:
            return StoreReadError(
                f"cannot read '{where}': {cause}, still failing after {attempts} attempts; the "
                "server or network failed: try again later, or raise 'retries' / 'timeout' in storage_options"
            )
        return StoreReadError(f"cannot read '{where}': {cause}")

    def _tls_message(self, err: BaseException) -> str:
        """What a failed TLS handshake means and what to pass instead; never retried."""
        cause = tls_error(err)
        if isinstance(cause, ssl.SSLCertVerificationError):
            what = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause)
            return (
                f"the server's TLS certificate is not trusted ({what}); not retried, since every attempt "
                f"would fail the same way. {self._trust_hint()}"
            )
        plain = (
            "If the server speaks plain HTTP on this port, use http:// instead of https://; else check"
            if self.protocol == "https"
            else "Check"
        )
        return (
            f"the TLS handshake failed ({cause}); not retried, since every attempt would fail the same "
            f"way. {plain} the URL's scheme and port and the server's TLS set-up"
        )

    def _trust_hint(self) -> str:
        if self.protocol in ("http", "https"):
            return (
                "If you trust this server, give its CA certificate: storage_options := MAP {'ssl': "
                "'/path/to/ca.pem'} (or set SSL_CERT_FILE before Python starts); 'ssl': 'false' skips "
                "the check altogether, for a server and network you trust"
            )
        if self.protocol in ("s3", "s3a"):
            return (
                "If you trust this endpoint, give its CA certificate: storage_options := MAP "
                "{'client_kwargs': '{\"verify\": \"/path/to/ca.pem\"}'} (or set AWS_CA_BUNDLE)"
            )
        return "If you trust this server, add its CA certificate to the trusted ones (SSL_CERT_FILE)"

    def _credentials_hint(self) -> str:
        if self.protocol in ("s3", "s3a"):
            return (
                "give credentials: storage_options := MAP {'key': ..., 'secret': ...}, the AWS_* "
                "environment variables, or a DuckDB secret (CREATE SECRET (TYPE s3, ...))"
            )
        if self.protocol in ("http", "https"):
            return (
                "check the URL; a server that needs authentication takes "
                "storage_options := MAP {'headers': '{\"Authorization\": ...}'}"
            )
        if self.protocol in ("az", "abfs", "abfss"):
            return (
                "give credentials: storage_options := MAP {'connection_string': ...}, {'account_name': ..., "
                "'account_key': ...} or {'account_name': ..., 'sas_token': ...}, or the AZURE_STORAGE_* "
                "environment variables; 'anon': 'false' signs in as the Azure CLI or the machine's identity does"
            )
        return "check the URL and the credentials in storage_options"

    # -- the Store protocol ---------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The bytes of every key (None where missing), fetched concurrently; keys that a
        `prefetch` started are taken from it."""
        ahead = self._take_ahead(keys)
        rest = [k for k in keys if k not in ahead]
        fetched = dict(zip(rest, self._fetch(rest), strict=True)) if rest else {}
        data = [fetched[k] if k in fetched else ahead[k].result() for k in keys]
        if any(b is None for b in data):
            self._check_unchanged([k for k, b in zip(keys, data, strict=True) if b is None][0])
        return data

    def _fetch(self, keys: Sequence[str]) -> list[bytes | None]:
        paths = [self._path(k) for k in keys]
        if self.is_async:
            out = self._run(lambda: asyncio.gather(*(self._get_one(k, p) for k, p in zip(keys, paths, strict=True))))
        else:
            out = self._sync_map(lambda k, p: self._sync_attempts(k, lambda: self.fs.cat_file(p)), keys, paths)
            out = [None if b is None else bytes(b) for b in out]
            counters.count(bytes_read=sum(len(b) for b in out if b is not None))
        return list(out)

    async def _get_one(self, key: str, path: str) -> bytes | None:
        raw = await self._attempts(key, lambda: self._aget(key, path))
        if raw is None:
            return None
        data = bytes(raw)
        counters.count(bytes_read=len(data))
        return data

    def prefetch(self, keys: Sequence[str]) -> list[concurrent.futures.Future[bytes | None]]:
        """Start fetching `keys` now; `get_many` takes the answers (see `forget`). The futures
        say when each answer is in (none for a filesystem without async requests)."""
        if not self.is_async:
            return []
        started = []
        with self._lock:
            for key in keys:
                entry = self._ahead.get(key)
                if entry is None:
                    future = asyncio.run_coroutine_threadsafe(self._get_one(key, self._path(key)), self.fs.loop)
                    entry = self._ahead[key] = [future, 0, False]
                entry[1] += 1
                started.append(entry[0])
        return started

    def forget(self, keys: Sequence[str]) -> None:
        """Prefetches nobody will take (a LIMIT ended the scan): dropped, and cancelled when no
        reader took their key yet."""
        with self._lock:
            for key in keys:
                entry = self._release(key)
                if entry is not None and not entry[2]:
                    entry[0].cancel()

    def _take_ahead(self, keys: Sequence[str]) -> dict[str, concurrent.futures.Future[bytes | None]]:
        if not self._ahead:
            return {}
        taken = {}
        with self._lock:
            for key in keys:
                entry = self._ahead.get(key)
                if entry is not None:
                    entry[2] = True
                    taken[key] = entry[0]
                    self._release(key)
        return taken

    def _release(self, key: str) -> list[Any] | None:
        """One prefetch of `key` is done with; the entry once none wants it (lock held)."""
        entry = self._ahead.get(key)
        if entry is None:
            return None
        entry[1] -= 1
        if entry[1] > 0:
            return None
        del self._ahead[key]
        return entry

    def token(self, key: str) -> str | None:
        return self.token_many([key])[0]

    def token_many(self, keys: Sequence[str]) -> list[str | None]:
        """A validator per key (ETag, Last-Modified, size), None where the key is missing.

        A validator that came with a GET of the key in the last `FETCHED_TOKEN_AGE` seconds is
        used once instead of a HEAD: it is as fresh as a HEAD's answer would be.
        """
        now = time.monotonic()
        with self._lock:
            fetched = {k: self._fetched.pop(k) for k in keys if k in self._fetched}
        known = {k: tok for k, (tok, at) in fetched.items() if now - at < FETCHED_TOKEN_AGE}
        ask = [k for k in dict.fromkeys(keys) if k not in known]
        answers = dict(zip(ask, self._token_requests(ask), strict=True)) if ask else {}
        return [known[k] if k in known else answers[k] for k in keys]

    def _token_requests(self, keys: Sequence[str]) -> list[str | None]:
        paths = [self._path(k) for k in keys]
        if self.is_async:

            async def one(key: str, path: str) -> str | None:
                info = await self._attempts(key, lambda: self._ainfo(path))
                return None if info is None else _token_of(info)

            return list(self._run(lambda: asyncio.gather(*(one(k, p) for k, p in zip(keys, paths, strict=True)))))
        infos = self._sync_map(lambda k, p: self._sync_attempts(k, lambda: self.fs.info(p)), keys, paths)
        return [None if i is None else _token_of(i) for i in infos]

    def list_dir(self, prefix: str) -> list[str]:
        if not self.can_list:
            raise StoreReadError(
                f"cannot list '{self.where(prefix)}': plain HTTP has no way to list keys; give the "
                "store consolidated metadata, or read one array with array_path :="
            )
        path = self._path(prefix.rstrip("/"))
        if self.is_async:
            entries = self._run(lambda: self._attempts(prefix, lambda: self._als(path)))
        else:
            entries = self._sync_attempts(prefix, lambda: self.fs.ls(path, detail=False))
        if entries is None:
            return []
        base = path.rstrip("/") + "/"
        names = {
            str(e).rstrip("/")[len(base) :] if str(e).startswith(base) else str(e).rstrip("/").rsplit("/", 1)[-1]
            for e in entries
        }
        return sorted(n for n in names if n and "/" not in n)

    # -- filesystem specifics -------------------------------------------------------------------
    async def _aget(self, key: str, path: str) -> bytes:
        """GET a key; over HTTP the response's validator is kept for the next `token` of it."""
        if self.protocol not in ("http", "https"):
            return await self.fs._cat_file(path)
        from aiohttp import ClientResponseError

        session = await self.fs.set_session()
        # a chunk is read in pieces of up to 2 MiB, not aiohttp's 64 KiB: fewer pauses of the
        # socket and fewer wake-ups of the event loop per chunk (about 10% off a bulk scan)
        async with session.get(self.fs.encode_url(path), **{"read_bufsize": READ_BUFFER, **self.fs.kwargs}) as r:
            if r.status >= 400:
                raise ClientResponseError(r.request_info, r.history, status=r.status, message=r.reason or "")
            data = await r.read()  # a body shorter than its Content-Length raises here
            token = _token_of(
                {
                    "ETag": r.headers.get("ETag"),
                    "Last-Modified": r.headers.get("Last-Modified"),
                    "size": r.headers.get("Content-Length"),
                }
            )
        with self._lock:
            self._fetched[key] = (token, time.monotonic())
            if len(self._fetched) > MAX_FETCHED_TOKENS:
                self._fetched.pop(next(iter(self._fetched)))
        return data

    async def _ainfo(self, path: str) -> dict[str, Any]:
        if self.protocol in ("http", "https"):
            return await self._http_head(path)
        if self.protocol in ("gs", "gcs"):
            # one GET of the object's metadata: gcsfs's `_info` also lists the path as a folder
            # (in parallel, and again for a missing key), requests trace() would not see
            return await self.fs._get_object(path)
        if self.protocol in ("s3", "s3a", "az", "abfs", "abfss"):
            return await self.fs._info(path, refresh=True)
        return await self.fs._info(path)

    async def _als(self, path: str) -> list[str]:
        if self.protocol in ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"):
            return await self.fs._ls(path, detail=False, refresh=True)
        return await self.fs._ls(path, detail=False)

    async def _http_head(self, path: str) -> dict[str, Any]:
        """One HEAD request; fsspec's own `_info` turns every failure into 'not found'."""
        from aiohttp import ClientResponseError

        session = await self.fs.set_session()
        kwargs = dict(self.fs.kwargs)
        async with session.head(self.fs.encode_url(path), allow_redirects=True, **kwargs) as r:
            if r.status >= 400:
                raise ClientResponseError(r.request_info, r.history, status=r.status, message=r.reason or "")
            return {
                "ETag": r.headers.get("ETag"),
                "Last-Modified": r.headers.get("Last-Modified"),
                "size": r.headers.get("Content-Length"),
            }

    def _sync_attempts(self, key: str, call: Callable[[], Any]) -> Any:
        """The retry rules for a synchronous filesystem (no per-request timeout is possible)."""
        attempt = 0
        while True:
            attempt += 1
            counters.count(requests=1)
            try:
                return call()
            except Exception as err:  # backends raise their own types: classified, never guessed
                wait = self._after_failure(key, err, attempt)
                if wait is None:
                    return None
            time.sleep(wait)

    def _sync_map(self, fn: Callable[[str, str], Any], keys: Sequence[str], paths: Sequence[str]) -> list[Any]:
        if len(keys) == 1:
            return [fn(keys[0], paths[0])]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="zarrsql-io")
        return list(self._pool.map(fn, keys, paths))

    def _check_unchanged(self, missing_key: str) -> None:
        """A missing chunk is fill only if the store's metadata is still what the tree read."""
        watch = self.watch
        if watch is None:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last_change_check < CHANGE_CHECK_INTERVAL:
                return
            self._last_change_check = now
        key, token = watch
        current = self.token(key)
        if current != token:
            raise StoreReadError(
                f"store '{self.url}' changed during the query: '{key}' is no longer the version "
                f"the query planned with, and '{missing_key}' is missing; run the query again"
            )


def _token_of(info: dict[str, Any]) -> str:
    """A validator from an info record; a key with none at all never validates (re-read)."""
    parts = [
        str(info.get(k))
        for k in ("ETag", "etag", "LastModified", "Last-Modified", "mtime", "size")
        if info.get(k) not in (None, "")
    ]
    if not parts:
        return f"unvalidated:{time.monotonic_ns()}"
    return "|".join(parts)


def _azure_single_attempt(fs: Any) -> None:
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
