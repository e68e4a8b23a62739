"""What a statement DuckDB failed raises instead of DuckDB's error.

A zarrsql error recorded by a scan or UDF is raised as itself (Ctrl-C as KeyboardInterrupt);
DuckDB's own errors that a zarrsql argument caused (a `bounds :=` list it refused, a view over
a store that is gone) are explained.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import duckdb

from zarrsql.engine import interrupts
from zarrsql.errors import QueryInterrupted, StoreNotFoundError, UnsupportedError, ZarrSQLError
from zarrsql.store import is_url

if TYPE_CHECKING:
    from zarrsql.engine.state import ConnectionState


def _as_raised(err: ZarrSQLError) -> BaseException:
    """A scan's recorded error as the statement raises it: Ctrl-C as KeyboardInterrupt."""
    if isinstance(err, QueryInterrupted):
        return KeyboardInterrupt(str(err))
    return err.with_traceback(None)


def interrupted(err: RuntimeError) -> BaseException:
    """DuckDB's own "Query interrupted" (it saw Ctrl-C between tasks) as KeyboardInterrupt."""
    if str(err) == "Query interrupted" and not isinstance(err, duckdb.Error):
        return _ctrl_c()
    return err


def _ctrl_c() -> KeyboardInterrupt:
    """Ctrl-C as the connection's own methods raise it (docs/notebooks.md)."""
    from zarrsql.scan.reader import INTERRUPTED

    return KeyboardInterrupt(INTERRUPTED)


def statement_failure(state: ConnectionState, signals: int) -> BaseException | None:
    """What a statement that DuckDB failed raises instead of DuckDB's error, or None: the zarrsql error a
    scan or function recorded (Ctrl-C as KeyboardInterrupt), or KeyboardInterrupt when Ctrl-C
    came since `interrupts.mark()` gave `signals` (it met a callback before that callback
    could record it, and DuckDB reported it as a Python failure, `interrupts`)."""
    zerr = state.take_error()
    if zerr is not None:
        return _as_raised(zerr)
    if interrupts.arrived_since(signals):
        return _ctrl_c()
    return None


_NO_TABLE = re.compile(r"Table with name (.+?) does not exist", re.IGNORECASE)


def gone_store(err: duckdb.Error) -> ZarrSQLError | None:
    """A stored view over `FROM 'x.zarr'` whose store is gone: DuckDB says only that no table
    has that name (a statement naming the string itself is told in `_register_missing`)."""
    found = _NO_TABLE.search(str(err)) if isinstance(err, duckdb.CatalogException) else None
    name = found.group(1) if found else ""
    if not name.rstrip("/").lower().endswith(".zarr") or is_url(name) or os.path.exists(os.path.expanduser(name)):
        return None
    return StoreNotFoundError(
        f"no Zarr store at '{name}' (named by a view): the path does not exist; check the path "
        "(relative paths are resolved from the current directory) or recreate the view"
    )


#: What DuckDB 1.5 says when it hands an Arrow scan a filter holding a UBIGINT of 2**63 or more
#: (an IN list, its join filters): it converts the values to Python ints that pyarrow reads as
#: int64. Plain DuckDB 1.5 over any pyarrow dataset fails the same way; DuckDB 2 does not.
_ARROW_OVERFLOW = "OverflowError: Python int too large to convert to C long"


def arrow_overflow(err: duckdb.Error) -> ZarrSQLError | None:
    """DuckDB 1.5 failing to hand a filter on a large UBIGINT to the scan (`_ARROW_OVERFLOW`),
    explained with the ways around it; None for any other error (and always on DuckDB 2)."""
    from zarrsql.engine.source import HAS_SOURCES

    if HAS_SOURCES or _ARROW_OVERFLOW not in str(err):
        return None
    return UnsupportedError(
        "DuckDB 1.5 could not hand a filter to the zarr scan: it holds a UBIGINT of 2^63 or more (in an IN "
        "list, or the keys of a join), which DuckDB 1.5 passes to Arrow scans as a type they cannot read (its "
        "own limit: plain DuckDB 1.5 fails the same way over a pyarrow dataset). Compare as HUGEINT so that "
        "the filter is not handed over (WHERE CAST(u AS HUGEINT) IN (...), JOIN ... ON CAST(z.u AS HUGEINT) "
        "= k.u), write the IN as ORs of equalities, or upgrade to DuckDB 2, which has no such limit"
    )


def bounds_hint(err: duckdb.Error, text: str | None) -> ZarrSQLError | None:
    """The explanation of DuckDB refusing a `bounds :=` list, or None for any other error."""
    if not isinstance(err, duckdb.ConversionException):
        return None
    from zarrsql.engine import params

    return params.bounds_list_error(str(err), text)
