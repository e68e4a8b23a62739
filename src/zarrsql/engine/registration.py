"""Registering the scans a statement reads on the DuckDB connection, between binding rounds.

DuckDB cannot call back into Python to create a table while it binds a statement, so the
scan UDF only records what binding asked for (`state.pending`); `Connection._rounds` then
registers it here (`_register_missing`: an Arrow source, or a dataset on DuckDB 1.5, and the
view over it) and runs the statement again. A statement's `read_zarr('<store>')` calls are
registered before its first bind (`_preregister`), and opened while the database itself is
still being opened (`_preopen`); `FROM 'x.zarr'` strings, in the statement or in views kept in
a database file, become temporary views (`_claim_literals`). Registrations past
`state.MAX_REGISTERED` are dropped oldest first (`_forget_oldest`).

A mixin of `Connection` (engine/connection.py), which holds the state these methods share.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

import duckdb

from zarrsql.engine import state as kept_scans
from zarrsql.engine import udfs
from zarrsql.engine.access import policy_of
from zarrsql.engine.sqltext import claimable, literal_stores, quote_ident, quote_text, string_constants
from zarrsql.errors import SelectionError, StoreNotFoundError, ZarrSQLError
from zarrsql.store import is_url, using_opener
from zarrsql.store.files import missing_error
from zarrsql.store.opening import detected_format

if TYPE_CHECKING:
    from collections.abc import Callable

    from zarrsql.engine.secrets import SecretOpener
    from zarrsql.engine.state import ConnectionState
    from zarrsql.scan import TableScan


#: A statement's text that may change DuckDB's file-access rules (engine/access.py).
_NAMES_ACCESS = re.compile(r"external_access|allowed_(?:directories|paths)", re.IGNORECASE)


def _literal_stores(text: str, seen: set[str]) -> list[str]:
    """The plain Zarr stores of `read_zarr('<store>')` calls in `text` not in `seen`; none
    for a statement with a CTE, which DuckDB may leave unbound (`Connection._preregister`)."""
    lowered = text.lower()
    if "read_zarr" not in lowered or "with" in lowered:
        return []
    # a plain Zarr store only: opening a reference set or an HDF5 file again reads it whole again
    return [t for t in dict.fromkeys(literal_stores(text)) if t not in seen and detected_format(t) == "zarr"]


def _open_literal(store: str, opener: SecretOpener | None) -> TableScan:
    """The table `read_zarr('<store>')` reads; its error is the statement's, raised as such."""
    from zarrsql.engine import params
    from zarrsql.scan import open_table

    try:
        with using_opener(opener):
            return open_table(params.read_request({"store": store}))
    except ZarrSQLError as err:
        raise err.with_traceback(None) from None


def _local_folder(text: str) -> bool:
    if is_url(text) and not text.lower().startswith("file://"):
        return False
    return os.path.isdir(os.path.expanduser(text.rstrip("/").removeprefix("file://")))


class ScanRegistration:
    """The registering half of `Connection` (see the module docstring)."""

    if TYPE_CHECKING:  # given by Connection
        _state: ConnectionState
        _installed: bool
        _duck: duckdb.DuckDBPyConnection | None

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

        def _run(self, text: str | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def _preregister(self, text: str) -> None:
        """Register the scans of the statement's `read_zarr('<store>')` calls before DuckDB
        binds it the first time: otherwise that bind fails on the scan's name, and the statement
        is bound twice (`_rounds`), about 4 ms of a first query. Only a call whose one argument
        is a string, once per store and connection (a later statement finds its scan there, or
        registers a changed one in a round). The scan is the statement's own, so an error
        opening it is the statement's error, raised as the statement would raise it (not met a
        second time); a statement with a CTE, which DuckDB may not bind at all, is left alone."""
        state = self._state
        if not self._installed or state.access_text:  # a text that may change the file-access rules first
            return
        stores = _literal_stores(text, state.preregistered)
        if not stores:
            return
        for store in stores:
            state.preregistered.add(store)
            scan = state.preopened.pop(store, None) or _open_literal(store, state.opener)
            state.fresh[repr(scan.request)] = scan  # the scan UDF takes it, not opening it again
            key = udfs.scan_name(scan)
            with state.lock:
                if key not in state.registered:
                    state.pending[key] = udfs.registration(scan, state)
        self._register_missing(None)

    def _preopen(self, text: Any) -> None:
        """Open the tables of the statement's `read_zarr('<store>')` calls (`_preregister`)
        before anything waits for DuckDB: a first statement does it while `connect()`'s
        database is still being opened, and a remote table's coordinates, which a `WHERE`
        needs before planning, start on their way at once. Local stores and http(s) URLs
        only: an object store may be read through DuckDB's secrets, which need the connection."""
        if not isinstance(text, str) or self._state.depth:
            return
        state = self._state
        state.access_text = _NAMES_ACCESS.search(text) is not None
        if state.access_text:
            return  # the text may change the file-access rules before it reads: nothing opened early
        stores = _literal_stores(text, state.preregistered | set(state.preopened))
        if stores and not self._access_open():
            return  # DuckDB's file-access rules apply: the statement opens its stores under them
        for store in stores:
            if not is_url(store) or store.lower().startswith(("http://", "https://", "file://")):
                scan = state.preopened[store] = _open_literal(store, None)
                if "where" in text.lower():  # a condition: its coordinates will be read first
                    from zarrsql.scan import begin_coordinates

                    begin_coordinates(scan, scan.columns)

    def _access_open(self) -> bool:
        """Whether DuckDB's external access is on (engine/access.py). A database still being
        opened by `connect()` has had no statement yet, so none has turned it off."""
        if self._duck is None:
            return True
        opener = self._state.opener
        policy = opener.policy() if opener is not None else policy_of(self._duck)
        return policy.external

    def _register_missing(self, text: str | None) -> bool:
        import pyarrow as pa

        from zarrsql.engine.actions import PendingAction  # an action: performed unless only bound
        from zarrsql.engine.source import HAS_SOURCES

        with self._state.lock:
            pending, self._state.pending = self._state.pending, {}
        for key, make in pending.items():
            made = make.result(self._con, text) if isinstance(make, PendingAction) else make()
            if isinstance(made, str):  # an action that made the view `key` over what it registered
                self._state.registered.add(key)
                self._state.order.append((key, made, True))
                continue
            obj, view = (made, None) if isinstance(made, pa.Table) else made
            name = key if view is None else key + "_raw"
            if isinstance(obj, pa.Table) or not HAS_SOURCES:
                self._con.register(name, obj)
            else:
                self._con._register_arrow_source(name, obj)
            if view is not None:
                self._con.execute(
                    f"CREATE OR REPLACE TEMP VIEW {quote_ident(key)} AS " + view.format(raw=quote_ident(name))
                )
            self._state.registered.add(key)
            self._state.order.append((key, name, view is not None))
        self._forget_oldest()
        if pending:
            return True
        texts = string_constants(text, table_position=True) if text else []
        if self._claim_literals(texts) or self._claim_view_literals():
            return True
        missing = [
            t
            for t in texts
            if t.rstrip("/").lower().endswith(".zarr") and not is_url(t) and not os.path.exists(os.path.expanduser(t))
        ]
        if missing:  # DuckDB would only say "table does not exist"
            raise missing_error(missing[0], os.path.expanduser(missing[0]))
        folders = [t for t in texts if t.rstrip("/").lower().endswith(".zarr") and _local_folder(t)]
        if folders:  # or "Did you mean pg_namespace?"
            raise StoreNotFoundError(
                f"'{folders[0]}' is a folder without zarr.json (Zarr v3) or .zgroup (Zarr v2), so it is not a "
                "Zarr store; point FROM at the store's root folder (the one holding zarr.json or .zgroup)"
            )
        return False

    def _from_hint(self, text: str) -> SelectionError | None:
        """For `FROM 'x.zarr'` on a store with several tables: the read_zarr call that picks one
        (FROM takes no parameters), or None when that is not why the store was refused."""
        from zarrsql import catalog
        from zarrsql.metadata.tree import cached_tree
        from zarrsql.store import open_store

        try:
            with using_opener(self._state.opener):
                tables = catalog.list_tables(cached_tree(open_store(text)))
        except ZarrSQLError:
            return None
        names = [r["table_name"] for r in tables if r["group_path"] == "/" and r["table_name"]]
        if len(names) < 2:
            return None
        return SelectionError(
            f"FROM '{text}' cannot pick a table: the store's root group '/' has {len(names)} tables "
            f"({', '.join(names)}), and FROM takes no parameters; read one with "
            f"SELECT * FROM read_zarr({quote_text(text)}, table_name := {quote_text(names[0])}) "
            "(read_zarr also selects by dims := [...], or one array with array_path := '...')"
        )

    def _forget_oldest(self) -> None:
        """Drop the oldest registrations past `state.MAX_REGISTERED`: each holds a scan (and its
        decoded coordinates) that a later statement can register again if it needs it."""
        state = self._state

        def over() -> bool:
            return len(state.order) > kept_scans.MAX_REGISTERED

        for key, name, has_view in state.let_go(state.order, over, state.bound_now()):
            with state.lock:
                state.registered.discard(key)
            if has_view:
                self._con.execute(f"DROP VIEW IF EXISTS {quote_ident(key)}")
            self._con.unregister(name)

    def _claim_literals(self, texts: list[str]) -> bool:
        new = [t for t in dict.fromkeys(texts) if t not in self._state.literal_views and claimable(t)]
        for t in new:
            self._state.literal_views.add(t)
            statement = f"CREATE OR REPLACE TEMP VIEW {quote_ident(t)} AS SELECT * FROM read_zarr({quote_text(t)})"
            try:
                self._run(statement, self._con.execute, statement)
            except SelectionError as err:
                self._state.literal_views.discard(t)
                raise (self._from_hint(t) or err).with_traceback(None) from err
            except BaseException:
                self._state.literal_views.discard(t)
                raise
        return bool(new)

    def _claim_view_literals(self, *, quiet: bool = False) -> bool:
        """Views stored in a database file may read `'x.zarr'` strings: claim those too.

        With `quiet` (when connecting), a store that cannot be claimed now is left for the
        query that uses it to report.
        """
        texts = [s for sql in self._stored_view_sql() for s in string_constants(sql, table_position=True)]
        texts = [s for s in texts if ".zarr" in s.lower()]
        if not quiet:
            return self._claim_literals(texts)
        claimed = False
        for t in texts:
            try:
                claimed |= self._claim_literals([t])
            except (ZarrSQLError, duckdb.Error):
                self._state.literal_views.discard(t)
        return claimed

    def _stored_view_sql(self) -> list[str]:
        """The SQL of the database's own views (a database file's, or made this session)."""
        rows = self._con.execute("SELECT sql FROM duckdb_views() WHERE NOT internal AND sql IS NOT NULL").fetchall()
        return [sql for (sql,) in rows]
