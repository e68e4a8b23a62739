"""`FlightSqlService`: the Flight RPC methods, answering Flight SQL commands on a zarrsql
connection.

The flow a client follows (ADBC, JDBC): GetFlightInfo with a command → a FlightInfo whose one
endpoint holds a ticket → DoGet of that ticket → the result as a stream of record batches.
Prepared statements are made and closed with DoAction; parameters arrive with DoPut. Query
results run at DoGet, streamed (see `streams`); a write (when allowed) runs once, at
GetFlightInfo or DoPut, and its small result waits in the ticket. Catalog commands are their
own tickets and are answered at DoGet from DuckDB's catalog (see `catalog`).

Every handler turns zarrsql's and DuckDB's errors into Flight errors carrying the message
(`_errors`): a refused statement is permission-denied, a bad statement or argument is
invalid-argument. The plain Flight calls no Flight SQL client makes (a path descriptor,
ListFlights, DoExchange) are refused with an error saying what to send instead.

Each session's cursor starts in the served connection's current database and schema (a
DuckDB cursor would start in the default one): `zarrsql serve --database FILE` attaches the
file beside an in-memory database and uses it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.flight as flight

from zarrsql.engine.sqltext import quote_ident
from zarrsql.errors import ParameterError, ZarrSQLError
from zarrsql.server import catalog, commands, sqlinfo
from zarrsql.server import protocol as pb
from zarrsql.server.policy import CATALOG_REFUSAL, Statement, StatementRefused, classify
from zarrsql.server.sessions import Registry, Session, Ticket, UnknownHandle
from zarrsql.server.streams import Limits, Streams, stream, user_error

T = TypeVar("T")
log = logging.getLogger(__name__)
_ACTIONS = [
    ("CreatePreparedStatement", "Create a prepared statement (ActionCreatePreparedStatementRequest)"),
    ("ClosePreparedStatement", "Close a prepared statement (ActionClosePreparedStatementRequest)"),
    ("CancelFlightInfo", "Cancel a running query (CancelFlightInfoRequest)"),
    ("CancelQuery", "Cancel a running query (ActionCancelQueryRequest, deprecated)"),
]


def _errors(method: Callable[..., T]) -> Callable[..., T]:
    """Translate the errors of a handler into Flight errors with zarrsql's message."""

    @functools.wraps(method)
    def run(self: FlightSqlService, *args: Any) -> T:
        try:
            return method(self, *args)
        except StatementRefused as err:
            raise flight.FlightUnauthorizedError(f"zarrsql server: {err}") from None
        except (UnknownHandle, pb.RequestError) as err:
            raise flight.FlightServerError(f"zarrsql server: {err}") from None
        except (duckdb.Error, ZarrSQLError) as err:
            raise user_error(err) from None
        except flight.FlightError:
            raise
        except Exception as err:  # the edge: a bug must not reach the client as a traceback
            log.exception("zarrsql server: %s failed", method.__name__)
            raise flight.FlightInternalError(
                f"zarrsql server: internal error ({type(err).__name__}: {err}); this is a bug in zarrsql, please "
                "report it with the server's log"
            ) from None

    return run


class FlightSqlService(flight.FlightServerBase):  # type: ignore[misc]
    """The server: `root` is the zarrsql connection whose cursors the sessions use."""

    def __init__(self, location: str, root: Any, *, allow_writes: bool, limits: Limits, **server_options: Any) -> None:
        super().__init__(location, **server_options)
        self._root = root
        self._cursor_lock = threading.Lock()
        self.allow_writes = allow_writes
        self.limits = limits
        self.registry = Registry(self._new_cursor, keep_state=allow_writes)
        self.streams = Streams()
        self._running: dict[bytes, tuple[threading.Event, Any]] = {}
        self._running_lock = threading.Lock()
        self._home = _home_of(root)
        self.closed = threading.Event()

    def _new_cursor(self) -> Any:
        # DuckDB installs zarrsql's functions in the shared catalog: one cursor made at a time.
        with self._cursor_lock:
            cursor = self._root.cursor()
        if self._home is not None:
            cursor.sql(self._home)
        if not self.allow_writes:
            cursor._lock_catalog(CATALOG_REFUSAL)
        return cursor

    def _session(self, context: Any) -> Session:
        return self.registry.session(context.peer())

    # -- GetFlightInfo / GetSchema ------------------------------------------------------
    @_errors
    def get_flight_info(self, context: Any, descriptor: flight.FlightDescriptor) -> flight.FlightInfo:
        command = _command_of(descriptor)
        schema, ticket = self._plan(context, command, descriptor.command)
        endpoint = flight.FlightEndpoint(ticket, [])
        return flight.FlightInfo(schema, descriptor, [endpoint], -1, -1)

    @_errors
    def get_schema(self, context: Any, descriptor: flight.FlightDescriptor) -> flight.SchemaResult:
        command = _command_of(descriptor)
        if isinstance(command, (commands.StatementQuery, commands.PreparedQuery)):
            statement, rows = self._statement_of(command)
            if not statement.query:
                return flight.SchemaResult(pa.schema([]))
            return flight.SchemaResult(self._describe(context, statement, rows) or pa.schema([]))
        return flight.SchemaResult(self._fixed_schema(command))

    def _plan(self, context: Any, command: commands.Command, raw: bytes) -> tuple[pa.Schema, bytes]:
        """(schema, ticket) for a command: statements get a one-use ticket, catalog commands
        are their own ticket."""
        if isinstance(command, (commands.StatementQuery, commands.PreparedQuery)):
            statement, rows = self._statement_of(command)
            _check_parameters(statement, rows)
            peer = context.peer()
            if statement.query:
                known = (
                    self.registry.prepared(command.handle).take_schema()
                    if isinstance(command, commands.PreparedQuery)
                    else None
                )
                schema = (known if not rows else None) or self._describe(context, statement, rows) or pa.schema([])
                return schema, commands.ticket(self.registry.issue(Ticket(peer, statement, rows)))
            result = self._write(context, statement, rows)
            return result.schema, commands.ticket(self.registry.issue(Ticket(peer, statement, rows, result)))
        return self._fixed_schema(command), raw

    def _statement_of(self, command: commands.Command) -> tuple[Statement, tuple[tuple[Any, ...], ...]]:
        if isinstance(command, (commands.StatementQuery, commands.StatementUpdate)):
            return classify(command.query, allow_writes=self.allow_writes), ()
        assert isinstance(command, (commands.PreparedQuery, commands.PreparedUpdate))
        prepared = self.registry.prepared(command.handle)
        return prepared.statement, tuple(prepared.rows)

    def _describe(self, context: Any, statement: Statement, rows: tuple[tuple[Any, ...], ...]) -> pa.Schema | None:
        """A query's result schema, by binding it with LIMIT 0 (None: parameters not bound yet).

        The names are the relation's own: DuckDB 2's LIMIT 0 renames duplicate names (`a`,
        `a` → `a`, `a_1`), which its result stream keeps (Arrow schemas allow duplicates), and
        a client checks that a stream's schema is the one GetFlightInfo announced."""
        if statement.parameters and not rows:
            return None
        _check_parameters(statement, rows)
        with self._session(context).lease(self.registry.spare_cursor) as cursor:
            try:
                rel = cursor.sql(statement.text, params=list(rows[0])) if rows else cursor.sql(statement.text)
                if rel is None:
                    return pa.schema([])
                schema = _arrow(rel.limit(0)).schema
                names = list(rel.columns)
                if len(names) != len(schema):
                    return schema
                fields = [field.with_name(name) for field, name in zip(schema, names, strict=True)]
                return pa.schema(fields, metadata=schema.metadata)
            except (duckdb.Error, ZarrSQLError) as err:
                raise user_error(err, cursor) from None

    def _fixed_schema(self, command: commands.Command) -> pa.Schema:
        if isinstance(command, commands.Catalogs):
            return catalog.CATALOGS_SCHEMA
        if isinstance(command, commands.DbSchemas):
            return catalog.DB_SCHEMAS_SCHEMA
        if isinstance(command, commands.Tables):
            return catalog.TABLES_WITH_SCHEMA if command.include_schema else catalog.TABLES_SCHEMA
        if isinstance(command, commands.TableTypes):
            return catalog.TABLE_TYPES_SCHEMA
        if isinstance(command, commands.SqlInfo):
            return sqlinfo.SCHEMA
        if isinstance(command, commands.Keys):
            return commands.keys_schema(command.kind)
        raise pb.RequestError(f"{type(command).__name__} is not a command GetFlightInfo takes")

    # -- DoGet --------------------------------------------------------------------------
    @_errors
    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.FlightDataStream:
        command = commands.parse(ticket.ticket)
        if not isinstance(command, commands.TicketQuery):
            return flight.RecordBatchStream(self._catalog_table(context, command))
        held = self.registry.redeem(command.handle)
        if held.result is not None:
            return flight.RecordBatchStream(held.result)
        session = self.registry.session(held.session)
        if _seeds_random(held.statement):
            session.keep_state()
        lease = _Lease(session, self.registry.spare_cursor)
        cancelled = threading.Event()
        with self._running_lock:
            self._running[command.handle] = (cancelled, lease)
        try:
            return stream(
                self.streams,
                lease,
                held.statement,
                held.rows,
                self.limits,
                cancelled,
                on_end=lambda: self._forget(command.handle),
            )
        except BaseException:
            self._forget(command.handle)
            raise

    def _forget(self, handle: bytes) -> None:
        with self._running_lock:
            self._running.pop(handle, None)

    def _catalog_table(self, context: Any, command: commands.Command) -> pa.Table:
        if isinstance(command, commands.SqlInfo):
            held = {**self.registry.counts(), "streams": self.streams.open}
            return sqlinfo.table(list(command.info), read_only=not self.allow_writes, held=held)
        if isinstance(command, commands.TableTypes):
            return catalog.table_types()
        if isinstance(command, commands.Keys):
            return commands.keys_schema(command.kind).empty_table()
        with self._session(context).lease(self.registry.spare_cursor) as cursor:
            if isinstance(command, commands.Catalogs):
                return catalog.catalogs(cursor)
            if isinstance(command, commands.DbSchemas):
                return catalog.db_schemas(cursor, command.catalog, command.pattern)
            if isinstance(command, commands.Tables):
                return catalog.tables(
                    cursor,
                    command.catalog,
                    command.schema_pattern,
                    command.table_pattern,
                    list(command.table_types),
                    include_schema=command.include_schema,
                )
        raise pb.RequestError(f"{type(command).__name__} is not a ticket this server issued")

    # -- DoPut: parameters and updates ----------------------------------------------------
    @_errors
    def do_put(self, context: Any, descriptor: flight.FlightDescriptor, reader: Any, writer: Any) -> None:
        command = _command_of(descriptor)
        rows = _parameter_rows(reader)
        if isinstance(command, commands.PreparedQuery):
            prepared = self.registry.prepared(command.handle)
            prepared.rows = rows
            # DoPutPreparedStatementResult: the same handle stays valid with the new rows
            writer.write(pa.py_buffer(pb.encode([(1, command.handle)])))
            return
        if isinstance(command, commands.StatementUpdate):
            statement, _ = self._statement_of(command)
        elif isinstance(command, commands.PreparedUpdate):
            statement = self.registry.prepared(command.handle).statement
        else:
            raise pb.RequestError(
                f"DoPut does not take {type(command).__name__}; it takes prepared statement "
                "parameters and updates (bulk ingestion is not supported)"
            )
        result = self._write(context, statement, tuple(rows))
        writer.write(pa.py_buffer(pb.encode([(1, _update_count(result))])))

    def _write(self, context: Any, statement: Statement, rows: tuple[tuple[Any, ...], ...]) -> pa.Table:
        """Run a statement that is not a query (writes are allowed, or classify refused it)
        once per parameter row; its result (DuckDB's `Count` summed over the rows).

        The DB-API `execute` + `fetchall` gives the result on every DuckDB version (1.5's
        `sql()` runs a write at once and returns no relation); a write's result is a few rows.
        """
        _check_parameters(statement, rows)
        result = pa.table({})
        with self._session(context).lease(self.registry.spare_cursor) as cursor:
            for params in rows or [()]:
                cursor.execute(statement.text, list(params)) if params else cursor.execute(statement.text)
                names = [d[0] for d in cursor.description or []]
                values = cursor.fetchall() if names else []
                table = pa.Table.from_pylist([dict(zip(names, v, strict=True)) for v in values]) if values else None
                result = _counted(result, table if table is not None else pa.table({n: [] for n in names}))
        return result

    # -- DoAction: prepared statements and cancellation ----------------------------------
    @_errors
    def do_action(self, context: Any, action: flight.Action) -> Iterator[flight.Result]:
        kind, body = action.type, action.body.to_pybytes()
        if kind == "CreatePreparedStatement":
            fields = commands.action_request(body, "ActionCreatePreparedStatementRequest")
            statement = classify(pb.text(fields, 1), allow_writes=self.allow_writes)
            dataset = self._describe(context, statement, ()) if statement.query else pa.schema([])
            handle = self.registry.prepare(statement, dataset if statement.query else None)
            parameters = _parameter_schema(statement.parameters)
            return iter([flight.Result(commands.prepared_result(handle, dataset, parameters))])
        if kind == "ClosePreparedStatement":
            fields = commands.action_request(body, "ActionClosePreparedStatementRequest")
            self.registry.close_prepared(pb.raw(fields, 1))
            return iter([])
        if kind in ("CancelFlightInfo", "CancelQuery"):
            return iter([flight.Result(self._cancel(kind, body))])
        raise pb.RequestError(f"the action {kind!r} is not supported (supported: {', '.join(a for a, _ in _ACTIONS)})")

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return list(_ACTIONS)

    def list_flights(self, context: Any, criteria: bytes) -> Iterator[flight.FlightInfo]:
        raise flight.FlightServerError(
            "zarrsql server: ListFlights is not supported: this is a Flight SQL server; send a Flight SQL "
            "command (CommandStatementQuery) with GetFlightInfo, and list tables with CommandGetTables"
        )

    def do_exchange(self, context: Any, descriptor: flight.FlightDescriptor, reader: Any, writer: Any) -> None:
        raise flight.FlightServerError(
            "zarrsql server: DoExchange is not supported: send a Flight SQL command (CommandStatementQuery) "
            "with GetFlightInfo and read its ticket with DoGet"
        )

    def _cancel(self, kind: str, body: bytes) -> bytes:
        """Cancel the query behind a FlightInfo's ticket; replies in the form `kind` asks for."""
        fields = (
            pb.decode(body) if kind == "CancelFlightInfo" else commands.action_request(body, "ActionCancelQueryRequest")
        )
        info = flight.FlightInfo.deserialize(pb.raw(fields, 1))
        status = pb.CANCEL_NOT_CANCELLABLE
        for endpoint in info.endpoints:
            command = commands.parse(endpoint.ticket.ticket)
            if isinstance(command, commands.TicketQuery) and self._interrupt(command.handle):
                status = pb.CANCEL_CANCELLED
        reply = pb.encode([(1, status)])
        return reply if kind == "CancelFlightInfo" else pb.pack("ActionCancelQueryResult", reply)

    def _interrupt(self, handle: bytes) -> bool:
        with contextlib.suppress(UnknownHandle):
            self.registry.redeem(handle)  # not fetched yet: it never runs
            return True
        with self._running_lock:
            running = self._running.get(handle)
        if running is None:
            return False
        cancelled, lease = running
        cancelled.set()
        lease.interrupt()
        return True

    def interrupt_all(self) -> None:
        """Cancel every running query (before a shutdown, which waits for running calls)."""
        with self._running_lock:
            running = list(self._running.values())
        for cancelled, lease in running:
            cancelled.set()
            lease.interrupt()

    def close(self) -> None:
        self.registry.close()
        self.closed.set()


class _Lease:
    """A stream's lease of a session's cursor (`streams.CursorLease`) that remembers the
    cursor while it holds it, so a cancel interrupts that cursor and, once the stream gave
    it back (ended or spilled), no other statement's."""

    def __init__(self, session: Session, spare: Callable[[], Any]) -> None:
        self._session, self._spare = session, spare
        self._manager: contextlib.AbstractContextManager[Any] | None = None
        self._lock = threading.Lock()
        self.free: Callable[[], None] | None = None
        self.cursor: Any = None

    def __enter__(self) -> Any:
        self._manager = self._session.lease(self._spare, free=self.free)
        cursor = self._manager.__enter__()
        with self._lock:
            self.cursor = cursor
        return cursor

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.cursor = None
        if self._manager is not None:
            self._manager.__exit__(None, None, None)

    def interrupt(self) -> None:
        with self._lock, contextlib.suppress(Exception):
            if self.cursor is not None:
                self.cursor.duckdb.interrupt()


def _seeds_random(statement: Statement) -> bool:
    """Whether the statement may call `setseed`: the one state a read-only server lets a
    session keep (its random sequence; temporary objects and SET are refused there). Judged
    on the whole text, strings included (`query('SELECT setseed(0.5)')`): a false match only
    keeps the session on its own cursor, which is always right."""
    return "setseed" in statement.text.lower()


def _command_of(descriptor: flight.FlightDescriptor) -> commands.Command:
    """The Flight SQL command a descriptor carries; a path descriptor names no command."""
    if descriptor.descriptor_type != flight.DescriptorType.CMD or descriptor.command is None:
        raise pb.RequestError(
            "path descriptors (FlightDescriptor.for_path) are not supported: send a Flight SQL command "
            "(FlightDescriptor.for_command with CommandStatementQuery, CommandGetTables, ...)"
        )
    return commands.parse(descriptor.command)


def _home_of(root: Any) -> str | None:
    """The USE statement that gives a new cursor the root connection's current database and
    schema (a cursor starts in DuckDB's default one; `zarrsql serve --database FILE` attaches
    the file and uses it), or None when a new cursor starts there already."""
    here = "SELECT current_database(), current_schema()"
    home = tuple(root.sql(here).fetchall()[0])
    probe = root.cursor()
    try:
        start = tuple(probe.sql(here).fetchall()[0])
    finally:
        probe.close()
    if home == start:
        return None
    return f"USE {quote_ident(home[0])}.{quote_ident(home[1])}"


def _arrow(rel: Any) -> pa.Table:
    """A relation's rows as a table (None, DuckDB 1.5's answer to a DDL statement: none)."""
    if rel is None:
        return pa.table({})
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def _parameter_rows(reader: Any) -> list[tuple[Any, ...]]:
    """The parameter rows a DoPut sent: each row's values in column order (positional)."""
    rows: list[tuple[Any, ...]] = []
    for chunk in reader:
        batch = chunk.data
        if batch is None or batch.num_columns == 0:
            continue
        columns = [c.to_pylist() for c in batch.columns]
        rows.extend(zip(*columns, strict=True))
    return rows


def _check_parameters(statement: Statement, rows: tuple[tuple[Any, ...], ...]) -> None:
    """Refuse a run whose values do not match the statement's parameters, before it runs:
    DuckDB's own errors differ by version and say neither count (1.5, given no values:
    "Unexpected prepared parameter. This type of statement can't be prepared!")."""
    takes = statement.parameters
    for index, given in enumerate([len(row) for row in rows] or [0]):
        if given != takes:
            where = f" (parameter row {index + 1} of {len(rows)})" if len(rows) > 1 else ""
            raise ParameterError(
                f"the statement takes {_counted_noun(takes, 'parameter')} (a '?' or '$1' in its SQL) and was "
                f"given {_counted_noun(given, 'value')}{where}; pass one value per parameter, e.g. "
                "cursor.execute(sql, (value, ...)) with ADBC's DB-API"
            )


def _counted_noun(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _parameter_schema(count: int) -> pa.Schema | None:
    """The bind parameters' schema: `count` fields of the null type, the protocol's
    placeholder for "any type" (DuckDB infers a parameter's type from its use)."""
    if not count:
        return None
    return pa.schema([pa.field(str(i + 1), pa.null()) for i in range(count)])


def _counted(previous: pa.Table, result: pa.Table) -> pa.Table:
    """Sum DuckDB's `Count` column over runs (one per parameter row); else the last result."""
    if previous.column_names == ["Count"] == result.column_names:
        total = sum(previous["Count"].to_pylist()) + sum(result["Count"].to_pylist())
        return pa.table({"Count": pa.array([total], result.schema.field("Count").type)})
    return result


def _update_count(result: pa.Table) -> int:
    """The rows a write changed: DuckDB's `Count`, else 0 (DDL changes no rows)."""
    if result.column_names == ["Count"] and result.num_rows:
        return int(sum(v or 0 for v in result["Count"].to_pylist()))
    return 0
