"""`zarr_sample(store, points, ...)` and `zarrsql.sample(...)`: a store's cells at given points.

The points (a query, a table name, or from Python a relation or a data frame) name some of
the table's dimensions by their columns (`lat`, `lon`, optionally `time`); every other column
is the point's own (an id, a name). The points text is run, so DuckDB's own parser first
decides what it is (`_points_statement`): exactly one query, or the name of a table or view,
never other statements (`'SELECT 1; DROP TABLE t'`). Each point is matched on each of those
dimensions to the nearest (or the equal) coordinate value among those `bounds :=` keeps
(`plan/sampling.py`), and the result is a temporary view:

    SELECT <point columns>, <table columns>
    FROM <points with their matched coordinates> p
    LEFT JOIN (SELECT * FROM read_zarr(...) WHERE (lat = a1 AND lon = b1) OR ...) z
           ON z.lat = p.matched_lat AND z.lon = p.matched_lon
    ORDER BY <point order>, <the other dimensions>

The `WHERE` names the matched cells with literals of the coordinates' own types, so it is
pushed into the scan and only the work units holding a matched cell are read. A point with
no match (beyond the tolerance) keeps one row whose table columns are NULL, never a far
cell. The point's columns that name dimensions are renamed `point_<dim>` beside the matched
`<dim>`. All of this runs when the statement binds, as the connection runs other actions.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from zarrsql.decode.logical import Labels
from zarrsql.engine import params
from zarrsql.engine.functions import READ_PARAMS
from zarrsql.engine.parsetree import parsed
from zarrsql.engine.sqltext import literal, quote_ident, quote_text
from zarrsql.errors import ParameterError
from zarrsql.expand.arrow import to_arrow
from zarrsql.plan.sampling import METHODS, kept_positions, match, repeated_value
from zarrsql.scan import Column, TableScan, open_table

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection

#: Above this many distinct matched cells the pushed filter names each axis' values instead
#: (a superset of the cells: still pruned per axis, and the join keeps only the matches).
MAX_CELL_TERMS = 512
#: The parts of a table's name in DuckDB's parse of `SELECT * FROM <name>`, outermost first.
_NAME_PARTS = ("catalog_name", "schema_name", "table_name")
_DURATION = "duration_us"
_TIME_UNITS = {"timestamp_s": 1, "timestamp_ms": 10**3, "timestamp_us": 10**6, "timestamp_ns": 10**9}
_INFINITE_TICKS = np.iinfo(np.int64).max  # how DuckDB hands an infinite TIMESTAMPTZ to Arrow


def _points(conn: Connection, points: Any) -> pa.Table:
    if not isinstance(points, str) or not points.strip():
        raise ParameterError(
            "zarr_sample's points must be a query (e.g. 'SELECT * FROM stations') or a table or view name"
        )
    text, is_query = _points_statement(conn, points)
    try:
        table = conn.sql(text).arrow()
    except duckdb.InterruptException:
        raise
    except duckdb.Error as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        if is_query:
            raise ParameterError(f"zarr_sample's points query failed: {first}; fix the query") from None
        raise ParameterError(
            f"zarr_sample's points '{points}' name no table or view this connection can read ({first}); "
            "give the name of one, or the points as a query in a string, e.g. zarr_sample('store.zarr', "
            "'SELECT 45.0 AS lat, 7.5 AS lon')"
        ) from None
    table = table.read_all() if isinstance(table, pa.RecordBatchReader) else table
    check_point_columns(table.column_names)
    return table


def check_point_columns(names: list[str]) -> None:
    """Points need a column, and each column its own name, ignoring case as SQL does (a query
    may repeat one, an Arrow table or a DataFrame too, whose named index levels are columns)."""
    if not names:
        raise ParameterError(
            "the points have no columns; give them a column named after each dimension to match (e.g. lat, lon)"
        )
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise ParameterError(
                f"the points have two columns named '{name}' (ignoring case, as SQL does; a DataFrame's named "
                "index levels count as columns); give each its own name"
            )
        seen.add(name.lower())


def _points_statement(conn: Connection, points: str) -> tuple[str, bool]:
    """The statement reading the points, and whether `points` is a query: the text itself
    when DuckDB's parser reads it as exactly one query (SELECT, WITH, VALUES, FROM, TABLE, a
    parenthesised query; comments anywhere), `SELECT * FROM <name>` when it is a table or view
    name. Anything else is refused before it runs: the text would run every statement it
    holds (`'SELECT 1 AS lat; DROP TABLE t'` drops `t`; through a read-only server a COPY
    writes a file), and one query cannot write."""
    doc = parsed(conn.duckdb, points)
    if not doc.get("error"):
        count = len(doc.get("statements") or [])
        if count == 1:
            return points, True
        raise ParameterError(
            f"zarr_sample's points {points!r} hold {count or 'no'} queries; give exactly one query "
            "(e.g. 'SELECT * FROM stations') or a table or view name"
        )
    if doc.get("error_type") == "parser":
        name = _table_name(conn, points)
        if name is not None:
            return f"SELECT * FROM {name}", False
        if len(parsed(conn.duckdb, f"SELECT * FROM {points}", keep=False).get("statements") or []) == 1:
            raise ParameterError(
                f"zarr_sample's points {points!r} are more than a table or view name (a clause, an alias, a join "
                f"or a table function) and no query; give the query whole, e.g. 'SELECT * FROM {points}'"
            )
        raise ParameterError(
            f"zarr_sample's points {points!r} are neither a query nor a table or view name "
            f"({doc.get('error_message')}); give one query (e.g. 'SELECT * FROM stations') or the name of a "
            "table or view (quoted if need be, e.g. 'main.\"my stations\"')"
        )
    try:
        kinds = ", ".join(s.type.name for s in conn.duckdb.extract_statements(points))
    except duckdb.Error:
        kinds = "other"
    raise ParameterError(
        f"zarr_sample's points {points!r} hold statements that are not one query ({kinds}), and none of them "
        "was run; give exactly one query (SELECT, WITH, VALUES, FROM or TABLE) or a table or view name"
    )


def _table_name(conn: Connection, text: str) -> str | None:
    """`text` as a table or view's name, quoted part by part (`stations`, `main."my points"`),
    or None when it is anything more: DuckDB must parse `SELECT * FROM <text>` exactly as it
    parses `SELECT * FROM <the quoted name>` (no alias, clause, join or second statement)."""
    doc = parsed(conn.duckdb, f"SELECT * FROM {text}", keep=False)
    statements = doc.get("statements") or []
    if doc.get("error") or len(statements) != 1:
        return None
    table = statements[0]["node"].get("from_table") or {}
    if table.get("type") != "BASE_TABLE":
        return None
    name = ".".join(quote_ident(str(table[part])) for part in _NAME_PARTS if table.get(part))
    again = parsed(conn.duckdb, f"SELECT * FROM {name}", keep=False)
    return name if _without_locations(again) == _without_locations(doc) else None


def _without_locations(node: Any) -> Any:
    """A parse tree without the offsets and lengths of its text (a quoted name is longer)."""
    if isinstance(node, dict):
        return {k: _without_locations(v) for k, v in node.items() if not k.startswith("query_location")}
    if isinstance(node, list):
        return [_without_locations(v) for v in node]
    return node


def _method(args: dict[str, Any]) -> str:
    method = args.get("method") or "nearest"
    if not isinstance(method, str) or method.lower() not in METHODS:
        raise ParameterError(f"method := must be 'nearest' or 'exact', got {json.dumps(method)}")
    return method.lower()


def _kind(logical: str) -> str:
    """How a matched dimension takes a tolerance: 'labels' none, 'time' and 'duration' an
    interval, 'number' a number."""
    if logical == "string":
        return "labels"
    if logical in _TIME_UNITS:
        return "time"
    return "duration" if logical == _DURATION else "number"


def _is_number(value: Any) -> bool:
    """A tolerance given as a number (SQL `20`, `0.5`, or text such as '0.5'), not an interval."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float, Decimal)):
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _interval_micros(conn: Connection, value: Any, dim: str) -> int:
    text = str(value)
    try:
        rows = conn.duckdb.execute("SELECT epoch_us(CAST(? AS INTERVAL))", [text]).fetchall()
    except Exception as err:  # noqa: BLE001 - DuckDB's conversion error, restated
        raise ParameterError(
            f"tolerance for the dimension '{dim}' must be an interval such as '1 hour', got {text!r}"
        ) from err
    micros = int(rows[0][0])
    if micros < 0:
        raise ParameterError(f"tolerance for the dimension '{dim}' must be zero or more, got {text!r}")
    return micros


def _scalar_targets(scan: TableScan, given: list[int], raw: Any) -> list[int]:
    """The matched axes a single tolerance applies to: a number to the numeric dimensions, an
    interval to the time and duration ones; refused when the points give none of them, and
    when it is neither a number nor text (a list, a boolean)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, Decimal, str)):
        what = "a boolean" if isinstance(raw, bool) else f"a {type(raw).__name__}"
        raise ParameterError(
            f"tolerance := {json.dumps(raw, default=str)} is {what}; give a number (for numeric dimensions), an "
            "interval such as '1 hour' (for time and duration dimensions), or a MAP per dimension, e.g. "
            "MAP {'lat': '0.5', 'time': '1 hour'}"
        )
    wanted = ("number",) if _is_number(raw) else ("time", "duration")
    kinds = {k: _kind(scan.dim_logical[k]) for k in given}
    chosen = [k for k in given if kinds[k] in wanted]
    if chosen:
        return chosen
    why = {
        "labels": "holds labels, which match exactly",
        "time": "is a time dimension, which takes an interval such as '1 hour'",
        "duration": "is a duration dimension, which takes an interval such as '1 hour'",
        "number": "is numeric, which takes a number",
    }
    reasons = "; ".join(f"'{scan.dims[k].name}' {why[kinds[k]]}" for k in given)
    what = (
        "a number, which applies to numeric dimensions"
        if wanted == ("number",)
        else "not a number, so it is read as an interval, which applies to time and duration dimensions"
    )
    raise ParameterError(
        f"tolerance := {raw!r} is {what}, and the points give none ({reasons}); "
        "give a MAP per dimension, e.g. MAP {'lat': '0.5', 'time': '1 hour'}"
    )


def _tolerances(conn: Connection, scan: TableScan, given: list[int], raw: Any) -> dict[int, float | int | None]:
    """The tolerance of each matched axis, in the axis' own units (time: its ticks; a duration:
    microseconds). A single value applies to the axes of its kind (`_scalar_targets`)."""
    out: dict[int, float | int | None] = dict.fromkeys(given)
    if raw is None:
        return out
    by_name = {scan.dims[k].name: k for k in given}
    if isinstance(raw, dict):
        unknown = [d for d in raw if d not in by_name]
        if unknown:
            raise ParameterError(
                f"tolerance names '{unknown[0]}', which is not a dimension the points give ({', '.join(by_name)})"
            )
        items = {by_name[d]: v for d, v in raw.items()}
    else:
        items = dict.fromkeys(_scalar_targets(scan, given, raw), raw)
    for k, value in items.items():
        name, logical = scan.dims[k].name, scan.dim_logical[k]
        kind = _kind(logical)
        if kind == "labels":
            raise ParameterError(
                f"tolerance := applies to numeric, time and duration dimensions; '{name}' holds labels, "
                "which match exactly"
            )
        if kind == "time":
            out[k] = _interval_micros(conn, value, name) * _TIME_UNITS[logical] // 10**6
            continue
        if kind == "duration":
            out[k] = _interval_micros(conn, value, name)
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ParameterError(
                f"tolerance for the dimension '{name}' must be a number, got {json.dumps(value)}"
            ) from None
        if not number >= 0:
            raise ParameterError(f"tolerance for the dimension '{name}' must be zero or more, got {number}")
        out[k] = number
    return out


def _wall_times(conn: Connection, col: pa.ChunkedArray, column: str) -> pa.ChunkedArray:
    """TIMESTAMPTZ points as the session's wall-clock times: what `CAST(point AS TIMESTAMP)`
    gives, and so what a join or a WHERE compares with a TIMESTAMP dimension. Each instant
    moves by its session `TimeZone` offset, which DuckDB's own cast gives per whole second
    (offsets change on whole seconds), so its zone data and daylight-saving rules decide and
    finer ticks are kept; an infinite point stays infinite."""
    unit = col.type.unit
    per_second = _TIME_UNITS[f"timestamp_{unit}"]
    ticks = np.asarray(col.cast(pa.int64()).to_numpy(zero_copy_only=False))
    finite = (ticks > -_INFINITE_TICKS) & (ticks < _INFINITE_TICKS)
    seconds = np.unique(ticks[finite] // per_second)
    name = f"__zarrsql_instants_{uuid.uuid4().hex[:16]}"
    conn.duckdb.register(name, pa.table({"t": pa.array(seconds * 10**6, pa.timestamp("us", tz="UTC"))}))
    try:
        sql = f"SELECT epoch_us(CAST(t AS TIMESTAMP)) - epoch_us(t) AS o FROM {quote_ident(name)} ORDER BY t ASC"
        offsets = np.asarray(conn.duckdb.execute(sql).fetchnumpy()["o"], dtype=np.int64)
    except duckdb.Error as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ParameterError(
            f"the points' column '{column}' holds a TIMESTAMPTZ with no TIMESTAMP in the session's TimeZone "
            f"({first}), as CAST({quote_ident(column)} AS TIMESTAMP) finds; give times inside TIMESTAMP's range"
        ) from None
    finally:
        conn.duckdb.unregister(name)
    offsets = offsets.astype("timedelta64[us]").astype(f"timedelta64[{unit}]").astype(np.int64)
    local = ticks.copy()
    local[finite] += offsets[np.searchsorted(seconds, ticks[finite] // per_second)]
    return pa.chunked_array([pa.array(local, pa.timestamp(unit))])


def _targets(conn: Connection, table: pa.Table, column: str, logical: str, dim: str) -> np.ndarray:
    """The points' values along one matched axis, in the axis' units (time: its ticks, of a
    TIMESTAMPTZ point its session wall time, `_wall_times`; a duration: microseconds; whole
    numbers on an integer axis: integers, `_whole_numbers`; other numbers: float64, which
    `match` rounds to a float axis' type)."""
    col = table.column(column)
    if col.null_count:
        first = col.to_pylist().index(None)
        raise ParameterError(
            f"point {first} has a NULL '{column}': every point needs a value for each dimension it names"
        )
    if logical in _TIME_UNITS:
        if not pa.types.is_timestamp(col.type) and not pa.types.is_date(col.type):
            raise ParameterError(
                f"the points' column '{column}' must be a TIMESTAMP to match the time dimension '{dim}', got {col.type}"
            )
        if pa.types.is_timestamp(col.type) and col.type.tz is not None:
            col = _wall_times(conn, col, column)
        cast = col.cast(pa.timestamp(logical.removeprefix("timestamp_")), safe=False)  # finer: truncated
        return np.asarray(cast.cast(pa.int64()).to_numpy(zero_copy_only=False))
    if logical == _DURATION:
        return _duration_micros(col, column, dim)
    if logical == "string":
        return np.array(col.to_pylist(), dtype=object)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_decimal(col.type)):
        raise ParameterError(
            f"the points' column '{column}' must be numeric to match the dimension '{dim}', got {col.type}"
        )
    whole = _whole_numbers(col, column, dim) if logical.startswith(("int", "uint")) else None
    if whole is not None:
        return whole
    return np.asarray(col.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False))  # as xarray: rounded


def _whole_numbers(col: pa.ChunkedArray, column: str, dim: str) -> np.ndarray | None:
    """Integer points (or DECIMALs without fraction digits, as DuckDB hands a HUGEINT or a
    literal beyond BIGINT to Arrow) as int64 or uint64, which `match` compares with an
    integer axis exactly: an id beyond 2^53 has no float64. None when they are not whole."""
    if pa.types.is_integer(col.type):
        return np.asarray(col.to_numpy(zero_copy_only=False))
    if not pa.types.is_decimal(col.type) or col.type.scale != 0:
        return None
    for whole in (pa.int64(), pa.uint64()):
        try:
            return np.asarray(col.cast(whole).to_numpy(zero_copy_only=False))
        except pa.ArrowInvalid:
            continue
    raise ParameterError(
        f"the points' column '{column}' holds whole numbers that fit neither BIGINT nor UBIGINT (some beyond "
        f"-2^63 .. 2^64-1, or negative ones beside ones above 2^63-1), which the integer dimension '{dim}' "
        "cannot be matched with exactly; cast the column to BIGINT or UBIGINT"
    )


def _duration_micros(col: pa.ChunkedArray, column: str, dim: str) -> np.ndarray:
    """INTERVAL points (or Arrow durations: a timedelta, timedelta64 or pandas Timedelta) in
    microseconds; a month has no fixed length, so an interval with months is refused."""
    if pa.types.is_duration(col.type):
        cast = col.cast(pa.duration("us"), safe=False)  # finer than microseconds: truncated
        return np.asarray(cast.cast(pa.int64()).to_numpy(zero_copy_only=False))
    if pa.types.is_interval(col.type):
        out = np.empty(len(col), dtype=np.int64)
        for i, value in enumerate(col.to_pylist()):
            if value.months:
                raise ParameterError(
                    f"point {i} has a '{column}' of {value.months} month(s), which has no fixed length; "
                    f"give the duration dimension '{dim}' days, hours or smaller units"
                )
            out[i] = value.days * 86_400_000_000 + value.nanoseconds // 1000
        return out
    raise ParameterError(
        f"the points' column '{column}' must be an INTERVAL (e.g. INTERVAL 3 HOURS; from Python a timedelta) "
        f"to match the duration dimension '{dim}', got {col.type}"
    )


def _sql_value(value: Any, logical: Any) -> str | None:
    """A literal of exactly the coordinate's value and type, or None when none is written. A
    float is cast from its shortest text, which DuckDB reads as the double it is: written bare,
    `-0.46000000834465027` is a DECIMAL, which DuckDB 1.5 casts to FLOAT one step off."""
    if isinstance(logical, Labels):
        return quote_text(str(value))
    if logical in ("float32", "float64"):
        return f"CAST({quote_text(repr(float(value)))} AS {'FLOAT' if logical == 'float32' else 'DOUBLE'})"
    if isinstance(logical, str) and logical[:3] in ("int", "uin"):
        return str(int(value))
    if logical == _DURATION:
        return f"to_microseconds({int(value)})"
    if logical == "timestamp_ns":
        return f"make_timestamp_ns({int(value)})"
    if logical in _TIME_UNITS:
        return f"make_timestamp({int(value) * 10**6 // _TIME_UNITS[logical]})"
    return None


def _cells_filter(scan: TableScan, given: list[int], positions: np.ndarray, columns: dict[int, Column]) -> str:
    """The pushed WHERE naming the matched cells (or, when many, each axis' matched values)."""
    matched = positions[(positions >= 0).all(axis=1)]
    cells = np.unique(matched, axis=0) if len(matched) else matched
    if len(cells) == 0:
        return "false"

    def value(k: int, pos: int) -> str | None:
        dv = scan.dims[k]
        return _sql_value(dv.values[pos], columns[k].logical)

    if len(cells) <= MAX_CELL_TERMS:
        terms: list[str] = []
        for cell in cells:
            pairs = [(k, value(k, int(p))) for k, p in zip(given, cell, strict=True)]
            if any(v is None for _, v in pairs):
                return "true"
            terms.append("(" + " AND ".join(f"{quote_ident(scan.dims[k].name)} = {v}" for k, v in pairs) + ")")
        return " OR ".join(terms)
    parts = []
    for j, k in enumerate(given):
        values = [value(k, int(p)) for p in np.unique(cells[:, j])]
        if all(v is not None for v in values):
            parts.append(f"{quote_ident(scan.dims[k].name)} IN ({', '.join(v for v in values if v)})")
    return " AND ".join(parts) or "true"


def _argument(value: Any) -> str:
    """A parameter value as SQL; a MAP's NULL values (virtual chunk credentials) stay NULL."""
    if isinstance(value, dict):
        return (
            "MAP {"
            + ", ".join(f"{literal(str(k))}: {literal(v if v is None else str(v))}" for k, v in value.items())
            + "}"
        )
    return literal(value)


def _read_call(args: dict[str, Any]) -> str:
    read = [p.strip('"') for p in READ_PARAMS]
    named = [f"{quote_ident(k)} := {_argument(args[k])}" for k in read if args.get(k) is not None]
    return f"read_zarr({', '.join([literal(params.store_of(args)), *named])})"


def _refuse_repeats(scan: TableScan, k: int, kept: np.ndarray | None) -> None:
    """A matched axis must not repeat a value among the positions `bounds :=` keeps: one
    point would match two cells (xarray refuses `method="nearest"` on such an index too)."""
    dv = scan.dims[k]
    value = repeated_value(dv.values, dv.nulls, kept)
    if value is not None:
        raise ParameterError(
            f"dimension '{dv.name}' of table '{scan.table.label}' repeats the coordinate value "
            f"{_shown(value, scan.dim_logical[k])}, so a point has no single cell to match; leave "
            f"'{dv.name}' out of the points and filter it with WHERE"
        )


def _shown(value: Any, logical: str) -> str:
    """A coordinate value as its column shows it: a time as ISO text (its ticks mean nothing to
    a reader), a duration as days and hours, anything else as Python writes it."""
    if logical in _TIME_UNITS:
        stamp = np.array([int(value)], dtype=np.int64).astype(f"datetime64[{logical.removeprefix('timestamp_')}]")
        whole = stamp.astype("datetime64[s]")
        return str(np.datetime_as_string(whole if whole[0] == stamp[0] else stamp)[0]).replace("T", " ")
    if logical == _DURATION:
        return str(datetime.timedelta(microseconds=int(value)))
    return repr(value)


def _point_names(names: list[str], matched: list[str], columns: list[Column]) -> dict[str, str]:
    """The points' columns renamed so that the table's columns keep their names: those naming a
    matched dimension, and any other named like a table column (ignoring case, as SQL does),
    become `point_<name>`."""
    table = {c.name.lower() for c in columns}
    renamed = {c: f"point_{c}" for c in names if c in matched or c.lower() in table}
    seen: set[str] = set(table)
    for c in names:
        new = renamed.get(c, c)
        if new.lower() in seen:
            raise ParameterError(
                f"the points' column '{c}' would be named '{new}', which the result already has; rename it"
            )
        seen.add(new.lower())
    return renamed


def sample_view(conn: Connection, args: dict[str, Any], name: str) -> str:
    """Create the temporary view `name` answering `zarr_sample(args)`; returns its SELECT."""
    method = _method(args)
    read_args = {k: v for k, v in args.items() if k not in ("points", "method", "tolerance")}
    scan = open_table(params.read_request(read_args))
    points = _points(conn, args.get("points"))
    columns = {c.dim: c for c in scan.columns if c.dim is not None}
    dims = {scan.dims[k].name: k for k in columns}
    folded = {name.lower(): k for name, k in dims.items()}  # a column names a dimension ignoring case, as in SQL
    matching = [c for c in points.column_names if c.lower() in folded]  # the points' own spelling
    given = [folded[c.lower()] for c in matching]
    if not given:
        raise ParameterError(
            f"the points have no column naming a dimension of table '{scan.table.label}' (its dimensions are "
            f"{', '.join(repr(d) for d in dims)}; the points' columns are "
            f"{', '.join(repr(c) for c in points.column_names)}); name the columns after the dimensions"
        )
    clash = [c for c in points.column_names if c.lower().startswith("__zarrsql")]
    if clash:
        raise ParameterError(f"the points' column '{clash[0]}' uses zarrsql's internal prefix; rename it")
    if method == "exact" and args.get("tolerance") is not None:
        raise ParameterError(
            "tolerance := applies to method := 'nearest' only (exact matches equal values); drop one of the two"
        )
    tolerances = _tolerances(conn, scan, given, args.get("tolerance"))
    positions = np.empty((points.num_rows, len(given)), dtype=np.int64)
    for j, k in enumerate(given):
        dv, logical = scan.dims[k], scan.dim_logical[k]
        kept = kept_positions(scan.base_predicate, dv)  # bounds := : the cells the table keeps
        _refuse_repeats(scan, k, kept)
        targets = _targets(conn, points, matching[j], logical, dv.name)
        positions[:, j] = match(dv.values, dv.nulls, targets, method=method, tolerance=tolerances[k], kept=kept)
    found = (positions >= 0).all(axis=1)
    renamed = _point_names(points.column_names, matching, scan.columns)
    extra = {"__zarrsql_point": pa.array(np.arange(points.num_rows, dtype=np.int64))}
    for j, k in enumerate(given):
        col = columns[k]
        pos = np.where(found, positions[:, j], 0)
        source = pos.astype(np.int32) if isinstance(col.logical, Labels) else scan.dims[k].values[pos]
        missing = None if found.all() else np.asarray(~found)
        extra[f"__zarrsql_m{j}"] = to_arrow(source, missing, col.logical)
    table = pa.table({**{renamed.get(c, c): points.column(c) for c in points.column_names}, **extra})
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    raw = f"{name}_points_{digest}"
    conn.duckdb.register(raw, table)
    on = " AND ".join(f"z.{quote_ident(scan.dims[k].name)} = p.__zarrsql_m{j}" for j, k in enumerate(given))
    hidden = ", ".join(["__zarrsql_point", *(f"__zarrsql_m{j}" for j in range(len(given)))])
    others = [quote_ident(scan.dims[k].name) for k in columns if k not in given]
    order = ", ".join(f"{o} ASC NULLS LAST" for o in ["p.__zarrsql_point", *(f"z.{o}" for o in others)])
    where = _cells_filter(scan, given, positions, columns)
    body = (
        f"SELECT p.* EXCLUDE ({hidden}), z.* FROM {quote_ident(raw)} p "
        f"LEFT JOIN (SELECT * FROM {_read_call(read_args)} WHERE {where}) z ON {on} ORDER BY {order}"
    )
    conn.execute(f"CREATE OR REPLACE TEMP VIEW {quote_ident(name)} AS {body}")
    return raw
