"""What a failed request means: a missing key, a refusal, a passing fault, or a real error.

Remote filesystems raise their own exception types (aiohttp, botocore, s3fs's and gcsfs's
translations).
`classify` decides by type and HTTP status only, never by message text, with one exception:
gcsfs reports a 403 as a bare OSError whose text alone names it ("Forbidden: <url>"), which is
read only when gcsfs raised it.

- MISSING: 404 (fsspec raises FileNotFoundError) — a key that does not exist;
- DENIED: 401/403 (PermissionError) — never retried, credentials will not appear by waiting;
- TRANSIENT: 5xx, 408, 429, timeouts, resets, refused or dropped connections, a body cut short
  of its Content-Length — retried with backoff;
- TLS: a failed TLS handshake or an untrusted certificate — never retried, the next handshake
  fails the same way (a TLS connection dropped mid-stream, `SSLEOFError`, stays TRANSIENT);
- FATAL: everything else (other 4xx, bad URLs) — reported at once.

`describe` turns the cause into the words an error message uses (aiohttp's TooManyRedirects,
whose status is 0, as a server that redirected too many times).
"""

from __future__ import annotations

import asyncio
import errno
import ssl
import sys
from enum import Enum
from typing import Any


class Failure(Enum):
    MISSING = "missing"
    DENIED = "denied"
    TRANSIENT = "transient"
    TLS = "tls"
    FATAL = "fatal"


_TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
    }
)


def _chain(err: BaseException) -> list[BaseException]:
    """`err` and its causes (s3fs wraps botocore errors in builtin ones)."""
    out: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and cur not in out and len(out) < 8:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _status(value: Any) -> int | None:
    return value if isinstance(value, int) and 100 <= value < 600 else None


def _gcsfs_status(err: BaseException) -> int | None:
    """The status in gcsfs's HttpError (`.code`); gcsfs is only looked for once it is loaded,
    since an error can only come from it then."""
    retry = sys.modules.get("gcsfs.retry")
    if retry is None or not isinstance(err, retry.HttpError):
        return None
    return _status(err.code)


#: The start of the plain OSError gcsfs raises for an HTTP 403 (`gcsfs.retry.validate_response`
#: raises `OSError(f"Forbidden: {url}\n{body}")`, no status attached). A 401 comes as its
#: HttpError with `.code`, a 404 as FileNotFoundError.
_GCSFS_FORBIDDEN = "Forbidden: "


def _gcsfs_forbidden(err: BaseException) -> int | None:
    """403 for gcsfs's refusal, the one status gcsfs reports by its text alone. Only a bare
    OSError (no errno, no subclass) that gcsfs itself raised is read, so no other library's
    message can pass for a refusal."""
    if type(err) is not OSError or err.errno is not None or not str(err).startswith(_GCSFS_FORBIDDEN):
        return None
    innermost = err.__traceback__
    while innermost is not None and innermost.tb_next is not None:
        innermost = innermost.tb_next
    module = "" if innermost is None else str(innermost.tb_frame.f_globals.get("__name__", ""))
    return 403 if module.split(".", 1)[0] == "gcsfs" else None


def status_of(err: BaseException) -> int | None:
    """The HTTP status an exception carries (aiohttp `.status`, azure-core's `.status_code`,
    gcsfs's `.code` or its "Forbidden" OSError, botocore `.response`), if any; none for a
    response aiohttp could not parse, whose "400" is aiohttp's own, never the server's."""
    if _malformed(err):
        return None
    for e in _chain(err):
        status = (
            _status(getattr(e, "status", None))
            or _status(getattr(e, "status_code", None))
            or _gcsfs_status(e)
            or _gcsfs_forbidden(e)
        )
        if status is not None:
            return status
        response: Any = getattr(e, "response", None)
        if isinstance(response, dict):
            code = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if isinstance(code, int):
                return code
    return None


def _malformed(err: BaseException) -> bool:
    """Whether aiohttp failed to parse the server's answer (a bad status line, a body longer
    than its Content-Length spilling into the next answer): a broken answer, worth a retry."""
    parsing = sys.modules.get("aiohttp.http_exceptions")
    return parsing is not None and any(isinstance(e, parsing.HttpProcessingError) for e in _chain(err))


def _aiohttp_transient(err: BaseException) -> bool:
    try:
        import aiohttp
    except ImportError:
        return False
    return isinstance(
        err,
        (
            aiohttp.ClientPayloadError,
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientConnectionError,
            aiohttp.ServerTimeoutError,
        ),
    )


def _botocore_transient(err: BaseException) -> bool:
    try:
        from botocore import exceptions as bx
    except ImportError:
        return False
    return isinstance(
        err,
        (
            bx.ConnectionError,
            bx.HTTPClientError,
            bx.ReadTimeoutError,
            bx.IncompleteReadError,
            bx.ResponseStreamingError,
        ),
    )


def _requests_transient(err: BaseException) -> bool:
    """A connection failure in `requests` terms: gcsfs raises ProxyError for an HTTP 502, and
    google-auth refreshes tokens over requests (looked for only once requests is loaded)."""
    exc = sys.modules.get("requests.exceptions")
    return exc is not None and isinstance(err, (exc.ConnectionError, exc.Timeout, exc.ChunkedEncodingError))


#: TLS errors that are the connection dropping, not the handshake failing: worth a retry.
_TLS_TRANSIENT = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError, ssl.SSLWantReadError)


def _aiohttp_tls(err: BaseException) -> bool:
    aiohttp = sys.modules.get("aiohttp")
    return aiohttp is not None and isinstance(err, aiohttp.ServerFingerprintMismatch)


def tls_error(err: BaseException) -> ssl.SSLError | BaseException | None:
    """The TLS failure behind `err` (the `ssl` error, or aiohttp's fingerprint mismatch), if
    the handshake failed; None for any other failure, a dropped TLS connection included."""
    for e in _chain(err):
        cert = getattr(e, "certificate_error", None)  # aiohttp's ClientConnectorCertificateError
        if isinstance(cert, ssl.SSLCertVerificationError):
            return cert
        if isinstance(e, ssl.SSLCertVerificationError) or _aiohttp_tls(e):
            return e
    for e in _chain(err):
        inner = getattr(e, "os_error", None)  # aiohttp's ClientConnectorSSLError keeps ssl's error here
        found = inner if isinstance(inner, ssl.SSLError) else e
        if isinstance(found, ssl.SSLError):
            return None if isinstance(found, _TLS_TRANSIENT) else found
    return None


def classify(err: BaseException) -> Failure:
    """The kind of failure `err` is (see the module docstring)."""
    if tls_error(err) is not None:
        return Failure.TLS
    status = status_of(err)
    if status is not None:
        if status in (404, 410):
            return Failure.MISSING
        if status in (401, 403):
            return Failure.DENIED
        if status in (408, 429) or status >= 500:
            return Failure.TRANSIENT
        return Failure.FATAL
    if _malformed(err):
        return Failure.TRANSIENT
    if isinstance(err, FileNotFoundError):
        return Failure.MISSING
    if isinstance(err, PermissionError):
        return Failure.DENIED
    for e in _chain(err):
        if isinstance(e, (TimeoutError, asyncio.TimeoutError, ConnectionError, *_TLS_TRANSIENT)):
            return Failure.TRANSIENT
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            return Failure.TRANSIENT
        if _aiohttp_transient(e) or _botocore_transient(e) or _requests_transient(e):
            return Failure.TRANSIENT
    return Failure.FATAL


def _payload_cut(err: BaseException) -> bool:
    try:
        import aiohttp
    except ImportError:
        aiohttp = None  # type: ignore[assignment]
    for e in _chain(err):
        if aiohttp is not None and isinstance(e, aiohttp.ClientPayloadError):
            return True
        try:
            from botocore.exceptions import IncompleteReadError
        except ImportError:
            continue
        if isinstance(e, IncompleteReadError):
            return True
    return False


def _redirects(err: BaseException) -> int | None:
    """How many redirects aiohttp followed before it gave up (its TooManyRedirects carries no
    status, only the responses it followed), if that is how the request failed."""
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None:
        return None
    return next((len(e.history) for e in _chain(err) if isinstance(e, aiohttp.TooManyRedirects)), None)


def describe(err: BaseException, timeout: float) -> str:
    """The cause of a failed request in a few words, with the HTTP status when there is one."""
    status = status_of(err)
    if status is not None:
        return f"HTTP {status}"
    redirects = _redirects(err)
    if redirects is not None:
        return (
            f"the server redirected too many times ({redirects} redirects without an answer): a redirect loop, "
            "or a chain longer than 'max_redirects' in storage_options allows (10 by default)"
        )
    if _payload_cut(err):
        return "the response was cut short (fewer bytes than its Content-Length: truncated in transit)"
    if _malformed(err):
        return "the server's answer was not valid HTTP (a body longer than its Content-Length, or a broken proxy)"
    if any(isinstance(e, (TimeoutError, asyncio.TimeoutError)) for e in _chain(err)):
        return f"no complete answer within the {timeout:g} s timeout"
    if any(isinstance(e, ConnectionRefusedError) for e in _chain(err)):
        return "connection refused (is the host up and the port right?)"
    text = str(err) or type(err).__name__
    return f"{type(err).__name__}: {text}"
