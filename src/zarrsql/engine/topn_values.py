"""Top rows by a data column: `ORDER BY t2m DESC LIMIT 10` reads every column only where they lie.

DuckDB answers `SELECT * ... ORDER BY t2m DESC LIMIT 10` with a Top-N operator over every
row, so the scan decoded every chunk of every column for ten rows (1.2 s on the ERA5-like
store, where DuckDB on a Parquet copy skips row groups by their statistics and takes 0.12 s).
The connection therefore finds the cells first: `scan/first_cells.py` reads the ORDER BY
column alone and returns cells among which the first rows lie, with the statement's
direction and NULL placement. The statement then gets, per axis, `<coordinate> IN (<the
values of those cells' positions>)`, which DuckDB pushes into the scan: the rows kept are a
superset of those cells (every combination of the positions listed, every position holding
a listed value), so sorting them with the statement's own ORDER BY and LIMIT gives its first
rows (ties aside, as SQL allows).

This runs for the shape `topn.py` rewrites (one zarrsql table whose rows are its cells, ORDER
BY then LIMIT, scalar items) when the first ORDER BY key is a numeric data column. A WHERE may
read dimension columns (and one-dimensional coordinates): the cells are then looked for among
those it keeps (`where_cells.py`), and the statement keeps its WHERE beside the IN lists; a
WHERE on a data variable declines. With one key, any of the rows tied at the last value will
do; with more keys every tied cell is kept, and the statement runs as written when that is
more than `MAX_CELLS`. Declined too: more than `MAX_ROWS` rows wanted, a string (labels)
dimension, a listed position whose coordinate is NULL or NaN or whose text does not read back
as its value. The cells come from the store as it was when the statement was rewritten; the
check `topn.py` adds makes a relation fetched after a change fail and say to run the statement
again.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from zarrsql.decode.logical import Labels
from zarrsql.engine.answers import _axis_table, statement_reads
from zarrsql.engine.exact_literals import exact_texts
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.engine.sqltext import quote_ident, quote_text
from zarrsql.engine.where_cells import POSITION, cells_kept, with_positions
from zarrsql.expand.arrow import to_arrow
from zarrsql.expand.columns import Column
from zarrsql.scan.first_cells import ORDERABLE, Wanted, column_keys, first_cells

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection
    from zarrsql.scan import TableScan

#: The most rows (LIMIT plus OFFSET) whose cells are looked for first.
MAX_ROWS = 10_000
#: The most cells kept when every tie of the last row is needed.
MAX_CELLS = 50_000


def bound(
    conn: Connection,
    scan: TableScan,
    column: Column,
    order: tuple[bool, bool, bool],
    rows: int,
    where: tuple[dict[str, Any], str] | None = None,
) -> tuple[str, list[tuple[str, str | None]]]:
    """The condition keeping the cells of the first `rows` rows by data column `column` (see
    the module docstring), as SQL text, and the (key, token) of the column's chunks read to
    find them, which the statement's check compares with the store's at each run. `order` is
    (descending, NULLs first, the only ORDER BY key); `where` the statement's WHERE tree and
    the table's alias, whose cells alone are looked at (`where_cells`)."""
    if not scan.rows_are_cells or scan.base_predicate is not None or not scan.num_rows:
        raise Decline("rows that are not all the cells of the table, or none")
    if column.data is None or column.logical not in ORDERABLE:
        raise Decline("not a numeric data column")
    _check_listable(scan)
    kept_by, cells_in = (None, scan.num_rows) if where is None else cells_kept(conn, scan, *where)
    if rows > MAX_ROWS or rows * 8 > cells_in:
        raise Decline("too many rows wanted to look for their cells first")
    # a remote store's token is a request per chunk, before the query: not taken, as a remote
    # table's other state is not checked either (`scan/validity.py`)
    keys = [] if getattr(scan.store, "remote", False) else column_keys(scan, column, kept_by)
    if keys is None:
        raise Decline("a column whose chunk keys are not known ahead (its freshness cannot be checked)")
    descending, nulls_first, alone = order
    wanted = Wanted(column, descending, nulls_first, rows, all_ties=not alone)
    with statement_reads():  # the statement reads the same chunks: their failure is its own
        tokens = list(zip(keys, scan.store.token_many(keys), strict=True)) if keys else []  # before the reads
        cells = first_cells(scan, wanted, MAX_CELLS, where=kept_by)
    if cells is None or not len(cells):
        raise Decline("too many cells tied with the last row wanted")
    shape = scan.table.shape
    at = np.unravel_index(cells, shape)
    conditions = []
    for k, n in enumerate(shape):
        kept = np.unique(at[k])
        if len(kept) < n:
            conditions.append(_listed(conn, scan, k, kept))
    if not conditions:
        raise Decline("the cells found lie along every position")
    return " AND ".join(conditions), tokens


def _check_listable(scan: TableScan) -> None:
    """Decline, before a chunk is read, what `_listed` could not write as an IN list: a string
    dimension and, on DuckDB 1.5, a coordinate holding NaN (1.5 applies a pushed filter with
    Arrow's NaN rules) or a UBIGINT one of 2**63 or more (1.5 has no Arrow form for such a
    list, `failures.refused_pushdown`). Found only after the search, the statement ran as
    written and read the column a second time."""
    for k in range(len(scan.table.shape)):
        if scan.positional[k]:
            continue
        column = next(c for c in scan.columns if c.dim == k and c.derived is None)
        if isinstance(column.logical, Labels):
            raise Decline("a string dimension (its column holds labels)")
        if HAS_SOURCES:
            continue
        with statement_reads():  # a remote table's coordinates are read at first use
            values = np.asarray(scan.dims[k].values)
        if values.dtype.kind == "f" and bool(np.isnan(values).any()):
            raise Decline("a coordinate holding NaN, on DuckDB 1.5 (Arrow's NaN rules filter it)")
        if values.dtype == np.uint64 and len(values) and int(values.max()) >= 2**63:
            raise Decline("a UBIGINT coordinate of 2**63 or more, on DuckDB 1.5 (no Arrow form for its IN list)")


def _listed(conn: Connection, scan: TableScan, k: int, kept: np.ndarray) -> str:
    """`<axis k's coordinate> IN (<its values at positions kept>)`, each a literal of the
    column's type whose text reads back as the value."""
    column = next(c for c in scan.columns if c.dim == k and c.derived is None)
    name = quote_ident(column.name)
    if scan.positional[k]:
        return f"{name} IN ({', '.join(str(int(p)) for p in kept)})"
    table = _axis_table(scan, k, []).select([column.name])  # labels and 1.5's NaN: `_check_listable`
    texts = _texts(conn, table, column.name, kept)
    return f"{name} IN ({', '.join(texts)})"


def _texts(conn: Connection, table: pa.Table, column: str, kept: np.ndarray) -> list[str]:
    """The distinct values of `column` at positions `kept` as literals `CAST('<text>' AS
    <type>)`, found by DuckDB over the column as the scan hands it (see `exact_literals`).
    DuckDB picks the positions too, and the Arrow arrays are wrapped, not built by `pa.array`
    or `take`: those import pandas or pyarrow.compute, tenths of a second in a first statement."""
    name = "__zarrsql_cells_" + uuid.uuid4().hex[:12]
    conn._con.register(name, with_positions(table))
    wanted = to_arrow(np.asarray(kept, dtype=np.int64), None, "int64")
    conn._con.register(name + "_kept", pa.Table.from_arrays([wanted], names=[POSITION]))
    try:
        kind, texts = exact_texts(
            conn,
            f"SELECT {quote_ident(column)} AS v FROM {quote_ident(name)} "
            f"SEMI JOIN {quote_ident(name + '_kept')} USING ({POSITION})",
        )
    finally:
        conn._con.unregister(name)
        conn._con.unregister(name + "_kept")
    return [f"CAST({quote_text(text)} AS {kind})" for text in texts]
