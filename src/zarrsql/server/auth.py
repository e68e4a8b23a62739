"""Bearer-token authentication: one token for the server, checked on every call.

Clients send `authorization: Bearer <token>` (ADBC: the database option
`adbc.flight.sql.authorization_header`; the Flight SQL JDBC driver: `token=<token>` in its
URL). The middleware compares in constant time and refuses a missing or wrong token with
Flight's unauthenticated error before any handler runs. A token is read from a file (its
first line, surrounding whitespace dropped) or generated (URL-safe, 32 random bytes).
"""

from __future__ import annotations

import hmac
import os
import secrets
from typing import Any

import pyarrow.flight as flight

from zarrsql.errors import ParameterError

#: Bytes of randomness in a generated token (256 bits; 43 URL-safe characters).
TOKEN_BYTES = 32
_HEADER = "authorization"


def new_token() -> str:
    """A fresh random token."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def read_token(path: str | os.PathLike[str]) -> str:
    """The token in `path`'s first line; a clear error when the file is missing or empty."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as err:
        raise ParameterError(
            f"cannot read the token file '{os.fspath(path)}' ({err.strerror}); give "
            "--token-file a readable file whose first line is the token"
        ) from err
    if not token:
        raise ParameterError(f"the token file '{os.fspath(path)}' is empty; write the token on its first line")
    return token


class BearerMiddleware(flight.ServerMiddleware):  # type: ignore[misc]
    """Nothing to do after the check: the factory refuses bad calls before they start."""


class BearerAuth(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    """Refuses every call whose `authorization` header is not `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._expected = f"Bearer {token}".encode()

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> BearerMiddleware:
        values = headers.get(_HEADER) or headers.get(_HEADER.title()) or []
        if not values:
            raise flight.FlightUnauthenticatedError(
                "zarrsql server: no token sent; send the header 'authorization: Bearer <token>' "
                "(ADBC: db_kwargs={'adbc.flight.sql.authorization_header': 'Bearer <token>'})"
            )
        if not any(hmac.compare_digest(v.encode(), self._expected) for v in values):
            raise flight.FlightUnauthenticatedError("zarrsql server: the token sent is not this server's token")
        return BearerMiddleware()
