"""`serve()`: start the Flight SQL server on a connection; `ServerHandle`: the running server."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from zarrsql.errors import ParameterError
from zarrsql.server.streams import Limits

log = logging.getLogger(__name__)
#: Seconds `shutdown()` waits for running calls to end. A call ends at once when its query is
#: interrupted, but a stream whose client stopped reading is stuck in gRPC's send (flow
#: control) until that client reads or leaves, and pyarrow's server can wait for it forever:
#: after this long the shutdown goes on without it.
SHUTDOWN_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ServerHandle:
    """A running server: where it listens, its token (None without authentication), and
    `shutdown()`. Also a context manager that shuts the server down on exit."""

    location: str
    port: int
    token: str | None
    _service: Any = field(repr=False)

    def shutdown(self) -> None:
        """Stop accepting calls, end running ones, and close the sessions' cursors; returns
        within about `SHUTDOWN_SECONDS` even while a client holds a stream it does not read
        (that call ends when the client reads again or disconnects)."""
        self._service.interrupt_all()
        stopping = threading.Thread(target=self._service.shutdown, name="zarrsql-server-shutdown", daemon=True)
        stopping.start()
        stopping.join(SHUTDOWN_SECONDS)
        if stopping.is_alive():
            log.warning(
                "zarrsql server: %d result stream(s) still wait for their clients to read; shutting down without them",
                self._service.streams.open,
            )
        self._service.close()

    def wait(self) -> None:
        """Block until the server is shut down (from another thread)."""
        while not self._service.closed.wait(0.5):  # in steps: Ctrl-C reaches a waiting main thread
            pass

    @property
    def open_streams(self) -> int:
        """Result streams currently open (a finished or abandoned stream is closed)."""
        return int(self._service.streams.open)

    def state(self) -> dict[str, int]:
        """Counts of what the server holds: sessions, prepared statements, unfetched tickets
        and open streams."""
        return {**self._service.registry.counts(), "streams": self.open_streams}

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def serve(
    connection: Any,
    host: str = "127.0.0.1",
    port: int = 31337,
    *,
    token: str | None = None,
    auth: bool = True,
    tls: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None,
    allow_writes: bool = False,
    limits: Limits | None = None,
) -> ServerHandle:
    """Serve `connection` (a zarrsql Connection, or a DuckDB one) over Arrow Flight SQL.

    Returns once the server listens (port 0 picks a free port: read `handle.port`). With
    `auth` (the default) clients must send `authorization: Bearer <token>`; `token=None`
    generates one (`handle.token`). `tls=(certificate_file, key_file)` (PEM) serves over TLS.
    Read-only unless `allow_writes`. Each client session gets its own cursor.
    """
    import pyarrow as pa

    from zarrsql.engine.connection import register
    from zarrsql.server.auth import BearerAuth, new_token
    from zarrsql.server.service import FlightSqlService

    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ParameterError(f"port={port!r}: give a port number from 0 to 65535 (0 picks a free one)")
    root = register(connection)
    secret = (token or new_token()) if auth else None
    options: dict[str, Any] = {}
    if secret is not None:
        options["middleware"] = {"auth": BearerAuth(secret)}
    scheme = "grpc+tcp"
    if tls is not None:
        options["tls_certificates"] = [_certificate(*tls)]
        scheme = "grpc+tls"
    try:
        service = FlightSqlService(
            f"{scheme}://{host}:{port}", root, allow_writes=allow_writes, limits=limits or Limits(), **options
        )
    except pa.ArrowException as err:  # gRPC says only "did not start properly"; its log says why
        raise ParameterError(
            f"the Flight SQL server cannot listen on {host}:{port} ({err}): the port is in use, or the host is "
            "not an address of this machine; pick another port (0 picks a free one) or host"
        ) from err
    shown = f"[{host}]" if ":" in host else host
    return ServerHandle(f"{scheme}://{shown}:{service.port}", service.port, secret, service)


def _certificate(cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> Any:
    import pyarrow.flight as flight

    try:
        with open(cert, "rb") as c, open(key, "rb") as k:
            return flight.CertKeyPair(c.read(), k.read())
    except OSError as err:
        raise ParameterError(
            f"cannot read the TLS file '{err.filename}' ({err.strerror}); give a PEM certificate and its "
            "private key (--tls-cert FILE --tls-key FILE)"
        ) from err
