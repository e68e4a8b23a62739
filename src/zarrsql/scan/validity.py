"""Whether an opened table still describes its store, checked where a scan starts and ends.

An opened table (`TableScan`) keeps what it read when it was opened: its arrays' metadata
(shape, chunk grid, dtype) and its decoded coordinates. It reads data chunks anew on every
scan. A scan that starts later (a relation fetched again, `docs/design.md`) or runs long (a
result streamed while another writer replaces the store) must never pair that kept state with
the chunks of another version of the store: old coordinates beside new values, or rows that
no longer exist read as fill (NULL).

The *baseline* of a table is the token of every key its kept state came from, as its node
tree was validated: the metadata documents of its arrays and of their groups, and the chunks
of the coordinates it decoded (`NodeTree.chunk_arrays`). It is taken once per opened table
(a few keys) and compared with the store's current tokens (one `stat` each on a local store):

- `refreshed(table)`, when a scan starts (an engine adapter's, or a core `Scan`'s): the
  table itself while nothing changed; opened again from the same store when something did.
  If the store only grew (an append: every array as it was but longer, every coordinate's
  values those it had, then more), the table still reads the rows it was bound to, which
  the store holds unchanged. Otherwise the rows are the store's as it is now, provided the
  columns are still those the engine bound; if they are not, or the table no longer opens,
  `StoreReadError` says to run the statement (or `open_scan`) again. Old coordinates are
  never paired with another version's chunks.
- `same_metadata(baseline, table)`, when a relation is fetched after other statements and
  its table, opened again, got another scan name: whether only coordinate chunks changed,
  so that the relation's own scan (through `refreshed`) can read the store as it is now.
- `ChangeGuard`, while a scan runs: a chunk found missing (`LocalStore.missing_seen`) is
  fill only while the table's documents are unchanged; if they changed, the store was
  rewritten under the scan, which raises instead of reading the rest as fill.

A remote store is not checked here: each token is a request (the second query on a store
pays no metadata cost), its tree is revalidated by the next statement, and a chunk missing
while its metadata changed is the store's own error (`ChangeWatching`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from zarrsql.errors import StoreReadError, ZarrSQLError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import ancestors
from zarrsql.plan.units import DimValues

if TYPE_CHECKING:
    from zarrsql.scan.contract import TableScan
    from zarrsql.store import Store

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Baseline:
    """The tokens a table's kept state was built from: `documents` (metadata) and
    `coordinates` (chunks of decoded coordinates), each (key, token) in the store's spelling."""

    store: Store
    documents: tuple[tuple[str, str | None], ...]
    coordinates: tuple[tuple[str, str | None], ...]

    @property
    def remote(self) -> bool:
        return bool(getattr(self.store, "remote", False))

    def changed(self, *, coordinates: bool = True) -> list[str]:
        """The keys whose token differs now (a `stat` each on a local store), in order."""
        pairs = self.documents + self.coordinates if coordinates else self.documents
        current = self.store.token_many([k for k, _ in pairs])
        return [k for (k, token), now in zip(pairs, current, strict=True) if token != now]


_lock = threading.Lock()
_baselines: weakref.WeakKeyDictionary[Any, Baseline] = weakref.WeakKeyDictionary()


def baseline(table: TableScan) -> Baseline:
    """The table's baseline, taken the first time it is asked for (the engine asks when it
    registers a table, in the statement that opened it) and the same ever after."""
    with _lock:
        hit = _baselines.get(table)
    if hit is not None:
        return hit
    tree = table.tree
    owners = dict(tree.chunk_arrays)
    nodes, coordinates = _arrays(table)
    wanted = nodes | {a for path in nodes for a in ancestors(path)} | {""}
    documents, chunks = [], []
    for key, token in list(tree.validators.items()):  # a snapshot: other scans may add to it
        owner = owners.get(key)
        if owner is not None:
            if owner in coordinates:
                chunks.append((key, token))
        elif not key.endswith("/") and key.rpartition("/")[0] in wanted:  # a document, not a listing
            documents.append((key, token))
    made = Baseline(table.store, tuple(documents), tuple(chunks))
    with _lock:
        return _baselines.setdefault(table, made)


def _arrays(table: TableScan) -> tuple[set[str], set[str]]:
    """The paths of the nodes the table reads, and of those whose decoded values it keeps."""
    t = table.table
    coordinates = {a.path for a in t.coords if a is not None}
    coordinates |= {aux.array.path for aux in t.aux} | {index.rows.path for index in t.indexes}
    nodes = set(coordinates)
    for dc in t.data:
        nodes.add(dc.array.path)
        nodes.update(getattr(dc.array, "parts", ()))  # an encoded variable's arrays
    return nodes, coordinates


def _columns_signature(table: TableScan) -> list[tuple[Any, ...]]:
    """What an engine bound of the table: each column's name, role and type. A string
    coordinate is a column of strings whatever its labels (`Labels` compare by identity);
    an ENUM's categories are part of its type (`Enum` compares by value)."""
    from zarrsql.decode.logical import Labels

    return [
        (c.name, c.dim, c.data, c.derived, c.aux, "labels" if isinstance(c.logical, Labels) else c.logical)
        for c in table.columns
    ]


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads a table that `refreshed` finds changed, as its error names it: the `call`,
    what was `made` from the table, the `binder` of its columns, and how to read `again`."""

    call: str
    made: str
    binder: str
    again: str


#: A relation of an SQL statement (the engine adapters).
STATEMENT = Reader(
    "read_zarr()", "relation was made", "statement", "run the statement again on the zarrsql.Connection (con.sql(...))"
)
#: A `Scan` of the core's entry point, planned by `open_scan`.
SCAN = Reader("open_scan()", "scan was planned", "scan", "call open_scan again")


def refreshed(table: TableScan, reader: Reader = STATEMENT) -> TableScan:
    """The table to scan now: `table` while its baseline holds (a local store; a remote one is
    not checked, see the module docstring), else the table opened again from the same store.

    Raises `StoreReadError` (worded for `reader`) when the table as it is now has other
    columns (or types) than the ones the engine bound, or no longer opens: a statement bound
    to the old columns cannot read it, and running it again binds the new ones."""
    base = baseline(table)
    if base.remote:
        return table
    changed = base.changed()
    if not changed:
        return table
    from zarrsql.scan.opening import open_table

    try:
        fresh = open_table(table.request, store=table.store)
    except ZarrSQLError as err:
        raise changed_error(table, changed[0], f"and its table no longer opens ({err})", reader) from None
    if _columns_signature(fresh) != _columns_signature(table):
        what = f"and its columns are no longer the ones the {reader.binder} was bound with"
        raise changed_error(table, changed[0], what, reader)
    return table if _appended_to(table, fresh) else fresh


def same_metadata(bound: Baseline, table: TableScan) -> bool:
    """Whether `table`, opened again, comes from the same metadata documents (each with the
    token it had) as the table `bound` was taken of, in a local store: then only the chunks
    of its coordinates can differ, so a scan bound to that table still has the columns and
    shape of `table`, and `refreshed` pairs the coordinates as they are now with the chunks.

    False for a remote store (`refreshed` does not check it, so its kept coordinates would
    meet the new chunks) and for any change of a document (an append, a new type or
    encoding): a relation bound before such a change is refused, not read."""
    if bound.remote:
        return False
    now = baseline(table)
    return now.store.url == bound.store.url and dict(now.documents) == dict(bound.documents)


def _appended_to(old: TableScan, new: TableScan) -> bool:
    """Whether `new` is `old` with rows appended (the module docstring): then every row of
    `old` is still in the store, as it was, and reading it with `old` is consistent."""
    a, b = old.table, new.table
    if not (old.rows_are_cells and new.rows_are_cells) or a.aux or b.aux or a.indexes or b.indexes:
        return False  # kept state beyond 1-D coordinates: not worth proving unchanged
    if len(a.shape) != len(b.shape) or any(m < n for n, m in zip(a.shape, b.shape, strict=True)):
        return False
    arrays_a = [*a.coords, *(dc.array for dc in a.data)]
    arrays_b = [*b.coords, *(dc.array for dc in b.data)]
    if len(arrays_a) != len(arrays_b):
        return False
    if any(_but_shape(x) != _but_shape(y) for x, y in zip(arrays_a, arrays_b, strict=True)):
        return False
    return all(_leading(x, y) for x, y in zip(old.dims, new.dims, strict=True))


def _but_shape(array: Any) -> str:
    """Everything an array's metadata says but its shape, as text (a NaN fill equals itself)."""
    if array is None:
        return ""
    if not isinstance(array, ArrayMeta):
        return f"encoded {id(array)}"  # an encoded variable: never the same as another
    return repr(replace(array, shape=()))


def _leading(old: DimValues, new: DimValues) -> bool:
    """Whether the old coordinate values (and NULLs) are the new ones' first values."""
    n = len(old.values)
    if len(new.values) < n:
        return False
    try:
        same = bool(np.array_equal(old.values, new.values[:n], equal_nan=old.values.dtype.kind in "fcmM"))
    except TypeError:  # values numpy cannot compare so
        return False
    if old.nulls is None or new.nulls is None:
        return same and old.nulls is None and (new.nulls is None or not np.asarray(new.nulls)[:n].any())
    return same and bool(np.array_equal(old.nulls, np.asarray(new.nulls)[:n]))


def changed_error(table: TableScan, key: str, what: str, reader: Reader = STATEMENT) -> StoreReadError:
    """The error of a store that changed since a statement (or a scan) bound it."""
    return StoreReadError(
        f"{reader.call}: the store changed since this {reader.made} ('{key}' of store "
        f"'{table.store.url}' was rewritten or removed), {what}; {reader.again} to read the store as it is now"
    )


class ChangeGuard:
    """Watches one running scan of a local store (see the module docstring): `check()` after
    each unit compares the table's documents with its baseline only when the store met a
    missing key since the last check, so an unchanged store costs a counter read per unit."""

    __slots__ = ("_base", "_seen", "_store", "_url")

    def __init__(self, table: TableScan) -> None:
        store = table.store
        self._store = store
        self._url = store.url
        seen = None if getattr(store, "remote", False) else getattr(store, "missing_seen", None)
        self._seen: int | None = seen
        self._base = baseline(table) if seen is not None else None

    def checked(self, results: Iterator[T]) -> Iterator[T]:
        """`results`, each handed over after `check()`; passed through untouched when there is
        nothing to watch (a remote store), so that the caller's `yield from` reaches the
        reader's own generator (closing it, or Ctrl-C thrown into it, acts there at once)."""
        if self._seen is None:
            return results
        return self._checking(results)

    def _checking(self, results: Iterator[T]) -> Generator[T, None, None]:
        try:
            for result in results:
                self.check()
                yield result
        finally:
            close = getattr(results, "close", None)  # at once, as `yield from` would
            if close is not None:
                close()

    def check(self) -> None:
        """Raise `StoreReadError` if a chunk read since the last check was missing because
        the store was rewritten (its documents changed); a missing chunk of an unchanged
        store is fill, as Zarr says."""
        if self._seen is None or self._base is None:
            return
        seen = self._store.missing_seen  # type: ignore[attr-defined]  # present when _seen is set
        if seen == self._seen:
            return
        self._seen = seen
        changed = self._base.changed(coordinates=False)
        if changed:
            raise StoreReadError(
                f"store '{self._url}' changed during the query: '{changed[0]}' is no longer the version "
                "the query planned with, and chunks it read were missing; run the query again"
            )
