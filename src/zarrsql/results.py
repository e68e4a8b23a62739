"""How the command line writes a statement's result: a bounded table, or csv, json, parquet.

What callers rely on:
- a table streams the result as Arrow batches, keeps only the rows it shows (the first and
  last `max_rows / 2`) and counts the others, so a result of millions of rows costs the
  memory of a few batches and the footer gives the true count. Each value shows as DuckDB's
  `CAST(... AS VARCHAR)` of the result's own value: columns of a type that Arrow carries
  exactly are cast for the shown rows only, the others (UHUGEINT, BIT, TIME WITH TIME ZONE,
  nested types, ...) by DuckDB as the result streams, since Arrow would change them;
- a `.txt` table given `.gz` or `.zst` after it is compressed (gzip, zstd) like csv and json;
  parquet compresses inside the file, so `.parquet.gz` and `.parquet.zst` are refused;
- csv, json (one object per line) and parquet are written by DuckDB's own `COPY` of the
  query, so lists, structs and times look as DuckDB writes them. Standard output gets them
  through a temporary file: `COPY ... TO '/dev/stdout'` would truncate a file the shell
  redirected standard output to, and write over what was printed before;
- `SHOW TABLES` and `SHOW ALL TABLES` leave out zarrsql's internal `__zarrsql_*` names.

DuckDB and pyarrow are imported inside the functions: the command line's `--help` stays light.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from zarrsql import boxtable
from zarrsql.errors import ParameterError

FORMATS = ("table", "csv", "json", "parquet")
#: File extensions `--output` infers a format from (a `.gz` or `.zst` after them compresses).
EXTENSIONS = {
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".parquet": "parquet",
    ".txt": "table",
}
_COMPRESSED = (".gz", ".zst")
#: DuckDB types whose values come back from an Arrow round trip unchanged, so their text can
#: be cast from the few rows a table keeps. Any other type is cast to text by DuckDB while the
#: result streams: Arrow has no UHUGEINT (its values come back wrapped, the largest as -1),
#: carries BIT as bytes and TIME WITH TIME ZONE without its offset, and nested types may hold
#: such values. Only plain types tested against DuckDB's own text are listed.
_ARROW_EXACT = frozenset(
    {
        "BOOLEAN",
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "FLOAT",
        "DOUBLE",
        "VARCHAR",
        "BLOB",
        "DATE",
        "TIME",
        "TIMESTAMP",
        "TIMESTAMP_NS",
        "TIMESTAMP WITH TIME ZONE",
    }
)
_DECIMAL = re.compile(r"^DECIMAL\(\d+,\d+\)$")
_COPY_OPTIONS = {"csv": "FORMAT csv, HEADER", "json": "FORMAT json", "parquet": "FORMAT parquet"}
#: Rows per Arrow batch while a table streams: bounds what is held for the last rows.
BATCH_ROWS = 100_000
#: Statement types run for their result; others (CREATE, INSERT, ...) print nothing.
_RESULT_TYPES = frozenset({"SELECT", "EXPLAIN", "PRAGMA", "CALL", "EXECUTE"})
_SHOW_TABLES = re.compile(r"^\s*show\s+(all\s+)?tables\b", re.IGNORECASE)
_INTERNAL_PREFIX = "__zarrsql_"
_HELD = "__zarrsql_cli_result"


@dataclass(frozen=True, slots=True)
class Output:
    """Where a result goes: `format` (one of FORMATS), `path` (None: standard output) and
    `max_rows`, the rows a table shows."""

    format: str
    path: str | None
    max_rows: int

    def shows_progress(self) -> bool:
        """DuckDB draws its progress bar on standard output: only over a table on a terminal."""
        return self.format == "table" and self.path is None and sys.stdout.isatty()


def output_of(fmt: str | None, path: str | None, max_rows: int) -> Output:
    """Check the output options before any work: format known or inferred, file writable."""
    if fmt is None:
        fmt = "table" if path is None else format_of(path)
    if fmt == "parquet" and path is None:
        raise ParameterError("--format parquet writes a binary file: give --output FILE.parquet")
    if fmt == "parquet" and path is not None and path.lower().endswith(_COMPRESSED):
        _refuse_compressed_parquet(path)
    if path is not None:
        _check_target(path)
    return Output(fmt, path, max_rows)


def format_of(path: str) -> str:
    """The format an `--output` file name asks for (`x.csv`, `x.json`, `x.csv.gz`, ...)."""
    stem, ext = os.path.splitext(path.lower())
    if ext in _COMPRESSED:
        ext = os.path.splitext(stem)[1]
    if ext not in EXTENSIONS:
        names = ", ".join(EXTENSIONS)
        raise ParameterError(
            f"cannot tell the output format from the file name '{path}': end it in one of {names}, "
            f"or give --format {'|'.join(FORMATS)}"
        )
    return EXTENSIONS[ext]


def _refuse_compressed_parquet(path: str) -> NoReturn:
    """A parquet file compresses its own pages; gzip or zstd around the whole file would give
    a file that no parquet reader (DuckDB, pandas, Spark) opens, so the name is refused."""
    plain = os.path.splitext(path)[0]
    raise ParameterError(
        f"cannot write --output '{path}': parquet compresses inside the file (snappy by default), and a parquet "
        f"file compressed as a whole opens in no parquet reader; name it '{plain}', or for zstd inside the file "
        f"give the SQL COPY (SELECT ...) TO '{plain}' (FORMAT parquet, COMPRESSION zstd)"
    )


def _check_target(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ParameterError(
            f"cannot write --output '{path}': the folder '{folder}' does not exist; create it or choose another path"
        )
    if os.path.isdir(path):
        raise ParameterError(f"cannot write --output '{path}': it is a folder; give a file name")


def run_sql(con: Any, sql: str, output: Output) -> None:
    """Run every statement of `sql` on the zarrsql connection `con`; write the last one's result."""
    statements = _statements(con, sql)
    if not statements:
        raise ParameterError("the SQL holds no statement (only blanks or comments); pass one, e.g. SHOW TABLES")
    for query, _ in statements[:-1]:
        _run_to_end(con, query)
    last, kind = statements[-1]
    text = last.strip().rstrip(";").rstrip()
    if _SHOW_TABLES.match(text):
        text = f"SELECT * FROM ({text}\n) WHERE NOT starts_with(name, '{_INTERNAL_PREFIX}')"
    if kind == "SELECT" and output.format != "table":
        copy(con, text, output)
        return
    rel = con.sql(text)
    if rel is None or (kind not in _RESULT_TYPES and rel.columns == ["Count"]):
        return  # a CREATE or INSERT: DuckDB 2 returns its row count, DuckDB 1.5 nothing
    if output.format == "table":
        write_table(con, rel, output, plan=kind == "EXPLAIN")
        return
    con.duckdb.register(_HELD, _arrow_table(rel))  # EXPLAIN, PRAGMA, ...: rows already held
    try:
        copy(con, f"FROM {_HELD}", output)
    finally:
        con.duckdb.unregister(_HELD)


def _statements(con: Any, sql: str) -> list[tuple[str, str]]:
    """(text, type name) of each statement of `sql`, as DuckDB's parser splits and names them,
    except a COPY to Zarr, found as the zarrsql connection finds it from Python (`copy_to_zarr`):
    its options are zarrsql's, and DuckDB's parser refuses some (`LAYOUT table`, `MODE
    create`: reserved words), so its text goes to the connection unparsed, as from Python."""
    from zarrsql.engine.sqltext import copy_to_zarr, tokens

    found: list[tuple[str, str]] = []
    rest = 0  # where the text not yet given to DuckDB's parser starts
    begin = 0
    ends = [t.pos for t in tokens(sql) if t.text == ";"]  # a tokenizer's `;`: never one in a string
    for end in [*ends, len(sql)]:
        if copy_to_zarr(sql[begin:end]) is not None:
            found += _parsed(con, sql[rest:begin])
            found.append((sql[begin:end], "COPY"))
            rest = end + 1
        begin = end + 1
    return found + _parsed(con, sql[rest:])


def _parsed(con: Any, sql: str) -> list[tuple[str, str]]:
    return [(s.query, s.type.name) for s in con.duckdb.extract_statements(sql)] if sql.strip() else []


def _run_to_end(con: Any, query: str) -> None:
    """Run a statement whose result is not shown. DuckDB 2 streams `execute`'s result, which
    must be run to its end (`complete`) before the next statement; 1.5 has run it already."""
    con.execute(query)
    complete = getattr(con.duckdb, "complete", None)
    if complete is not None:
        with scan_errors(con):
            complete()


def copy(con: Any, query: str, output: Output) -> None:
    """Write the rows of `query` with DuckDB's COPY (see the module docstring)."""
    options = _COPY_OPTIONS[output.format]
    if output.path is not None:
        con.execute(f"COPY ({query}\n) TO {_quote(output.path)} ({options})")
        return
    with tempfile.TemporaryDirectory(prefix="zarrsql-") as folder:
        target = os.path.join(folder, f"result.{output.format}")
        con.execute(f"COPY ({query}\n) TO {_quote(target)} ({options})")
        sys.stdout.flush()
        with open(target, "rb") as f:
            shutil.copyfileobj(f, sys.stdout.buffer)
        sys.stdout.buffer.flush()


def write_table(con: Any, rel: Any, output: Output, *, plan: bool = False) -> None:
    """Stream `rel` and write it as a box table of at most `output.max_rows` rows; an
    EXPLAIN's `plan` is written as DuckDB draws it (a table cell would flatten its lines)."""
    if plan:
        text = "".join(f"{value}\n" for _, value in rel.fetchall())
    else:
        text = boxtable.render(collect(con, rel, output.max_rows))
    if output.path is None:
        sys.stdout.write(text)
        return
    _write_text(output.path, text)


def _write_text(path: str, text: str) -> None:
    """Write a table's text to `path`, compressed when the name ends in `.gz` (gzip) or
    `.zst` (zstd), as COPY compresses csv and json. The text is a few rows: one piece."""
    data = text.encode("utf-8")
    suffix = os.path.splitext(path.lower())[1]
    if suffix == ".gz":
        data = gzip.compress(data)
    elif suffix == ".zst":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    with open(path, "wb") as f:
        f.write(data)


def collect(con: Any, rel: Any, max_rows: int) -> boxtable.Shown:
    """The rows a table shows, as DuckDB's text of each value, and the result's row count."""
    import pyarrow as pa

    head, tail = (max_rows + 1) // 2, max_rows // 2
    kept = _Kept(max_rows, tail)
    types = [str(t) for t in rel.types]
    streamed = _inexact_as_text(rel, types)
    # DuckDB 2 streams with `to_arrow_reader`, 1.5 with `fetch_record_batch`
    stream = getattr(streamed, "to_arrow_reader", None) or streamed.fetch_record_batch
    with scan_errors(con):
        reader = stream(BATCH_ROWS)
        for batch in reader:
            kept.add(batch)
    if kept.total <= max_rows:
        rows, gap = pa.Table.from_batches(kept.first, reader.schema), None
    else:
        first = pa.Table.from_batches(kept.first, reader.schema).slice(0, head)
        last = pa.Table.from_batches(list(kept.last), reader.schema)
        rows, gap = pa.concat_tables([first, last.slice(last.num_rows - tail)]), head
    return boxtable.Shown(rel.columns, types, _texts(con, rows), kept.total, gap)


def _inexact_as_text(rel: Any, types: list[str]) -> Any:
    """`rel` with the columns Arrow would change (see `_ARROW_EXACT`) cast to text by DuckDB,
    on the same relation: the query runs once. Unchanged when every column is exact."""
    exact = [t in _ARROW_EXACT or bool(_DECIMAL.match(t)) for t in types]
    if all(exact):
        return rel
    return rel.project(
        ", ".join(f"#{i}" if keep else f"CAST(#{i} AS VARCHAR)" for i, keep in enumerate(exact, start=1))
    )


class _Kept:
    """The first `first_rows` rows and the last `last_rows` rows of a stream, and its length."""

    def __init__(self, first_rows: int, last_rows: int) -> None:
        self.first: list[Any] = []
        self.last: deque[Any] = deque()
        self.total = 0
        self._room, self._last_rows, self._held = first_rows, last_rows, 0

    def add(self, batch: Any) -> None:
        if self._room > 0:
            self.first.append(batch.slice(0, self._room))
            self._room -= self.first[-1].num_rows
        self.total += batch.num_rows
        if self._last_rows == 0 or batch.num_rows == 0:
            return
        self.last.append(batch)
        self._held += batch.num_rows
        while self._held - self.last[0].num_rows >= self._last_rows:
            self._held -= self.last.popleft().num_rows


@contextmanager
def scan_errors(con: Any) -> Iterator[None]:
    """Streaming with DuckDB's own reader wraps a zarrsql scan's failure in DuckDB's text:
    re-raise the zarrsql error itself."""
    import duckdb
    import pyarrow as pa

    try:
        yield
    except (OSError, pa.ArrowException, duckdb.Error):
        err = con.take_scan_error()
        if err is not None:
            raise err.with_traceback(None) from None
        raise


def _texts(con: Any, table: Any) -> list[tuple[str | None, ...]]:
    """Each value as DuckDB writes it as text (`CAST(... AS VARCHAR)`), NULL as None; the
    columns are named by position, so two columns of one name stay apart."""
    if table.num_rows == 0 or table.num_columns == 0:
        return []
    rel = con.duckdb.from_arrow(table)
    return rel.project(", ".join(f"CAST(#{i} AS VARCHAR)" for i in range(1, table.num_columns + 1))).fetchall()


def _arrow_table(rel: Any) -> Any:
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
