"""A WHERE on dimension columns as the cells it keeps, for looking up the first cells of an order.

`SELECT * FROM era5 WHERE time >= '2020-06-01' ORDER BY t2m DESC LIMIT 10` wants the hottest
cells of the summer. `topn_values` finds the hottest cells by reading `t2m` alone, and so
must leave out every cell the WHERE drops, exactly: a cell it kept wrongly could take one of
the ten places, and the statement, which still applies its own WHERE, would then return
fewer rows; one it dropped wrongly could be missing from them.

The WHERE is split into atoms that read one axis each, and DuckDB evaluates every atom over
that axis' coordinate columns, as `answers.py` does for `count(*) ... WHERE`: the same Arrow
columns the scan hands over, so casts, NULLs and NaN behave as in the statement. Positions
with the same atom values form a class; the WHERE, with SQL's three values, is then worked
out once per combination of classes (`plan/classes.py`), and a cell is kept when it is true
there. A WHERE reading a data variable, or two dimensions in one atom, declines.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from zarrsql.engine.answers import _STATE, _axis, _columns, _split
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.sqltext import quote_ident
from zarrsql.expand.arrow import to_arrow
from zarrsql.plan.classes import AxisClasses, contract, from_counts, truth_table
from zarrsql.plan.predicate import Atom
from zarrsql.scan.first_cells import Where

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection
    from zarrsql.scan import TableScan

#: The column `with_positions` adds: each row's position along its axis.
POSITION = "__zarrsql_position"


def cells_kept(conn: Connection, scan: TableScan, where: dict[str, Any], alias: str) -> tuple[Where, int]:
    """The cells of `scan`'s table that the WHERE tree `where` keeps, and how many there are."""
    atoms: list[dict[str, Any]] = []
    predicate = _split(where, _columns(scan), alias, atoms)
    classes: list[AxisClasses] = []
    per_position: list[np.ndarray | None] = []
    for k, n in enumerate(scan.table.shape):
        axis, table = _axis(conn, scan, k, atoms, [], needed=False, entries=None)
        if table is None:  # no atom reads this axis: one class
            classes.append(from_counts([], [()], [n]))
            per_position.append(None)
            continue
        codes = _codes(conn, table, axis.code)
        found, inverse, sizes = np.unique(codes, return_inverse=True, return_counts=True)
        leaves = [Atom(f"\0axis{k}", key) for key in axis.keys]
        states = [[_STATE[(int(code) // 3**j) % 3] for j in range(len(leaves))] for code in found]
        classes.append(from_counts(leaves, states, sizes.tolist()))
        per_position.append(inverse.reshape(-1).astype(np.intp))
    truth = truth_table(predicate, classes)
    if truth is None:
        raise Decline("too many combinations of classes in the WHERE")
    truth = np.ascontiguousarray(truth, dtype=bool)
    return Where(tuple(per_position), truth), contract(truth, [c.sizes for c in classes])


def _codes(conn: Connection, table: pa.Table, code: str) -> np.ndarray:
    """Each position's class code (`answers._Axis.code`) in storage order."""
    name = "__zarrsql_where_" + uuid.uuid4().hex[:12]
    conn._con.register(name, with_positions(table))
    try:
        got = conn._con.execute(f"SELECT {code} AS code FROM {quote_ident(name)} ORDER BY {POSITION} ASC").fetchnumpy()
    finally:
        conn._con.unregister(name)
    return np.asarray(got["code"], dtype=np.int64)


def with_positions(table: pa.Table) -> pa.Table:
    """`table` (an axis' coordinate columns) with `POSITION`, 0, 1, ... down its rows: DuckDB
    keeps no row order a query can rely on, so positions are read back by it. Wrapped by
    `to_arrow`, not built by `pa.array`, which imports pandas on its first numpy input."""
    return table.append_column(POSITION, to_arrow(np.arange(table.num_rows, dtype=np.int64), None, "int64"))
