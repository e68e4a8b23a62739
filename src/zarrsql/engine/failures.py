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
from zarrsql.errors import QueryInterrupted, StoreNotFoundError, ZarrSQLError
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


def bounds_hint(err: duckdb.Error, text: str | None) -> ZarrSQLError | None:
    """The explanation of DuckDB refusing a `bounds :=` list, or None for any other error."""
    if not isinstance(err, duckdb.ConversionException):
        return None
    from zarrsql.engine import params

    return params.bounds_list_error(str(err), text)
