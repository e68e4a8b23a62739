"""Open the table a request selects, once: one store, one tree, one table per scan."""

from __future__ import annotations

from zarrsql.metadata.tree import cached_tree
from zarrsql.scan.contract import TableScan
from zarrsql.scan.request import ReadRequest, open_store_for
from zarrsql.scan.sparse import SparseScan
from zarrsql.scan.table import DenseScan
from zarrsql.store import Store
from zarrsql.tables.select import select_table


def open_table(request: ReadRequest, store: Store | None = None) -> TableScan:
    """Open the table a request selects: a dense scan, or one of stored sparse entries.

    `store` is the request's store already open (a table opened again after its store
    changed, `scan/validity.py`: the same store object, with the options and credentials
    it was opened with); None opens it from the request."""
    store = open_store_for(request) if store is None else store
    tree = cached_tree(store)
    table = select_table(tree, request.selection)
    if table.layout != "dense":
        return SparseScan(request, tree, table, store)
    return DenseScan(request, tree, table, store)
