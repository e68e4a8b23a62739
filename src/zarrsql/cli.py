"""The `zarrsql` command line: tables, metadata, query, demo and serve.

What a user can rely on:
- every failure is one message on standard error, `zarrsql: ...`, and a non-zero exit
  status: 1 for an error, 2 for a usage mistake (argparse), 130 when interrupted. No
  traceback, unless the environment sets ZARRSQL_TRACEBACK=1 (for bug reports);
- `--help` and `--version` answer without importing DuckDB or pyarrow: everything heavy is
  imported inside the commands, after the arguments are parsed;
- results go to the terminal as a bounded table (see `results`), or to a file whose format
  follows its extension.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from zarrsql.errors import ParameterError, SelectionError, StoreReadError, ZarrSQLError
from zarrsql.results import FORMATS, Output, output_of, run_sql

#: Set by Ctrl-C. DuckDB turns an interrupted query into its own error (a RuntimeError
#: "Query interrupted"); this tells such an error from any other without reading its text.
_INTERRUPTED = threading.Event()
#: The connections of the running command, for Ctrl-C to interrupt.
_RUNNING: list[Any] = []
#: Set while `query` mounts the store: it only reads metadata then, so Ctrl-C ends the process
#: at once (a metadata read waits out its request, which neither DuckDB nor a scan can stop).
_MOUNTING = threading.Event()

#: Database names DuckDB keeps for itself; a store named like one is mounted as `<name>_store`.
#: Names `USE` would take for a catalog or schema of DuckDB's own, not the mounted store.
_RESERVED = frozenset({"main", "memory", "system", "temp", "information_schema", "pg_catalog"})


class _Version(argparse.Action):
    """`--version`: zarrsql's and DuckDB's versions, read from package metadata (DuckDB is
    not imported for it)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the versions of zarrsql and DuckDB, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from zarrsql import __version__

        try:
            engine = version("duckdb")
        except PackageNotFoundError:
            engine = "not installed"
        print(f"zarrsql {__version__} (DuckDB {engine})")
        parser.exit()


def _max_rows(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def _output_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="table (default on the terminal), csv, json (one object per line) or parquet; "
        "with --output, taken from the file's extension when not given",
    )
    p.add_argument("--output", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument(
        "--max-rows",
        type=_max_rows,
        default=40,
        metavar="N",
        help="rows a table shows: the first and last N/2 of a longer result (default 40)",
    )
    return p


def _storage_option(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE, e.g. endpoint_url=http://localhost:9000, not {text!r}")
    return key.strip(), value


def _store_options() -> argparse.ArgumentParser:
    """The options of the store a command reads: those of a remote store's filesystem."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--storage-option",
        dest="storage_options",
        action="append",
        type=_storage_option,
        default=[],
        metavar="KEY=VALUE",
        help="an option of a remote store's filesystem, as storage_options := MAP {...} takes it "
        "(repeatable), e.g. endpoint_url=http://localhost:9000 or anon=false",
    )
    return p


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zarrsql", description="SQL over Zarr stores, with DuckDB.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)
    out, store = _output_options(), _store_options()
    for name, text in [("tables", "list the tables of a store"), ("metadata", "list the arrays of a store")]:
        s = sub.add_parser(name, help=text, parents=[out, store])
        s.add_argument("store")
    q = sub.add_parser(
        "query",
        help="run SQL with the store's named tables mounted (root tables unqualified)",
        parents=[out, store],
    )
    q.add_argument("store")
    q.add_argument("sql", help="the SQL (several statements: the last one's result is written); - reads standard input")
    d = sub.add_parser("demo", help="write a small example store and run example queries on it")
    d.add_argument("--path", default=None, help="where to write the store (default ./zarrsql-demo.zarr)")
    from zarrsql.server.command import add_parser as add_serve

    add_serve(sub, parents=[store])
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns the exit status (see the module docstring).

    The command runs in a worker thread while the main thread waits for it: Python delivers
    Ctrl-C to the main thread only, and DuckDB does not look for it while it computes the
    first batch of a streamed result. On Ctrl-C the main thread asks DuckDB to stop
    (`interrupt`), gives the command up to `GRACE_SECONDS` to finish, and ends the process
    with status 130 (`os._exit`: DuckDB's own threads may still be winding down, and
    finalizing the interpreter under them can abort the process).
    """
    args = _parser().parse_args(argv)
    if threading.current_thread() is not threading.main_thread():
        return _run(args)  # no signals here: run in this thread
    try:
        _read_sql_from_stdin(args)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    status: list[int] = []
    finished = threading.Event()

    def command() -> None:
        try:
            status.append(_run(args))
        finally:
            finished.set()

    threading.Thread(target=command, name="zarrsql-command", daemon=True).start()
    try:
        # an Event, not Thread.join: Python 3.11's join, interrupted by Ctrl-C, marks the
        # thread as ended while it still runs, and the grace below would not wait for it
        while not finished.wait(0.1):
            pass
    except KeyboardInterrupt:
        # a server serves until the process ends: there is nothing of it to wait for
        return _stop(finished, 0.0 if args.command == "serve" else GRACE_SECONDS)
    return status[0] if status else 1


def _read_sql_from_stdin(args: argparse.Namespace) -> None:
    """`query STORE -`: read the SQL in the main thread, before the command starts, so that
    Ctrl-C while it waits for input is only "interrupted" (a worker thread would go on
    waiting, or take the closed input for an empty statement)."""
    if getattr(args, "sql", None) == "-":
        args.stdin_sql = sys.stdin.read()


#: Seconds an interrupted command gets to stop before the process exits regardless.
GRACE_SECONDS = 5.0
#: Seconds between two requests to stop during the grace: a query or scan the command starts
#: after Ctrl-C (the scan after a metadata read that was under way) stops within this time.
STOP_AGAIN_SECONDS = 0.05


def _stop(finished: threading.Event, grace: float) -> NoReturn:
    """Ctrl-C: stop the command's queries and scans, give it `grace` seconds to wind down
    (`finished` is set when it has; none while it mounts, see `_MOUNTING`), then end the
    process with status 130. Nothing reaches standard output after the Ctrl-C."""
    _INTERRUPTED.set()
    _hush_stdout()
    deadline = time.monotonic() + (0.0 if _MOUNTING.is_set() else grace)
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: end at once
        while True:
            _interrupt_running()
            left = deadline - time.monotonic()
            if left <= 0 or finished.wait(min(left, STOP_AGAIN_SECONDS)):
                break
    demo = sys.modules.get("zarrsql.demo")
    if demo is not None:  # os._exit runs no `finally`: remove a half-written demo store here
        demo.discard_staging()
    _fail("interrupted", 130)
    sys.stderr.flush()
    os._exit(130)


def _interrupt_running() -> None:
    """Stop the command's queries (DuckDB's `interrupt`; `con.duckdb` would first install
    zarrsql's functions, which on DuckDB 1.5 waits for the running statement while holding
    the GIL its callbacks need) and every scan's queued units and remote fetches, which
    DuckDB's interrupt does not end."""
    for con in _RUNNING:
        with contextlib.suppress(Exception):  # closed already: nothing to stop
            con.interrupt()
    reader = sys.modules.get("zarrsql.scan.reader")  # not loaded: no scan has started
    if reader is not None:
        reader.cancel_all()


def _hush_stdout() -> None:
    """Write out what was printed before Ctrl-C, then point standard output at /dev/null: a
    result completed during the grace (it ended as the signal came) is never printed."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        _silence_stdout()


def _run(args: argparse.Namespace) -> int:
    """Run the command; every error becomes one message and a status (the CLI's edge)."""
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        return 130 if _INTERRUPTED.is_set() else _fail("interrupted", 130)
    except BrokenPipeError:  # `zarrsql query ... | head`: the reader left, nothing to report
        _silence_stdout()
        return 141
    except Exception as err:  # the edge: one message, no traceback
        if _INTERRUPTED.is_set() or _is_interrupt(err):
            return 130  # the main thread reports it
        if os.environ.get("ZARRSQL_TRACEBACK") == "1":
            raise
        return _fail(_message(err), 1)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from zarrsql import demo

        demo.run(args.path, stop=_INTERRUPTED)
        return 0
    if args.command == "serve":
        from zarrsql.server.command import run as serve

        return serve(args, _RUNNING)
    output = output_of(args.format, args.output, args.max_rows)
    _check_store(args.store)
    sql = _sql_text(args) if args.command == "query" else None
    options = dict(args.storage_options)
    import zarrsql

    with zarrsql.connect() as con:
        _RUNNING.append(con)
        con.execute(f"SET enable_progress_bar = {str(_duckdb_progress(output)).lower()}")
        if sql is None:
            function = "read_zarr_tables" if args.command == "tables" else "read_zarr_metadata"
            run_sql(con, f"SELECT * FROM {function}({_quote(args.store)}{_options_sql(options)})", output)
            note = _unreadable_note(con, args.store, options) if args.command == "tables" else None
            if note:
                print(f"zarrsql: note: {note}", file=sys.stderr)
        else:
            _query(con, args.store, options, sql, output)
    return 0


def _options_sql(options: dict[str, str]) -> str:
    """`, storage_options := MAP {...}` for a table function's arguments, or nothing."""
    if not options:
        return ""
    pairs = ", ".join(f"{_quote(k)}: {_quote(v)}" for k, v in options.items())
    return f", storage_options := MAP {{{pairs}}}"


def _duckdb_progress(output: Output) -> bool:
    """Whether DuckDB's own bar shows: progress on (`ZARRSQL_PROGRESS`), output that shows
    one, and zarrsql's bar not already showing on the terminal."""
    from zarrsql.settings import get_option

    return output.shows_progress() and bool(get_option("progress")) and not _own_progress()


def _unreadable_note(con: Any, store: str, options: dict[str, str]) -> str | None:
    """What to tell about arrays that give no table because they cannot be read (unreadable
    metadata, an unsupported type): `tables` lists none for them, `query` mounts none."""
    rows = con.sql(
        f"SELECT name FROM read_zarr_metadata({_quote(store)}{_options_sql(options)}) "
        "WHERE role = 'unsupported' ORDER BY name ASC"
    ).fetchall()
    if not rows:
        return None
    names = [r[0] for r in rows]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"{len(names)} array(s) cannot be read and give no table ({shown}); "
        f"`zarrsql metadata {store}` shows why in their attrs"
    )


def _own_progress() -> bool:
    """zarrsql's bar shows on standard error (a terminal): DuckDB's, stuck at 0 for Arrow
    scans, would only clutter standard output beside it."""
    from zarrsql.notebook.progress import display_kind, install
    from zarrsql.settings import get_option

    install()
    return bool(get_option("progress")) and display_kind() == "terminal"


def _query(con: Any, store: str, options: dict[str, str], sql: str, output: Output) -> None:
    """Mount what the store names, then run the SQL. Nothing is mounted for a store without
    named tables (an OME-Zarr pyramid's levels have no table names) or one that cannot be
    listed (plain HTTP without consolidated metadata): the SQL reads it with `read_zarr(...,
    array_path := ...)`, and only if it then misses a table is the reason told. The mounted
    views read with the storage options given; a `read_zarr(...)` in the SQL names its own."""
    import duckdb

    unlisted: StoreReadError | None = None
    _MOUNTING.set()
    try:
        mounted = _mount(con, store, options)
    except StoreReadError as err:
        from zarrsql.store import open_store

        if open_store(store, options).can_list:  # a listing that failed: the error itself
            raise
        mounted, unlisted = False, err
    finally:
        _MOUNTING.clear()
    if _INTERRUPTED.is_set():  # Ctrl-C came as the mount ended: the SQL does not start
        raise KeyboardInterrupt
    try:
        run_sql(con, sql, output)
    except duckdb.CatalogException as err:
        if mounted:
            raise
        raise SelectionError(f"{err}\n({_why_unmounted(con, store, options, unlisted)})") from err


def _why_unmounted(con: Any, store: str, options: dict[str, str], unlisted: StoreReadError | None) -> str:
    """Why `query` mounted nothing, and how the SQL reads the store instead."""
    if unlisted is not None:  # its own message says how: consolidate, or array_path :=
        return f"nothing was mounted: {_message(unlisted)}"
    note = _unreadable_note(con, store, options)
    return (
        f"store '{store}' has no named tables, so nothing was mounted: read its arrays with "
        f"read_zarr({_quote(store)}, array_path := '...'); list them with `zarrsql metadata`"
        + (f"; {note}" if note else "")
    )


def _mount(con: Any, store: str, options: dict[str, str]) -> bool:
    """Mount the store's named tables as a database named after it and make that the default.

    The statements of `read_zarr_views` run one by one, so that a table that cannot be read
    (an array of an unsupported type among its variables) is left out with a note on
    standard error, as `tables` notes it, and the SQL still runs: it may not need that table,
    or read the other arrays with `array_path :=` as the note says. (`zarrsql.mount` mounts
    all tables or none, as a program needs.) False when the store has no named tables.
    """
    import duckdb

    from zarrsql.engine.sqltext import quote_ident

    database = database_name(store)
    statements = con.sql(
        f"SELECT schema_name, view_name, sql FROM read_zarr_views({_quote(store)}, {_quote(database)}"
        f"{_options_sql(options)})"
    ).fetchall()
    if not any(view for _, view, _ in statements):
        return False
    for schema, view, sql in statements:
        if view is None:
            con.execute(sql)  # ATTACH, CREATE SCHEMA
            continue
        try:
            con.execute(sql)
        except (ZarrSQLError, duckdb.Error) as err:
            name = view if schema == "main" else f"{quote_ident(schema)}.{view}"
            print(f"zarrsql: note: table {name} is not mounted: {_message(err)}", file=sys.stderr)
    con.execute(f"USE {quote_ident(database)}")
    return True


def database_name(store: str) -> str:
    """The name `query` mounts a store as: its folder name without `.zarr`, as an identifier
    (`era5_like.zarr` → `era5_like`, `cells.ome.zarr` → `cells_ome`)."""
    stem = os.path.basename(store.rstrip("/")) or "store"
    stem = re.sub(r"\.zarr$", "", stem, flags=re.IGNORECASE)
    name = re.sub(r"\W", "_", stem) or "store"
    name = name if not name[0].isdigit() else f"s_{name}"
    return f"{name}_store" if name.lower() in _RESERVED else name


def _check_store(store: str) -> None:
    """Refuse a STORE that cannot name a store, in the command line's words: an empty one,
    or a URL of a scheme zarrsql does not read (which would be looked for as a local path)."""
    from zarrsql.store.base import URL_SCHEMES

    if not store.strip():
        raise ParameterError('STORE is empty: give the path or URL of a Zarr store, e.g. "data/era5.zarr"')
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]+)://", store)
    if scheme and not store.lower().startswith((*URL_SCHEMES, "file://")):
        supported = ", ".join(URL_SCHEMES)
        raise ParameterError(
            f"STORE '{store}': the URL scheme '{scheme.group(1)}://' is not supported; give a local path "
            f"(or file://) or a URL starting with one of {supported}"
        )


def _sql_text(args: argparse.Namespace) -> str:
    """The SQL of `query`: the argument, or standard input for `-` (read by `main` already
    when it runs the command in a thread)."""
    sql: str = args.sql
    read: str | None = getattr(args, "stdin_sql", None)
    text = sql if sql != "-" else read if read is not None else sys.stdin.read()
    if not text.strip():
        where = "standard input" if sql == "-" else "the command line"
        raise ParameterError(f'no SQL given on {where}: pass a statement, e.g. "SELECT * FROM t LIMIT 5"')
    return text


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _message(err: BaseException) -> str:
    if isinstance(err, (ZarrSQLError, OSError)) or _is_duckdb_error(err):
        return str(err).strip() or type(err).__name__
    return (
        f"internal error ({type(err).__name__}: {err}); this is a bug in zarrsql: please report it, "
        "with the output of the same command run with ZARRSQL_TRACEBACK=1"
    )


def _is_duckdb_error(err: BaseException) -> bool:
    duckdb = sys.modules.get("duckdb")  # loaded if the error came from it
    return duckdb is not None and isinstance(err, duckdb.Error)


def _is_interrupt(err: BaseException) -> bool:
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and isinstance(err, duckdb.InterruptException)


def _fail(message: str, status: int) -> int:
    print(f"zarrsql: {message}", file=sys.stderr)
    return status


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
