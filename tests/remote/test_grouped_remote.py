"""Grouped work units on a remote store: a unit holds at most one round of requests (the
store's `concurrency`), so a LIMIT met by the first unit costs one round, and the rows are
those of the local store, in the same order."""

from __future__ import annotations

import zarrsql
from zarrsql.scan import ReadRequest, open_table

BIG = "fixtures/big_edge.zarr"


def test_remote_units_hold_at_most_one_round_of_requests(http) -> None:
    from zarrsql.scan.reader import read_batches

    scan = open_table(ReadRequest(store=http.url(BIG)))
    scan.store.concurrency = 4  # fewer requests in flight than the fixture has chunks
    plan = scan.plan()
    sizes = sorted(u.num_rows() for u in plan.units())
    assert len(sizes) > 4
    batches = list(read_batches(scan, plan, scan.columns))
    assert len(batches) >= -(-len(sizes) // 4)
    assert all(b.num_rows <= sum(sizes[-4:]) for b in batches)
    assert sum(b.num_rows for b in batches) == sum(sizes)


def test_remote_rows_equal_local_rows_in_order(http, fixtures_dir) -> None:
    con = zarrsql.connect()
    remote = con.sql(f"SELECT * FROM read_zarr('{http.url(BIG)}')").to_arrow_table()
    local = con.sql(f"SELECT * FROM read_zarr('{fixtures_dir / 'big_edge.zarr'}')").to_arrow_table()
    assert remote.num_rows > 0
    assert remote.equals(local)
