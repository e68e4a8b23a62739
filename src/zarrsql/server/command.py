"""The `zarrsql serve` command: its arguments, and running the server until interrupted.

Nothing heavy is imported here at module level: `zarrsql --help` builds this parser.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from zarrsql.errors import ParameterError

DEFAULT_PORT = 31337


def _mount_spec(text: str) -> tuple[str, str]:
    name, sep, store = text.partition("=")
    if not sep or not name.strip() or not store.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=STORE (e.g. era5=/data/era5.zarr), not {text!r}")
    return name.strip(), store.strip()


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
        return value

    return parse


def add_parser(sub: Any) -> None:
    """Add `serve` to the command line's subcommands."""
    s = sub.add_parser("serve", help="serve mounted stores over Arrow Flight SQL (ADBC, JDBC clients)")
    s.add_argument(
        "--mount",
        action="append",
        type=_mount_spec,
        default=[],
        metavar="NAME=STORE",
        help="mount a store as database NAME (repeatable)",
    )
    s.add_argument("--database", metavar="FILE", help="serve this DuckDB file (its views and mounts) instead of memory")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    auth = s.add_mutually_exclusive_group()
    auth.add_argument("--token-file", metavar="F", help="read the bearer token from F's first line")
    auth.add_argument("--no-auth", action="store_true", help="accept clients without a token (trusted networks only)")
    s.add_argument("--tls-cert", metavar="FILE", help="PEM certificate: serve over TLS (with --tls-key)")
    s.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    s.add_argument("--allow-writes", action="store_true", help="run statements other than queries too")
    s.add_argument(
        "--batch-rows",
        type=_positive(int),
        default=65_536,
        metavar="N",
        help="rows per record batch sent (default 65536)",
    )
    s.add_argument(
        "--query-timeout",
        type=_positive(float),
        default=300.0,
        metavar="SECONDS",
        help="interrupt a query running longer (default 300)",
    )


def run(args: argparse.Namespace, running: list[Any]) -> int:
    """Start the server, print where it listens (and a generated token, once), serve until
    interrupted. `running` gets the connection, for the command line's Ctrl-C handling."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ParameterError("TLS needs both --tls-cert FILE and --tls-key FILE")
    import zarrsql
    from zarrsql.server.auth import read_token
    from zarrsql.server.serving import serve
    from zarrsql.server.streams import Limits

    token = read_token(args.token_file) if args.token_file else None
    con = zarrsql.connect(args.database or ":memory:")
    running.append(con)
    for name, store in args.mount:
        zarrsql.mount(con, store, name)
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    limits = Limits(batch_rows=args.batch_rows, timeout=args.query_timeout)
    handle = serve(
        con,
        args.host,
        args.port,
        token=token,
        auth=not args.no_auth,
        tls=tls,
        allow_writes=args.allow_writes,
        limits=limits,
    )
    mode = "read-write" if args.allow_writes else "read-only"
    mounted = ", ".join(name for name, _ in args.mount) or "nothing mounted"
    print(f"zarrsql: serving Arrow Flight SQL at {handle.location} ({mode}; {mounted})", flush=True)
    if handle.token is None:
        print("zarrsql: authentication is off (--no-auth): anyone who can reach the port can query", flush=True)
    elif token is None:
        print(f"zarrsql: token (shown once): {handle.token}", flush=True)
        print("zarrsql: clients send the header 'authorization: Bearer <token>'", flush=True)
    sys.stdout.flush()
    handle.wait()
    return 0
