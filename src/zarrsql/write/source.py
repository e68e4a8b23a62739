"""What a writer reads: the relation (or SQL text) to write, its dimensions and its columns.

`source_of(relation_or_sql, connection)` gives the DuckDB relation and the zarrsql
connection it runs on. `dims_of(source, dims)` checks given dimension names against the
relation's columns, or takes them from the one zarrsql table the relation reads when it
kept all of that table's dimensions (found from the relation's SQL text); otherwise it asks
for `dims=`. `kinds_of(...)` sorts every other column into what a dense array can hold.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from zarrsql.errors import ParameterError, UnwritableColumnError, WriteError, ZarrSQLError

#: Rows per streamed batch: memory holds one batch besides the output, and a batch is large
#: enough that the per-batch numpy work is not dominated by Python overhead.
BATCH_ROWS = 1 << 17


@dataclass(frozen=True)
class Source:
    """A relation to write and the connection it belongs to."""

    relation: duckdb.DuckDBPyRelation
    connection: Any  # a zarrsql.Connection

    @property
    def columns(self) -> list[str]:
        return list(self.relation.columns)


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
    """The dimensions of the one zarrsql table the relation reads, or None when it reads none
    or several (then which columns are dimensions is the caller's to say)."""
    from zarrsql.engine.functions import FUNCTIONS
    from zarrsql.engine.sqltext import zarrsql_calls

    try:
        text = source.relation.sql_query()
    except duckdb.Error:
        return None
    calls = [c for c in zarrsql_calls(text, FUNCTIONS) if c.function == "read_zarr"]
    if len(calls) != 1:
        return None
    args = []
    for a in calls[0].arguments:
        key = "store" if a.name is None else a.name.strip('"')
        args.append(f"'{key}': {a.text}")
    con = source.connection.duckdb
    try:
        ((arg_json,),) = con.sql(f"SELECT to_json({{{', '.join(args)}}})::VARCHAR").fetchall()
    except duckdb.Error:
        return None
    from zarrsql.engine import params
    from zarrsql.scan import open_table

    try:
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
    hint = "drop it from the SELECT, or CAST it to a number or text"
    if pa.types.is_interval(t) or pa.types.is_duration(t):  # no layout stores a duration as it is
        hint = f'drop it from the SELECT, or CAST it to a number of a unit, e.g. epoch_us("{name}") (microseconds)'
    # the table layout stores lists (cast to a fixed size), structs (points), dictionaries and
    # geometries, never durations or maps: point there only when it can help
    unstorable = pa.types.is_interval(t) or pa.types.is_duration(t) or pa.types.is_map(t)
    table = ", or write it with layout='table'" if target == "grid" and not unstorable else ""
    where = "a grid store's dense arrays" if target == "grid" else "an xarray Dataset's dense arrays"
    raise UnwritableColumnError(f"column '{name}' has type {t}, which {where} cannot hold; {hint}{table}")


def arrow_reader(relation: duckdb.DuckDBPyRelation, rows: int = BATCH_ROWS) -> pa.RecordBatchReader:
    """The relation's rows as an Arrow stream (DuckDB 2: `to_arrow_reader`; 1.5: `fetch_record_batch`)."""
    stream = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
    return stream(rows)


def schema_of(source: Source) -> pa.Schema:
    """The Arrow schema of the relation (no rows read)."""
    reader = arrow_reader(source.relation.limit(0), 1)
    schema = reader.schema
    reader.read_all()
    return schema


def batches(source: Source, relation: duckdb.DuckDBPyRelation | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of `relation` (default: the source's), streamed batch by batch, never the
    whole result at once. A zarrsql scan that fails while streaming re-raises as itself."""
    rel = source.relation if relation is None else relation
    reader = None
    try:
        reader = arrow_reader(rel)
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            if batch.num_rows:
                yield batch
    except (duckdb.Error, OSError, pa.ArrowException) as err:
        taken = getattr(source.connection, "take_scan_error", None)
        zerr = taken() if taken is not None else None
        if zerr is not None:
            raise zerr.with_traceback(None) from err
        if isinstance(err, duckdb.Error):
            raise
        # DuckDB's error, passed through the Arrow stream as an OSError: the query's, not the disk's
        raise WriteError(f"the query failed while its rows were written: {err}; no row was written") from err
    finally:
        if reader is not None:
            reader.close()  # a writer that stops early (a duplicate found) leaves no open result
