"""What a writer reads: the relation (or SQL text) to write, its dimensions and its columns.

`source_of(relation_or_sql, connection)` gives the DuckDB relation and the zarrsql
connection it runs on. `dims_of(source, dims)` checks given dimension names against the
relation's columns, or takes them from the one zarrsql table the relation reads when it
kept all of that table's dimensions (found in DuckDB's parse of the relation's SQL, through
`'x.zarr'` strings, views, mounts and CTEs); otherwise it asks for `dims=`. `kinds_of(...)`
sorts every other column into what a dense array can hold.

A query that fails while a writer reads it (a CAST of a bad value in the first batch or the
last, in the user's relation or in the SQL a writer runs around it) is one error whatever the
path: `query_error`, a `WriteError` quoting DuckDB's message without its quote of the SQL it
ran (zarrsql's, in a writer's own query), or the error of a zarrsql scan the query reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from zarrsql.errors import ParameterError, UnwritableColumnError, WriteError, ZarrSQLError

#: Rows per streamed batch: memory holds one batch besides the output, and a batch is large
#: enough that the per-batch numpy work is not dominated by Python overhead.
BATCH_ROWS = 1 << 17


@dataclass(frozen=True)
class Source:
    """A relation to write and the connection it belongs to, and the Arrow streams of its rows
    the writer has opened (`open_reader`), so that `close_readers` ends them however the write
    ended: DuckDB 2 refuses every other query on the connection while one is open."""

    relation: duckdb.DuckDBPyRelation
    connection: Any  # a zarrsql.Connection
    readers: list[pa.RecordBatchReader] = field(default_factory=list, compare=False, repr=False)
    store: str | None = None  # where the rows go (named when the query fails); None: into memory

    @property
    def columns(self) -> list[str]:
        return list(self.relation.columns)

    def open_reader(self, relation: duckdb.DuckDBPyRelation | None = None) -> pa.RecordBatchReader:
        """The rows of `relation` (default: the source's) as an Arrow stream, kept to be closed."""
        reader = arrow_reader(self.relation if relation is None else relation)
        self.readers.append(reader)
        return reader

    def close_readers(self) -> None:
        """Close every stream `open_reader` gave (closing one read to its end, or closed, is a
        no-op). A write that failed midway may leave its stream referenced from the failure's
        traceback, which a reference cycle (an asyncio future holding the I/O error) keeps
        until the garbage collector runs: until then the connection "has an open result"."""
        while self.readers:
            self.readers.pop().close()


def source_of(relation_or_sql: Any, connection: Any = None) -> Source:
    """The relation to write: a DuckDB relation, or SQL text run on `connection` (or on the
    default connection of `zarrsql.sql`)."""
    from zarrsql.engine.api import default_connection
    from zarrsql.engine.connection import register

    if isinstance(relation_or_sql, str):
        con = default_connection() if connection is None else register(connection)
        rel = con.sql(relation_or_sql)
        if rel is None:
            raise ParameterError(
                "the SQL given to write returns no rows (it is not a query); pass a SELECT, e.g. "
                "'SELECT * FROM read_zarr(...) WHERE ...'"
            )
        return Source(rel, con)
    if isinstance(relation_or_sql, duckdb.DuckDBPyRelation):
        con = default_connection() if connection is None else register(connection)
        return Source(relation_or_sql, con)
    raise ParameterError(
        f"the data to write must be a DuckDB relation (con.sql(...), zarrsql.read_zarr(...)) or SQL text, "
        f"got a {type(relation_or_sql).__name__}"
    )


def dims_of(source: Source, dims: Sequence[str] | None) -> tuple[str, ...]:
    """The dimension columns: `dims` checked, or the source table's dimensions."""
    columns = source.columns
    if dims is not None:
        if isinstance(dims, str) or not all(isinstance(d, str) for d in dims) or not dims:
            raise ParameterError(f"dims must be a list of column names, e.g. ['time', 'lat'], got {dims!r}")
        unknown = [d for d in dims if d not in columns]
        if unknown:
            raise ParameterError(
                f"dims names '{unknown[0]}', which is not a column of the relation (its columns: "
                f"{', '.join(columns)}); pass dims from those columns"
            )
        if len(set(dims)) != len(dims):
            raise ParameterError(f"dims names a column twice: {list(dims)}")
        return tuple(dims)
    found = _source_table_dims(source)
    if found is None or not all(d in columns for d in found):
        kept = "" if found is None else f" (the store's table has dimensions {list(found)}, not all kept)"
        raise ParameterError(
            f"the relation's dimensions cannot be known{kept}: pass dims=[...] (in a COPY, the option "
            f"DIMS (...)) naming the dimension columns among {', '.join(columns)}"
        )
    return found


def _source_table_dims(source: Source) -> tuple[str, ...] | None:
    """The dimensions of the one zarrsql table the relation reads, or None when it reads none,
    several, or any other table (then which columns are dimensions is the caller's to say).

    The table is found in DuckDB's parse of the relation's SQL, whatever names it: a
    `read_zarr(...)` call, a `'x.zarr'` string, a view (a user's, a mount's) or a CTE over one,
    followed down to the `read_zarr` call they stand for. Rows from a second table (a join, a
    set operation, even of the same table again) make it None; a subquery in WHERE only filters."""
    own = _OwnConnection(source)
    renamed: set[str] = set()
    try:
        reads = _reads(own, _parsed(own, source.relation.sql_query()), {}, 0, renamed)
        if len(reads) != 1 or reads[0] is None:
            return None
        dims = _read_zarr_dims(own, reads[0])
    except (duckdb.Error, _NotOneTable):
        return None
    if dims is not None and renamed & {d.lower() for d in dims}:
        return None  # `lat AS time, time AS lat`: the names are the table's, the columns are not
    return dims


class _NotOneTable(Exception):
    """The relation's tables cannot be told with certainty (an unparsed statement, an
    ambiguous name, views nested too deep): its dimensions are the caller's to say."""


class _OwnConnection:
    """SQL run on the connection the relation belongs to, where its views and mounts are (a
    relation of another connection than `Source.connection` names views that one lacks).

    DuckDB 2's relation keeps that connection as `_con`; 1.5's has only `relation.query`,
    which runs SQL there beside a temporary view of the relation, dropped at once."""

    _PROBE = "__zarrsql_dims_probe"

    def __init__(self, source: Source) -> None:
        from zarrsql.engine.connection import wrapper_of

        duck = getattr(source.relation, "_con", None)
        self.relation = source.relation
        self.duck = duck if isinstance(duck, duckdb.DuckDBPyConnection) else None
        self.wrapper = (wrapper_of(self.duck) if self.duck is not None else None) or source.connection

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of the query `sql` on the relation's connection."""
        if self.duck is not None:
            return self.duck.execute(sql).fetchall()
        try:
            result = self.relation.query(self._PROBE, sql)
            return [] if result is None else result.fetchall()
        finally:
            self.relation.query(self._PROBE, f"DROP VIEW IF EXISTS {self._PROBE}")


#: DuckDB's kinds of table reference that read rows themselves (not a join or a subquery).
_TABLE_READS = frozenset(
    {"BASE_TABLE", "TABLE_FUNCTION", "EXPRESSION_LIST", "COLUMN_DATA", "SHOW_REF", "DELIM_GET", "BOUND_TABLE_REF"}
)
#: Views and CTEs followed from the relation down to `read_zarr` (a view over a mount's view
#: over ...); deeper (or a recursive CTE) is not followed, and the caller names the dimensions.
MAX_NESTING = 8


def _parsed(own: _OwnConnection, sql: str) -> dict[str, Any]:
    """DuckDB's parse of `sql` (`json_serialize_sql`): its one statement, without parameters."""
    from zarrsql.engine.sqltext import quote_text

    ((text,),) = own.rows(f"SELECT json_serialize_sql({quote_text(sql)})")
    doc = json.loads(text)
    statements = doc.get("statements") or []
    if doc.get("error") or len(statements) != 1 or statements[0].get("named_param_map"):
        raise _NotOneTable("not one SELECT DuckDB parses")
    return statements[0]  # type: ignore[no-any-return]


def _reads(own: _OwnConnection, tree: Any, ctes: dict[str, Any], depth: int, renamed: set[str]) -> list[str | None]:
    """Every table the rows of `tree` come from (its FROM clauses and set operations), once per
    read: the SQL of a `read_zarr` call (`SELECT * FROM read_zarr(...)`), or None for any other
    table. `ctes`: the CTEs in scope. `renamed` gets the names, both old and new, of every
    column a select list on the way renames (`lat AS time`, `* REPLACE (air AS lon)`)."""
    if depth > MAX_NESTING:
        raise _NotOneTable("views or CTEs nested too deep")
    if isinstance(tree, list):
        return [r for item in tree for r in _reads(own, item, ctes, depth, renamed)]
    if not isinstance(tree, dict) or "class" in tree:
        return []  # an expression: a subquery in it filters or computes values, it adds no rows
    kind = tree.get("type")
    if tree.get("column_name_alias") or kind == "PIVOT":  # may give a dimension's name to another column
        raise _NotOneTable("a table whose columns are renamed or reshaped")
    if isinstance(kind, str) and kind in _TABLE_READS:
        return _table_reads(own, tree, ctes, depth, renamed)
    renamed |= _renames(tree.get("select_list") or [])
    defined = (tree.get("cte_map") or {}).get("map") or []
    if defined:  # read where they are named, once per naming
        ctes = {**ctes, **{str(e["key"]).lower(): e["value"] for e in defined}}
    return [r for key, value in tree.items() if key != "cte_map" for r in _reads(own, value, ctes, depth, renamed)]


def _renames(select_list: list[Any]) -> set[str]:
    """The names (lowercase, old and new) of the columns a select list renames."""
    out: set[str] = set()
    for item in select_list:
        if not isinstance(item, dict):
            continue
        if item.get("class") == "COLUMN_REF":
            name, alias = str((item.get("column_names") or [""])[-1]).lower(), str(item.get("alias") or "").lower()
            if alias and alias != name:
                out |= {name, alias}
        elif item.get("class") == "STAR":
            for entry in item.get("replace_list") or []:
                value = entry.get("value") or {}
                source = value.get("column_names") if value.get("class") == "COLUMN_REF" else None
                if not source or str(source[-1]).lower() != str(entry.get("key")).lower():
                    out.add(str(entry.get("key")).lower())
            for entry in item.get("rename_list") or []:
                out |= {str((entry.get("key") or {}).get("column", "")).lower(), str(entry.get("value")).lower()}
    return out


def _table_reads(
    own: _OwnConnection, ref: dict[str, Any], ctes: dict[str, Any], depth: int, renamed: set[str]
) -> list[str | None]:
    """What one table reference reads: a `read_zarr` call, or what the CTE or view it names
    reads, or an unclaimed `'x.zarr'` string's store; else one other table."""
    from zarrsql.engine.sqltext import claimable, quote_text

    if ref["type"] == "TABLE_FUNCTION":
        function = ref.get("function") or {}
        plain = not function.get("schema") and not function.get("catalog")
        return [_call_sql(own, ref) if plain and str(function.get("function_name")).lower() == "read_zarr" else None]
    if ref["type"] != "BASE_TABLE":
        return [None]
    name, schema, database = str(ref["table_name"]), ref.get("schema_name") or "", ref.get("catalog_name") or ""
    if not schema and not database and name.lower() in ctes:
        if ctes[name.lower()].get("aliases"):
            raise _NotOneTable("a CTE whose columns are renamed")
        return _reads(own, ctes[name.lower()], ctes, depth + 1, renamed)
    found = own.rows(_catalog_query(name, schema, database))
    if len(found) > 1 or (found and found[0][0] is None):
        return [None]  # a table, or a name that is not one view
    if found:
        return _reads(own, _parsed(own, _view_body(str(found[0][0]))), {}, depth + 1, renamed)
    if not schema and not database and claimable(name):  # a `'x.zarr'` string not claimed yet
        return [f"SELECT * FROM read_zarr({quote_text(name)})"]
    return [None]  # a DataFrame or another object DuckDB finds by its name


def _catalog_query(name: str, schema: str, database: str) -> str:
    """The SQL (NULL for a table) of each table or view the reference `[database.][schema.]name`
    can mean: unqualified, the temporary ones and the current schema's; `s.name` is schema `s`
    of the current database or the main schema of database `s`."""
    from zarrsql.engine.sqltext import quote_text

    n, s, d = quote_text(name.lower()), quote_text(schema.lower()), quote_text(database.lower())
    if database:
        where = f"lower(database_name) = {d} AND lower(schema_name) = {s if schema else quote_text('main')}"
    elif schema:
        where = (
            f"(lower(database_name) = {s} AND schema_name = 'main') OR "
            f"(database_name = current_database() AND lower(schema_name) = {s})"
        )
    else:
        where = "(database_name = 'temp' OR database_name = current_database()) AND schema_name = current_schema()"
    return (
        f"SELECT sql FROM duckdb_views() WHERE lower(view_name) = {n} AND ({where}) "
        f"UNION ALL SELECT NULL FROM duckdb_tables() WHERE lower(table_name) = {n} AND ({where})"
    )


def _view_body(sql: str) -> str:
    """The query of a view's `CREATE VIEW name AS <query>;` (a view that renames the columns,
    `name(a, b)`, is not followed: its names are not the table's)."""
    from zarrsql.engine.sqltext import tokens

    toks = tokens(sql)
    head = next((k for k, t in enumerate(toks) if t.kind == "keyword" and t.text.upper() == "AS"), None)
    if head is None or any(t.text == "(" for t in toks[:head]):
        raise _NotOneTable("a view with column names of its own")
    return sql[toks[head].pos + len(toks[head].text) :].strip().rstrip(";")


def _call_sql(own: _OwnConnection, ref: dict[str, Any]) -> str:
    """`SELECT * FROM read_zarr(...)` of a parsed `read_zarr` table reference."""
    from zarrsql.engine.sqltext import quote_text

    template = _parsed(own, "SELECT * FROM t")
    template["node"]["from_table"] = {**ref, "alias": ""}
    doc = {"error": False, "statements": [template]}
    ((text,),) = own.rows(f"SELECT json_deserialize_sql({quote_text(json.dumps(doc))})")
    return str(text)


def _read_zarr_dims(own: _OwnConnection, call_sql: str) -> tuple[str, ...] | None:
    """The dimensions of the table the one `read_zarr` call of `call_sql` opens (its
    arguments evaluated by DuckDB, as the call's own would be)."""
    from zarrsql.engine import params
    from zarrsql.engine.functions import FUNCTIONS
    from zarrsql.engine.sqltext import zarrsql_calls
    from zarrsql.scan import open_table
    from zarrsql.store import using_opener

    calls = [c for c in zarrsql_calls(call_sql, FUNCTIONS) if c.function == "read_zarr"]
    if len(calls) != 1:
        return None
    args = []
    for a in calls[0].arguments:
        key = "store" if a.name is None else a.name.strip('"')
        args.append(f"'{key}': {a.text}")
    ((arg_json,),) = own.rows(f"SELECT to_json({{{', '.join(args)}}})::VARCHAR")
    opener = getattr(getattr(own.wrapper, "_state", None), "opener", None)  # a mount's storage options
    try:
        with using_opener(opener):
            scan = open_table(params.read_request(params.parse_args(arg_json)))
    except ZarrSQLError:
        return None
    return tuple(scan.table.dims)


# -- column kinds --------------------------------------------------------------------------
#: How a column's values live in a dense array. "float", "int", "bool", "time", "string".
Kind = str


def kind_of(name: str, arrow_type: pa.DataType, target: str) -> Kind:
    """The kind of array a column becomes, or an UnwritableColumnError naming it and the fix."""
    t = arrow_type
    if pa.types.is_floating(t) or pa.types.is_decimal(t):  # DECIMAL as float64, as DuckDB's .df() does
        return "float"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "time"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_dictionary(t) and pa.types.is_string(t.value_type):
        return "string"
    where = "a grid store's dense arrays" if target == "grid" else "an xarray Dataset's dense arrays"
    if pa.types.is_null(t):  # a bare NULL: DuckDB 2 gives it no type (1.5 made it an INTEGER)
        raise UnwritableColumnError(
            f"column '{name}' is a bare NULL (type null), with no type for {where} to hold it in; give it one, "
            f'e.g. NULL::DOUBLE AS "{name}" (every cell missing), or drop it from the SELECT'
        )
    hint = "drop it from the SELECT, or CAST it to a number or text"
    if pa.types.is_interval(t) or pa.types.is_duration(t):  # no layout stores a duration as it is
        hint = f'drop it from the SELECT, or CAST it to a number of a unit, e.g. epoch_us("{name}") (microseconds)'
    # the table layout stores lists (cast to a fixed size), structs (points), dictionaries and
    # geometries, never durations or maps: point there only when it can help
    unstorable = pa.types.is_interval(t) or pa.types.is_duration(t) or pa.types.is_map(t)
    table = ", or write it with layout='table'" if target == "grid" and not unstorable else ""
    raise UnwritableColumnError(f"column '{name}' has type {t}, which {where} cannot hold; {hint}{table}")


def arrow_reader(relation: duckdb.DuckDBPyRelation, rows: int = BATCH_ROWS) -> pa.RecordBatchReader:
    """The relation's rows as an Arrow stream (DuckDB 2: `to_arrow_reader`; 1.5: `fetch_record_batch`)."""
    stream = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
    return stream(rows)


def schema_of(source: Source) -> pa.Schema:
    """The Arrow schema of the relation (no rows read)."""
    reader = arrow_reader(source.relation.limit(0), 1)
    try:
        return reader.schema
    finally:
        reader.close()


def batches(source: Source, relation: duckdb.DuckDBPyRelation | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of `relation` (default: the source's), streamed batch by batch, never the
    whole result at once. A query that fails while streaming raises `query_error`."""
    rel = source.relation if relation is None else relation
    reader = None
    try:
        reader = source.open_reader(rel)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            if batch.num_rows:
                yield batch
    except duckdb.InterruptException:
        raise  # Ctrl-C: not the query's failure
    except (duckdb.Error, OSError, pa.ArrowException) as err:
        # DuckDB's error, raised by the first batch or passed through the Arrow stream (as an
        # OSError without an errno): the query's, not the disk's
        raise query_error(source, err) from err
    finally:
        if reader is not None:
            reader.close()  # a writer that stops early (a duplicate found) leaves no open result


#: Where DuckDB's message quotes the SQL it ran ("LINE 1: SELECT ...", a caret line below).
_SQL_QUOTE = re.compile(r"\n\s*LINE \d+:.*", re.DOTALL)


def query_error(source: Source, err: BaseException) -> Exception:
    """What a query that failed while a writer read it is raised as: the error of a zarrsql
    scan the query reads, as itself; otherwise a `WriteError` with DuckDB's message (raise it
    `from err`). DuckDB's quote of the SQL is left out: in a writer's own query (the relation
    joined to coordinates, its wide numbers cast) that SQL is zarrsql's, not the user's, and
    the message says what failed without it."""
    taken = getattr(source.connection, "take_scan_error", None)
    scan_error = taken() if taken is not None else None
    if scan_error is not None:
        return scan_error.with_traceback(None)  # type: ignore[no-any-return]
    message = _SQL_QUOTE.sub("", str(err)).strip()
    if source.store is None:
        return WriteError(f"the query failed while its rows were read: {message}; fix the query")
    return WriteError(
        f"the query failed while its rows were written to '{source.store}': {message}; fix the query (nothing "
        "was written: a new store is not created, an append is rolled back)"
    )
