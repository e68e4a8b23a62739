"""The `zarrsql serve` command: its arguments, and running the server until interrupted.

Nothing heavy is imported here at module level: `zarrsql --help` builds this parser.
"""

from __future__ import annotations

import argparse
import math
import os
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
    """A parser of a finite number above zero (`nan` and `inf` are refused: no timer can wait
    them, and a limit that is not a number limits nothing)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text!r}")
        return value

    return parse


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535 (0 picks a free one), not {text!r}")
    return value


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add `serve` to the command line's subcommands; `parents` gives `--storage-option`,
    which applies to every `--mount`."""
    s = sub.add_parser("serve", help="serve mounted stores over Arrow Flight SQL (ADBC, JDBC clients)", parents=parents)
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
    s.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)"
    )
    auth = s.add_mutually_exclusive_group()
    auth.add_argument("--token-file", metavar="F", help="read the bearer token from F's first line")
    auth.add_argument("--no-auth", action="store_true", help="accept clients without a token (trusted networks only)")
    s.add_argument("--tls-cert", metavar="FILE", help="PEM certificate: serve over TLS (with --tls-key)")
    s.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    s.add_argument("--allow-writes", action="store_true", help="run statements other than queries too")
    s.add_argument(
        "--safe",
        action="store_true",
        help="clients reach only the mounted stores: DuckDB's external access is turned off after mounting "
        "(no other file, URL or extension), the stores' folders and --allow-directory kept allowed",
    )
    s.add_argument(
        "--allow-directory",
        action="append",
        default=[],
        metavar="DIR",
        help="with --safe, a folder or URL prefix clients may read too (repeatable)",
    )
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
    s.add_argument(
        "--max-message-mib",
        type=_positive(int),
        default=16,
        metavar="MIB",
        help="largest message sent, in MiB: a result row larger is refused (default 16, ADBC's default limit)",
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
    # a read-only server attaches the file read-only (`_attach_read_only`); with writes it is opened as is
    con = zarrsql.connect(args.database if args.database and args.allow_writes else ":memory:")
    running.append(con)
    if args.database and not args.allow_writes:
        _attach_read_only(con, args.database)
    if args.storage_options and not args.mount:
        raise ParameterError("--storage-option applies to the stores of --mount NAME=STORE, and none is given")
    options = dict(args.storage_options) or None
    for name, store in args.mount:
        zarrsql.mount(con, store, name, storage_options=options)
    if args.allow_directory and not args.safe:
        raise ParameterError("--allow-directory keeps a folder open under --safe, which is not given; add --safe")
    if args.safe:
        lock_files(con, [store for _, store in args.mount], args.allow_directory)
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    limits = Limits(batch_rows=args.batch_rows, timeout=args.query_timeout, message_bytes=args.max_message_mib << 20)
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
    mode = ("read-write" if args.allow_writes else "read-only") + ("; safe" if args.safe else "")
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


def _attach_read_only(con: Any, database: str) -> None:
    """Attach the DuckDB file `database` read-only and make it the connection's (and so every
    client session's) current database, so nothing a client runs (a sequence's `nextval`, a
    checkpoint) can change the file. Attached beside an in-memory database rather than opened
    read-only, so that `--mount` can still attach stores (DuckDB attaches nothing to a
    read-only connection)."""
    from zarrsql.engine.sqltext import quote_ident

    listed = "SELECT database_name FROM duckdb_databases()"
    before = {name for (name,) in con.sql(listed).fetchall()}
    con.sql(f"ATTACH {_quote_string(database)} (READ_ONLY)")
    (name,) = {name for (name,) in con.sql(listed).fetchall()} - before
    con.sql(f"USE {quote_ident(name)}")


def _quote_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def lock_files(con: Any, stores: list[str], directories: list[str]) -> None:
    """Turn DuckDB's external access off on `con`'s database, keeping the mounted `stores`
    (a folder: its directory; a file, an HDF5 or reference file: its path) and the extra
    `directories` (folders or URL prefixes) allowed. DuckDB refuses to change either list
    afterwards, and zarrsql's readers obey the same settings (engine/access.py): a client can
    then read nothing else, with zarrsql's functions or DuckDB's."""
    from zarrsql.engine.sqltext import quote_text
    from zarrsql.store.access import comparable
    from zarrsql.store.base import is_url

    folders: list[str] = []
    files: list[str] = []
    for location in [*stores, *directories]:
        path = comparable(location)  # absolute (`file://` in any case, `~`), as the rules compare
        if is_url(path):
            folders.append(path if path.endswith("/") else path + "/")
        else:
            (files if os.path.isfile(path) else folders).append(path)
    con.execute(f"SET allowed_directories = [{', '.join(quote_text(f) for f in folders)}]")
    con.execute(f"SET allowed_paths = [{', '.join(quote_text(f) for f in files)}]")
    kept = con.sql("SELECT current_setting('allowed_directories')").fetchall()[0][0]
    lost = [f for f in folders if is_url(f) and f not in kept]
    if lost:
        raise ParameterError(
            f"--safe cannot keep {lost[0]} open: this DuckDB stored the URL as a local path (DuckDB 1.5 does so "
            "without its httpfs extension loaded); serve remote stores with --safe on DuckDB 2, or without --safe"
        )
    con.execute("SET enable_external_access = false")
