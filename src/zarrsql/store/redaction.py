"""URLs as error messages may show them: without the secrets that URLs themselves carry.

A pre-signed URL carries its credential and signature in the query string (S3's
`X-Amz-Signature`, Azure's SAS `sig`, GCS's `X-Goog-Signature`, a `token=`), and an HTTP URL
may carry a user and password (`https://user:password@host/...`), which aiohttp sends as Basic
authentication. docs/remote.md promises that no error message repeats them, and a message goes
to logs, CI output and the CLI's stderr. What a message may show:

- every value of the query string and the fragment replaced by `***`, whatever its name (a
  signature is named differently by each service, so no list of names can be complete): the
  names stay, since they say what kind of URL it was;
- a password in the authority replaced by `***` (`user:***@host`); a user name alone is taken
  for a token (`https://<token>@host`) and hidden whole, except on Azure's schemes, where
  `abfs://container@account.dfs.core.windows.net` names the container, no secret.

The URL a store reads stays untouched: only the text of messages is redacted.
"""

from __future__ import annotations

import re

#: What replaces a secret in a message.
HIDDEN = "***"
#: Schemes whose user part names a container (`container@account`), not a credential.
_CONTAINER_SCHEMES = frozenset({"az", "abfs", "abfss"})
_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<path>[^?#]*)"
    r"(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?",
    re.DOTALL,
)
#: A URL inside a longer text (an error relayed from a library): up to a space or a quote.
_URL_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redacted_url(url: str) -> str:
    """`url` as a message may show it (see the module docstring); text that is no URL (a local
    path) is returned unchanged."""
    found = _URL.fullmatch(url)
    if found is None:
        return url
    scheme = found["scheme"]
    user, at, host = found["authority"].rpartition("@")
    shown = f"{scheme}://{_shown_userinfo(scheme, user)}{at}{host}{found['path']}"
    if found["query"] is not None:
        shown += "?" + _hidden_values(found["query"])
    if found["fragment"] is not None:
        shown += "#" + _hidden_values(found["fragment"])
    return shown


def redacted_text(text: str) -> str:
    """`text` with every URL in it shown as `redacted_url` shows it."""
    return _URL_IN_TEXT.sub(lambda m: redacted_url(m[0]), text)


def url_secrets(url: str) -> list[str]:
    """The secrets `url` carries in its user part, as the text a library's error may repeat
    outside any URL (a password, a token given as the user): longest first, none shorter
    than 4 characters (a shorter one would also hide innocent text)."""
    found = _URL.fullmatch(url)
    if found is None:
        return []
    userinfo = found["authority"].rpartition("@")[0]
    user, colon, password = userinfo.partition(":")
    secrets = [password] if colon else [] if found["scheme"].lower() in _CONTAINER_SCHEMES else [user]
    return sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True)


def _shown_userinfo(scheme: str, userinfo: str) -> str:
    if not userinfo:
        return userinfo
    user, colon, _password = userinfo.partition(":")
    if colon:
        return f"{user}:{HIDDEN}"
    return userinfo if scheme.lower() in _CONTAINER_SCHEMES else HIDDEN


def _hidden_values(pairs: str) -> str:
    """`name=value&...` with every value hidden; a part without `=` is a value on its own."""
    return "&".join(
        (part.partition("=")[0] + "=" + HIDDEN if "=" in part else HIDDEN) if part else part
        for part in pairs.split("&")
    )
