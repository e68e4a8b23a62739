"""Stores over HTTP, against a real server on 127.0.0.1 (tests/remote/httpserver.py).

Every read is compared with the local read of the same store; request counts come from the
server's own log and must match `zarrsql.trace()`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import zarrsql
from zarrsql.errors import StoreNotFoundError, StoreReadError

ERA5 = "fixtures/era5_like.zarr"
ERA5_TABLE = "table_name := 'time_latitude_longitude'"
AIR_V2 = "fixtures/v2/air_temperature.zarr"


def _table(con: zarrsql.Connection, location: str, extra: str = "", columns: str = "*") -> pa.Table:
    args = f"'{location}'" + (f", {extra}" if extra else "")
    return con.sql(f"SELECT {columns} FROM read_zarr({args})").to_arrow_table()


def _rows(con: zarrsql.Connection, location: str, extra: str = "") -> list[tuple]:
    """execute + fetchall: a scan's error re-raises as the ZarrSQLError it is (API.md)."""
    args = f"'{location}'" + (f", {extra}" if extra else "")
    return con.execute(f"SELECT * FROM read_zarr({args})").fetchall()


def _same_as_local(con, http, served_root: Path, path: str, extra: str = "") -> pa.Table:
    remote = _table(con, http.url(path), extra)
    local = _table(con, str(served_root / path), extra)
    assert remote.num_rows > 0
    assert remote.equals(local), (remote.schema, local.schema)
    return remote


def _is_metadata(path: str) -> bool:
    leaf = path.rsplit("/", 1)[-1]
    return leaf in ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        (ERA5, ERA5_TABLE),
        (AIR_V2, ""),
        ("fixtures/mixed_chunks.zarr", ""),
        ("fixtures/missing.zarr", ""),
        ("fixtures/big_edge.zarr", ""),
    ],
)
def test_http_read_equals_local_read(con, http, served_root, path, extra):
    _same_as_local(con, http, served_root, path, extra)


def test_trace_counts_every_request_the_server_saw(con, http, served_root):
    with zarrsql.trace() as t:
        _table(con, http.url(ERA5), ERA5_TABLE)
    assert t.requests == http.count() > 0
    assert t.bytes_read > 0


def test_second_query_costs_no_metadata_reads_beyond_validation(con, http, served_root):
    _table(con, http.url(ERA5), ERA5_TABLE)
    http.reset()
    with zarrsql.trace() as t:
        _table(con, http.url(ERA5), ERA5_TABLE)
    gets = [p for m, p in http.log if m == "GET"]
    assert gets  # the data chunks ...
    assert not any(_is_metadata(p) for p in gets), gets  # ... but no metadata: it comes from the cache
    heads = [p for m, p in http.log if m == "HEAD"]
    assert f"/{ERA5}/zarr.json" in heads  # the consolidated document is what validates the tree
    assert t.requests == len(http.log)


def test_metadata_ttl_trusts_the_cache_without_any_request(con, http):
    extra = f"{ERA5_TABLE}, storage_options := MAP {{'metadata_ttl': '600'}}"
    _table(con, http.url(ERA5), extra)
    http.reset()
    _table(con, http.url(ERA5), extra)
    assert http.count("HEAD") == 0
    assert not any(_is_metadata(p) for _, p in http.log)


def test_a_changed_store_is_read_again(con, http):
    _table(con, http.url(ERA5), ERA5_TABLE)
    http.reset()
    http.salt = "-rewritten"  # every ETag changes, as after a rewrite
    _table(con, http.url(ERA5), ERA5_TABLE)
    assert ("GET", f"/{ERA5}/zarr.json") in http.log


def test_from_a_url_string_is_claimed_by_its_suffix(con, http, served_root):
    remote = con.sql(f"SELECT * FROM '{http.url(AIR_V2)}'").to_arrow_table()
    local = _table(con, str(served_root / AIR_V2))
    assert remote.num_rows > 0
    assert remote.equals(local)


def test_python_keyword_storage_options_reach_the_server(con, http, served_root):
    rel = zarrsql.read_zarr(http.url(AIR_V2), connection=con, storage_options={"headers": '{"X-Zarrsql-Test": "yes"}'})
    assert rel.to_arrow_table().num_rows > 0
    assert http.headers_seen
    assert all(h.get("X-Zarrsql-Test") == "yes" for h in http.headers_seen)


# -- stores without consolidated metadata: plain HTTP cannot list ------------------------------


@pytest.mark.parametrize("path", ["plain/era5_like.zarr", "plain/v2_air_temperature.zarr"])
def test_unconsolidated_store_over_http_names_the_ways_out(con, http, path):
    with pytest.raises(StoreReadError) as info:
        _rows(con, http.url(path))
    text = str(info.value)
    assert http.url(path) in text
    assert "consolidate" in text
    assert "array_path" in text


@pytest.mark.parametrize(
    ("path", "array"), [("plain/era5_like.zarr", "2m_temperature"), ("plain/v2_air_temperature.zarr", "air")]
)
def test_array_path_reads_one_array_over_http_with_its_coordinates(con, http, served_root, path, array):
    table = _same_as_local(con, http, served_root, path, f"array_path := '{array}'")
    assert "time" in table.column_names  # coordinates found next to the array, not positions
    assert not any(m == "GET" and p.endswith("/") for m, p in http.log)  # nothing tried to list


def test_array_path_to_a_missing_array_over_http_is_an_error(con, http):
    with pytest.raises(zarrsql.ZarrSQLError):
        _rows(con, http.url("plain/era5_like.zarr"), "array_path := 'no_such_array'")


# -- failures ------------------------------------------------------------------------------------

CHUNK = f"{ERA5}/2m_temperature/c/1/0/0"


def test_transient_5xx_is_retried_and_the_result_is_complete(con, http, served_root):
    _table(con, http.url(ERA5), ERA5_TABLE)  # warm the metadata
    http.reset()
    http.inject(CHUNK, "503", times=2)
    with zarrsql.trace() as t:
        _same_as_local(con, http, served_root, ERA5, ERA5_TABLE)
    assert http.count("GET", lambda p: p == "/" + CHUNK) == 3  # two failures, then the bytes
    assert t.requests >= 3


def test_persistent_5xx_fails_naming_url_status_and_attempts(con, http):
    http.inject(CHUNK, "500", times=None)
    with pytest.raises(StoreReadError) as info:
        _rows(con, http.url(ERA5), f"{ERA5_TABLE}, storage_options := MAP {{'retries': '2', 'retry_backoff': '0'}}")
    text = str(info.value)
    assert http.url(CHUNK) in text
    assert "HTTP 500" in text
    assert "3 attempts" in text
    assert http.count("GET", lambda p: p == "/" + CHUNK) == 3


@pytest.mark.parametrize("status", ["403", "401"])
def test_access_denied_is_never_retried(con, http, status):
    http.inject(CHUNK, status, times=None)
    with pytest.raises(StoreReadError) as info:
        _rows(con, http.url(ERA5), ERA5_TABLE)
    assert f"HTTP {status}" in str(info.value)
    assert http.url(CHUNK) in str(info.value)
    assert "access denied" in str(info.value)
    assert http.count("GET", lambda p: p == "/" + CHUNK) == 1


def test_403_on_metadata_is_an_error_not_a_missing_store(con, http):
    http.inject(f"{ERA5}/zarr.json", "403", times=None)
    with pytest.raises(StoreReadError, match="HTTP 403"):
        _rows(con, http.url(ERA5), ERA5_TABLE)


def test_missing_store_is_store_not_found_naming_the_url(con, http):
    with pytest.raises(StoreNotFoundError) as info:
        _rows(con, http.url("fixtures/no_such_store.zarr"))
    assert http.url("fixtures/no_such_store.zarr") in str(info.value)


def test_404_on_a_chunk_reads_as_fill_value(con, http):
    query = 'count(*) AS rows, count("2m_temperature") AS n'
    base = _table(con, http.url(ERA5), ERA5_TABLE, query).to_pylist()[0]
    http.inject(CHUNK, "404", times=None)  # a genuine not-found: the chunk was never written
    after = _table(con, http.url(ERA5), ERA5_TABLE, query).to_pylist()[0]
    assert after["rows"] == base["rows"]  # every row is still there ...
    assert 0 < after["n"] < base["n"]  # ... and the chunk's cells are its fill value (NaN → NULL)


def test_truncated_chunk_is_retried_then_reported(con, http, served_root):
    http.inject(CHUNK, "truncate", times=1)
    _same_as_local(con, http, served_root, ERA5, ERA5_TABLE)  # one retry recovers it
    http.inject(CHUNK, "truncate", times=None)
    with pytest.raises(StoreReadError) as info:
        _rows(con, http.url(ERA5), f"{ERA5_TABLE}, storage_options := MAP {{'retries': '1', 'retry_backoff': '0'}}")
    assert "truncated" in str(info.value)
    assert http.url(CHUNK) in str(info.value)


def test_dropped_connection_is_retried(con, http, served_root):
    http.inject(CHUNK, "drop", times=1)
    _same_as_local(con, http, served_root, ERA5, ERA5_TABLE)
    assert http.count("GET", lambda p: p == "/" + CHUNK) == 2


def test_unreachable_host_names_the_url_and_the_cause(con):
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.zarr"
    with pytest.raises(StoreReadError) as info:
        _rows(con, url, "storage_options := MAP {'retries': '1', 'retry_backoff': '0'}")
    assert url in str(info.value)
    assert "refused" in str(info.value)


def test_a_stalled_server_times_out(con, http):
    http.latency = 0.5
    start = time.monotonic()
    with pytest.raises(StoreReadError) as info:
        _rows(con, http.url(ERA5), f"{ERA5_TABLE}, storage_options := MAP {{'timeout': '0.1', 'retries': '0'}}")
    assert "timeout" in str(info.value)
    assert time.monotonic() - start < 5


def test_store_changing_during_a_query_is_an_error_not_fill(con, http):
    _table(con, http.url(ERA5), ERA5_TABLE)  # cached and valid
    http.reset()

    def rewrite(method: str, path: str) -> None:
        if method == "GET" and "/2m_temperature/c/" in path:
            http.salt = "-rewritten"  # the writer replaced the store while we read it

    http.on_request = rewrite
    http.inject(CHUNK, "404", times=None)
    with pytest.raises(StoreReadError) as info:
        _rows(con, http.url(ERA5), ERA5_TABLE)
    assert "changed during the query" in str(info.value)
    assert http.url(ERA5) in str(info.value)


def test_chunks_are_fetched_concurrently(con, http, served_root):
    _table(con, http.url("fixtures/big_edge.zarr"))  # metadata warm
    http.reset()
    http.latency = 0.05
    start = time.monotonic()
    _same_as_local(con, http, served_root, "fixtures/big_edge.zarr")
    elapsed = time.monotonic() - start
    chunks = http.count("GET")
    assert chunks >= 27
    assert http.max_in_flight >= 8
    assert elapsed < chunks * 0.05 / 2  # one request at a time would take chunks × latency


def test_fetched_ahead_chunks_are_each_requested_once(con, http, served_root):
    """The reader starts chunk fetches before decoding; the decode must take those answers,
    never ask the server a second time."""
    store = served_root / "fixtures/big_edge.zarr"
    _same_as_local(con, http, served_root, "fixtures/big_edge.zarr")
    chunk_gets = Counter(p for m, p in http.log if m == "GET" and "/c/" in p)
    on_disk = {
        "/" + f.relative_to(served_root).as_posix() for f in store.rglob("*") if f.is_file() and "c" in f.parent.parts
    }
    assert set(chunk_gets) == {p for p in on_disk if not _is_metadata(p)}  # a full scan reads every chunk
    assert set(chunk_gets.values()) == {1}, chunk_gets.most_common(3)


def test_a_scan_closed_early_leaves_no_fetch_behind(http, monkeypatch):
    """A LIMIT met early: nothing beyond the fetch horizon is asked for, and nothing fetched
    ahead stays in the store once the scan is closed (fetches not sent yet are cancelled). A
    LIMIT met by the first unit is tests/remote/test_window.py's; here the second batch opens
    the whole window and the fetches two windows ahead, which `concurrency` keeps short of
    the table."""
    _closed_early(http, monkeypatch)


def test_a_closed_scan_cancels_its_fetches_at_once_even_when_the_loop_runs_between(http, monkeypatch):
    """The same, with the event loop given time to run while the fetches are being forgotten
    (a loaded machine preempts the closing thread): a cancelled request in flight gives its
    slot back, and a queued fetch not cancelled yet would take it and be sent (a CI run saw
    all 11 sent). The scan forgets in one call, and the store cancels in one step on its loop."""
    from zarrsql.store.remote import FsspecStore

    forget = FsspecStore.forget

    def preempted(self, keys):
        forget(self, keys)
        time.sleep(0.3)

    monkeypatch.setattr(FsspecStore, "forget", preempted)
    _closed_early(http, monkeypatch)


def _closed_early(http, monkeypatch):
    monkeypatch.setattr("zarrsql.plan.units.GROUP_CELLS", 1)  # one unit per chunk, as counted here
    from zarrsql.scan import ReadRequest, open_table
    from zarrsql.scan.reader import FETCH_WINDOWS, read_batches

    window = 6
    scan = open_table(
        ReadRequest(store=http.url("fixtures/big_edge.zarr"), storage_options=(("concurrency", str(window)),))
    )
    plan = scan.plan()
    units = list(plan.units())
    horizon = 1 + FETCH_WINDOWS * window  # fetches started when the engine asks for a second batch
    assert len(units) > horizon + 4
    # a remote table's coordinates are read when first used: read them now, so that the log
    # below holds the units' fetches only
    assert all(len(d.values) == n for d, n in zip(scan.dims, scan.table.shape, strict=True))
    http.reset()
    slow = {f"/fixtures/big_edge.zarr/{k}" for u in units[2:horizon] for k in scan.unit_keys(u, scan.columns)}
    # units 3 on are still waiting on the server when the scan closes: two decoding threads
    # wait for nothing (a unit decodes once its chunks are in), the fetches queued behind the
    # `concurrency` in flight are cancelled before they are sent
    # (held until the scan is closed, not for a set time: a loaded machine can take longer
    # than any set time between the first slow request and the close)
    gate = threading.Event()
    http.on_request = lambda method, path: gate.wait(30) if path in slow else None
    batches = read_batches(scan, plan, scan.columns)
    first = next(batches)
    second = next(batches)
    batches.close()
    gate.set()
    assert (first.num_rows, second.num_rows) == (units[0].num_rows(), units[1].num_rows())
    time.sleep(1.2)  # requests that were in flight finish; any request made is in the log
    gets = {p for m, p in http.log if m == "GET"}
    allowed = {f"/fixtures/big_edge.zarr/{k}" for u in units[:horizon] for k in scan.unit_keys(u, scan.columns)}
    assert gets <= allowed  # nothing beyond the horizon
    assert len([p for p in gets if p in slow]) < len(slow)  # queued fetches were cancelled
    assert scan.store._ahead == {}


def test_units_whose_chunks_arrived_are_decoded_while_earlier_ones_wait(http, monkeypatch):
    """Requests that share the bandwidth finish in no set order: a unit is decoded as soon as
    its chunks are in, not behind units whose chunks are late (two late units would otherwise
    hold both decoding threads)."""
    monkeypatch.setattr("zarrsql.plan.units.GROUP_CELLS", 1)  # one unit per chunk, as counted here
    import threading

    from zarrsql.scan import ReadRequest, open_table
    from zarrsql.scan.reader import read_batches

    scan = open_table(ReadRequest(store=http.url("fixtures/big_edge.zarr")))
    plan = scan.plan()
    units = list(plan.units())
    http.reset()
    late = {f"/fixtures/big_edge.zarr/{k}" for u in units[1:3] for k in scan.unit_keys(u, scan.columns)}
    http.on_request = lambda method, path: time.sleep(0.8) if path in late else None
    batches = read_batches(scan, plan, scan.columns)
    with zarrsql.trace() as t:
        next(batches)  # the first unit; units 2-9 are on their way, the window then widens
        second = threading.Thread(target=next, args=(batches,))
        second.start()  # waits for unit 2, whose chunk is late
        time.sleep(0.4)
        decoded_while_waiting = t.work_units_read
        second.join()
    batches.close()
    assert decoded_while_waiting >= 1 + 6  # the first unit, and units 4-9 (units 2 and 3 are late)
