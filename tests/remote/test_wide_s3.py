"""Requests to S3, counted by moto's server (with latency; its log records every request):
a wide group without consolidated metadata (300 arrays) opens with concurrent requests in a
bounded number of rounds, and every document, chunk or range costs one request (no HEAD)."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarrsql
from tests.remote import s3server
from tests.remote.conftest import _no_aws_environment, moto_client
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.metadata.tree import clear_cache
from zarrsql.store.backends import split_options

N_ARRAYS = 300
LENGTH, CHUNK = 48, 24  # the coordinate and v299 in two chunks, the others in one
LATENCY = 0.1
BUCKET = "zarrsql-wide"


@pytest.fixture(scope="module")
def wide_local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v3 group written by zarr-python: a `time` coordinate and 300 variables over it."""
    import zarr

    path = tmp_path_factory.mktemp("wide") / "wide.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    time = group.create_array("time", shape=(LENGTH,), chunks=(CHUNK,), dtype="int64", dimension_names=["time"])
    time[:] = np.arange(LENGTH)
    time.attrs["units"] = "hours since 2020-01-01 00:00:00"
    for i in range(N_ARRAYS):
        chunks = (CHUNK,) if i == N_ARRAYS - 1 else (LENGTH,)
        a = group.create_array(f"v{i:03d}", shape=(LENGTH,), chunks=chunks, dtype="float32", dimension_names=["time"])
        a[:] = np.arange(LENGTH, dtype="float32") * (i + 1)
    return path


@pytest.fixture(scope="module")
def wide(wide_local: Path) -> Iterator[tuple[s3server.Timed, str]]:
    """The log of an S3 server with `LATENCY` per request, and the wide store's URL on it."""
    saved = dict(os.environ)
    _no_aws_environment()
    server, timed, endpoint = s3server.start()  # no latency while the bucket fills
    client = moto_client("s3", endpoint, "fixture", "fixture")
    client.create_bucket(Bucket=BUCKET, ACL="public-read")
    for f in wide_local.rglob("*"):
        if f.is_file():
            key = f"wide.zarr/{f.relative_to(wide_local).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=f.read_bytes(), ACL="public-read")
    timed.latency = LATENCY
    yield timed, endpoint
    server.shutdown()
    os.environ.clear()
    os.environ.update(saved)


def _run(con: zarrsql.Connection, timed: s3server.Timed, sql: str) -> tuple[list[Any], list[tuple]]:
    timed.reset()
    rows = con.sql(sql).fetchall()
    return rows, list(timed.timeline)


def _kinds(timeline: list[tuple]) -> Counter[str]:
    """Requests by kind: LIST (a GET with a list-type query), GET, HEAD."""
    return Counter("LIST" if m == "GET" and "list-type" in p else m for m, p, *_ in timeline)


def _most_in_flight(timeline: list[tuple]) -> int:
    events = sorted([(t[2], 1) for t in timeline] + [(t[3], -1) for t in timeline])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_a_wide_group_opens_in_a_bounded_number_of_rounds(con, wide, wide_local):
    timed, endpoint = wide
    clear_cache()
    url = f"s3://{BUCKET}/wide.zarr"
    opts = f"storage_options := MAP {{'endpoint_url': '{endpoint}'}}"
    rows, timeline = _run(con, timed, f"DESCRIBE SELECT * FROM read_zarr('{url}', {opts})")
    import zarr

    local = zarr.open_group(str(wide_local), mode="r")
    assert sorted(r[0] for r in rows) == sorted(local.array_keys())  # every variable, and time
    # the root document, one listing, every array's document: each read once, and no HEAD
    # (the validators come with the GETs). No chunk of the time coordinate: the columns'
    # types come from the documents, and its values are read when a scan first needs them
    assert _kinds(timeline) == Counter({"GET": 1 + N_ARRAYS + 1, "LIST": 1})
    # botocore's pool would hold 10 connections; the store's 32 requests are in flight at once
    assert _most_in_flight(timeline) >= 24
    # root, list, the documents in waves of 32: 13 rounds when the server
    # answers each wave at once; a serial walk would take ~300. moto spends CPU per request, so
    # on a busy machine a wave's answers spread out and the chain grows: the bound is loose.
    waves = math.ceil((N_ARRAYS + 1) / 32)
    assert s3server.dependent_rounds(timeline) <= 4 * (3 + waves)


def test_a_cached_wide_group_is_validated_with_heads_only(con, wide):
    timed, endpoint = wide
    clear_cache()
    opts = f"storage_options := MAP {{'endpoint_url': '{endpoint}'}}"
    query = f"DESCRIBE SELECT * FROM read_zarr('s3://{BUCKET}/wide.zarr', {opts})"
    first, _ = _run(con, timed, query)
    with zarrsql.trace() as second_trace:
        second, timeline = _run(con, timed, query)
    assert second == first
    assert second_trace.bytes_read == 0
    # one HEAD per document read (root, arrays), nothing fetched
    assert _kinds(timeline) == Counter({"HEAD": 1 + N_ARRAYS + 1})


def test_a_chunk_on_s3_costs_one_request(con, wide, wide_local):
    timed, endpoint = wide
    clear_cache()
    opts = f"storage_options := MAP {{'endpoint_url': '{endpoint}'}}"
    rows, timeline = _run(con, timed, f"SELECT sum(v299) FROM read_zarr('s3://{BUCKET}/wide.zarr', {opts})")
    import zarr

    expected = zarr.open_array(str(wide_local / "v299"), mode="r")[:].astype(np.float64).sum()
    assert rows[0][0] == pytest.approx(expected, rel=1e-12)
    chunk_gets = [p for m, p, *_ in timeline if m == "GET" and "/v299/c/" in p]
    assert len(chunk_gets) == LENGTH // CHUNK  # one GET per chunk
    assert _kinds(timeline)["HEAD"] == 0  # none before a GET, none to validate what was just read


def test_the_s3_connection_pool_holds_concurrency_connections():
    _, theirs = split_options("s3", {"concurrency": "48"})
    assert theirs["config_kwargs"]["max_pool_connections"] == 48
    _, given = split_options("s3", {"config_kwargs": '{"max_pool_connections": 5}'})
    assert given["config_kwargs"]["max_pool_connections"] == 5


def test_a_sharded_array_on_s3_reads_inner_chunks_with_ranged_gets(con, wide, tmp_path):
    """Ranged GETs (the shard index at the end, then the inner chunks a query needs) go out
    as single requests too, and read what zarr-python reads."""
    import zarr

    timed, endpoint = wide
    path = tmp_path / "sharded.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    x = group.create_array("x", shape=(64,), chunks=(64,), dtype="int64", dimension_names=["x"])
    x[:] = np.arange(64)
    v = group.create_array("v", shape=(64,), chunks=(8,), shards=(64,), dtype="float64", dimension_names=["x"])
    v[:] = np.sqrt(np.arange(64.0))
    zarr.consolidate_metadata(str(path))
    client = moto_client("s3", endpoint, "fixture", "fixture")
    timed.latency = 0.0
    for f in path.rglob("*"):
        if f.is_file():
            key = f"sharded.zarr/{f.relative_to(path).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=f.read_bytes(), ACL="public-read")
    timed.latency = LATENCY
    clear_cache()
    opts = f"storage_options := MAP {{'endpoint_url': '{endpoint}'}}"
    sql = f"SELECT sum(v) FROM read_zarr('s3://{BUCKET}/sharded.zarr', {opts}) WHERE x BETWEEN 10 AND 20"
    rows, timeline = _run(con, timed, sql)
    expected = zarr.open_array(str(path / "v"), mode="r")[10:21].sum()
    assert rows[0][0] == pytest.approx(expected, rel=1e-12)
    shard_gets = [p for m, p, *_ in timeline if m == "GET" and "/v/c/" in p]
    if HAS_SOURCES:  # the WHERE reaches the scan (DuckDB 2.x); on 1.5 DuckDB filters after a whole read
        assert 2 <= len(shard_gets) <= 3  # the index, then inner chunks 1 and 2 (8 values each)
    else:
        assert len(shard_gets) >= 1
    assert _kinds(timeline)["HEAD"] == 0


def test_validating_a_v2_walk_asks_one_head_per_document(con, wide, served_root):
    """An unconsolidated v2 store records the documents it found absent (`.zgroup` of an
    array, ...) too; revalidating one is one HEAD, not a HEAD and a LIST (s3fs's `_info`)."""
    timed, endpoint = wide
    store = served_root / "plain/v2_air_temperature.zarr"
    client = moto_client("s3", endpoint, "fixture", "fixture")
    timed.latency = 0.0
    for f in store.rglob("*"):
        if f.is_file():
            key = f"v2.zarr/{f.relative_to(store).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=f.read_bytes(), ACL="public-read")
    timed.latency = LATENCY
    clear_cache()
    opts = f"storage_options := MAP {{'endpoint_url': '{endpoint}'}}"
    sql = f"SELECT count(*), avg(air) FROM read_zarr('s3://{BUCKET}/v2.zarr', {opts})"
    first, _ = _run(con, timed, sql)
    second, timeline = _run(con, timed, sql)
    import xarray as xr

    air = xr.open_zarr(store, consolidated=False).air.values.astype(np.float64)
    for rows in (first, second):  # the sum's order, and so its last bits, may differ
        assert rows[0][0] == air.size
        assert rows[0][1] == pytest.approx(np.nanmean(air), rel=1e-9)
    kinds = _kinds(timeline)
    assert kinds["LIST"] == 0  # validation only: HEADs, nothing listed
    assert kinds["HEAD"] > 0
