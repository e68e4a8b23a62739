"""Coordinate values written into a rewritten statement, as literals that select them exactly.

The top-n rewrites (`topn`, `topn_values`) find coordinate values in the axis tables and
then bound the statement with them as text: `time <= CAST('2020-01-03 00:00:00' AS
TIMESTAMP)`. That is only right when the text, cast back to the column's type, is not
distinct from the value found. A float whose shortest text rounds, a NULL, a NaN (whose
comparisons DuckDB 1.5's Arrow scan treats by Arrow's rules) or a type without a plain name
would select other rows than the ones meant, so any of them declines the rewrite and the
statement runs as written.

DuckDB itself writes the text and checks the read-back, so the literal follows its own
casts (timestamps with time zones, decimals, nanoseconds) rather than Python's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zarrsql.engine.answers import _TYPE_NAME
from zarrsql.engine.parsetree import Decline

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection


def exact_texts(conn: Connection, source: str) -> tuple[str, list[str]]:
    """The DuckDB type of column `v` of the query `source` and its distinct values as texts
    (sorted), each reading back as its value under `CAST(text AS type)`.

    Raises Decline for no rows, a NULL or NaN value, a text that reads back as another value,
    or a type whose name cannot be written into a cast."""
    typed = conn._con.execute(f"SELECT typeof(v) FROM ({source}) LIMIT 1").fetchall()
    if not typed:
        raise Decline("no coordinate value to bound by")
    kind = str(typed[0][0]).upper()
    if not _TYPE_NAME.match(kind):
        raise Decline("a coordinate type not carried over as text")
    rows = conn._con.execute(
        f"SELECT DISTINCT CAST(v AS VARCHAR) AS t, CAST(CAST(v AS VARCHAR) AS {kind}) IS NOT DISTINCT FROM v "
        f"FROM ({source}) ORDER BY t ASC"
    ).fetchall()
    if any(text is None or same is not True or str(text).lower().lstrip("+-") == "nan" for text, same in rows):
        raise Decline("a coordinate value is NULL or NaN, or its text does not read back as it")
    return kind, [str(text) for text, _ in rows]
