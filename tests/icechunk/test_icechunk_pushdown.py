"""WHERE prunes the same work units on a repository as on the same data in a plain store, and
trace() counts the repository's requests and bytes."""

from __future__ import annotations

import pytest

import zarrsql
from zarrsql.metadata.tree import clear_cache

WHERES = [
    "time >= TIMESTAMP '2024-01-01 18:00'",
    "lat > 46 AND lon < 8",
    "time < TIMESTAMP '2024-01-01 06:00' AND lat <= 45",
    "t2m > 1000",  # a data column: no pruning, every unit read
]


def _traced(location: str, extra: str, where: str):
    sql = f"SELECT time, lat, lon, t2m FROM read_zarr('{location}'{extra}) WHERE {where}"
    zarrsql.sql(sql).fetchall()  # warm: metadata and coordinates cached
    with zarrsql.trace() as t:
        rows = sorted(zarrsql.sql(sql).fetchall())
    return rows, t


@pytest.mark.parametrize("where", WHERES)
def test_pruning_matches_the_plain_store(versions, where):
    rows, repo = _traced(str(versions.path), ", tag := 'v1'", where)
    expected, plain = _traced(str(versions.plain), "", where)
    assert rows == expected
    assert repo.work_units_planned == plain.work_units_planned
    assert repo.work_units_read == plain.work_units_read
    assert repo.chunks_decoded == plain.chunks_decoded
    assert repo.requests == plain.requests == repo.chunks_decoded
    assert repo.bytes_read == plain.bytes_read > 0


def test_pruned_query_reads_fewer_bytes(versions):
    _, everything = _traced(str(versions.path), "", "true")
    _, pruned = _traced(str(versions.path), "", WHERES[0])
    assert 0 < pruned.work_units_read < everything.work_units_read
    assert 0 < pruned.bytes_read < everything.bytes_read


def test_trace_counts_metadata_requests_on_a_cold_read(versions):
    clear_cache()
    with zarrsql.trace() as t:
        zarrsql.sql(f"SELECT count(*) FROM read_zarr('{versions.path}', tag := 'v1')").fetchall()
    # the root group, the five arrays' documents and the three coordinates' chunks
    assert t.requests >= 1 + 5 + 3
    assert t.bytes_read > 0
