"""Storage options checked when a store opens, one check per filesystem family.

Options are checked when a store opens, not at its first request: an S3 keyword s3fs does not
take (`region`, `aws_access_key_id`) would otherwise fail every request with a TypeError from
deep inside aiobotocore, an HTTP one (`header`, `anon`) every request with a TypeError from
aiohttp, a GCS one (`anon`, `key`) would be ignored without a word by gcsfs, and a GCS `token`
that is neither a method, a key file nor its JSON is taken by gcsfs for a raw access token and
sent to Google in a URL (which its errors repeat). The names each filesystem takes are read
from the installed library (its constructor's keywords; for HTTP also aiohttp's request
keywords, which fsspec passes on). Messages name the option and its right spelling, never an
option's value (it may be a secret).
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any
from urllib.parse import urlsplit

from zarrsql.errors import ParameterError
from zarrsql.store.options import NetworkOptions

#: The storage option that makes an http(s) store's keys names (store/backends.py's docstring): its value
#: is the store's URL, below which each path segment of a key is percent-encoded. store/opening.py
#: sets it for a Zarr store; the filesystem keeps it (so that a copy of the filesystem made from
#: the same options, as zarr-python's reads use, encodes the same way) and sends it nowhere.
NAMED_KEYS = "zarrsql_names_below"  # no "key" in it: a value under such a name is hidden in messages

#: Keywords s3fs passes on rather than declares: aiobotocore's session, fsspec's caches.
_S3_PASSED_ON = ("profile", "session_vars", "event_hooks", "include_builtin_handlers")
_FSSPEC_KEYWORDS = ("use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache")
#: What users write for an S3 option (boto3's, the AWS CLI's, DuckDB's names) and s3fs's spelling.
_S3_SPELLINGS = {
    "region": """'client_kwargs': '{"region_name": "..."}'""",
    "region_name": """'client_kwargs': '{"region_name": "..."}'""",
    "aws_region": """'client_kwargs': '{"region_name": "..."}'""",
    "endpoint": "'endpoint_url'",
    "aws_endpoint_url": "'endpoint_url'",
    "s3_endpoint": "'endpoint_url'",
    "aws_access_key_id": "'key'",
    "access_key_id": "'key'",
    "key_id": "'key'",
    "aws_secret_access_key": "'secret'",
    "secret_access_key": "'secret'",
    "secret_key": "'secret'",
    "aws_session_token": "'token'",
    "session_token": "'token'",
    "profile_name": "'profile'",
    "aws_profile": "'profile'",
    "verify": """'client_kwargs': '{"verify": ...}'""",
}
#: s3fs keywords whose value is a JSON object (keywords for botocore), each with an example.
_S3_OBJECTS = {
    "client_kwargs": '{"region_name": "eu-west-1"}',
    "config_kwargs": '{"max_pool_connections": 64}',
    "s3_additional_kwargs": '{"ServerSideEncryption": "AES256"}',
}


def _s3_keywords() -> frozenset[str] | None:
    """Every keyword s3fs takes, read from the installed s3fs (None when it is missing)."""
    import inspect

    try:
        from s3fs import S3FileSystem  # type: ignore[import-untyped]
    except ImportError:
        return None
    declared = inspect.signature(S3FileSystem.__init__).parameters
    named = {n for n, p in declared.items() if p.kind is p.POSITIONAL_OR_KEYWORD or p.kind is p.KEYWORD_ONLY}
    return frozenset(named - {"self"}) | frozenset(_S3_PASSED_ON) | frozenset(_FSSPEC_KEYWORDS)


def check_s3_options(options: Mapping[str, Any]) -> None:
    """Refuse an option s3fs does not take, naming its spelling, a nested option that is not a
    JSON object, and an `endpoint_url` that is not an http(s) URL (botocore's "Invalid endpoint"
    would come at the first request); values are never repeated (they may be secrets)."""
    spellings = {name: f"use {spelling}" for name, spelling in _S3_SPELLINGS.items()}
    _check_names("s3://", options, _s3_keywords(), spellings, "see docs/remote.md for the options s3:// takes")
    for name, example in _S3_OBJECTS.items():
        _check_object(options, name, example)
    _check_endpoint(options.get("endpoint_url"), "storage option 'endpoint_url'")
    client = options.get("client_kwargs")
    if isinstance(client, Mapping):
        _check_endpoint(client.get("endpoint_url"), "'endpoint_url' in storage option 'client_kwargs'")


def _check_endpoint(url: Any, where: str) -> None:
    """An S3 endpoint is a URL with an http(s) scheme and a host (None: s3fs's default)."""
    if url is None:
        return
    parts = urlsplit(url) if isinstance(url, str) else None
    scheme = parts.scheme.lower() if parts is not None else ""
    if parts is None or scheme not in ("http", "https") or not parts.hostname:
        what = (
            f"{type(url).__name__}, not text"
            if parts is None
            else f"a URL with the scheme '{scheme}'"
            if scheme and parts.netloc
            else "text without a scheme and host"
        )
        raise ParameterError(
            f"{where} must be the URL of the S3 server, scheme and host, e.g. "
            f"'http://minio:9000' or 'https://s3.eu-west-1.amazonaws.com'; got {what}"
        )


def _check_names(
    scheme: str, options: Mapping[str, Any], known: frozenset[str] | None, spellings: Mapping[str, str], fix: str
) -> None:
    """Refuse the first option of `options` not in `known` (None: the library is missing, so
    nothing can be known), with what to do instead: the fix for a name users of other libraries
    write (`spellings`), else the closest name taken (zarrsql's own settings included), else `fix`."""
    if known is None:
        return
    for name in options:
        if name in known:
            continue
        hint = spellings.get(name.lower()) or _SETTING_SPELLINGS.get(name.lower())
        if hint is None:
            near = difflib.get_close_matches(name, sorted(known | frozenset(_SETTINGS)), n=1, cutoff=0.75)
            hint = f"use '{near[0]}'" if near else fix
        raise ParameterError(f"storage option '{name}' is not an option of {scheme} stores; {hint}")


def _check_object(options: Mapping[str, Any], name: str, example: str, of: str = "keywords") -> None:
    """Refuse option `name` unless it is a JSON object (a mapping from Python) of `of`."""
    value = options.get(name)
    if name in options and not isinstance(value, Mapping):
        got = "text" if isinstance(value, str) else type(value).__name__
        raise ParameterError(
            f"storage option '{name}' must be a JSON object of {of}, e.g. '{name}': '{example}'; got {got}"
        )


#: zarrsql's own settings (store/options.py): taken on every scheme, never passed on.
_SETTINGS = tuple(f.name for f in fields(NetworkOptions))
#: What users write for zarrsql's own settings (fsspec's, requests' habits) and their spelling.
_SETTING_SPELLINGS = {
    "retry": "use 'retries'",
    "max_retries": "use 'retries'",
    "backoff": "use 'retry_backoff'",
    "max_concurrency": "use 'concurrency'",
}


def _init_keywords(classes: Iterable[type]) -> frozenset[str]:
    """The keywords the constructors of `classes` and of their bases declare by name."""
    named: set[str] = set()
    for cls in classes:
        for base in cls.__mro__:
            init = base.__dict__.get("__init__")
            if init is None:
                continue
            params = inspect.signature(init).parameters.values()
            named |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return frozenset(named - {"self"}) | frozenset(_FSSPEC_KEYWORDS)


#: The header that carries credentials over HTTP, as an option's hint gives it.
_AUTHORIZATION = """'headers': '{"Authorization": "Bearer ..."}'"""
#: What users write for an HTTP option (requests', S3's, curl's habits) and what to do instead.
_HTTP_SPELLINGS = {
    "anon": f"leave it out: http(s) stores read anonymously unless a header carries credentials, {_AUTHORIZATION}",
    **{
        n: f"give credentials as a request header, {_AUTHORIZATION}"
        for n in ("key", "secret", "token", "username", "user", "password", "authorization", "bearer", "api_key")
    },
    "header": "use 'headers'",
    "verify": "use 'ssl': 'false' (no certificate check) or 'ssl': '/path/to/ca.pem'",
    "ca_bundle": "use 'ssl': '/path/to/ca.pem'",
    "cafile": "use 'ssl': '/path/to/ca.pem'",
    "endpoint_url": "give the server in the store's URL (http(s) stores have no endpoint)",
    "allow_redirects": (
        "leave it out: redirects are always followed, since a redirect's own body is not the key's value; "
        "'max_redirects' bounds how many (10 by default)"
    ),
}
#: The HTTP options most often needed, as a refusal lists them.
_HTTP_COMMON = ("headers", "ssl", "params", "cookies", "proxy", "client_kwargs", "max_redirects", "encoded")
#: aiohttp request keywords zarrsql sets itself on every request (`_http_get`, `_http_head`).
_HTTP_OWN = frozenset({"allow_redirects", "timeout"})


@functools.cache
def _http_keywords() -> frozenset[str] | None:
    """Every keyword an http(s) store passes on: fsspec's HTTPFileSystem's own and aiohttp's
    request keywords (fsspec sends the rest with every request); None without aiohttp."""
    try:
        import aiohttp
        from fsspec.implementations.http import HTTPFileSystem
    except ImportError:
        return None
    declared = inspect.signature(aiohttp.ClientSession._request).parameters.values()
    request = {p.name for p in declared if p.kind is p.KEYWORD_ONLY}
    return (_init_keywords([HTTPFileSystem]) | frozenset(request) | {NAMED_KEYS}) - _HTTP_OWN


def check_http_options(options: Mapping[str, Any]) -> None:
    """Refuse an option neither fsspec's HTTPFileSystem nor aiohttp takes (aiohttp would raise
    a TypeError at every request), naming its spelling, and `headers` / `client_kwargs` that are
    not JSON objects (aiohttp's "multidict update sequence" error at the first request)."""
    taken = ", ".join(f"'{n}'" for n in (*_HTTP_COMMON, *_SETTINGS))
    fix = f"http(s) stores take {taken} and aiohttp's other request keywords (see docs/remote.md)"
    _check_names("http(s)://", options, _http_keywords(), _HTTP_SPELLINGS, fix)
    _check_object(options, "headers", '{"Authorization": "Bearer ..."}', "header names and values")
    _check_object(options, "client_kwargs", '{"trust_env": true}')
    headers = options.get("headers") or {}
    if not all(isinstance(v, str) for v in headers.values()):
        raise ParameterError(
            "storage option 'headers' must map each header's name to its value as text, e.g. "
            """'headers': '{"Authorization": "Bearer ..."}'"""
        )


#: What users write for a GCS option (S3's, google-cloud-storage's habits) and what to do instead.
_GCS_SPELLINGS = {
    "anon": "use 'token': 'anon' (the default when no credentials are configured)",
    **{
        n: "use 'token': '/path/to/key.json' (or the key's JSON, or a method such as 'google_default')"
        for n in (
            "key",
            "secret",
            "key_file",
            "keyfile",
            "credentials",
            "credentials_file",
            "service_account",
            "service_account_file",
            "google_application_credentials",
        )
    },
    "project_id": "use 'project'",
    "endpoint": "use 'endpoint_url'",
    "emulator_host": "use 'endpoint_url'",
    "storage_emulator_host": "use 'endpoint_url'",
}


@functools.cache
def _gcs_keywords() -> frozenset[str] | None:
    """Every keyword gcsfs's filesystems take by name (None without gcsfs): gcsfs accepts any
    other and ignores it without a word."""
    try:
        import gcsfs
        from gcsfs.core import GCSFileSystem
    except ImportError:
        return None
    return _init_keywords([gcsfs.GCSFileSystem, GCSFileSystem])


def check_gcs_options(options: Mapping[str, Any]) -> None:
    """Refuse an option gcsfs does not take (it would be ignored), naming its spelling."""
    taken = ", ".join(f"'{n}'" for n in ("token", "project", "endpoint_url", "requester_pays", *_SETTINGS))
    fix = f"gs:// stores take {taken} and gcsfs's other keywords (see docs/remote.md)"
    _check_names("gs://", options, _gcs_keywords(), _GCS_SPELLINGS, fix)
    _check_object(options, "session_kwargs", '{"trust_env": true}')
