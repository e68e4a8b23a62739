"""Storage options: zarrsql's own network settings split from the filesystem's keywords.

`storage_options` reach a store as text (SQL `MAP(VARCHAR, VARCHAR)`, Python values turned
into literals), so values are brought back to Python here: `'true'`/`'false'` (any case) are
booleans and a value starting with `{` or `[` is JSON (for nested keywords such as
`client_kwargs`). Everything else stays text.

zarrsql reads these keys itself and does not pass them on:

| key | default | bounds |
|---|---|---|
| `timeout` | 30 | seconds one request may take (each attempt), so a stalled server fails the query |
| `retries` | 3 | extra attempts after a transient failure (5xx, 429, reset, timeout, truncated body) |
| `retry_backoff` | 0.1 | seconds before the first retry; doubled per retry, at most 2 s |
| `concurrency` | 32 | requests in flight, and the reader's threads for this store |
| `metadata_ttl` | 0 | seconds a cached node tree is trusted without revalidating it |

On S3, botocore's own retries are turned off (`config_kwargs` default) and s3fs's are
set to one attempt, so that `retries` means what it says; botocore's connection pool (10 by
default) is sized to `concurrency`, so that `concurrency` does too. On Azure the same holds: the
storage SDK's retry policy (3 retries, 15 s apart) is set to none when the store opens.
On GCS, gcsfs's loop around every request (6 attempts, up to 16 s apart) is bypassed
(store/remote.py).

TLS over HTTP: `ssl` is passed to every aiohttp request. `'false'` skips certificate checks;
any other text is the path of a CA certificate file (PEM) to trust, made into an SSL context
here (one per file, so that fsspec's cached filesystem for the same options is reused).

Anonymous S3: a store on `s3://` gets `anon=True` unless the options name credentials
(`anon`, `key`, `secret`, `token`, `profile`, `session`) or the environment holds them
(the `AWS_*` variables below, or a shared credentials/config file). See docs/remote.md.

Anonymous Azure: likewise, a store on `az://`, `abfs://` or `abfss://` gets `anon=True` unless
the options name a way to authenticate (`anon`, `account_key`, `sas_token`,
`connection_string`, `credential`, `client_id`/`client_secret`/`tenant_id`) or the environment
does (`AZURE_STORAGE_*` credentials, or the variables of a service principal, workload or
managed identity). Left alone, adlfs would build a DefaultAzureCredential, which probes the
CLI, the metadata endpoint and more, and finding nothing fails even a public container's reads,
slowly (it can use up the whole request timeout).
`'anon': 'false'` asks for that credential chain explicitly (an Azure VM's identity, `az login`).

Anonymous GCS: a store on `gs://` or `gcs://` gets `token='anon'` unless the options give a
`token` (a method such as `'google_default'` or `'cloud'`, a key file, or the key's JSON) or
the environment points at credentials (`GOOGLE_APPLICATION_CREDENTIALS`, the application-default
file `gcloud auth application-default login` writes, or gcsfs's own token cache). Left at
`token=None`, gcsfs tries those and then the cloud metadata server before settling for anonymous
access, and off Google Cloud that probe costs seconds per process for a public bucket that needs
no credentials at all. The listings cache is off too (`use_listings_cache=False`): gcsfs answers
a file's info from the last listing of its folder, which would hide a rewritten object from the
validation zarrsql does before using its cached metadata.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from zarrsql.errors import ParameterError

if TYPE_CHECKING:  # ssl loads when a CA file is given, not with every store that is opened
    import ssl

#: Requests in flight per store: enough to hide ~20-100 ms of latency behind a decoder that
#: handles a chunk in a few ms, while keeping open sockets and buffered chunks bounded.
DEFAULT_CONCURRENCY = 32


@dataclass(frozen=True, slots=True)
class NetworkOptions:
    """How a remote store talks to its server (see the module docstring for each field)."""

    timeout: float = 30.0
    retries: int = 3
    retry_backoff: float = 0.1
    concurrency: int = DEFAULT_CONCURRENCY
    metadata_ttl: float = 0.0


_NUMBERS: dict[str, tuple[type, float]] = {
    # key: (type, smallest allowed value)
    "timeout": (float, 0.001),
    "retries": (int, 0),
    "retry_backoff": (float, 0.0),
    "concurrency": (int, 1),
    "metadata_ttl": (float, 0.0),
}

_S3_CREDENTIAL_KEYS = frozenset({"anon", "key", "secret", "token", "profile", "session"})
_S3_CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def _value(text: Any) -> Any:
    """A storage option's value as Python: booleans and JSON come back from text."""
    if not isinstance(text, str):
        return text
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError as err:
            raise ParameterError(
                f"storage option value {text!r} starts like JSON but is not valid JSON: {err}"
            ) from err
    return text


def _number(key: str, value: Any) -> float | int:
    kind, low = _NUMBERS[key]
    try:
        number = kind(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number) or number < low:  # NaN compares false with any bound
        raise ParameterError(
            f"storage option {key!r} must be a finite {'whole ' if kind is int else ''}number >= {low:g}, got {value!r}"
        )
    return number


def _configured(
    options: Mapping[str, Any], keys: frozenset[str], env: tuple[str, ...], files: tuple[str, ...] = ()
) -> bool:
    """Whether the user configured credentials: named in `options` (any of `keys`), set in the
    environment (any of `env`), or stored in one of `files`. The rule of every cloud below."""
    return bool(keys & set(options)) or any(os.environ.get(n) for n in env) or any(os.path.isfile(f) for f in files)


def s3_has_credentials(options: Mapping[str, Any]) -> bool:
    """Whether S3 credentials are configured in `options` or the environment (not IMDS)."""
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials"),
        os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config"),
    )
    return _configured(options, _S3_CREDENTIAL_KEYS, _S3_CREDENTIAL_ENV, files)


#: Options that choose how adlfs authenticates: with any of them, the user has decided.
_AZURE_CREDENTIAL_KEYS = frozenset(
    {"anon", "account_key", "sas_token", "connection_string", "credential", "client_id", "client_secret", "tenant_id"}
)
#: Environment variables adlfs reads credentials from (`AZURE_STORAGE_*`), and those that make
#: DefaultAzureCredential find a service principal, workload identity or managed identity.
_AZURE_CREDENTIAL_ENV = (
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CLIENT_ID",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_STORAGE_TENANT_ID",
    "AZURE_STORAGE_ANON",
    "AZURE_CLIENT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "IDENTITY_ENDPOINT",
    "MSI_ENDPOINT",
)


def azure_defaults(theirs: dict[str, Any]) -> None:
    """Anonymous access unless credentials are named in `theirs` or the environment.

    Without credentials adlfs falls back to DefaultAzureCredential, which tries the Azure CLI,
    managed identity endpoints and more before failing; a public container needs none of it.
    """
    if not _configured(theirs, _AZURE_CREDENTIAL_KEYS, _AZURE_CREDENTIAL_ENV):
        theirs["anon"] = True


#: Where google-auth looks for the file `gcloud auth application-default login` writes.
_GCLOUD_ADC_FILE = "application_default_credentials.json"


def _gcloud_config_dir() -> str:
    if os.environ.get("CLOUDSDK_CONFIG"):
        return os.environ["CLOUDSDK_CONFIG"]
    if os.name == "nt" and os.environ.get("APPDATA"):
        return os.path.join(os.environ["APPDATA"], "gcloud")
    return os.path.join(os.path.expanduser("~"), ".config", "gcloud")


def gcs_defaults(theirs: dict[str, Any]) -> None:
    """gcsfs keywords zarrsql sets unless the user did: anonymous access without credentials,
    and no listings cache (see the module docstring for why each)."""
    theirs.setdefault("use_listings_cache", False)
    files = (
        os.path.join(_gcloud_config_dir(), _GCLOUD_ADC_FILE),
        os.path.join(os.path.expanduser("~"), ".gcs_tokens"),  # gcsfs's browser-login cache
    )
    if not _configured(theirs, frozenset({"token"}), ("GOOGLE_APPLICATION_CREDENTIALS",), files):
        theirs["token"] = "anon"


@lru_cache(maxsize=16)
def _trusting(cafile: str) -> ssl.SSLContext:
    """A verifying SSL context that also trusts the CA certificate(s) in `cafile`."""
    import ssl

    path = os.path.expanduser(cafile)
    if not os.path.isfile(path):
        raise ParameterError(
            f"storage option 'ssl' {cafile!r} is not a file: give 'false' to skip certificate checks, "
            "or the path of the CA certificate (PEM) that signed the server's certificate"
        )
    try:
        return ssl.create_default_context(cafile=path)
    except (ssl.SSLError, ValueError) as err:
        raise ParameterError(
            f"storage option 'ssl' {cafile!r} holds no PEM certificate that can be trusted ({err})"
        ) from err


def s3_defaults(theirs: dict[str, Any]) -> None:
    """Anonymous access without credentials, and botocore's retries off (else every zarrsql
    attempt would hide botocore's own, unseen by `trace()`).

    botocore's `total_max_attempts` counts the first request, so 1 is one request; its
    older `max_attempts` counts retries (`max_attempts: 1` is two requests). A `retries`
    entry the user gives in `config_kwargs` is kept; other `config_kwargs` (a pool size) do
    not bring botocore's retries back."""
    if not s3_has_credentials(theirs):
        theirs["anon"] = True
    config = dict(theirs.get("config_kwargs") or {})
    config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    theirs["config_kwargs"] = config


def s3_pool(theirs: dict[str, Any], concurrency: int) -> None:
    """As many pooled connections as requests in flight: botocore's pool holds 10, and a
    request beyond them waits for a free connection, so `concurrency` would not mean what it
    says. A `max_pool_connections` the user gives in `config_kwargs` is kept."""
    config = dict(theirs.get("config_kwargs") or {})
    config.setdefault("max_pool_connections", concurrency)
    theirs["config_kwargs"] = config


def http_defaults(theirs: dict[str, Any]) -> None:
    """`ssl` given as a CA file's path becomes an SSL context trusting it."""
    if isinstance(theirs.get("ssl"), str):
        theirs["ssl"] = _trusting(theirs["ssl"])


def split_settings(storage_options: Mapping[str, Any]) -> tuple[NetworkOptions, dict[str, Any]]:
    """zarrsql's own settings, and the rest: the keywords for the fsspec filesystem (to which
    `backends.split_options` adds the defaults of the URL's backend)."""
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for key, raw in storage_options.items():
        if key in _NUMBERS:
            ours[key] = _number(key, _value(raw))
        else:
            theirs[str(key)] = _value(raw)
    return NetworkOptions(**ours), theirs
