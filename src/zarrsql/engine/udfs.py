"""The Python UDFs a zarrsql connection installs in DuckDB, and what they register.

DuckDB evaluates them while it binds a statement (facts 2 and 3 of the DuckDB notes): the scan
UDF opens the table a `read_zarr(...)` call names and answers the internal name its scan will
be registered under; the listing UDF does the same for `read_zarr_metadata/tables/views`; the
check and refuse UDFs fail a kept relation whose answer or pruned join went stale. None of them
may use the connection (no re-entrancy): each records what to register in the
`ConnectionState`, and the connection registers it before it runs the statement again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zarrsql.engine import interrupts
from zarrsql.engine import state as kept_scans
from zarrsql.engine.functions import METADATA_COLUMNS, TABLES_COLUMNS, VIEWS_COLUMNS
from zarrsql.engine.secrets import MountOptions
from zarrsql.engine.sqltext import quote_ident, quote_text
from zarrsql.errors import StoreReadError, ZarrSQLError
from zarrsql.store import using_opener
from zarrsql.store.opening import given_object

if TYPE_CHECKING:
    import pyarrow as pa

    from zarrsql.engine.secrets import CallOpener, SecretOpener
    from zarrsql.engine.state import ConnectionState
    from zarrsql.scan import TableScan
    from zarrsql.store.access import AccessPolicy


def scan_udf(state: ConnectionState) -> Callable[[str], str]:
    @interrupts.stopping(state.record)  # Ctrl-C while it opens the table (see `interrupts`)
    def scan_key(args: str) -> str:
        # DuckDB may call this several times while binding one statement, and again each time
        # a relation is fetched: answer once per statement.
        from zarrsql.engine import params

        policy = params.access_of(args)  # DuckDB's file-access settings as it binds the call now
        if policy is not None:
            state.call_access = (state.generation, policy)  # what the scan it names obeys (`stream_policy`)
        memo = state.scan_keys.get(args)
        if memo is not None and memo[0] == state.generation:
            return memo[1]
        from zarrsql.scan import open_table
        from zarrsql.scan.validity import baseline

        try:
            request = params.read_request(params.parse_args(args))
            scan = state.fresh.pop(repr(request), None)  # opened for this statement already
            if scan is not None and policy is not None:
                policy.check(request.store)  # opened before the statement ran: its rules now
            if scan is None:
                with using_opener(_opener(state, policy)):
                    scan = open_table(request)
        except ZarrSQLError as err:
            state.record(err)
            raise
        key = _kept_name(state, scan_name(scan), scan, memo)
        _check_wrapped(state, key, "read_zarr", memo)
        with state.lock:
            if key not in state.registered:
                state.pending[key] = registration(scan, state)
            if key not in state.bound_baselines:
                state.bound_baselines[key] = baseline(scan)
            state.scan_keys[args] = (state.generation, key)
            state.opened[args] = scan
        return key

    return scan_key


def _opener(state: ConnectionState, policy: AccessPolicy | None) -> SecretOpener | CallOpener | None:
    """The connection's store opener for a call DuckDB handed `policy` (engine/access.py)."""
    return state.opener.for_call(policy) if state.opener is not None else None


def _kept_name(state: ConnectionState, key: str, scan: TableScan, earlier: tuple[int, str] | None) -> str:
    """The scan name a relation fetched again after other statements reads (`earlier`: what
    the same call read when it was bound): its own when the store changed since only in its
    coordinates' values (`validity.same_metadata`), whose registered scan reads the store as
    it is now (`validity.refreshed`); else `key`, the name of the table as it is now, which
    only a statement can register (`_check_wrapped` says so)."""
    if state.depth or earlier is None or key == earlier[1] or key in state.registered:
        return key
    from zarrsql.scan.validity import same_metadata

    bound = state.bound_baselines.get(earlier[1])
    if earlier[1] in state.registered and bound is not None and same_metadata(bound, scan):
        return earlier[1]
    return key


#: What a checked statement is, for its errors: the constant answers of `answers.py` and the
#: bounds `topn.py` adds carry the same check.
_REWRITTEN = (
    "a statement zarrsql answered or bounded from the store as it was (count/min/max from the "
    "coordinates, or the first rows of ORDER BY ... LIMIT)"
)


def check_udf(state: ConnectionState) -> Callable[[str, list[str]], bool]:
    """The check a constant answer runs (`ConnectionState.answer_check`): true while the table it was
    computed from is unchanged, else an error. A constant has no scan to read the store anew,
    so a relation holding one fetched after the store changed must fail, not repeat it.

    A local store is checked at every run (a `stat` per document and coordinate chunk of the
    table); a remote one, whose tokens are requests, only when a later statement ran on the
    connection (until then a relation answers with what it bound, as a scan's does)."""

    @interrupts.stopping(state.record)  # a check reads the store
    def answer_is_current(token: str, settings: list[str]) -> bool:
        entry = state.checks.get(token)
        if entry is None:
            err: ZarrSQLError = ZarrSQLError(
                f"{_REWRITTEN}: the check of this relation's answer was let go (the relation or view it was "
                "made for is gone, and later statements came); run the statement again on the zarrsql.Connection "
                "(con.sql(...)), or for a lasting view write CREATE VIEW <name> AS <statement>, which zarrsql "
                "does not rewrite"
            )
        elif (moved := _moved_setting(entry[2], settings)) is not None:
            err = ZarrSQLError(
                f"{_REWRITTEN}: the session's {moved} changed since this relation was made, which changes "
                "its rows; run the statement again on the zarrsql.Connection (con.sql(...)) under the "
                "settings it should read"
            )
        else:
            made, base, _ = entry
            if base.remote and made == state.generation:
                return True
            changed = base.changed()
            if not changed:
                return True
            err = StoreReadError(
                f"{_REWRITTEN}: the store changed since this relation was made "
                f"('{changed[0]}' of store '{base.store.url}' was rewritten or removed); run the statement again "
                "on the zarrsql.Connection (con.sql(...)) to read the store as it is now"
            )
        state.record(err)
        raise err

    return answer_is_current


def _moved_setting(made: tuple[str, ...], now: list[str]) -> str | None:
    """The first of `CHECKED_SETTINGS` whose value differs from when the check was made, as
    `name (was 'x', now 'y')`; None when none did."""
    for name, was, is_now in zip(kept_scans.CHECKED_SETTINGS, made, now or (), strict=False):
        if was != str(is_now):
            return f"{name} (was {was!r}, now {is_now!r})"
    return None


def refuse_udf(state: ConnectionState) -> Callable[[str], bool]:
    """What a rewritten statement calls where it can no longer give the statement's rows (a
    join pruned with keys its other side no longer holds, `joins.py`): it fails with `message`,
    recorded so that the wrapper raises it as the ZarrSQLError it is."""

    def refuse(message: str) -> bool:
        err = ZarrSQLError(message)
        state.record(err)
        raise err

    return refuse


def scan_name(scan: TableScan) -> str:
    """The name a scan is registered under: a changed store or request gets a new one."""
    return "__zarrsql_" + scan.fingerprint()[:24]


def registration(scan: TableScan, state: ConnectionState) -> Callable[[], tuple[object, str | None]]:
    """What registers a scan when the statement is run again: its source and ENUM view."""
    return lambda: (_source(scan, state.record, _gate(state)), _enum_view(scan))


def _gate(state: ConnectionState) -> Callable[[TableScan], None]:
    """What a registered scan asks before DuckDB reads it: whether the connection's file-access
    rules still let its store be read. The scan is registered under a name any statement may
    name directly (`duckdb_views()` lists it), also after `SET enable_external_access = false`."""

    def admit(scan: TableScan) -> None:
        location = scan.request.store
        if not given_object(location):
            state.stream_policy().check(location)

    return admit


def _check_wrapped(state: ConnectionState, key: str, function: str, earlier: tuple[int, str] | None = None) -> None:
    """Refuse a zarrsql read run outside the wrapper's statements that needs a scan not
    registered yet: only the wrapper registers scans, so DuckDB would only say that an
    internal table does not exist. Outside them is a relation fetched again (`earlier`: what
    the same call read when the wrapper bound it) or the plain DuckDB connection (`con.duckdb`)."""
    if state.depth == 0 and key not in state.registered:
        if earlier is not None:
            why = (
                "the store changed since this relation was made (its metadata differs now)"
                if earlier[1] != key
                else f"its scan was let go after {kept_scans.MAX_REGISTERED} later reads on this connection"
            )
            raise ZarrSQLError(
                f"{function}(): {why}; run the statement again on the zarrsql.Connection (con.sql(...)) "
                "to read the store as it is now"
            )
        raise ZarrSQLError(
            f"{function}() was run on the plain DuckDB connection (con.duckdb), which cannot register "
            "zarrsql's scans; run the statement on the zarrsql.Connection instead (con.sql(...) or "
            "con.execute(...))"
        )


def _source(scan: TableScan, on_error: Callable[[ZarrSQLError], None], gate: Callable[[TableScan], None]) -> object:
    """What DuckDB registers for a scan (`engine.source`: pyarrow, loaded with the first scan)."""
    from zarrsql.engine.source import make_source

    return make_source(scan, on_error, gate)


def _enum_view(scan: TableScan) -> str | None:
    """The SELECT that gives categorical columns their ENUM type (Arrow dictionaries read as
    VARCHAR), over the raw scan registered as `{raw}`; None when there is nothing to cast."""
    from zarrsql.decode.logical import Enum

    if not any(isinstance(c.logical, Enum) for c in scan.columns):
        return None
    parts = []
    for c in scan.columns:
        if isinstance(c.logical, Enum):
            labels = ", ".join(quote_text(v) for v in c.logical.categories)
            parts.append(f"CAST({quote_ident(c.name)} AS ENUM({labels})) AS {quote_ident(c.name)}")
        else:
            parts.append(quote_ident(c.name))
    return "SELECT " + ", ".join(parts) + " FROM {raw}"


def list_rows(kind: str, args: dict[str, Any], mount_options: MountOptions | None = None) -> list[dict[str, Any]]:
    """The rows of a listing function (`metadata`, `tables`, `views`) for its arguments; the
    views' statements name `storage_options` by a name `mount_options` holds, never inline."""
    from zarrsql import catalog
    from zarrsql.engine import params
    from zarrsql.metadata.tree import cached_tree
    from zarrsql.store import open_store

    store = open_store(params.store_of(args), dict(params.storage_options_of(args)), params.store_choice_of(args))
    tree = cached_tree(store)
    sel = params.selection_of(args)
    if kind == "metadata":
        return catalog.list_metadata(tree, sel.group_path, sel.array_path)
    if kind == "tables":
        return catalog.list_tables(tree, sel.group_path, sel.array_path)
    names = args.get("view_names")
    if names is not None and not isinstance(names, dict):
        raise params.ParameterError("view_names := must be a MAP of table keys to view names")
    database = args.get("database")
    if not isinstance(database, str):
        raise params.ParameterError("read_zarr_views needs the database name as its second argument")
    given = dict(params.storage_options_of(args))
    name = (mount_options or MountOptions()).name_for(given) if given else None
    return catalog.view_statements(
        tree, params.store_of(args), database, names, params.store_choice_of(args), options_name=name
    )


LISTING_COLUMNS = {"metadata": METADATA_COLUMNS, "tables": TABLES_COLUMNS, "views": VIEWS_COLUMNS}


def listing_table(kind: str, rows: list[dict[str, Any]]) -> pa.Table:
    """A listing's rows as an Arrow table with the columns API.md gives it."""
    import pyarrow as pa

    types = {"VARCHAR": pa.string(), "VARCHAR[]": pa.list_(pa.string()), "UBIGINT[]": pa.list_(pa.uint64())}
    columns = LISTING_COLUMNS[kind]
    return pa.table(
        {name: pa.array([r[name] for r in rows], type=types[sql_type]) for name, sql_type in columns.items()}
    )


def list_udf(state: ConnectionState) -> Callable[[str, str], str]:
    @interrupts.stopping(state.record)  # a listing reads the store's metadata
    def listing(kind: str, args: str) -> str:
        # DuckDB calls this in every binding round of a statement: the store's metadata is
        # validated (a request per document on a store without consolidated metadata) once
        memo = state.list_keys.get((kind, args))
        if memo is not None and memo[0] == state.generation:
            return memo[1]
        from zarrsql.engine import params

        try:
            with using_opener(_opener(state, params.access_of(args))):
                rows = list_rows(kind, params.parse_args(args), state.mount_options)
        except ZarrSQLError as err:
            state.record(err)
            raise
        text = json.dumps(rows, sort_keys=True)
        key = "__zarrsql_list_" + hashlib.sha1(f"{kind}:{text}".encode()).hexdigest()[:24]
        _check_wrapped(state, key, f"read_zarr_{kind}", memo)
        with state.lock:
            if key not in state.registered:
                state.pending[key] = lambda: listing_table(kind, rows)
            state.list_keys[(kind, args)] = (state.generation, key)
        return key

    return listing
