"""What a statement DuckDB failed raises instead of DuckDB's error.

A zarrsql error recorded by a scan or UDF is raised as itself (Ctrl-C as KeyboardInterrupt);
DuckDB's own errors that a zarrsql argument caused (a `bounds :=` list it refused, a view over
a store that is gone) are explained, and so are the filters DuckDB 1.5 cannot hand to an Arrow
scan. A relation (`con.sql`) runs only when fetched, in DuckDB and outside the wrapper, so
those filters are looked for in its plan when it is made (`refused_pushdown`).
"""

from __future__ import annotations

import json
import os
import re
from types import FrameType
from typing import TYPE_CHECKING, Any

import duckdb

from zarrsql.engine import interrupts
from zarrsql.engine.frames import call_from
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

#: What DuckDB 1.5 says when it pushes an OR on one column that holds `IS [NOT] DISTINCT FROM`
#: (`x IS DISTINCT FROM 1 OR x > 2`) into an Arrow scan: it has no Arrow form for that comparison.
_DISTINCT_PUSHED = re.compile(r"Comparison Type COMPARE_(?:NOT_)?DISTINCT_FROM can't be an Arrow Scan Pushdown Filter")


def _overflow_error() -> UnsupportedError:
    return UnsupportedError(
        "DuckDB 1.5 could not hand a filter to the zarr scan: it holds a UBIGINT of 2^63 or more (in an IN "
        "list, or the keys of a join), which DuckDB 1.5 passes to Arrow scans as a type they cannot read (its "
        "own limit: plain DuckDB 1.5 fails the same way over a pyarrow dataset). Compare as HUGEINT so that "
        "the filter is not handed over (WHERE CAST(u AS HUGEINT) IN (...), JOIN ... ON CAST(z.u AS HUGEINT) "
        "= k.u), write the IN as ORs of equalities, or upgrade to DuckDB 2, which has no such limit"
    )


def _distinct_error() -> UnsupportedError:
    return UnsupportedError(
        "DuckDB 1.5 could not hand a filter to the zarr scan: IS [NOT] DISTINCT FROM joined by OR with another "
        "condition on the same column (x IS DISTINCT FROM 1 OR x > 2) becomes a filter DuckDB 1.5 cannot pass "
        "to Arrow scans (its own limit: plain DuckDB 1.5 fails the same way over a pyarrow dataset). Write "
        "x IS DISTINCT FROM c as (x IS NULL OR x <> c) and x IS NOT DISTINCT FROM c as x = c (for c not "
        "NULL), or upgrade to DuckDB 2, which has no such limit"
    )


def arrow_unpushable(err: duckdb.Error) -> ZarrSQLError | None:
    """DuckDB 1.5 failing to hand the scan a filter it has no Arrow form for (a large UBIGINT,
    `_ARROW_OVERFLOW`; `IS [NOT] DISTINCT FROM` within an OR, `_DISTINCT_PUSHED`), explained with
    the ways around it; None for any other error (and always on DuckDB 2)."""
    from zarrsql.engine.source import HAS_SOURCES

    if HAS_SOURCES:
        return None
    if _ARROW_OVERFLOW in str(err):
        return _overflow_error()
    if isinstance(err, duckdb.NotImplementedException) and _DISTINCT_PUSHED.search(str(err)):
        return _distinct_error()
    return None


#: A statement that may push such a filter: an integer of 19 digits or more (2**63 has 19), or
#: DISTINCT FROM. Only such a statement pays for the plan `refused_pushdown` reads.
_MAY_REFUSE = re.compile(r"\d{19}|distinct\s+from", re.IGNORECASE)
#: A quoted string in the plan's filter text (DuckDB prints VARCHAR constants quoted).
_QUOTED = re.compile(r"'(?:[^']|'')*'")
#: An IN list of the plan's filter text: `u IN (1, 9223372036854775808)`.
_IN_LIST = re.compile(r"\bIN \(([^()]*)\)")


def refused_pushdown(
    con: duckdb.DuckDBPyConnection, state: ConnectionState, text: Any, parameters: Any, frame: FrameType | None
) -> ZarrSQLError | None:
    """On DuckDB 1.5, the error (as `arrow_unpushable` gives it) of a query whose plan hands an
    Arrow scan a filter DuckDB cannot pass to it: an IN list holding an integer of 2**63 or
    more, or `IS [NOT] DISTINCT FROM` within an OR. DuckDB would fail at the relation's first
    fetch with its raw error, out of the wrapper's reach; the plan (`EXPLAIN`) shows the filters
    it pushes. None on DuckDB 2, for a text that cannot hold such a filter, for anything but one
    SELECT, and when the plan cannot be had (the fetch then reports what is wrong). A join's
    filters are made while it runs, so a join on such keys is not found here."""
    from zarrsql.engine.duckdb_version import MAJOR  # not engine.source: it loads the scan machinery

    if MAJOR >= 2 or not isinstance(text, str) or not _may_refuse(text, parameters):
        return None
    try:
        statements = con.extract_statements(text)
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            return None
        explain = f"EXPLAIN (FORMAT json) {text}"
        rows = call_from(frame, con.execute, explain, parameters).fetchall()
        plan = json.loads(rows[0][1])
    except (duckdb.Error, ZarrSQLError, ValueError, IndexError):
        state.take_error()  # a scan's error met by this look only: not the statement's
        return None
    pushed = _QUOTED.sub("''", " ".join(_arrow_scan_filters(plan)))
    if "DISTINCT FROM" in pushed:
        return _distinct_error()
    for listed in _IN_LIST.findall(pushed):
        if any(value.isdigit() and int(value) >= 2**63 for value in listed.split(", ")):
            return _overflow_error()
    return None


def _may_refuse(text: str, parameters: Any) -> bool:
    """Whether the statement could push such a filter: by its text, or a parameter of 2**63 or more."""
    if _MAY_REFUSE.search(text):
        return True
    values = list(parameters.values()) if isinstance(parameters, dict) else parameters
    return isinstance(values, (list, tuple)) and any(isinstance(v, int) and v >= 2**63 for v in values)


def _arrow_scan_filters(nodes: Any) -> list[str]:
    """The filter texts of the Arrow scans in `nodes` (the JSON plan of EXPLAIN), a scan's
    several filters given by DuckDB as a list."""
    found: list[str] = []
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, dict):
            continue
        if node.get("name") == "ARROW_SCAN":
            filters = (node.get("extra_info") or {}).get("Filters")
            found.extend([filters] if isinstance(filters, str) else [str(f) for f in filters or []])
        found.extend(_arrow_scan_filters(node.get("children")))
    return found


def bounds_hint(err: duckdb.Error, text: str | None) -> ZarrSQLError | None:
    """The explanation of DuckDB refusing a `bounds :=` list, or None for any other error."""
    if not isinstance(err, duckdb.ConversionException):
        return None
    from zarrsql.engine import params

    return params.bounds_list_error(str(err), text)
