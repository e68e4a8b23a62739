"""`zarrsql.Connection`: a DuckDB connection with the zarrsql SQL functions installed.

Every method it does not need to change is DuckDB's own (delegated). The ones that run SQL
(`sql`, `query`, `execute`, `from_query`, `table`, `view`) first hand a COPY to Zarr to the
writers (`_copy_to_zarr`), prepare the statement's text (`name = value` as `name :=` in
zarrsql calls, `SHOW TABLES` without internal names), then go through `_run`, which:
1. runs the statement from a frame that sees the caller's variables, so `FROM df` finds the
   user's DataFrame as on plain DuckDB (see `frames`);
2. on a catalog error, registers the scans that the scan UDF asked for during binding
   (and temporary views for `FROM 'x.zarr'` strings) and runs it again;
3. on any error raised by zarrsql code inside the statement, re-raises that `ZarrSQLError`
   (the DuckDB error keeps the same text for plain DuckDB callers); DuckDB's own refusals of
   a zarrsql argument are explained by `hints`.
Registration happens outside any running query, so DuckDB's no-re-entrancy rule holds.

`connect()` costs what `duckdb.connect()` costs: the UDFs and macros (and with them numpy,
pyarrow and the Zarr core) are installed by the first statement that may read a store
(`_install`), so a session of plain SQL, or the command line before its first query, never
loads them. This module imports the rest of the engine inside the functions that use it.

What DuckDB calls back while it binds (the UDFs, `udfs.py`), what they share with the
connection (`state.py`) and what a failed statement raises (`failures.py`) live apart, and
so do two halves of the class itself, as mixins: installing the functions (`installing.py`)
and registering the scans binding asked for (`registration.py`).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import functools
import importlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from zarrsql.engine import interrupts
from zarrsql.engine.failures import (
    arrow_unpushable,
    bounds_hint,
    gone_store,
    interrupted,
    refused_pushdown,
    statement_failure,
)
from zarrsql.engine.frames import call_from, caller_frame
from zarrsql.engine.functions import FUNCTIONS
from zarrsql.engine.installing import FunctionInstaller
from zarrsql.engine.registration import ScanRegistration
from zarrsql.engine.sqltext import (
    AGGREGATE_CALL,
    claimable,
    copy_to_zarr,
    named_equals,
    quote_ident,
    quote_text,
    show_tables,
    string_constants,
    table_info_names,
)
from zarrsql.engine.state import ConnectionState
from zarrsql.errors import (
    ParameterError,
    ZarrSQLError,
)
from zarrsql.store import is_url, using_opener

if TYPE_CHECKING:  # by name: inside Connection, `duckdb` is its property of that name
    import pyarrow as pa
    from duckdb import DuckDBPyRelation


T = TypeVar("T")
#: The prefix of every name zarrsql registers on a connection (scans, listings, actions).
INTERNAL_PREFIX = "__zarrsql_"
#: Rounds of "register what binding asked for, run again" before giving up: one per distinct
#: zarrsql read a statement binds in sequence (joins of many stores need several).
MAX_ROUNDS = 32


#: Connection methods that fetch the result of the last `execute`.
_FETCHES = frozenset(
    {
        "fetchall",
        "fetchone",
        "fetchmany",
        "fetchdf",
        "df",
        "fetchnumpy",
        "fetch_df",
        "fetch_df_chunk",
        "arrow",
        "fetch_arrow_table",
        "to_arrow_table",
        "fetch_record_batch",
        "pl",
        "torch",
        "tf",
    }
)


#: DuckDB's binder error for a statement nested deeper than `max_expression_depth`.
_TOO_DEEP = "Max expression depth limit"


def _zarr_url_in_from(text: str | None) -> bool:
    if not text:
        return False
    return any(is_url(t) and claimable(t) for t in string_constants(text, table_position=True))


class Connection(FunctionInstaller, ScanRegistration):
    """A DuckDB connection with zarrsql's SQL functions (see the module docstring)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection | concurrent.futures.Future[duckdb.DuckDBPyConnection], *,
        stored_views: bool = True,
    ) -> None:  # fmt: skip
        """`con` is a DuckDB connection, or one being opened (`connect`): the wrapper waits for
        it when it first needs it (`_con`)."""
        self._duck: duckdb.DuckDBPyConnection | None = None
        self._opening: concurrent.futures.Future[duckdb.DuckDBPyConnection] | None = None
        self._state = ConnectionState()
        self._install_lock = threading.Lock()
        self._installed = False  # the UDFs (and the scan machinery behind them)
        self._macros: set[str] = set()  # the zarrsql functions created on this connection
        self._macro_text: dict[str, str] | None = None
        interrupts.track(self)  # from this (the main) thread, which alone may take the wakeup fd
        _WRAPPERS.add(self)  # found again from a relation's DuckDB connection (`wrapper_of`)
        if isinstance(con, concurrent.futures.Future):
            self._opening = con
            return
        self._duck = _prepared_duckdb(con)
        if stored_views and self._stored_view_sql():  # a new in-memory database has none
            self._install()  # stored views may call read_zarr, whatever the statement's text
            self._claim_view_literals(quiet=True)

    @property
    def _con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, once it is open."""
        duck = self._duck
        if duck is None:
            opening = self._opening
            assert opening is not None, "a connection is given or being opened"
            duck = self._duck = opening.result()
            self._opening = None
        return duck

    @property
    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """The underlying DuckDB connection (with zarrsql's functions installed on it)."""
        self._install()
        return self._con

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._con, name)
        if name in _FETCHES:
            return self._translating(attr)
        return attr

    def _translating(self, fetch: Callable[..., T]) -> Callable[..., T]:
        """Fetching a result of `execute` streams the scan: its errors re-raise as themselves.

        Nothing is cleared first: the scan may already have failed (and recorded its error)
        while `execute` was still running, which cleared older errors when it began.
        """

        def run(*args: Any, **kwargs: Any) -> T:
            signals = interrupts.mark()
            try:
                return fetch(*args, **kwargs)
            except RuntimeError as err:
                raise interrupted(err) from err
            except duckdb.Error as err:
                failure = statement_failure(self._state, signals)
                if failure is not None:
                    raise failure from err
                raise

        return run

    def pl(self, *args: Any, **kwargs: Any) -> Any:
        """The last `execute`'s result as a polars DataFrame.

        DuckDB 2.x's connection has no `pl`; jupysql treats a connection as native DuckDB
        (`%sql` on it reads DataFrames by name, uses DuckDB's dialect) only when it has both
        `df` and `pl`, so the wrapper always offers it.
        """
        native = getattr(self._con, "pl", None)
        if native is not None:
            return self._translating(native)(*args, **kwargs)
        import polars

        return polars.from_arrow(self._translating(self._con.to_arrow_table)())

    def take_scan_error(self) -> ZarrSQLError | None:
        """The zarrsql error behind a failed read of a relation's stream, once (else None).

        A relation streamed with DuckDB's own methods (`to_arrow_reader`) fails with DuckDB's
        wrapping of the message; the command line reports the original error with this.
        """
        return self._state.take_error()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<zarrsql.Connection around {self._con!r}>"

    # -- running statements ------------------------------------------------------------
    def _run(self, text: str | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` (a DuckDB call on statement `text`) as the module
        docstring says, from a frame that sees the caller's variables (see `frames`)."""
        state = self._state
        self._install_for(text)
        if state.depth == 0:
            if not state.pinned:
                state.new_statement(self._in_views)
            self._finish_copy_result()
        if state.depth == 0 and text is not None:
            self._preregister(text)
        state.depth += 1
        frame = caller_frame()
        try:
            if state.depth == 1 and isinstance(text, str):
                self._bind_info_tables(text)
            return self._rounds(lambda: call_from(frame, fn, *args, **kwargs), text)
        finally:
            state.depth -= 1

    def _bind_info_tables(self, text: str) -> None:
        """Bind the tables the statement names as text to `pragma_table_info('<name>')`,
        `pragma_show('<name>')` or `PRAGMA table_info(<name>)`, registering the scans of a view
        over zarrsql's functions now. DuckDB binds such a view only when the result is read,
        after `_run` (a relation fetched later; every statement of the Flight SQL server), where
        no scan can be registered any more (`udfs._check_wrapped`): on a cursor, which shares
        the views but not the scans its parent registered, the statement failed. A name that
        binds to nothing is left for the statement itself to report."""
        lowered = text.lower()
        if "table_info" not in lowered and "pragma_show" not in lowered:
            return
        for name in dict.fromkeys(table_info_names(text)):
            probe = f"SELECT * FROM {'.'.join(quote_ident(part) for part in name)} LIMIT 0"
            with contextlib.suppress(duckdb.Error):  # no such table: the statement says so in its own words
                self._rounds(functools.partial(self._con.sql, probe), None)

    def _copy_to_zarr(self, query: Any) -> DuckDBPyRelation | None:
        """Run `COPY ... TO 'x.zarr'` / `(FORMAT zarr)` with zarrsql's writers (DuckDB alone would
        write CSV under that name) and return its one-row `Count`; None for any other statement.

        The writers sit above the engine (they run relations on this connection), so they are
        found by module name when such a statement runs, not imported by the engine."""
        if not isinstance(query, str) or copy_to_zarr(query) is None:
            return None
        self._state.copy_result = True  # DuckDB 2: finish an earlier execute() result, as a new
        self._finish_copy_result()  # execute() would, before the writer runs its queries
        rows = importlib.import_module("zarrsql.write.copy_statement").run_copy(self, query)
        return self._con.sql(f"SELECT {'NULL' if rows is None else int(rows)}::BIGINT AS Count")

    def _finish_copy_result(self) -> None:
        """DuckDB's own COPY leaves no open result to block the next query; the Count row of a
        COPY to Zarr is a query result, so it is finished (unread rows dropped) first."""
        if self._state.copy_result:
            self._state.copy_result = False
            complete = getattr(self._con, "complete", None)
            if complete is not None:
                complete()

    def _statement(self, query: Any) -> Any:
        """The statement as DuckDB should run it: `name = value` arguments of zarrsql's
        functions as `name := value`, and `SHOW TABLES` (`SHOW`, `DESCRIBE`) without zarrsql's
        internal names."""
        if not isinstance(query, str):
            return query
        body = show_tables(query)  # without comments and `;`, which would swallow the wrapper
        if body is not None:
            hidden = "".join(f" AND name != {quote_text(t)}" for t in sorted(self._state.literal_views))
            # The temporary views `FROM 'x.zarr'` creates are internal too (plain DuckDB lists none).
            return f"SELECT * FROM ({body}) WHERE NOT starts_with(name, {quote_text(INTERNAL_PREFIX)}){hidden}"
        return named_equals(query, FUNCTIONS)

    def _rewritten(self, query: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """The statement as written (`_statement`) and the one to run for `query`: a count
        answered from the plan (`answers.py`), or its groups computed by the scan
        (`grouped.py`), or else its joins on dimensions pruned (`joins.py`), or else its DOUBLE
        comparisons on float32 dimensions given FLOAT twins that prune (`widened.py`)."""
        statement = self._statement(query)
        self._install_for(statement)
        if not self._installed:  # nothing in it can read a store: no zarrsql table to answer from
            return statement, statement
        from zarrsql.engine import answers, joins, topn, widened

        has_args = bool(args or kwargs)
        answered = answers.rewrite(self, statement, has_args)
        if answered is statement and isinstance(statement, str) and AGGREGATE_CALL.search(statement):
            from zarrsql.engine import grouped  # numpy's reductions: only for a statement that aggregates

            answered = grouped.rewrite(self, statement, has_args)
        if answered is statement:
            answered = joins.rewrite(self, statement, has_args)
        if answered is statement:
            parameters = args[0] if args else kwargs.get("parameters", kwargs.get("params"))
            answered = widened.rewrite(self, statement, parameters)
        if answered is statement:  # `ORDER BY <dimension> LIMIT n` bounded to its first values
            answered = topn.rewrite(self, statement, has_args)
        return statement, answered

    def _run_rewritten(self, fn: Callable[..., T], written: Any, query: Any, *args: Any, **kwargs: Any) -> T:
        """Run `query`, the rewrite of the statement `written`; `written` itself when the rewrite
        nests deeper than the session's `max_expression_depth` lets DuckDB bind (a rewrite adds
        a few levels: IN lists, a bounding comparison, an answer's check), as the statement
        would have run without zarrsql's help."""
        try:
            return self._run(query, fn, query, *args, **kwargs)
        except (duckdb.BinderException, duckdb.ParserException) as err:  # 1.5 meets it while parsing too
            if query is written or _TOO_DEEP not in str(err):
                raise
        return self._run(written, fn, written, *args, **kwargs)

    def _rounds(self, action: Callable[[], T], text: str | None) -> T:
        for _ in range(MAX_ROUNDS):
            self._state.take_error()
            signals = interrupts.mark()
            try:
                return action()
            except RuntimeError as err:
                raise interrupted(err) from err
            except duckdb.Error as err:
                failure = statement_failure(self._state, signals)
                if failure is not None:
                    raise failure from err
                if isinstance(err, duckdb.CatalogException) and self._names_missing_function(err):
                    self._install()  # a view calls a zarrsql function the text did not name: run it again
                    continue
                hint = bounds_hint(err, text)
                if hint is not None:
                    raise hint from err
                # DuckDB reads `FROM 'http(s)://...'` itself (httpfs) before any catalog lookup,
                # so a Zarr URL there fails with another error: claim it all the same.
                if (isinstance(err, duckdb.CatalogException) or _zarr_url_in_from(text)) and self._register_missing(
                    text
                ):
                    continue
                gone = gone_store(err) or arrow_unpushable(err)  # a stored view's string; DuckDB 1.5's limits
                if gone is not None:
                    raise gone from err
                from zarrsql.engine import hints  # only for an error on its way to the caller

                hint = hints.explain(err, text)
                if hint is not None:
                    raise hint.with_traceback(None) from err
                raise
        # Each binding asked for scans the one before had not: an argument changes every time
        # DuckDB evaluates it (now(), current_timestamp, random()), so no scan ever matches.
        raise ParameterError(
            f"the statement asked for other zarr scans each of the {MAX_ROUNDS} times DuckDB bound it: an "
            "argument of read_zarr (or another zarrsql function) changes each time it is evaluated, such as "
            "now(), current_timestamp or random(); compute the value first and pass it as a literal or a "
            'parameter (con.sql("... as_of := ?", params=[value]))'
        )

    def _perform(self, kind: str, args: dict[str, Any], key: str) -> pa.Table | str:
        """Run an action of the SQL surface (outside any query) and return its rows, or (for
        an action that creates the view `key` itself) the name of what it registered."""
        from zarrsql.engine import actions, mounts, params, sampling

        try:
            database: Any = args.get("database")  # an SQL argument; mounts checks it is a name
            if kind in ("mount", "unmount") and self._state.catalog_locked is not None:
                raise ZarrSQLError(self._state.catalog_locked)
            if kind == "mount":
                with using_opener(self._state.opener):
                    return mounts.mount_table(
                        self,
                        params.store_of(args),
                        database,
                        view_names=args.get("view_names"),
                        existing=bool(args.get("existing")),
                        replace=bool(args.get("replace")),
                        storage_options=dict(params.storage_options_of(args)),
                        choice=params.store_choice_of(args),
                    )
            if kind == "sample":
                with using_opener(self._state.opener):
                    return sampling.sample_view(self, args, key)
            if kind == "unmount":
                return mounts.unmount_table(self, database)
            return actions.mounts_view(self, database, key)  # a view: current at each fetch
        except ZarrSQLError as err:
            self._state.record(err)
            raise

    # -- the DuckDB methods that run SQL ---------------------------------------------------
    def sql(self, query: str, *args: Any, **kwargs: Any) -> DuckDBPyRelation:
        self._preopen(query)
        if (copied := self._copy_to_zarr(query)) is not None:
            return copied
        return self._relation("sql", query, args, kwargs)

    def query(self, query: str, *args: Any, **kwargs: Any) -> DuckDBPyRelation:
        self._preopen(query)
        if (copied := self._copy_to_zarr(query)) is not None:
            return copied
        return self._relation("query", query, args, kwargs)

    def from_query(self, query: str, *args: Any, **kwargs: Any) -> DuckDBPyRelation:
        self._preopen(query)
        return self._relation("from_query", query, args, kwargs)

    def _relation(self, method: str, query: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> DuckDBPyRelation:
        """DuckDB's `method` (`sql`, `query`, `from_query`) on the statement as rewritten, or
        the relation a rewrite already bound for it; the scans it reads kept while it lives."""
        with self._statement_scope():
            written, query = self._rewritten(query, args, kwargs)
            relation = self._prepared(query)
            if relation is None:
                relation = self._run_rewritten(getattr(self._con, method), written, query, *args, **kwargs)
            if relation is not None:
                self._state.pin(relation, self._state.bound_now())
                parameters = args[0] if args else kwargs.get("params")
                refused = refused_pushdown(self._con, self._state, query, parameters, caller_frame())
                if refused is not None:  # DuckDB 1.5 would fail its first fetch with a raw error
                    raise refused
            return relation

    def execute(self, query: str, *args: Any, **kwargs: Any) -> Connection:
        self._preopen(query)
        if (copied := self._copy_to_zarr(query)) is not None:
            self._con.execute(copied.sql_query())
            self._state.copy_result = True
            return self
        with self._statement_scope():
            written, query = self._rewritten(query, args, kwargs)
            self._prepared(query)
            self._run_rewritten(self._con.execute, written, query, *args, **kwargs)
        return self

    @contextlib.contextmanager
    def _statement_scope(self) -> Iterator[None]:
        """One generation for a top-level statement, its rewrites' probes included: the scans
        a probe bound are the statement's, not opened (and their metadata validated) again."""
        state = self._state
        if state.depth or state.pinned:
            yield
            return
        state.new_statement(self._in_views)
        state.pinned = True
        try:
            yield
        finally:
            state.pinned = False

    def _in_views(self, tokens: Iterable[str]) -> set[str]:
        """The answer-check tokens among `tokens` that the SQL of some view holds: a view made
        from a rewritten relation (`con.sql(q).create_view(name)`) runs its check at each use.
        None found when the catalog cannot be read (a failed transaction, say)."""
        try:
            rows = self._con.execute("SELECT sql FROM duckdb_views() WHERE NOT internal").fetchall()
        except duckdb.Error:
            return set()
        texts = [str(row[0]) for row in rows]
        return {t for t in tokens if any(t in text for text in texts)}

    def _prepared(self, query: Any) -> DuckDBPyRelation | None:
        """The relation a rewrite bound for exactly this statement, as the last statement
        bound (`grouped._bound`): the statement need not be bound again. Taken once."""
        state = self._state
        prepared, state.prepared = state.prepared, None
        if prepared is None or prepared[0] != query or prepared[1] != state.generation:
            return None
        return prepared[2]

    def executemany(self, query: str, *args: Any, **kwargs: Any) -> Connection:
        query = self._statement(query)
        self._run(query, self._con.executemany, query, *args, **kwargs)
        return self

    def table(self, name: str) -> DuckDBPyRelation:
        return self._run(None, self._con.table, name)

    def view(self, name: str) -> DuckDBPyRelation:
        return self._run(None, self._con.view, name)

    def cursor(self) -> Connection:
        """A new connection to the same database, with zarrsql installed on it too; it reads
        the views this connection mounted with storage options (it sees those views too)."""
        made = Connection(self._con.cursor())
        made._state.mount_options.share_with(self._state.mount_options)
        return made

    def _lock_catalog(self, reason: str) -> None:
        """Refuse `zarr_mount` / `zarr_unmount` on this connection from now on, with `reason`
        as the error, however the statement spells or hides the call (a read-only server
        checks its statements' text too, but a string run by `query(...)` holds any SQL)."""
        self._state.catalog_locked = reason

    def close(self) -> None:
        if self._state.opener is not None:
            self._state.opener.close()
        self._con.close()


def connect(database: str = ":memory:", *, read_only: bool = False, config: dict[str, Any] | None = None) -> Connection:
    """Open DuckDB (in memory, or a database file) with zarrsql's SQL functions installed.

    A new in-memory database is opened on a thread of its own (DuckDB releases the GIL while
    it builds one, about 20 ms), and the connection waits for it when it first needs it: the
    first statement opens the stores it names meanwhile (`Connection._preopen`), over the
    network a round trip that would otherwise follow the connect. A database file, or any
    option, is opened here, so that its errors are `connect()`'s."""
    if database == ":memory:" and not read_only and not config:
        opening: concurrent.futures.Future[duckdb.DuckDBPyConnection] = concurrent.futures.Future()
        # not a daemon: the interpreter waits for it at exit (killed inside DuckDB, the process would abort)
        _OPENING.add(opening)
        threading.Thread(target=_open_in_memory, args=(opening,), name="zarrsql-connect").start()
        return Connection(opening, stored_views=False)
    con = duckdb.connect(database, read_only=read_only, config=config or {})
    return Connection(con, stored_views=database not in (":memory:", "") and not database.startswith(":memory:"))


def _open_in_memory(opening: concurrent.futures.Future[duckdb.DuckDBPyConnection]) -> None:
    try:
        opening.set_result(_prepared_duckdb(duckdb.connect(":memory:")))
    except BaseException as err:  # raised where the connection is first used
        opening.set_exception(err)


def _close_at_exit() -> None:
    """At exit, close the in-memory databases no statement ever used (still held by their
    futures): left to the interpreter's last clean-up, after other native libraries' (gRPC's)
    have shut down, DuckDB's destructor aborted the process.

    Live connections are closed too. A result left partly read (`fetchmany`, a reader
    given up after one batch) holds a stream of Python objects; DuckDB 1.5 released it during
    the interpreter's finalization, when its threads can no longer take the GIL, and the
    process aborted. Here, before finalization, the release is an ordinary one."""
    for opening in list(_OPENING):
        con = opening.result() if opening.exception() is None else None
        if con is not None:
            con.close()
    for wrapper in list(_WRAPPERS):
        with contextlib.suppress(Exception):  # closed already, or its database gone
            wrapper.close()


#: Every live zarrsql connection, for `wrapper_of`.
_WRAPPERS: weakref.WeakSet[Connection] = weakref.WeakSet()


def wrapper_of(con: duckdb.DuckDBPyConnection) -> Connection | None:
    """The live zarrsql connection around the DuckDB connection `con`, if any: a writer given
    a relation and no `connection=` runs on the one the relation came from (write/api.py)."""
    return next((wrapper for wrapper in list(_WRAPPERS) if wrapper._duck is con), None)


#: In-memory databases being opened, or opened and not yet taken by their connection.
_OPENING: weakref.WeakSet[concurrent.futures.Future[duckdb.DuckDBPyConnection]] = weakref.WeakSet()
atexit.register(_close_at_exit)


def _prepared_duckdb(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection as the wrapper uses it: DuckDB's progress bar off (it stays at 0 on
    zarrsql's Arrow scans; zarrsql shows its own, notebook/progress.py), Ctrl-C tracked."""
    con.execute("SET enable_progress_bar = false")
    interrupts.track(con)
    return con


def register(con: duckdb.DuckDBPyConnection) -> Connection:
    """Install zarrsql on a DuckDB connection you already have; use the returned wrapper.

    The functions are installed at once: the caller may go on using `con` itself, where
    `read_zarr` should then explain that only the wrapper registers scans."""
    if isinstance(con, Connection):
        return con
    if not isinstance(con, duckdb.DuckDBPyConnection):
        raise ParameterError(
            f"expected a zarrsql.Connection or a duckdb connection, got {type(con).__name__} {con!r:.60}: "
            "pass the connection object (con = zarrsql.connect()), not its name"
        )
    wrapped = Connection(con)
    wrapped._install()
    return wrapped
