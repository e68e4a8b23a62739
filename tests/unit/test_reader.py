"""The parallel reader (scan/reader.py) on a local store: order, and memory let go of."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np

from zarrsql.scan import reader
from zarrsql.scan.reader import read_batches
from zarrsql.scan import ReadRequest, open_table


def _scan(fixtures_dir: Path):
    scan = open_table(ReadRequest(store=str(fixtures_dir / "big_edge.zarr")))
    return scan, scan.plan()


def test_batches_come_in_plan_order(fixtures_dir, monkeypatch):
    """Units finish decoding in any order; rows still leave in the plan's order (small chunks
    are read in grouped units, whose rows are put back in the ungrouped units' order)."""
    monkeypatch.setattr("zarrsql.plan.units.GROUP_CELLS", 100)  # several groups of the 27 chunks
    scan, plan = _scan(fixtures_dir)
    units = list(plan.units())
    batches = list(read_batches(scan, plan, scan.columns))
    assert sum(b.num_rows for b in batches) == sum(u.num_rows() for u in units)
    assert len(batches) < len(units)  # the fixture's small chunks were grouped
    rows = {c.name: [v for b in batches for v in b.column(c.name).to_pylist()] for c in scan.columns}
    start = 0
    for unit in units:
        for col in scan.columns:
            if col.dim is not None:  # a unit's first row sits at the start of its region
                expected = scan.dims[col.dim].values[unit.region[col.dim][0]]
                assert rows[col.name][start] == np.asarray(expected).item()
        start += unit.num_rows()


def test_consumed_units_are_freed_without_the_garbage_collector(fixtures_dir):
    """Each batch must go when the engine is done with it: a reference cycle through the
    queued unit would keep every decoded batch until a collection runs."""
    scan, plan = _scan(fixtures_dir)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in read_batches(scan, plan, scan.columns):
            pass
        gc.collect()
        stuck = [o for o in gc.garbage if isinstance(o, reader._Queued)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert plan.units_total > 4
    assert stuck == []


def test_a_unit_listing_that_fails_ahead_of_the_reader_fails_the_scan_after_the_units_listed():
    """`_Ahead` lists units on the store's event loop too; a failure met there is raised by
    the reader once it has taken the units listed before it, never taken for the end of the
    plan (which would drop the rest of the table's rows without a word)."""
    import pytest

    def units():
        yield "u0"
        yield "u1"
        raise RuntimeError("listing failed")

    started: list[list[str]] = []

    def prefetch(keys: list[str]) -> list:
        started.append(keys)
        return []

    ahead = reader._Ahead(units(), lambda u: [f"{u}/k"], prefetch)
    ahead.open_to(5)  # as the first unit's arrival callback does, on another thread
    assert started == [["u0/k"], ["u1/k"]]
    assert ahead.take()[0] == "u0"
    assert ahead.take()[0] == "u1"
    with pytest.raises(RuntimeError, match="listing failed"):
        ahead.take()


def test_units_fetched_ahead_and_never_taken_are_handed_back_on_close():
    """`close()` names the keys of units whose fetches started and that nobody took, so
    the store can forget them, and nothing starts after it."""
    started: list[list[str]] = []

    def prefetch(keys: list[str]) -> list:
        started.append(keys)
        return []

    ahead = reader._Ahead(iter(["a", "b", "c", "d"]), lambda u: [f"{u}/1", f"{u}/2"], prefetch)
    ahead.open_to(3)
    assert ahead.take()[0] == "a"
    assert ahead.close() == ["b/1", "b/2", "c/1", "c/2"]
    ahead.open_to(4)
    assert ahead.take() is None
    assert len(started) == 3  # "d" never fetched
