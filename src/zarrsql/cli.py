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
from collections.abc import Sequence
from typing import Any, NoReturn

from zarrsql.errors import ParameterError, SelectionError, ZarrSQLError
from zarrsql.results import FORMATS, Output, output_of, run_sql

#: Set by Ctrl-C. DuckDB turns an interrupted query into its own error (a RuntimeError
#: "Query interrupted"); this tells such an error from any other without reading its text.
_INTERRUPTED = threading.Event()
#: The connections of the running command, for Ctrl-C to interrupt.
_RUNNING: list[Any] = []

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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zarrsql", description="SQL over Zarr stores, with DuckDB.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)
    out = _output_options()
    for name, text in [("tables", "list the tables of a store"), ("metadata", "list the arrays of a store")]:
        s = sub.add_parser(name, help=text, parents=[out])
        s.add_argument("store")
    q = sub.add_parser(
        "query",
        help="run SQL with the store's named tables mounted (root tables unqualified)",
        parents=[out],
    )
    q.add_argument("store")
    q.add_argument("sql", help="the SQL (several statements: the last one's result is written); - reads standard input")
    d = sub.add_parser("demo", help="write a small example store and run example queries on it")
    d.add_argument("--path", default=None, help="where to write the store (default ./zarrsql-demo.zarr)")
    from zarrsql.server.command import add_parser as add_serve

    add_serve(sub)
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
    status: list[int] = []
    worker = threading.Thread(target=lambda: status.append(_run(args)), name="zarrsql-command", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        return _stop(worker)
    return status[0] if status else 1


#: Seconds an interrupted command gets to stop before the process exits regardless.
GRACE_SECONDS = 5.0


def _stop(worker: threading.Thread) -> NoReturn:
    _INTERRUPTED.set()
    for con in _RUNNING:
        with contextlib.suppress(Exception):  # closed already: nothing to stop
            con.duckdb.interrupt()
    worker.join(GRACE_SECONDS)
    _fail("interrupted", 130)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def _run(args: argparse.Namespace) -> int:
    """Run the command; every error becomes one message and a status (the CLI's edge)."""
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
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

        demo.run(args.path)
        return 0
    if args.command == "serve":
        from zarrsql.server.command import run as serve

        return serve(args, _RUNNING)
    output = output_of(args.format, args.output, args.max_rows)
    sql = _sql_text(args.sql) if args.command == "query" else None
    import zarrsql

    with zarrsql.connect() as con:
        _RUNNING.append(con)
        con.execute(f"SET enable_progress_bar = {str(_duckdb_progress(output)).lower()}")
        if sql is None:
            function = "read_zarr_tables" if args.command == "tables" else "read_zarr_metadata"
            run_sql(con, f"SELECT * FROM {function}({_quote(args.store)})", output)
            note = _unreadable_note(con, args.store) if args.command == "tables" else None
            if note:
                print(f"zarrsql: note: {note}", file=sys.stderr)
        else:
            _query(con, args.store, sql, output)
    return 0


def _duckdb_progress(output: Output) -> bool:
    """Whether DuckDB's own bar shows: progress on (`ZARRSQL_PROGRESS`), output that shows
    one, and zarrsql's bar not already showing on the terminal."""
    from zarrsql.settings import get_option

    return output.shows_progress() and bool(get_option("progress")) and not _own_progress()


def _unreadable_note(con: Any, store: str) -> str | None:
    """What to tell about arrays that give no table because they cannot be read (unreadable
    metadata, an unsupported type): `tables` lists none for them, `query` mounts none."""
    rows = con.sql(
        f"SELECT name FROM read_zarr_metadata({_quote(store)}) WHERE role = 'unsupported' ORDER BY name"
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


def _query(con: Any, store: str, sql: str, output: Output) -> None:
    """Mount what the store names (possibly nothing: an OME-Zarr pyramid's levels have no
    table names, and the SQL reads them with `array_path :=`), then run the SQL."""
    import duckdb

    mounted = _mount(con, store)
    try:
        run_sql(con, sql, output)
    except duckdb.CatalogException as err:
        if mounted:
            raise
        note = _unreadable_note(con, store)
        raise SelectionError(
            f"{err}\n(store '{store}' has no named tables, so nothing was mounted: read its arrays with "
            f"read_zarr({_quote(store)}, array_path := '...'); list them with `zarrsql metadata`"
            + (f"; {note})" if note else ")")
        ) from err


def _mount(con: Any, store: str) -> bool:
    """Mount the store's named tables as a database named after it and make that the default."""
    import zarrsql
    from zarrsql.engine.sqltext import quote_ident

    named = con.sql(f"SELECT count(*) FROM read_zarr_tables({_quote(store)}) WHERE table_name IS NOT NULL")
    if not named.fetchall()[0][0]:
        return False
    database = database_name(store)
    zarrsql.mount(con, store, database)
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


def _sql_text(sql: str) -> str:
    text = sys.stdin.read() if sql == "-" else sql
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
