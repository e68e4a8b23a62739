"""A store behind an fsspec URL: http(s), s3, gs, az (async filesystems), memory and others.

Requests run on fsspec's own event loop (`fsspec.asyn.sync`), never `asyncio.run`, so the
store works inside Jupyter and from any reader thread. Each request is one attempt of at most
`timeout` seconds; a transient failure (see `failures.py`) is retried `retries` times with
doubling backoff, or after the wait the server names (`Retry-After`, `_after_failure`); a 404
is a missing key (None), a 401/403 is never retried. Every attempt counts as a request in
`zarrsql.trace()`, validation requests (HEAD) included.

`get_many` fetches keys concurrently, at most `concurrency` requests in flight per store,
which is what hides the round-trip latency of object storage. `prefetch` starts fetches
without waiting for them: the reader names the chunks of the next work units while only a
core's worth of threads decode, so requests stay in flight without tens of decoding threads
fighting the event loop for the GIL; a later `get_many` of those keys takes the answers.
`get_ranges` reads parts of values (HTTP Range requests, ranged object GETs), one request
per range. What differs between filesystems is their row in store/backends.py.
Plain HTTP cannot list keys, so `can_list` is False there and a store without consolidated metadata reads one array at a
time (metadata/tree.py). A chunk that is missing while the store's metadata document has
changed since the tree was read means the store changed under the query: an error, not fill.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import email.utils
import hashlib
import json
import math
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zarrsql import counters
from zarrsql.errors import ParameterError, StoreNotFoundError, StoreReadError, ZarrSQLError
from zarrsql.store.backends import backend_for, scrubbed, split_options
from zarrsql.store.base import ByteRange, check_key, note_changed
from zarrsql.store.failures import Failure, classify, describe, tls_error
from zarrsql.store.redaction import HIDDEN, redacted_url, url_secrets

#: Seconds between two "did the store change?" checks triggered by missing chunks: bounds the
#: extra HEAD requests on stores that legitimately leave many chunks unwritten.
CHANGE_CHECK_INTERVAL = 1.0
#: Longest wait the backoff doubles to (a server's `Retry-After` may ask for more: `_after_failure`).
MAX_BACKOFF = 2.0
#: Seconds a validator seen on a GET stands in for a HEAD (once): about a round trip's worth
#: of staleness, which a HEAD has too. It saves the HEAD that follows reading a document.
FETCHED_TOKEN_AGE = 2.0
#: Validators kept from GETs (oldest dropped): chunk reads must not grow it without bound,
#: while the documents of a wide store (thousands of arrays) keep theirs until the walk ends.
MAX_FETCHED_TOKENS = 8192


def _protocol(url: str) -> str:
    return url.split("://", 1)[0].lower()


class FsspecStore:
    """Reads keys below a URL through fsspec (see the module docstring for the rules)."""

    remote = True

    def __init__(self, url: str, storage_options: dict[str, Any]) -> None:
        scheme, _, rest = url.partition("://")  # partitioned first: 's3://' stripped of '/' loses its '://'
        rest = rest.rstrip("/")
        shown = redacted_url(url)  # messages never repeat a URL's signature, token or password
        # an HTTP store's keys would be appended after its query (object stores' keys may hold them)
        if scheme.lower() in ("http", "https") and ("?" in rest or "#" in rest):
            raise ParameterError(
                f"the store URL '{shown}' has a query string or fragment ('?...' or '#...'), which a store's keys "
                "cannot follow; give the store's root URL, and credentials or tokens in storage_options "
                "(e.g. MAP {'headers': '{\"Authorization\": \"Bearer ...\"}'})"
            )
        #: The URL read, credentials included; `url` is the one messages name (store/redaction.py).
        self._target = f"{scheme.lower()}://{rest}"  # URL schemes are case-insensitive (HTTP:// = http://)
        self.url = redacted_url(self._target)
        self.protocol = _protocol(self._target)
        self.backend = backend_for(self.protocol)
        word = self.backend.root_word
        if word is not None and not rest.strip("/"):
            raise ParameterError(
                f"the store URL '{shown}' names no {word}; give the store's full URL, "
                f"e.g. '{self.protocol}://{word}/path/to/store.zarr'"
            )
        self.network, self.fs_options = split_options(self.protocol, storage_options)
        self.fs, self.root = self._open_filesystem(shown)
        self.root = self.root.rstrip("/")
        self.backend.one_attempt(self.fs)
        self.can_list = self.backend.can_list
        self.concurrency = self.network.concurrency
        self.metadata_ttl = self.network.metadata_ttl
        self.is_async = bool(getattr(self.fs, "async_impl", False))
        digest = hashlib.sha1(json.dumps(self.fs_options, sort_keys=True, default=repr).encode()).hexdigest()[:16]
        self.cache_key = f"{self._target}#{digest}"  # stores read with other credentials are others
        self._watched: tuple[str, str | None] | None = None  # (metadata key, its token), see `watch`
        self._sem: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self._last_change_check = 0.0
        #: When the latest missing chunk arrived that no check started since has confirmed
        #: (0.0: none): `confirm_missing` checks once more at the end of a scan.
        self._unconfirmed = 0.0
        self._pool: ThreadPoolExecutor | None = None
        self._fetched: dict[str, tuple[str, float]] = {}  # key -> (validator from its GET, when)
        #: Started fetches: key -> [future of its bytes, prefetches still wanting it, taken yet].
        self._ahead: dict[str, list[Any]] = {}

    def _open_filesystem(self, url: str) -> tuple[Any, str]:
        """The filesystem and the path of the store's root on it (`url` is the store's URL as
        messages name it). Whatever building it raises (a library's own errors: an auth
        library's, an HTTP client's) becomes a ZarrSQLError without the options' secrets, nor
        the URL's, in its text."""
        try:
            return self.backend.open(self._target, self.fs_options)
        except ImportError as err:
            raise StoreNotFoundError(
                f"cannot open '{url}': the filesystem for {self.protocol}:// is not installed ({self._scrub(err)}); "
                f"install it with: pip install 'zarrsql[{self.backend.extra}]'"
            ) from err
        except ZarrSQLError:
            raise
        except (ValueError, TypeError, KeyError) as err:
            cause = self._scrub(f"{type(err).__name__}: {err}")
            raise ParameterError(f"cannot open '{url}' with these storage_options ({cause})") from err
        except Exception as err:  # a library's own error type while building: relayed, secrets removed
            cause = self._scrub(f"{type(err).__name__}: {err}")
            raise StoreReadError(
                f"cannot open '{url}': setting up its filesystem failed ({cause}); {self.backend.credentials_hint}"
            ) from err

    def _scrub(self, cause: object) -> str:
        """A library's error text as a message may relay it: without the secrets of the
        options or of the URL read (its password may appear whole, outside any URL)."""
        text = scrubbed(str(cause), self.fs_options)
        for secret in url_secrets(self._target):
            text = text.replace(secret, HIDDEN)
        return text

    def zarr_python_store(self) -> Any:
        """A zarr-python store on this store's filesystem, as an instance made for async use."""
        import zarr.storage

        return zarr.storage.FsspecStore(self._async_fs(), path=self.root, read_only=True)

    def _async_fs(self) -> Any:
        if self.fs.async_impl:
            if self.fs.asynchronous:
                return self.fs
            fs = type(self.fs)(asynchronous=True, **self.backend.keywords(self.fs_options))
            self.backend.one_attempt(fs)
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
            started = time.monotonic()
            try:
                async with self._sem:
                    started = time.monotonic()  # the attempt, not its wait for a slot
                    return await asyncio.wait_for(call(), self.network.timeout)
            except Exception as err:  # backends raise their own types: classified, never guessed
                wait = self._after_failure(key, err, attempt, time.monotonic() - started)
                if wait is None:
                    return None
            await asyncio.sleep(wait)

    def _after_failure(self, key: str, err: Exception, attempt: int, took: float) -> float | None:
        """What a failed attempt leads to: None for a missing key, else the seconds to wait
        before the next attempt; raises `StoreReadError` when there is no next attempt.

        The wait is the doubling backoff, or longer when the server named one (a 429 or 503
        with `Retry-After`): retrying sooner would only meet the same refusal. The attempt
        (`took` seconds) and the wait it names take at most `timeout` together, so a server
        that names long waits (or a hostile one: `Retry-After: 86400`) costs a query no more
        time than one that stalls every attempt until its timeout; a longer `timeout` honours
        longer waits."""
        kind = classify(err)
        if kind is Failure.MISSING:
            return None
        if kind is Failure.TRANSIENT and attempt <= self.network.retries:
            backoff = min(MAX_BACKOFF, self.network.retry_backoff * 2 ** (attempt - 1))
            asked = _retry_after(err)
            if asked is None:
                return backoff
            return max(backoff, min(asked, self.network.timeout - took))
        raise self._error(key, err, kind, attempt) from err

    def _error(self, key: str, err: BaseException, kind: Failure, attempts: int) -> StoreReadError:
        where, cause = self.where(key), self._scrub(describe(err, self.network.timeout))
        if kind is Failure.DENIED:
            return StoreReadError(f"access denied reading '{where}' ({cause}); {self.backend.credentials_hint}")
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
                f"would fail the same way. {self.backend.trust_hint}"
            )
        plain = (
            "If the server speaks plain HTTP on this port, use http:// instead of https://; else check"
            if self.backend.plain_http_hint
            else "Check"
        )
        return (
            f"the TLS handshake failed ({cause}); not retried, since every attempt would fail the same "
            f"way. {plain} the URL's scheme and port and the server's TLS set-up"
        )

    # -- the Store protocol and its capabilities ------------------------------------------------
    def get(self, key: str) -> bytes | None:
        return self.get_many([key])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """The bytes of every key (None where missing), fetched concurrently; keys that a
        `prefetch` started are taken from it."""
        ahead = self._take_ahead(keys)
        rest = [k for k in keys if k not in ahead]
        fetched = dict(zip(rest, self._fetch([(k, None) for k in rest]), strict=True)) if rest else {}
        data = [fetched[k] if k in fetched else ahead[k].result() for k in keys]
        self._check_found(keys, data)
        return data

    def get_ranges(self, requests: Sequence[tuple[str, ByteRange]]) -> list[bytes | None]:
        """The bytes of each (key, range), fetched concurrently, one request each."""
        data = self._fetch(requests) if requests else []
        self._check_found([k for k, _ in requests], data)
        return data

    def _check_found(self, keys: Sequence[str], data: Sequence[bytes | None]) -> None:
        missing = [k for k, b in zip(keys, data, strict=True) if b is None]
        if missing:
            self._check_unchanged(missing[0])

    def _fetch(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        for key, _ in requests:
            check_key(key)
        if self.is_async:
            return list(self._run(lambda: asyncio.gather(*(self._get_one(k, r) for k, r in requests))))
        out = self._sync_map(lambda k, r: self._sync_attempts(k, lambda: self._sync_get(k, r)), requests)
        counters.count(bytes_read=sum(len(b) for b in out if b is not None))
        return out

    def _sync_get(self, key: str, byte_range: ByteRange | None) -> bytes:
        start, end = (None, None) if byte_range is None else byte_range.bounds()
        return bytes(self.fs.cat_file(self._path(key), start=start, end=end))

    async def _get_one(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        path = self._path(key)
        got = await self._attempts(key, lambda: self.backend.get(self.fs, path, byte_range))
        if got is None:
            return None
        counters.count(bytes_read=got.transferred)
        if got.info is not None and byte_range is None:  # saves the HEAD that would follow
            with self._lock:
                self._fetched[key] = (_token_of(got.info), time.monotonic())
                if len(self._fetched) > MAX_FETCHED_TOKENS:
                    self._fetched.pop(next(iter(self._fetched)))
        return got.data

    def watch(self, key: str, token: str | None) -> None:
        """Check `key` against `token` when a chunk turns out missing (the module docstring)."""
        self._watched = (key, token)

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
                    future = asyncio.run_coroutine_threadsafe(self._get_one(key, None), self.fs.loop)
                    entry = self._ahead[key] = [future, 0, False]
                entry[1] += 1
                started.append(entry[0])
        return started

    def forget(self, keys: Sequence[str]) -> None:
        """Prefetches nobody will take (a LIMIT ended the scan): dropped, and cancelled when no
        reader took their key yet.

        The cancels run together in one callback on the event loop, the last key first: a
        request in flight that is cancelled gives its `concurrency` slot back, and were the
        fetches queued behind it still live at that moment, the next would take the slot and
        be sent (under load, the loop ran between two cancels made from this thread)."""
        doomed = []
        with self._lock:
            for key in keys:
                entry = self._release(key)
                if entry is not None and not entry[2]:
                    doomed.append(entry[0])
        if not doomed:
            return
        doomed.reverse()
        try:
            self.fs.loop.call_soon_threadsafe(_cancel_all, doomed)
        except RuntimeError:  # the loop is closed: nothing on it runs any more
            _cancel_all(doomed)

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

    def read_tokens(self, keys: Sequence[str]) -> list[str | None]:
        """The validator of the version each key's last GET read, whatever its age (a HEAD only
        for a key read without one): what a cached document must be checked against later.
        A HEAD now could describe a newer version than the bytes read, and would cost a round
        trip per wave of `concurrency` documents on a store of many arrays."""
        with self._lock:
            known = {k: self._fetched.pop(k)[0] for k in keys if k in self._fetched}
        ask = [k for k in dict.fromkeys(keys) if k not in known]
        answers = dict(zip(ask, self.token_many(ask), strict=True)) if ask else {}
        return [known[k] if k in known else answers[k] for k in keys]

    def _token_requests(self, keys: Sequence[str]) -> list[str | None]:
        if self.is_async:

            async def one(key: str) -> str | None:
                path = self._path(key)  # a bad key is the caller's error, never retried
                info = await self._attempts(key, lambda: self.backend.info(self.fs, path))
                return None if info is None else _token_of(info)

            return list(self._run(lambda: asyncio.gather(*(one(k) for k in keys))))
        paths = [(k, self._path(k)) for k in keys]
        infos = self._sync_map(lambda k, p: self._sync_attempts(k, lambda: self.fs.info(p)), paths)
        return [None if i is None else _token_of(i) for i in infos]

    def list_dir(self, prefix: str) -> list[str]:
        if not self.can_list:
            raise StoreReadError(
                f"cannot list '{self.where(prefix)}': plain HTTP has no way to list keys; give the "
                "store consolidated metadata, or read one array with array_path :="
            )
        path = self._path(prefix.rstrip("/"))
        if self.is_async:
            entries = self._run(lambda: self._attempts(prefix, lambda: self.backend.ls(self.fs, path)))
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

    # -- running requests without an event loop ------------------------------------------------
    def _sync_attempts(self, key: str, call: Callable[[], Any]) -> Any:
        """The retry rules for a synchronous filesystem (no per-request timeout is possible)."""
        attempt = 0
        while True:
            attempt += 1
            counters.count(requests=1)
            started = time.monotonic()
            try:
                return call()
            except Exception as err:  # backends raise their own types: classified, never guessed
                wait = self._after_failure(key, err, attempt, time.monotonic() - started)
                if wait is None:
                    return None
            time.sleep(wait)

    def _sync_map(self, fn: Callable[[str, Any], Any], pairs: Sequence[tuple[str, Any]]) -> list[Any]:
        """`fn(key, what)` for each (key, what) of `pairs`, `concurrency` at a time."""
        if len(pairs) == 1:
            return [fn(*pairs[0])]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="zarrsql-io")
        return list(self._pool.map(lambda p: fn(*p), pairs))

    def _check_unchanged(self, missing_key: str) -> None:
        """A missing chunk is fill only if the store's metadata is still what the tree read.

        A check covers the missing chunks that arrived before it started. Within
        `CHANGE_CHECK_INTERVAL` of the last one none is made; the chunk stays unconfirmed until
        the next check, at the latest the one `confirm_missing` makes when the scan ends."""
        watch = self._watched
        if watch is None:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last_change_check < CHANGE_CHECK_INTERVAL:
                self._unconfirmed = max(self._unconfirmed, now)
                return
            self._last_change_check = now
        self._compare(f"'{missing_key}' is missing", now)

    def confirm_missing(self) -> None:
        """At the end of a scan: if a missing chunk arrived after the last check started,
        check now, so that no chunk deleted by a rewrite during the scan is read as fill."""
        with self._lock:
            pending = self._unconfirmed
            if not pending or self._watched is None:
                return
            now = time.monotonic()
            self._last_change_check = now
        self._compare("chunks it read were missing", now)

    def _compare(self, missing: str, started: float) -> None:
        """Raise if the watched document is no longer the version the tree read; else every
        missing chunk that arrived before `started` is confirmed."""
        assert self._watched is not None
        key, token = self._watched
        current = self.token(key)
        with self._lock:
            if self._unconfirmed <= started:
                self._unconfirmed = 0.0
        if current != token:
            note_changed(self.cache_key)
            raise StoreReadError(
                f"store '{self.url}' changed during the query: '{key}' is no longer the version "
                f"the query planned with, and {missing}; run the query again"
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


def _retry_after(err: BaseException) -> float | None:
    """The seconds the server asked to wait before the next request, from the `Retry-After`
    header (RFC 9110: a number of seconds, or an HTTP date) of the response that failed; None
    when no response header says. The response comes with the failure or one of its causes:
    aiohttp's ClientResponseError `.headers` (http(s)://, when the backend passes them on),
    botocore's ClientError `.response` (s3://: s3fs raises its own error from it), azure-core's
    HttpResponseError `.response.headers` (az://). gcsfs keeps no headers on its errors."""
    seen: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and cur not in seen and len(seen) < 8:
        value = _header(_response_headers(cur), "retry-after")
        if value is not None:
            return _seconds_from(value)
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return None


def _response_headers(err: BaseException) -> Any:
    """The response headers a library's error carries, if any (see `_retry_after`)."""
    headers = getattr(err, "headers", None)
    if headers is not None:
        return headers
    response: Any = getattr(err, "response", None)
    if isinstance(response, dict):
        return (response.get("ResponseMetadata") or {}).get("HTTPHeaders")
    return getattr(response, "headers", None)


def _header(headers: Any, name: str) -> str | None:
    """Header `name` (lowercase) of `headers`, whatever the case its library keeps names in."""
    items = getattr(headers, "items", None)
    if not callable(items):
        return None
    for key, value in items():
        if str(key).lower() == name:
            return str(value)
    return None


def _seconds_from(value: str) -> float | None:
    """A `Retry-After` value in seconds from now (0 for a date past); None when it is neither
    a number nor an HTTP date."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # HTTP dates are GMT
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - dt.datetime.now(dt.UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _cancel_all(futures: Sequence[concurrent.futures.Future[Any]]) -> None:
    """Cancel each of `futures` (see `FsspecStore.forget`)."""
    for future in futures:
        future.cancel()
