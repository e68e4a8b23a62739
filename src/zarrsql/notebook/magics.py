"""`%load_ext zarrsql`: SQL cells on a zarrsql connection.

    %zarrsql SELECT count(*) FROM 'air.zarr'             # one line, result displayed
    %%zarrsql -c con -o monthly                          # a cell on the connection `con`;
    SELECT ... FROM read_zarr('air.zarr') GROUP BY 1     # the result also kept as `monthly`
    %%zarrsql monthly <<                                 # kept as `monthly`, not displayed

`-c NAME` names a variable of the notebook holding a connection (a `zarrsql.Connection`, or a
DuckDB one, which gets zarrsql installed); without it the module's default connection runs
the SQL (the one `zarrsql.sql` uses). A result with rows is a pandas DataFrame (an Arrow
table when pandas is missing); a statement without rows (CREATE, SET, PREPARE, CHECKPOINT, ...)
gives None; one that writes rows (INSERT, UPDATE, DELETE, MERGE, COPY) gives DuckDB's one-row
`Count`, on every DuckDB version (1.x's `sql()` returns nothing for them, 2.x the `Count`).

The SQL sees the notebook's variables, as `zarrsql.sql` called in a cell does: `FROM df` reads
the notebook's DataFrame `df` (DuckDB looks names up in the frame that called it; the magic
makes the call from a frame whose namespace is the notebook's, see `engine/frames.py`).

The SQL runs as written, in the line magic as in the cell magic: IPython's `$name` and
`{expression}` are not expanded (by default IPython expands them in a magic's line, which
would change a string literal such as `'cost $x'` and silently match other rows).
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from zarrsql.engine.api import default_connection
from zarrsql.engine.connection import register
from zarrsql.results import scan_errors

_OPTION = re.compile(r"^\s*(-[co])\s+([A-Za-z_]\w*)")
_KEEP = re.compile(r"^\s*([A-Za-z_]\w*)\s*<<")


def parse(line: str, cell: str | None) -> tuple[dict[str, str], str | None, str]:
    """(options, `name <<` target, SQL) of a magic's line and cell."""
    options: dict[str, str] = {}
    rest = line
    while (m := _OPTION.match(rest)) is not None:
        options[m.group(1)[1]] = m.group(2)
        rest = rest[m.end() :]
    keep = None
    if (m := _KEEP.match(rest)) is not None:
        keep, rest = m.group(1), rest[m.end() :]
    sql = "\n".join(part for part in (rest.strip(), (cell or "").strip()) if part)
    if rest.strip().startswith("-"):
        raise UsageError(f"%zarrsql: unknown option in {rest.strip().split()[0]!r}; options: -c CONNECTION, -o NAME")
    return options, keep, sql


T = TypeVar("T")

#: Statements that give no rows to show (DuckDB 2.x still returns an empty `Success` or
#: `Count` relation for them, 1.x nothing).
_NO_ROWS = frozenset(
    {
        "CREATE", "DROP", "ALTER", "SET", "TRANSACTION", "ATTACH", "DETACH", "LOAD", "VACUUM",
        "VARIABLE_SET", "PREPARE", "EXPORT",
    }
)  # fmt: skip
#: Statements whose result is the rows they wrote, as DuckDB's one-row `Count` (or the rows of
#: a RETURNING clause), or, for EXECUTE, whatever the prepared statement gives: run with
#: `execute`, which returns that on every DuckDB version (1.x's `sql()` returns None for them).
_COUNTED = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE_INTO", "COPY", "EXECUTE"})

#: What a statement gives the magic to show: "rows"; "call" (rows, or nothing for DuckDB's
#: empty `Success` result of CHECKPOINT and other calls that only act); "count" (`_COUNTED`);
#: "nothing" (`_NO_ROWS`, or any statement DuckDB expects no result from).
Outcome = Literal["rows", "call", "count", "nothing"]


def _outcome(sql: str) -> Outcome:
    """What the last statement of `sql` gives (the one whose result DuckDB returns)."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
        if not statements:
            return "rows"
        kind = statements[-1].type.name
        expected = [e.name for e in statements[-1].expected_result_type]
    except (duckdb.Error, ValueError):  # a syntax error, or a type this DuckDB cannot name: run it
        return "rows"
    if kind in _NO_ROWS or expected == ["NOTHING"]:
        return "nothing"
    if kind in _COUNTED:
        return "count"
    return "call" if kind == "CALL" else "rows"


def _frame(source: Any) -> Any:
    """The rows of `source` (a relation, or a connection after `execute`) as a DataFrame, or
    an Arrow table when pandas is missing."""
    try:
        return source.df()
    except ImportError:
        return source.to_arrow_table()


def _result(con: Any, sql: str) -> Any:
    """Run `sql` on `con` and return what the magic shows (see the module docstring); a scan's
    failure is raised as the zarrsql error itself, not wrapped in DuckDB's text."""
    outcome = _outcome(sql)
    with scan_errors(con):
        if outcome == "count":
            return _frame(con.execute(sql))
        relation = con.sql(sql)
        if relation is None or outcome == "nothing":
            return None
        rows = _frame(relation)  # a CALL runs here (DuckDB 2.x binds it into a lazy relation)
    names = rows.column_names if hasattr(rows, "column_names") else rows.columns  # Arrow's, pandas'
    return None if outcome == "call" and len(rows) == 0 and list(names) == ["Success"] else rows


#: The expression the magic's SQL runs in, in a frame whose namespace is the notebook's.
_FROM_NOTEBOOK = compile("__zarrsql_magic__()", "<%zarrsql>", "eval")


def _from_namespace(global_ns: dict[str, Any], user_ns: dict[str, Any], run: Callable[[], T]) -> T:
    """`run()`, called from a frame with the notebook's namespace, as a cell's code would be.

    zarrsql makes its DuckDB calls from the innermost frame outside zarrsql, so that DuckDB
    finds the caller's DataFrames by name (`engine/frames.py`); called from a magic, that frame
    is IPython's, where the notebook's names are not. The frame made here has the notebook's
    globals, and locals that add only the one name of the call, which no SQL names.
    """
    local = ChainMap({"__zarrsql_magic__": run}, user_ns)
    return eval(_FROM_NOTEBOOK, global_ns, local)  # type: ignore[no-any-return]  # noqa: S307 - fixed code


@magics_class
class ZarrSQLMagics(Magics):
    """The `%zarrsql` line magic and `%%zarrsql` cell magic (see the module docstring)."""

    @line_cell_magic
    @no_var_expand  # SQL as written: `$x` and `{n}` in a string literal are text, not Python
    def zarrsql(self, line: str, cell: str | None = None) -> Any:
        options, keep, sql = parse(line, cell)
        if not sql:
            raise UsageError("%zarrsql needs SQL: %zarrsql SELECT ... (or a %%zarrsql cell)")
        con = self._connection(options.get("c"))
        assert self.shell is not None  # a magic always runs in a shell
        result = _from_namespace(self.shell.user_global_ns, self._namespace(), lambda: _result(con, sql))
        for name in (options.get("o"), keep):
            if name:
                self._namespace()[name] = result
        return None if keep else result

    def _namespace(self) -> dict[str, Any]:
        """The notebook's variables (a magic always runs in a shell)."""
        assert self.shell is not None
        return self.shell.user_ns  # type: ignore[no-any-return]

    def _connection(self, name: str | None) -> Any:
        if name is None:
            return default_connection()
        namespace = self._namespace()
        if name not in namespace:
            raise UsageError(f"%zarrsql -c {name}: no variable named {name!r} in the notebook holds a connection")
        value = namespace[name]
        if not hasattr(value, "sql"):
            raise UsageError(f"%zarrsql -c {name}: {name!r} is a {type(value).__name__}, not a connection")
        return register(value)


def load(ipython: Any) -> None:
    """Register the magics on an IPython shell (`%load_ext zarrsql` calls this)."""
    from zarrsql.notebook.progress import install

    install()
    ipython.register_magics(ZarrSQLMagics)
