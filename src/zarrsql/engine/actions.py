"""The actions of the SQL surface: `zarr_mount`, `zarr_unmount`, `zarr_mounts`, `zarr_sample`.

An action runs SQL (it attaches a database, creates views), which DuckDB allows only outside a
running query. So the action UDF, which DuckDB calls while it binds the statement, records a
`PendingAction` and returns the name the result will be registered under; the connection
performs it between binding rounds (`Connection._register_missing`, `PendingAction.result`)
and runs the statement again. What callers rely on:

* Only a statement that runs its query performs a mount or an unmount. `EXPLAIN` (without
  ANALYZE), `DESCRIBE` / `SHOW` of a query and `PREPARE` only bind it: the call then answers
  with no rows and the columns it would have (`executes`). `EXPLAIN ANALYZE` runs the query,
  and so performs it; so does each `EXECUTE` of a prepared statement, which DuckDB 2 binds
  again. DuckDB 1.5 runs a prepared statement without binding it again (EXECUTE would
  answer what PREPARE bound and never mount), so there PREPARE of a mount or unmount is
  refused.
* A relation fetched again is bound again by DuckDB, outside any statement of the wrapper:
  it does not perform its action again. A `zarr_mount` or `zarr_unmount` relation answers
  with what its action did (the latest one of the same call while several such relations
  live), a `zarr_sample` relation with the points it matched (the values read anew), and
  `zarr_mounts()`, a view over DuckDB's catalog (`mount_views.mounts_view`), lists the mounts as
  they are at each fetch.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from zarrsql.engine import interrupts
from zarrsql.engine.duckdb_version import MAJOR
from zarrsql.errors import ParameterError, ZarrSQLError

if TYPE_CHECKING:
    import pyarrow as pa

#: The actions that change the catalog: a statement that only binds them must not perform them.
CHANGING = frozenset({"mount", "unmount"})
#: `DESCRIBE <query>` and `SHOW <query>` bind the query without running it; SUMMARIZE runs it.
_DESCRIBING = frozenset({"DESCRIBE", "SHOW"})


class ActionState(Protocol):
    """What the action UDF reads and records of the connection's state (`state.ConnectionState`)."""

    lock: threading.Lock
    depth: int
    generation: int
    registered: set[str]
    pending: dict[str, Callable[[], Any]]
    list_keys: dict[tuple[str, str], tuple[int, str]]
    pinned_names: dict[str, int]
    perform: weakref.WeakMethod[Callable[[str, dict[str, Any], str], Any]] | None

    def record(self, err: ZarrSQLError) -> None: ...


@dataclass(frozen=True)
class PendingAction:
    """An action that binding asked for, to perform under `key` once the binding failed."""

    kind: str
    args: dict[str, Any]
    key: str
    perform: weakref.WeakMethod[Callable[[str, dict[str, Any], str], Any]]

    def __call__(self) -> pa.Table | str:
        """Perform it on a connection that is still alive (it runs between the rounds of one
        of that connection's statements, so it always is)."""
        bound = self.perform()
        if bound is None:
            raise ZarrSQLError("the zarrsql.Connection that asked for this action was closed or dropped")
        return bound(self.kind, self.args, self.key)  # type: ignore[no-any-return]

    def result(self, duck: duckdb.DuckDBPyConnection, text: object) -> pa.Table | str:
        """What to register for the statement `text`: the action performed, or, for a mount or
        unmount that the statement only binds, no rows with the columns it would give."""
        if self.kind not in CHANGING or executes(duck, text, f"zarr_{self.kind}"):
            return self()
        if _prepares(duck, text) and MAJOR < 2:
            raise ParameterError(
                f"PREPARE of a statement calling zarr_{self.kind} is not supported on DuckDB "
                f"{duckdb.__version__}: it runs a prepared statement without binding it again, so EXECUTE "
                f"would never {self.kind}; run the statement itself (con.execute(...), with ? parameters "
                "if needed), or use DuckDB 2"
            )
        from zarrsql.engine import mounts

        schema = mounts.mounted_schema() if self.kind == "mount" else _mounts_schema()
        return schema.empty_table()


def _mounts_schema() -> pa.Schema:
    import pyarrow as pa

    from zarrsql.engine.mount_views import MOUNTS_COLUMNS

    return pa.schema([(name, pa.string()) for name in MOUNTS_COLUMNS])


def action_udf(state: ActionState) -> Callable[[str, str], str]:
    """The UDF every action macro calls with its kind and arguments (JSON): the name of the
    table (or view) holding its result, queued in `state.pending` until performed."""

    @interrupts.stopping(state.record)
    def action_key(kind: str, args: str) -> str:
        from zarrsql.engine import params

        digest = hashlib.sha1(f"{kind}:{args}".encode()).hexdigest()[:16]
        if state.depth == 0 and kind != "mounts":
            kept = _kept_result(state, kind, digest)
            if kept is not None:  # a relation fetched again: what its action gave
                return kept
        # zarr_mounts() is a view, right whenever it runs; the others answer once per statement
        key = f"__zarrsql_mounts_{digest}" if kind == "mounts" else f"__zarrsql_{kind}_{state.generation}_{digest}"
        if state.depth == 0 and key not in state.registered:
            raise ZarrSQLError(
                f"zarr_{kind}() was run outside the statements of a zarrsql.Connection (on the plain DuckDB "
                "connection, con.duckdb, or in a relation whose result is gone), which cannot run zarrsql's "
                "actions; run the statement on the zarrsql.Connection instead (con.sql(...) or con.execute(...))"
            )
        parsed = params.parse_args(args)
        with state.lock:
            state.list_keys[(f"zarr_{kind}", args)] = (state.generation, key)  # kept while a relation reads it
            if key not in state.registered and state.perform is not None:
                state.pending[key] = PendingAction(kind, parsed, key, state.perform)
        return key

    return action_key


def _kept_result(state: ActionState, kind: str, digest: str) -> str | None:
    """The registered result of the latest `kind` action with these arguments that a live
    relation reads, or None."""
    prefix, suffix = f"__zarrsql_{kind}_", f"_{digest}"
    kept = [
        name
        for name in list(state.pinned_names)
        if name.startswith(prefix) and name.endswith(suffix) and name in state.registered
    ]
    return max(kept, key=lambda name: int(name[len(prefix) : -len(suffix)]), default=None)


def executes(duck: duckdb.DuckDBPyConnection, text: object, function: str) -> bool:
    """Whether running `text` runs the query that calls `function`, rather than only binding it.

    The statements that name `function` decide (all of them when none does: a view calls it);
    a text DuckDB cannot split, or no text (a relation of a named view), runs."""
    if text is None:
        return True
    try:
        statements = duck.extract_statements(text) if isinstance(text, str) else [text]
    except duckdb.Error:
        return True
    naming = [s for s in statements if function in str(getattr(s, "query", "")).lower()]
    return any(_runs_query(duck, s) for s in naming or statements)


def _prepares(duck: duckdb.DuckDBPyConnection, text: object) -> bool:
    """Whether `text` is (or holds) a PREPARE statement."""
    try:
        statements = duck.extract_statements(text) if isinstance(text, str) else [text]
    except duckdb.Error:
        return False
    return any(getattr(s, "type", None) == duckdb.StatementType.PREPARE for s in statements)


def _runs_query(duck: duckdb.DuckDBPyConnection, statement: Any) -> bool:
    kind = getattr(statement, "type", None)
    query = str(getattr(statement, "query", ""))
    if kind == duckdb.StatementType.PREPARE:
        return False
    if kind == duckdb.StatementType.EXPLAIN:
        return _analyzes(query)
    if kind != duckdb.StatementType.SELECT:
        return True
    from zarrsql.engine import parsetree

    try:
        doc = parsetree.parsed(duck, query, keep=False)
    except duckdb.Error:
        return True
    node = ((doc.get("statements") or [{}])[0]).get("node") or {}
    source = node.get("from_table") or {}
    return not (source.get("type") == "SHOW_REF" and source.get("show_type") in _DESCRIBING)


def _analyzes(query: str) -> bool:
    """Whether an EXPLAIN statement runs its query: `EXPLAIN ANALYZE ...`, or `EXPLAIN (...)`
    with an ANALYZE option not set to false."""
    starts = [position for position, _ in duckdb.tokenize(query)]
    words = [query[a:b].strip().lower() for a, b in zip(starts, [*starts[1:], len(query)], strict=True)]
    words = [w.split()[0] if w and w[0].isalnum() else w[:1] for w in words]
    if len(words) < 2:
        return False
    if words[1] == "analyze":
        return True
    if words[1] != "(":
        return False
    options = words[2 : words.index(")") if ")" in words else len(words)]
    for i, word in enumerate(options):
        if word == "analyze":
            return options[i + 1 : i + 2] not in (["false"], ["0"], ["off"])
    return False


def mounts_view(con: Any, database: Any, name: str) -> str:
    """`zarr_mounts(database)` as the view `name` (`mount_views.mounts_view`), with the scalar
    function it calls created on `con`'s DuckDB connection the first time."""
    from zarrsql.engine import mount_views

    function = _PARTS_FUNCTIONS.get(con)
    if function is None:
        function = f"__zarrsql_mount_parts_{uuid.uuid4().hex[:12]}"
        con.duckdb.create_function(function, mount_views.mount_parts, ["VARCHAR"], "VARCHAR[]", side_effects=False)
        _PARTS_FUNCTIONS[con] = function
    return mount_views.mounts_view(con, database, name, function)


#: The name of each connection's `mount_parts` function, once created.
_PARTS_FUNCTIONS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
