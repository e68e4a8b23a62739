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
- `ChangeGuard`, while a scan of a local folder runs: after each unit is read, and before
  its rows are handed over, the baseline's documents and the coordinate chunks over the
  unit's region are compared again. A store rewritten under the scan (replaced, shrunk, a
  coordinate written anew) raises `StoreReadError` ("changed during the query"): the unit's
  chunks may be the new version's, and its rows would pair them with the old coordinates,
  or read chunks gone with the old version as fill. A token unchanged after the unit's reads
  means its key did not change before them (a rewritten file never gets its old token
  back), so the check covers every chunk the unit read. A store that only grew (an append)
  is read on: the rows the scan was planned with are all still there, as they were.

A store that reads the version a name pointed at when it opened (an Icechunk branch's tip,
`FollowsName`) holds that version's keys for good, but the name may move (a new commit):
`Baseline.changed()` then reports the name as changed too (one lookup of the name), and
`refreshed` opens the table again from the version the name points at now. A scan already
running keeps reading its version, which cannot change under it.

A remote store is not checked here: each token is a request (the second query on a store
pays no metadata cost), its tree is revalidated by the next statement, and a chunk missing
while its metadata changed is the store's own error (`ChangeWatching`).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from zarrsql.errors import StoreReadError, ZarrSQLError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import ancestors
from zarrsql.plan.units import DimValues, WorkUnit

if TYPE_CHECKING:
    from zarrsql.scan.contract import TableScan
    from zarrsql.store import Store


@runtime_checkable
class FollowsName(Protocol):
    """A store opened at the version a name pointed at (an Icechunk branch's tip): its keys
    are that version's for good, while the name may move on. A capability of the stores,
    declared where it is used (like those of store/base.py)."""

    def version_moved(self) -> str | None:
        """None while the name still points at the version the store reads; else what it
        points at now, as a phrase for errors (one lookup of the name)."""

    def reopened(self) -> Store:
        """The store of the version the name points at now, opened as this one was."""


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

    def changed(self) -> list[str]:
        """What differs now, in order: the name the store followed, if it moved
        (`FollowsName`), then the keys whose token differs (a `stat` each on a local store)."""
        pairs = self.documents + self.coordinates
        current = self.store.token_many([k for k, _ in pairs])
        keys = [k for (k, token), now in zip(pairs, current, strict=True) if token != now]
        moved = self.store.version_moved() if isinstance(self.store, FollowsName) else None
        return keys if moved is None else [moved, *keys]


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

    try:  # the version a followed name points at now (`FollowsName`), else the same store
        store = table.store.reopened() if isinstance(table.store, FollowsName) else table.store
        fresh = open_table(table.request, store=store)
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
    if old.positional or new.positional:  # positions lead longer positions, and nothing else
        return old.positional and new.positional
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
    """Watches one running scan of a local folder (see the module docstring): `check(unit)`,
    called after the unit is read and before its rows are handed over, compares the tokens
    of the table's documents and of the coordinate chunks the unit's rows pair with (a
    `stat` each) with the baseline. Units read on several threads may be checked at once.

    Only those chunks: a unit of a dense table pairs its data with the coordinate chunks over
    its region alone, so a coordinate chunk changed elsewhere cannot mix this unit's rows
    (the unit that reads it will find it changed). Checking every coordinate chunk per unit
    would cost a scan of n units with coordinates in n chunks (an appended time axis) n^2
    `stat`s. A unit of another kind (a sparse table's) is checked against the whole baseline.

    A store that only grew since the table was opened (an append, `_appended_to`) still holds
    every row the scan reads, as it was: the scan goes on, watching the store as it is now.

    A local folder is a store whose files another process can rewrite in place, and that
    counts the keys it found missing (`LocalStore.missing_seen`); a remote store checks its
    own reads (`ChangeWatching`), and a snapshot's keys never change."""

    __slots__ = ("_lock", "_table", "_watched")

    def __init__(self, table: TableScan) -> None:
        store = table.store
        self._table = table
        self._lock = threading.Lock()
        local = not getattr(store, "remote", False) and hasattr(store, "missing_seen")
        self._watched = _Watched.of(table) if local else None

    @property
    def watching(self) -> bool:
        """Whether `check` compares anything (a local folder's scan)."""
        return self._watched is not None

    def check(self, unit: Any = None) -> None:
        """Raise `StoreReadError` if the store was rewritten since the table was opened so that
        the rows of `unit` (just read) could pair the kept coordinates with another version's
        chunks, or read the chunks the old version had as fill."""
        watched = self._watched
        if watched is None:
            return
        changed = watched.changed(self._table, unit)
        if not changed:
            return
        with self._lock:
            now = self._watched
            if now is not None and now is not watched:  # another unit found the store grown meanwhile
                changed = now.changed(self._table, unit)
            if not changed or self._grew():
                return
        raise StoreReadError(
            f"store '{self._table.store.url}' changed during the query: '{changed[0]}' was rewritten or removed "
            "since the query planned with it, so its rows would mix two versions of the store; run the query again"
        )

    def _grew(self) -> bool:
        """Whether the store only grew since the scan's table was opened: then later units are
        checked against the store as it is now."""
        from zarrsql.scan.opening import open_table

        try:
            fresh = open_table(self._table.request, store=self._table.store)
        except ZarrSQLError:
            return False
        if not _appended_to(self._table, fresh):  # `_table` stays the one whose rows are read
            return False
        self._watched = _Watched.of(fresh)
        return True


#: A key and its token in the baseline.
Pair = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class _Watched:
    """What a `ChangeGuard` compares with the store: `fixed`, the keys every unit checks (the
    documents, and the chunks of kept arrays without a layout over the table's axes), and
    the kept arrays' `layouts`, whose chunks over a unit's region it checks (`every`: all
    of them, for a unit that is no region), each with its token in the baseline."""

    fixed: tuple[Pair, ...]
    layouts: tuple[_Layout, ...]
    every: tuple[Pair, ...]

    @classmethod
    def of(cls, table: TableScan) -> _Watched:
        """The table's, made the first time a scan of it asks (its keys are the baseline's)."""
        with _lock:
            hit = _watched.get(table)
        if hit is None:
            hit = cls._made(table)
            with _lock:
                _watched[table] = hit
        return hit

    @classmethod
    def _made(cls, table: TableScan) -> _Watched:
        base = baseline(table)
        tokens = dict(base.coordinates)
        layouts = []
        for array, axes in _kept_arrays(table):
            grid = tuple(-(-n // c) if c > 0 else 0 for n, c in zip(array.shape, array.chunks, strict=True))
            keys = [array.chunk_key(index) for index in itertools.product(*map(range, grid))]
            if all(k in tokens for k in keys):  # its chunks as the coordinate loaders name them
                layouts.append(_Layout(axes, array.chunks, grid, tuple((k, tokens[k]) for k in keys)))
        placed = {k for layout in layouts for k, _ in layout.pairs}
        fixed = (*base.documents, *((k, t) for k, t in base.coordinates if k not in placed))
        return cls(fixed, tuple(layouts), tuple(p for layout in layouts for p in layout.pairs))

    def changed(self, table: TableScan, unit: Any) -> list[str]:
        """The keys `unit`'s rows depend on whose token differs now, in order."""
        region = unit.region if isinstance(unit, WorkUnit) else None
        if region is None or len(region) != len(table.table.shape):
            pairs = self.fixed + self.every
        else:
            pairs = self.fixed + tuple(p for layout in self.layouts for p in layout.over(region))
        current = table.store.token_many([k for k, _ in pairs])
        return [k for (k, token), now in zip(pairs, current, strict=True) if token != now]


@dataclass(frozen=True, slots=True)
class _Layout:
    """The chunks of a kept array over some of the table's axes: `axes[i]` is the table axis
    of the array's axis `i` (None for an axis of its own, read whole: a character array's
    last), `pairs` its chunks in row-major order of its chunk `grid`."""

    axes: tuple[int | None, ...]
    chunks: tuple[int, ...]
    grid: tuple[int, ...]
    pairs: tuple[Pair, ...]

    def over(self, region: tuple[tuple[int, int], ...]) -> Sequence[Pair]:
        """The chunks that hold the array's values over `region` (table axes)."""
        ranges = []
        for axis, c, g in zip(self.axes, self.chunks, self.grid, strict=True):
            start, stop = (0, g * c) if axis is None else region[axis]
            ranges.append(range(start // c, min(g, -(-stop // c))) if c > 0 else range(0))
        if len(ranges) == 1:
            return self.pairs[ranges[0].start : ranges[0].stop]
        strides = [1] * len(self.grid)
        for i in range(len(self.grid) - 2, -1, -1):
            strides[i] = strides[i + 1] * self.grid[i + 1]
        return [
            self.pairs[sum(i * s for i, s in zip(index, strides, strict=True))] for index in itertools.product(*ranges)
        ]


_watched: weakref.WeakKeyDictionary[Any, _Watched] = weakref.WeakKeyDictionary()


def _kept_arrays(table: TableScan) -> list[tuple[ArrayMeta, tuple[int | None, ...]]]:
    """The kept arrays of a dense table whose chunks map onto its axes, with the table axis
    of each of their axes: each dimension's coordinate, and the auxiliary coordinates."""
    if not table.rows_are_cells:
        return []
    t = table.table
    found: list[tuple[ArrayMeta, tuple[int | None, ...]]] = [
        (a, (axis,)) for axis, a in enumerate(t.coords) if isinstance(a, ArrayMeta) and a.ndim == 1
    ]
    for aux in t.aux:
        extra = aux.array.ndim - len(aux.axes)
        if extra >= 0:
            found.append((aux.array, (*aux.axes, *([None] * extra))))
    return found
