"""`%load_ext zarrsql`: SQL cells on a zarrsql connection.

    %zarrsql SELECT count(*) FROM 'air.zarr'             # one line, result displayed
    %%zarrsql -c con -o monthly                          # a cell on the connection `con`;
    SELECT ... FROM read_zarr('air.zarr') GROUP BY 1     # the result also kept as `monthly`
    %%zarrsql monthly <<                                 # kept as `monthly`, not displayed

`-c NAME` names a variable of the notebook holding a connection (a `zarrsql.Connection`, or a
DuckDB one, which gets zarrsql installed); without it the module's default connection runs
the SQL (the one `zarrsql.sql` uses). A result with rows is a pandas DataFrame (an Arrow
table when pandas is missing); a statement without rows gives None.

The SQL runs as written, in the line magic as in the cell magic: IPython's `$name` and
`{expression}` are not expanded (by default IPython expands them in a magic's line, which
would change a string literal such as `'cost $x'` and silently match other rows).
"""

from __future__ import annotations

import re
from typing import Any

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


#: Statements that give no rows to show (DuckDB 2.x still returns an empty `Count` relation).
_NO_ROWS = frozenset(
    {"CREATE", "DROP", "ALTER", "SET", "TRANSACTION", "ATTACH", "DETACH", "LOAD", "VACUUM", "VARIABLE_SET"}
)


def _gives_rows(sql: str) -> bool:
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:  # let running it report the error
        return True
    return not statements or statements[-1].type.name not in _NO_ROWS


def _result(con: Any, relation: Any, sql: str) -> Any:
    """The rows of `relation` as a DataFrame (Arrow without pandas); a scan's failure is
    raised as the zarrsql error itself, not wrapped in DuckDB's text."""
    if relation is None or not _gives_rows(sql):
        return None
    with scan_errors(con):
        try:
            return relation.df()
        except ImportError:  # no pandas: the rows as Arrow
            return relation.to_arrow_table()


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
        result = _result(con, con.sql(sql), sql)
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
