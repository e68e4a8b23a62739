"""The keys a pruned join hands over, as SQL: the filter on the zarr side and the guard on
the other side (`joins` finds the joins and puts these in place).

`list_keys` runs the other side's `SELECT DISTINCT <keys>` once, and writes its keys as
literals of the other side's own type, so every comparison is the join's own: on one
dimension `dim IN (k1, ...)`, on several `(dim = k1 AND ...) OR ...`, or beyond
`MAX_TUPLE_KEYS` keys one IN list per dimension; beyond `MAX_KEYS` keys each dimension is
listed alone, as a list or a range (`_per_dimension_keys`). Keys of a type DuckDB would widen
the dimension to (DOUBLE on float32, TIMESTAMP_NS or TIMESTAMPTZ on TIMESTAMP), which would
keep the filter out of the scan, are written so that it reaches it (`_Written`). On DuckDB
1.5 a UBIGINT list holding a key past BIGINT's range is written as equalities or a range
instead (`_in_list`): 1.5 hands an IN list to the Arrow scan as Python integers that pyarrow
cannot read as one type.

The guard (`Keys.guarded`, put in place by `guarded_side` and `guarded_query`) makes a kept
relation safe: DuckDB runs a relation again at each fetch, and a view made from it
(`create_view`) at each read, with the keys of the first run frozen in. Each key column of
the other side becomes `CASE WHEN <the row's keys are listed ones, or NULL> THEN <column>
WHEN <fail> THEN <column> END`. The failing call (`ConnectionState.refuse_function`, which raises a
ZarrSQLError saying to run the statement again) is reached only by a row holding keys the
listing did not see (beyond `MAX_KEYS` keys, a value outside its dimension's list or
range): never when the statement runs at once, so the guard costs one membership test per
row of the other side and no second run of it. It sits on the key
columns themselves, not in a filter beside them, because DuckDB carries the pushed keys
across the join's equalities into the other side's scan, below any filter there, and would
drop the new rows unseen; through an expression calling a volatile function it pushes
nothing.
"""

from __future__ import annotations

import copy
import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrsql.engine import parsetree
from zarrsql.engine.answers import STORE_FAILURES, Raised
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.engine.sqltext import quote_ident, quote_text
from zarrsql.engine.time_bounds import BOUNDS

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection
    from zarrsql.scan import TableScan

#: The most distinct keys pushed as literals; a larger other side is not "small".
MAX_KEYS = 1000
#: The most keys of two or more dimensions pushed as an OR of tuples. DuckDB evaluates that OR
#: term by term on every row the scan returns (a self-join of 729 cells on three dimensions took
#: 3 s with it, 0.05 s unpruned), so more keys are pushed as one IN list per dimension: a
#: looser filter (every combination of the listed values), still one the join then narrows.
MAX_TUPLE_KEYS = 128


@dataclass(frozen=True, slots=True)
class Keys:
    """The pushed filter on the zarr side (`where`), and what the guard on the other side
    needs (module docstring): the condition its rows pass (`passes`), the key columns it is
    put on (`columns`, SQL expressions) and the call that fails (`refuse`), as SQL text."""

    where: str
    passes: str
    columns: tuple[str, ...]
    refuse: str

    def guarded(self, column: str) -> str:
        """The guard on `column`, its row's `passes` computed before as `PASSES`: the column's
        value, or the failure."""
        return f"CASE WHEN {PASSES} THEN {column} WHEN {self.refuse} THEN {column} END"


#: The column holding whether a row of the other side passes the guard, computed once per row.
PASSES = quote_ident("__zarrsql_passes")


def list_keys(conn: Connection, scan: TableScan, columns: list[str], keys_sql: str, others: list[str]) -> Keys:
    """The WHERE naming the distinct keys of `keys_sql` on the dimension columns among
    `columns` of the zarr table `scan` (declined when none is one), and
    the guard on the other side's key columns, `others` (SQL expressions, one per column)."""
    dims = dict(scan.filterable())
    use = [i for i, c in enumerate(columns) if c in dims]
    if not use:
        raise Decline("no join key is a dimension column")
    listed = f"SELECT * FROM ({keys_sql}) LIMIT {MAX_KEYS + 1}"
    types = [str(r[1]) for r in conn.sql("DESCRIBE " + listed).fetchall()]
    texts = ", ".join(f"CAST(k.{quote_ident(n)} AS VARCHAR)" for n in column_names(conn, listed))
    rows = conn.sql(f"SELECT {texts} FROM ({listed}) AS k").fetchall()
    if len(rows) > MAX_KEYS:
        return _per_dimension_keys(conn, scan, columns, keys_sql, others, use, types)
    listed_keys = {tuple(row[i] for i in use) for row in rows if all(row[i] is not None for i in use)}
    written = [_written(dims[columns[i]], types[i]) for i in use]
    exact = (tuple(w.exact(v) for w, v in zip(written, key, strict=True)) for key in listed_keys)
    keys = {k for k in exact if None not in k}  # a key no cell can equal (see `_Written`) is left out
    per_dimension = len(use) > 1 and len(keys) > MAX_TUPLE_KEYS
    exprs = [quote_ident(columns[i]) for i in use]
    kinds = [w.kind for w in written]
    where = _matching(exprs, kinds, keys, per_dimension, arrow_scan=not HAS_SOURCES)  # type: ignore[arg-type]
    twins = [
        _zoned_twin(conn, exprs[j], [key[j] for key in listed_keys])
        for j, w in enumerate(written)
        if w.zoned and listed_keys
    ]
    where = " AND ".join([f"({where})", *twins])
    guard = _listed([others[i] for i in use], [types[i] for i in use], listed_keys, per_dimension)
    nulls = " OR ".join(f"{others[i]} IS NULL" for i in use)  # a NULL key matches nothing
    refuse = f"{conn._state.refuse_function}({quote_text(_STALE)})"
    return Keys(where, f"{nulls} OR {guard}", tuple(dict.fromkeys(others[i] for i in use)), refuse)


def _per_dimension_keys(
    conn: Connection, scan: TableScan, columns: list[str], keys_sql: str, others: list[str], use: list[int],
    types: list[str],
) -> Keys:  # fmt: skip
    """`list_keys` for an other side with more than `MAX_KEYS` distinct keys: each dimension on
    its own, its distinct values as an IN list when there are at most `MAX_KEYS` of them, else
    the range from the least to the greatest (`_Axis`). Any combination of the values passes,
    a looser filter that the join then narrows, and it still prunes: a month of times joined
    to a two-year store reads that month. Listing runs the other side once more, and only here.
    Declined when no dimension gives a condition (every one a range holding NaN)."""
    dims = dict(scan.filterable())
    names = column_names(conn, keys_sql)
    items = []
    for i in use:
        k = f"k.{quote_ident(names[i])}"
        small = f"count(DISTINCT {k}) <= {MAX_KEYS}"
        numbers = f"FILTER (WHERE NOT isnan({k}))" if types[i] in ("FLOAT", "DOUBLE") else ""
        items += [
            f"CASE WHEN {small} THEN CAST(list(DISTINCT {k}) FILTER (WHERE {k} IS NOT NULL) AS VARCHAR[]) END",
            f"CASE WHEN NOT {small} AND count({k}) = count({k}) {numbers} "  # no NaN beside the range
            f"THEN [CAST(min({k}) AS VARCHAR), CAST(max({k}) AS VARCHAR)] END",
        ]
    row = conn.sql(f"SELECT {', '.join(items)} FROM ({keys_sql}) AS k").fetchall()[0]
    axes = [
        _Axis(quote_ident(columns[i]), _written(dims[columns[i]], types[i]), others[i], row[2 * j], row[2 * j + 1])
        for j, i in enumerate(use)
    ]
    kept = [a for a in axes if a.values is not None or (a.bounds is not None and None not in a.bounds)]
    if not kept:
        raise Decline("the other side's keys give no condition on any dimension")
    where = [a.condition(arrow_scan=not HAS_SOURCES) for a in kept]
    where += [_zoned_twin(conn, a.column, a.values or a.bounds) for a in kept if a.written.zoned]  # type: ignore[arg-type]
    nulls = " OR ".join(f"{others[i]} IS NULL" for i in use)  # a NULL key matches nothing
    guard = " AND ".join(a.guard() for a in kept)
    refuse = f"{conn._state.refuse_function}({quote_text(_STALE)})"
    return Keys(" AND ".join(where), f"{nulls} OR ({guard})", tuple(dict.fromkeys(others[i] for i in use)), refuse)


@dataclass(frozen=True, slots=True)
class _Axis:
    """One dimension's keys listed alone (`_per_dimension_keys`), as text of the other side's
    type: its distinct values (`values`, when at most `MAX_KEYS`), or else its least and
    greatest (`bounds`; None when a NaN key is among them: NaN sorts above every number in
    DuckDB, so a range up to it would pass everything anyway)."""

    column: str  # the zarr side's dimension, as SQL
    written: _Written
    other: str  # the other side's key column, as SQL
    values: list[str] | None
    bounds: list[str | None] | None

    def condition(self, *, arrow_scan: bool) -> str:
        """The filter on the zarr side's dimension."""
        kind = self.written.kind
        if self.values is not None:
            values = {v for v in map(self.written.exact, self.values) if v is not None}
            return _in_list(self.column, kind, values, arrow_scan=arrow_scan) if values else "false"
        return _between(self.column, kind, *self.written.outward(*(str(b) for b in self.bounds or ())))

    def guard(self) -> str:
        """The condition a row of the other side passes when its key was listed, in its own type."""
        kind = self.written.own
        if self.values is not None:
            return _matching([self.other], [kind], {(v,) for v in self.values}, False)
        return _between(self.other, kind, *(str(b) for b in self.bounds or ()))


def _between(expr: str, kind: str, low: str, high: str) -> str:
    return f"({expr} BETWEEN CAST({quote_text(low)} AS {kind}) AND CAST({quote_text(high)} AS {kind}))"


@dataclass(frozen=True, slots=True)
class _Written:
    """How keys of the other side's type `own` are written on a dimension so that DuckDB pushes
    the condition into the scan: as literals of type `kind`. DuckDB compares a FLOAT dimension
    with DOUBLE keys, and a TIMESTAMP one with TIMESTAMP_NS keys (a pandas column), by casting
    the dimension up, which it cannot push: the keys are written in the dimension's own type
    instead, and a key no cell can equal (a DOUBLE that is no float32 value, a time between two
    microseconds) left out (`exact`), so the rows are the same. A TIMESTAMP dimension compared
    with TIMESTAMPTZ keys reads each time in the session's zone; those keep their type, and a
    range in TIMESTAMP is put beside them (`zoned`, see `_zoned_twin`)."""

    own: str
    kind: str

    @property
    def zoned(self) -> bool:
        return self.kind == _ZONED

    def exact(self, text: str) -> str | None:
        """The key as a literal of `kind`, None when no cell can equal it."""
        if self.kind == "FLOAT" and self.own == "DOUBLE":
            return text if _is_a_float32(text) else None
        if self.kind == "TIMESTAMP" and self.own == _NANOS:
            micros, rest = _split_nanos(text)
            return micros if not rest else None
        return text

    def outward(self, low: str, high: str) -> tuple[str, str]:
        """A range of `kind` holding every cell the range `low`..`high` of `own` holds."""
        if self.kind == "FLOAT" and self.own == "DOUBLE":
            return _float32_outward(float(low), float(high))
        if self.kind == "TIMESTAMP" and self.own == _NANOS:  # a cell is a whole microsecond
            return _split_nanos(low)[0], _split_nanos(high)[0]
        return low, high


_ZONED, _NANOS = "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS"


def _written(logical: str, own: str) -> _Written:
    """How keys of SQL type `own` are written on a dimension of logical type `logical`."""
    if logical == "float32" and own == "DOUBLE":
        return _Written(own, "FLOAT")
    if logical == "timestamp_us" and own == _NANOS:
        return _Written(own, "TIMESTAMP")
    return _Written(own, own)


def _float32_outward(low: float, high: float) -> tuple[str, str]:
    """The greatest float32 at most `low` and the least at least `high`, as exact decimal text."""
    with np.errstate(over="ignore"):
        a, b = np.float32(low), np.float32(high)
    if float(a) > low:
        a = np.nextafter(a, np.float32(-np.inf))
    if float(b) < high:
        b = np.nextafter(b, np.float32(np.inf))
    return repr(float(a)), repr(float(b))


def _split_nanos(text: str) -> tuple[str, bool]:
    """A TIMESTAMP_NS value's text cut to whole microseconds (rounded down: the digits are
    the time of day's), and whether a part of a microsecond was cut."""
    head, dot, tail = text.partition(".")
    if not dot:
        return text, False
    digits = len(tail) - len(tail.lstrip("0123456789"))
    fraction, after = tail[:digits], tail[digits:]  # `after`: " (BC)" on a date before year 1
    return f"{head}.{fraction[:6]}{after}", fraction[6:].strip("0") != ""


def _zoned_twin(conn: Connection, expr: str, texts: list[str]) -> str:
    """A range in TIMESTAMP holding every cell of the TIMESTAMP dimension `expr` that equals one
    of the TIMESTAMPTZ keys `texts`. DuckDB reads a cell's time t in the session's zone, as
    the instant t - o for one of the zone's offsets o, all within a day: so t lies within a
    day of the key's UTC wall time (`time_bounds`)."""
    low, high = conn._con.execute(
        f"SELECT CAST({BOUNDS['low'].format(v='u')} AS VARCHAR), CAST({BOUNDS['high'].format(v='w')} AS VARCHAR) "
        "FROM (SELECT min(v) AS u, max(v) AS w FROM (SELECT CAST(unnest(CAST(? AS VARCHAR[])) AS TIMESTAMPTZ) AS v))",
        [texts],
    ).fetchone() or (None, None)
    if low is None or high is None:
        return "true"
    return _between(expr, "TIMESTAMP", low, high)


#: What a kept relation (or a view made from it) says when its other side gained keys.
_STALE = (
    "join pruned with the keys its other side held when this relation (or view) was made: that side now "
    "holds other keys, so the rows would be stale; run the statement again on the zarrsql.Connection "
    "(con.sql(...)) to join the data as it is now"
)


def _matching(
    exprs: list[str], types: list[str], keys: set[tuple[str, ...]], per_dimension: bool, *, arrow_scan: bool = False
) -> str:
    """The condition that `exprs` (one per key column) hold one of `keys` (their text, read back
    as `types`): one IN list on one column, an OR of equalities on several, or with
    `per_dimension` one IN list per column, which passes any combination of listed values.
    With `arrow_scan` (the zarr side's filter on DuckDB 1.5), an IN list 1.5 cannot hand to
    an Arrow scan is written otherwise (`_in_list`), which may pass more rows."""
    if not keys:
        return "false"
    if len(exprs) == 1:  # one IN list, not a chain of ORs DuckDB would nest a level per key
        return _in_list(exprs[0], types[0], {k for (k,) in keys}, arrow_scan=arrow_scan)
    if per_dimension:
        return " AND ".join(
            _in_list(e, t, {key[j] for key in keys}, arrow_scan=arrow_scan)
            for j, (e, t) in enumerate(zip(exprs, types, strict=True))
        )
    terms = (
        " AND ".join(f"{e} = CAST({quote_text(k)} AS {t})" for e, t, k in zip(exprs, types, key, strict=True))
        for key in sorted(keys)
    )
    return " OR ".join(f"({t})" for t in terms)


def _listed(exprs: list[str], types: list[str], keys: set[tuple[str, ...]], per_dimension: bool) -> str:
    """`_matching` for the guard, evaluated on every row of the other side: keys of several
    columns as a hashed `IN (SELECT ... FROM (VALUES ...))`, not an OR DuckDB tries term by
    term (0.03-0.06 s rather than 0.15-0.36 s for 100 pairs on a million rows)."""
    if per_dimension or len(exprs) == 1 or not keys:
        return _matching(exprs, types, keys, per_dimension, arrow_scan=not HAS_SOURCES)
    rows = ", ".join(
        "(" + ", ".join(f"CAST({quote_text(k)} AS {t})" for k, t in zip(key, types, strict=True)) + ")"
        for key in sorted(keys)
    )
    return f"({', '.join(exprs)}) IN (SELECT * FROM (VALUES {rows}))"


def _is_a_float32(text: str) -> bool:
    """Whether the DOUBLE key `text` is a float32 value. DuckDB compares a FLOAT dimension with
    a DOUBLE key as `CAST(dim AS DOUBLE) = key`, which it cannot push into the scan; written as
    a FLOAT literal instead, the key prunes, and the rows are the same: a float32 `v` matches
    a double `k` exactly when `k` is a float32 value and `v` is it. Keys that are not float32
    values match no cell and are left out. (NaN matches NaN in DuckDB, and stays.)"""
    value = float(text)
    if math.isnan(value):
        return True
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0] == value
    except OverflowError:
        return False


def _in_list(expr: str, type_name: str, values: set[str], *, arrow_scan: bool = False) -> str:
    """`expr IN (...)` of `values` (the keys' text) cast back to `type_name`.

    With `arrow_scan`, a UBIGINT list holding a value of 2**63 or more is written in a form
    DuckDB 1.5 can push into an Arrow scan: it hands an IN list over as Python integers, which
    pyarrow reads as int64 and fails on (OverflowError), while it hands each comparison over
    with its own uint64 scalar. Up to `MAX_TUPLE_KEYS` values: an OR of equalities (the same
    rows); beyond: `BETWEEN` the least and the greatest, which passes more rows (the join, or
    the IN the keys were listed for, narrows them) and prunes to that range."""
    cast = {v: f"CAST({quote_text(v)} AS {type_name})" for v in sorted(values)}
    if arrow_scan and type_name == "UBIGINT" and any(int(v) >= _BIGINT_END for v in values):
        if len(values) > MAX_TUPLE_KEYS:
            least, greatest = min(values, key=int), max(values, key=int)
            return f"({expr} BETWEEN {cast[least]} AND {cast[greatest]})"
        return "(" + " OR ".join(f"{expr} = {c}" for c in cast.values()) + ")"
    return f"{expr} IN ({', '.join(cast.values())})"


#: The least UBIGINT past BIGINT's range (`_in_list`).
_BIGINT_END = 2**63


def column_names(conn: Connection, sql: str) -> list[str]:
    """The names of the columns `sql` gives: a part of the statement (a join's other side, a
    key subquery), whose store, when it fails to open, is the statement's error (`answers.bind`)."""
    try:
        described = conn.sql("DESCRIBE " + sql).fetchall()
    except STORE_FAILURES as err:
        raise Raised(err, part=True) from None
    return [str(r[0]) for r in described]


def guarded_side(conn: Connection, rest: dict[str, Any], keys: Keys) -> dict[str, Any]:
    """`(SELECT * REPLACE (<guarded key columns>) FROM <rest>) AS <its alias>` in place of the
    other side `rest` (which keeps its own alias and column names inside, so the guard's names
    resolve)."""
    kind = rest.get("type")
    alias = str(rest.get("alias") or "")
    if not alias and kind == "BASE_TABLE":
        alias = str(rest.get("table_name") or "")
    elif not alias and kind == "TABLE_FUNCTION":  # DuckDB names it after its function
        alias = str((rest.get("function") or {}).get("function_name") or "")
    if not alias and kind != "SUBQUERY":
        raise Decline("an unnamed other side whose name DuckDB makes up")
    replaced = ", ".join(f"{keys.guarded(c)} AS {c}" for c in keys.columns)
    doc = parsetree.serialize(
        conn._con,
        f"SELECT * FROM (SELECT * EXCLUDE ({PASSES}) REPLACE ({replaced}) "
        f"FROM (SELECT *, {keys.passes} AS {PASSES} FROM t)) AS {quote_ident(alias or 'k')}",
        keep=False,
    )
    sub = doc["statements"][0]["node"]["from_table"]
    sub["subquery"]["node"]["from_table"]["subquery"]["node"]["from_table"] = copy.deepcopy(rest)
    sub["alias"] = alias  # an unnamed subquery stays unnamed
    return sub  # type: ignore[no-any-return]


def guarded_query(conn: Connection, query: dict[str, Any], names: list[str], keys: Keys) -> dict[str, Any]:
    """`SELECT <guarded columns> FROM (SELECT *, <passes> FROM (<query>) AS k(<names>))`: a
    key subquery, guarded."""
    listed = ", ".join(quote_ident(n) for n in names)
    items = ", ".join(
        f"{keys.guarded(quote_ident(n))} AS {quote_ident(n)}" if quote_ident(n) in keys.columns else quote_ident(n)
        for n in names
    )
    node = parsetree.select_node(
        conn._con,
        f"SELECT {items} FROM (SELECT *, {keys.passes} AS {PASSES} FROM (SELECT 1) AS k({listed}))",
        keep=False,
    )
    node["from_table"]["subquery"]["node"]["from_table"]["subquery"]["node"] = query
    return node
