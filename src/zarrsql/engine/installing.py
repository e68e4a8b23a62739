"""Installing zarrsql's SQL functions on a connection: the UDFs once, each macro when first needed.

`connect()` costs what `duckdb.connect()` costs because nothing is installed then: DuckDB's
`create_function` imports numpy, and the scan machinery behind the UDFs imports pyarrow and
the Zarr core. A statement that may read a store (`_may_read_zarr`) installs the functions its
text names first (`_named_functions`); a catalog error naming another one installs the rest.

A mixin of `Connection` (engine/connection.py), which holds the state these methods share.
"""

from __future__ import annotations

import importlib
import threading
import uuid
import weakref
from typing import TYPE_CHECKING, Any, cast

import duckdb

from zarrsql.engine import udfs
from zarrsql.engine.functions import FUNCTIONS, macro_statements
from zarrsql.engine.secrets import SecretOpener
from zarrsql.engine.sqltext import claimable, string_constants

if TYPE_CHECKING:
    import pyarrow as pa

    from zarrsql.engine.state import ConnectionState


def _may_read_zarr(text: Any) -> bool:
    """Whether a statement may call a zarrsql function or name a store (then zarrsql's
    functions are installed before it runs): anything but a string, a text mentioning zarr,
    or a claimable string in table position (an Icechunk folder needs no `.zarr` suffix)."""
    if text is None:  # `table(name)`, `view(name)`: a catalog error installs them if needed
        return False
    if not isinstance(text, str) or "zarr" in text.lower():
        return True
    if "'" not in text and '"' not in text:
        return False
    try:
        return any(claimable(t) for t in string_constants(text, table_position=True))
    except Exception:  # the tokenizer refused the text: DuckDB will say why when it runs
        return False


def _named_functions(text: Any) -> frozenset[str]:
    """The zarrsql functions a statement's text may call (every one for a statement object):
    those whose name it contains, and `read_zarr`, which a store named in `FROM` reads through."""
    if not isinstance(text, str):
        return FUNCTIONS
    lowered = text.lower()
    return frozenset(n for n in FUNCTIONS if n in lowered) | {"read_zarr"}


class FunctionInstaller:
    """The installing half of `Connection` (see the module docstring)."""

    if TYPE_CHECKING:  # given by Connection
        _state: ConnectionState
        _install_lock: threading.Lock
        _installed: bool
        _macros: set[str]
        _macro_text: dict[str, str] | None

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

        def _finish_copy_result(self) -> None: ...

        def _perform(self, kind: str, args: dict[str, Any], key: str) -> pa.Table | str: ...

    def _install(self, names: frozenset[str] | None = None) -> None:
        """Create the UDFs, once, and the macros of zarrsql's SQL functions in `names` (all
        when None) not created yet, when first needed.

        Deferred from `connect()`: DuckDB's `create_function` imports numpy, and the scan
        machinery behind the UDFs imports pyarrow and the Zarr core, so a connection that
        never reads a store (the command line's, a plain-SQL session) pays for none of it.
        `_run` installs before a statement that may read a store (`_may_read_zarr`) the
        functions its text names (`_named_functions`; each macro costs DuckDB about a
        millisecond to create, and a first query pays for all of them), and everything after
        a catalog error naming a zarrsql function (a view of an attached database calls
        read_zarr, a stored view another function) before running it again.
        """
        wanted = names or FUNCTIONS
        with self._install_lock:
            if self._installed and self._macros >= wanted:
                return
            self._finish_copy_result()  # DuckDB 2 creates no function while a result is open
            con, state = self._con, self._state
            if self._macro_text is None:
                # UDFs live in the database's catalog, shared with cursors; macros are per
                # connection. Each connection therefore gets UDFs of its own, and its macros
                # call those.
                from zarrsql.engine import actions

                suffix = uuid.uuid4().hex[:12]
                scan_udf, list_udf, action_udf = (f"__zarrsql_{k}_{suffix}" for k in ("scan", "list", "action"))
                state.check_function = f"__zarrsql_check_{suffix}"
                con.create_function(scan_udf, udfs.scan_udf(state), ["VARCHAR"], "VARCHAR", side_effects=False)
                con.create_function(
                    list_udf, udfs.list_udf(state), ["VARCHAR", "VARCHAR"], "VARCHAR", side_effects=False
                )
                con.create_function(
                    action_udf, actions.action_udf(state), ["VARCHAR", "VARCHAR"], "VARCHAR", side_effects=False
                )
                con.create_function(
                    state.check_function, udfs.check_udf(state), ["VARCHAR", "VARCHAR[]"], "BOOLEAN", side_effects=True
                )
                state.refuse_function = f"__zarrsql_refuse_{suffix}"
                con.create_function(
                    state.refuse_function, udfs.refuse_udf(state), ["VARCHAR"], "BOOLEAN", side_effects=True
                )
                state.perform = weakref.WeakMethod(self._perform)  # weakly: see `ConnectionState`
                state.opener = SecretOpener(cast("duckdb.DuckDBPyConnection", weakref.proxy(con)), state.mount_options)
                self._macro_text = macro_statements(scan_udf, list_udf, action_udf)
            missing = sorted(wanted - self._macros)
            if missing:
                con.execute(";\n".join(self._macro_text[n] for n in missing))
                self._macros |= set(missing)
            if not self._installed:
                # What the UDFs run, loaded here in the caller's thread rather than inside
                # DuckDB's callback while it binds; the statement about to run needs it anyway.
                importlib.import_module("zarrsql.engine.params")
                source = importlib.import_module("zarrsql.engine.source")
                if not source.HAS_SOURCES:  # DuckDB 1.5 scans a pyarrow dataset, which imports pandas:
                    # loaded here, a Ctrl-C during that import is the caller's plain KeyboardInterrupt,
                    # not one inside DuckDB's callback that leaves pandas half imported
                    importlib.import_module("zarrsql.engine.dataset")
                self._installed = True

    @property
    def _complete(self) -> bool:
        """Whether every zarrsql function is installed on this connection."""
        return self._installed and self._macros >= FUNCTIONS

    def _names_missing_function(self, err: duckdb.Error) -> bool:
        """Whether a catalog error names a zarrsql function this connection has not created."""
        if self._complete:
            return False
        message = str(err).lower()
        return any(n in message for n in FUNCTIONS - self._macros)

    def _install_for(self, text: Any) -> None:
        """Install the zarrsql functions `text` names before running it, if it may read a store."""
        if not self._complete and _may_read_zarr(text):
            self._install(_named_functions(text))
