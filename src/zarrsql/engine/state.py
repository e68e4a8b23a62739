"""What a `zarrsql.Connection` keeps between the statements it runs and the UDFs DuckDB calls
while binding them: the scans registered and pending, the statement generation, the last
zarrsql error, the answer checks and the names live relations read (`ConnectionState`).

It lives apart from the connection so that the UDFs (`udfs.py`), the rewrites (answers, joins,
top-n, sampling) and the connection can all name it without importing each other.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from zarrsql import counters
from zarrsql.engine.secrets import MountOptions, SecretOpener
from zarrsql.engine.sqltext import quote_text
from zarrsql.errors import ZarrSQLError
from zarrsql.store.access import OPEN, AccessPolicy

if TYPE_CHECKING:
    import pyarrow as pa
    from duckdb import DuckDBPyConnection, DuckDBPyRelation

    from zarrsql.scan import TableScan
    from zarrsql.scan.validity import Baseline


#: Registered scans and listings kept per connection; older ones are dropped (and registered
#: again on demand), so a long session does not accumulate every store it ever read.
MAX_REGISTERED = 256  # read at each use: tests lower it


class ConnectionState:
    """Per-connection registry of scans and actions, and the last zarrsql error of a statement.

    `pending` maps a name that binding asked for to the function that makes the object to
    register under it (a scan source, or the result table of an action such as a mount).
    `generation` counts top-level statements, so that an action runs once per statement.

    DuckDB keeps the UDFs (and the scan sources registered) that hold this state in its C++
    catalog, where Python's garbage collector cannot see them: the state therefore refers to
    its `Connection` and the DuckDB connection only weakly, or a dropped connection would be
    part of a cycle never collected (its database and every scan it registered with it).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.registered: set[str] = set()
        # a result table, or (scan source, SELECT over it or None)
        self.pending: dict[str, Callable[[], pa.Table | str | tuple[object, str | None]]] = {}
        self.literal_views: set[str] = set()
        self.error: ZarrSQLError | None = None
        self.generation = 0
        self.depth = 0
        # the wrapper's `_perform`, weakly (see the class docstring)
        self.perform: weakref.WeakMethod[Callable[[str, dict[str, Any], str], Any]] | None = None
        self.scan_keys: dict[str, tuple[int, str]] = {}
        self.list_keys: dict[tuple[str, str], tuple[int, str]] = {}
        self.opener: SecretOpener | None = None  # s3:// stores read with DuckDB secrets
        self.mount_options = MountOptions()  # the storage options of this connection's mounts
        self.order: deque[tuple[str, str, bool]] = deque()
        self.copy_result = False  # execute() of a COPY to Zarr left its Count row to fetch
        #: Why zarr_mount / zarr_unmount are refused here (a read-only server's cursor), or None.
        self.catalog_locked: str | None = None
        self.grouped: deque[tuple[str, int]] = deque()  # results of GROUP BY computed by the scan (grouped.py)
        # registered names live relations read, with how many: not dropped while they live (`pin`)
        self.pinned_names: dict[str, int] = {}
        # (statement, generation, relation): a statement bound by a rewrite that then left it as it was
        self.prepared: tuple[str, int, DuckDBPyRelation] | None = None
        # the tables the scan UDF opened for this statement, by its arguments (`opened_scan`)
        self.opened: dict[str, TableScan] = {}
        # a statement's rewrites and the statement itself are one generation (`Connection._statement_scope`)
        self.pinned = False
        self.preregistered: set[str] = set()  # stores of `read_zarr('<store>')` calls (`_preregister`)
        self.preopened: dict[str, TableScan] = {}  # their tables, opened before DuckDB was needed
        self.fresh: dict[str, TableScan] = {}  # tables opened for this statement, by their request
        #: The UDF a constant answer's check calls (`answer_check`), and the baselines it checks
        #: by token, with the generation that made each: kept while a live relation reads one.
        self.check_function = ""
        self.checks: dict[str, tuple[int, Baseline, tuple[str, ...]]] = {}
        #: The baseline of the table each scan name was bound to, for a relation fetched again
        #: after other statements (`_kept_name`): kept while a live relation reads the name.
        self.bound_baselines: dict[str, Baseline] = {}
        #: The UDF a rewritten statement calls where its rows would be stale (`_refuse_udf`).
        self.refuse_function = ""
        #: DuckDB's file-access settings as the scan UDF last received them, with its generation
        #: (`stream_policy`), and whether the statement's text names those settings.
        self.call_access: tuple[int, AccessPolicy] | None = None
        self.access_text = False

    def stream_policy(self) -> AccessPolicy:
        """The file-access rules a registered scan obeys when DuckDB starts reading it: those the
        scan UDF received while this statement was bound, else (the scan named directly, a
        statement whose text may change the rules) the connection's, read now."""
        held = self.call_access
        if held is not None and held[0] == self.generation and not self.access_text:
            return held[1]
        return self.opener.policy() if self.opener is not None else OPEN

    def pin(self, relation: object, names: Iterable[str]) -> None:
        """Keep `names` registered while `relation` lives: DuckDB runs a relation again at each
        fetch, outside any statement of the wrapper, which then could not register them again."""
        names = list(dict.fromkeys(names))
        if not names:
            return
        for name in names:
            self.pinned_names[name] = self.pinned_names.get(name, 0) + 1
        weakref.finalize(relation, _unpin, self.pinned_names, names)

    def let_go(self, entries: deque[Any], over: Callable[[], bool], spared: set[str]) -> list[Any]:
        """Remove from `entries` (registrations, oldest first, each named by its first item) the
        oldest ones while `over()` holds, never one in `spared` or that a live relation reads
        (`pin`); return them, for the caller to unregister."""
        candidates = [e for e in entries if e[0] not in self.pinned_names and e[0] not in spared]
        gone = []
        while candidates and over():
            entry = candidates.pop(0)
            entries.remove(entry)
            gone.append(entry)
        return gone

    def bound_now(self) -> set[str]:
        """The names of the scans, listings and answer checks the current statement bound."""
        now = self.generation
        bound = {k for g, k in list(self.scan_keys.values()) + list(self.list_keys.values()) if g == now}
        return bound | {token for token, (g, _, _) in list(self.checks.items()) if g == now}

    def new_statement(self, in_views: Callable[[Iterable[str]], set[str]] | None = None) -> None:
        """A top-level statement begins: a new generation, whose scans are opened anew. The
        answer checks of earlier statements are kept while a live relation reads one (`pin`),
        while a view's text names one (`in_views`: the tokens among those given that some
        view's SQL holds; `con.sql(q).create_view(name)` lets the relation go at once), and
        for the newest `MAX_KEPT_CHECKS` others (DuckDB 1.5 keeps no text for a relation's
        view); the rest are let go."""
        counters.statement_started()  # the progress display: a display per statement
        self.generation += 1
        self.opened = {}
        self.fresh = {}
        if self.checks:
            self.checks = _kept_checks(self.checks, self.pinned_names, in_views)
        if self.bound_baselines:
            self.bound_baselines = {k: b for k, b in self.bound_baselines.items() if k in self.pinned_names}

    def answer_check(
        self, con: DuckDBPyConnection, table: TableScan, chunks: Sequence[tuple[str, str | None]] = ()
    ) -> str:
        """The SQL of the check of an answer computed from `table`'s kept state (its decoded
        coordinates, `answers.py`) and from `chunks` ((key, token) of data chunks it read,
        `topn_values.py`) under the session's settings now (`CHECKED_SETTINGS`, read on `con`):
        the rewritten statement calls `check_function` each time it runs, which fails once the
        table's store or one of those settings changed (`udfs.check_udf`)."""
        from zarrsql.scan.validity import baseline

        token = uuid.uuid4().hex[:16]
        base = baseline(table)
        if chunks:
            base = dataclasses.replace(base, coordinates=base.coordinates + tuple(chunks))
        settings = tuple(str(v) for v in con.execute(f"SELECT {SETTINGS_SQL}").fetchall()[0][0])
        self.checks[token] = (self.generation, base, settings)
        return f"{self.check_function}({quote_text(token)}, {SETTINGS_SQL})"

    def record(self, err: ZarrSQLError) -> None:
        with self.lock:
            self.error = err

    def take_error(self) -> ZarrSQLError | None:
        with self.lock:
            err, self.error = self.error, None
        return err


#: Session settings that change the rows a statement's text gives (its sort order, its time
#: zone and calendar, how text compares, what `/` means): an answer or bound computed under
#: them is checked against them at each run, as a relation or view runs again under the
#: settings of that moment.
CHECKED_SETTINGS = (
    "enable_external_access",  # turned off: the store may no longer be looked at, its answer neither
    "default_order",
    "default_null_order",
    "TimeZone",
    "Calendar",
    "default_collation",
    "integer_division",
)
SETTINGS_SQL = "[" + ", ".join(f"CAST(current_setting('{name}') AS VARCHAR)" for name in CHECKED_SETTINGS) + "]"

#: Answer checks kept for relations and views no longer pinned (see `new_statement`), and the
#: (key, token) pairs they may hold in all: a check of the hottest cells holds a pair per chunk.
MAX_KEPT_CHECKS = 16
MAX_KEPT_PAIRS = 200_000


def _kept_checks(
    checks: dict[str, tuple[int, Baseline, tuple[str, ...]]],
    pinned: dict[str, int],
    in_views: Callable[[Iterable[str]], set[str]] | None,
) -> dict[str, tuple[int, Baseline, tuple[str, ...]]]:
    """The checks `new_statement` keeps, in their order (the oldest first). The views' text is
    read only when a loose check would go (a query of the catalog, about a millisecond)."""
    loose = [t for t in checks if t not in pinned]
    spare: set[str] = set()
    pairs = 0
    for token in reversed(loose):  # the newest first
        base = checks[token][1]
        pairs += len(base.documents) + len(base.coordinates)
        if len(spare) >= MAX_KEPT_CHECKS or pairs > MAX_KEPT_PAIRS:
            break
        spare.add(token)
    going = [t for t in loose if t not in spare]
    if not going:
        return checks
    named = in_views(going) if in_views is not None else set()
    return {t: c for t, c in checks.items() if t in pinned or t in spare or t in named}


def _unpin(pinned: dict[str, int], names: list[str]) -> None:
    for name in names:
        left = pinned.pop(name, 1) - 1
        if left > 0:
            pinned[name] = left
