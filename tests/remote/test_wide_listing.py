"""Listing a wide S3 group without consolidated metadata (read_zarr_tables) reads each
document once and validates nothing twice: DuckDB calls the listing in every binding round
of one statement, and each call used to revalidate the whole tree (a HEAD per document)."""

from __future__ import annotations

from collections import Counter

from tests.remote.test_wide_s3 import BUCKET, LENGTH, N_ARRAYS, _kinds, _run, wide, wide_local  # noqa: F401
from zarrsql.metadata.tree import clear_cache


def _tables_sql(endpoint: str) -> str:
    opts = f"storage_options := MAP {{'endpoint_url': '{endpoint}'}}"
    return f"SELECT data_vars, coord_vars FROM read_zarr_tables('s3://{BUCKET}/wide.zarr', {opts})"


def _variables(local) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """The data variables and coordinates zarr-python sees: an array named for its only
    dimension is that dimension's coordinate."""
    import zarr

    group = zarr.open_group(str(local), mode="r")
    names = sorted(group.array_keys())
    coords = [n for n in names if list(group[n].metadata.dimension_names or ()) == [n]]
    return [n for n in names if n not in coords], coords


def test_listing_a_wide_group_reads_each_document_once_without_heads(con, wide, wide_local):  # noqa: F811
    timed, endpoint = wide
    clear_cache()
    rows, timeline = _run(con, timed, _tables_sql(endpoint))
    data_vars, coords = _variables(wide_local)
    assert len(rows) == 1
    assert sorted(rows[0][0]) == data_vars
    assert sorted(rows[0][1]) == coords
    # the root document, one listing, every array's document: no HEAD, no document twice
    assert _kinds(timeline) == Counter({"GET": 1 + N_ARRAYS + 1, "LIST": 1})
    gets = [p for m, p, *_ in timeline if m == "GET" and "list-type" not in p]
    assert len(gets) == len(set(gets))


def test_listing_again_validates_each_document_once(con, wide, wide_local):  # noqa: F811
    """The next statement revalidates the cached tree (metadata_ttl 0): one HEAD per
    document, once for the statement, whatever DuckDB's binding rounds."""
    timed, endpoint = wide
    clear_cache()
    first, _ = _run(con, timed, _tables_sql(endpoint))
    second, timeline = _run(con, timed, _tables_sql(endpoint))
    assert second == first
    assert _kinds(timeline) == Counter({"HEAD": 1 + N_ARRAYS + 1})
