"""The remote reader's first steps (scan/reader.py): the fetches of units 2-9 start as soon as
the first unit's chunks are in, before the engine asks for a second batch, so that their round
trip overlaps the first unit's decoding; a scan closed after the first batch (a LIMIT met by
the first unit) fetches no more than those 9 units and leaves no fetch behind. Once the
window is open, fetches run two windows ahead of the unit the engine takes, whether or not
it takes the next batch."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

STORE = "fixtures/big_edge.zarr"


def _open(http, monkeypatch, options=()):  # type: ignore[no-untyped-def]
    monkeypatch.setattr("zarrsql.plan.units.GROUP_CELLS", 1)  # one unit per chunk, as counted here
    from zarrsql.scan import ReadRequest, open_table

    scan = open_table(ReadRequest(store=http.url(STORE), storage_options=options))
    plan = scan.plan()
    return scan, plan, list(plan.units())


def _chunk_paths(scan, units) -> set[str]:  # type: ignore[no-untyped-def]
    return {f"/{STORE}/{k}" for u in units for k in scan.unit_keys(u, scan.columns)}


def _chunk_gets(http) -> set[str]:  # type: ignore[no-untyped-def]
    return {p for m, p in http.log if m == "GET" and "/c/" in p and "/v/" in p}


def test_the_next_units_are_fetched_before_the_second_batch_is_asked_for(http, monkeypatch):
    from zarrsql.scan.reader import EARLY_UNITS, read_batches

    scan, plan, units = _open(http, monkeypatch)
    assert len(units) > 1 + EARLY_UNITS
    http.reset()
    batches = read_batches(scan, plan, scan.columns)
    first = next(batches)
    assert first.num_rows == units[0].num_rows()
    wanted = _chunk_paths(scan, units[: 1 + EARLY_UNITS])
    deadline = time.monotonic() + 5.0
    while _chunk_gets(http) != wanted and time.monotonic() < deadline:
        time.sleep(0.02)  # the engine has not asked for a second batch: the reader is idle
    assert _chunk_gets(http) == wanted  # units 2-9 fetched already, nothing beyond them
    batches.close()
    time.sleep(0.3)
    assert _chunk_gets(http) == wanted
    assert scan.store._ahead == {}  # the fetched-ahead units nobody took are dropped


def test_a_scan_closed_at_once_drops_the_early_fetches(http, monkeypatch):
    """Closed after its first batch while units 2-9 are still on their way (a slow server):
    nothing beyond them is asked for, and nothing fetched ahead stays in the store."""
    from zarrsql.scan.reader import EARLY_UNITS, read_batches

    scan, plan, units = _open(http, monkeypatch)
    http.reset()
    slow = _chunk_paths(scan, units[1 : 1 + EARLY_UNITS])
    http.on_request = lambda method, path: time.sleep(0.3) if path in slow else None
    batches = read_batches(scan, plan, scan.columns)
    next(batches)
    batches.close()
    time.sleep(0.6)
    assert _chunk_gets(http) <= _chunk_paths(scan, units[: 1 + EARLY_UNITS])
    assert scan.store._ahead == {}


def test_a_full_remote_scan_with_early_fetches_reads_every_cell_once(http, monkeypatch, served_root):
    """Every cell of the table, each once, with the values xarray reads from the same store."""
    import xarray as xr

    from zarrsql.scan.reader import read_batches

    scan, plan, _ = _open(http, monkeypatch)
    http.reset()
    table = pa.Table.from_batches(list(read_batches(scan, plan, scan.columns)))
    got = sorted(zip(*(table.column(n).to_pylist() for n in ("a", "b", "c", "v")), strict=True))
    ds = xr.open_zarr(served_root / STORE)
    frame = ds["v"].to_dataframe().reset_index()
    expected = sorted(zip(*(frame[n].tolist() for n in ("a", "b", "c", "v")), strict=True))
    assert len(got) == len(expected) == int(np.prod(ds["v"].shape))
    assert got == expected  # the values are exact binary fractions
    gets = [p for m, p in http.log if m == "GET" and "/v/c/" in p]
    assert len(gets) == len(set(gets))  # each chunk fetched once, early ones included


def test_fetches_run_ahead_of_the_units_queued_while_the_engine_holds_a_batch(http, monkeypatch):
    """With the window open, the transfer does not wait for the engine: while it holds its
    second batch, the fetches of the next two windows go out (6 units queued to decode, 12
    fetched), and nothing beyond them."""
    from zarrsql.scan.reader import FETCH_WINDOWS, read_batches

    window = 6
    scan, plan, units = _open(http, monkeypatch, (("concurrency", str(window)),))
    horizon = 1 + FETCH_WINDOWS * window
    assert len(units) > horizon
    http.reset()
    batches = read_batches(scan, plan, scan.columns)
    next(batches)
    next(batches)  # the window opens whole (units 2-7 queued); the engine then holds this batch
    wanted = _chunk_paths(scan, units[:horizon])
    deadline = time.monotonic() + 5.0
    while _chunk_gets(http) != wanted and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _chunk_gets(http) == wanted  # units 8-13 fetched though nobody queued them yet
    rest = list(batches)
    assert sum(b.num_rows for b in rest) == sum(u.num_rows() for u in units[2:])
    gets = [p for m, p in http.log if m == "GET" and "/v/c/" in p]
    assert len(gets) == len(set(gets)) == len(_chunk_paths(scan, units))  # each chunk once
    assert scan.store._ahead == {}
