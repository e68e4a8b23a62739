"""The commit machinery on an object store (moto's S3 server on 127.0.0.1): a new store's root
document is written last, a failed new store leaves no key behind, an append commits with
the consolidated root, and zarrsql reads the table written there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import fsspec
import numpy as np
import pytest
import zarr

import zarrsql
from tests.remote.conftest import fresh_bucket
from zarrsql.errors import StoreExistsError
from zarrsql.write.commit import StoreTarget, publish_new
from zarrsql.write.table import write_table

BUCKET = "written"


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """Storage options of a fresh bucket on a local S3 API server."""
    yield from fresh_bucket(BUCKET)


def _fs(options: dict[str, str]) -> Any:
    return fsspec.filesystem("s3", key=options["key"], secret=options["secret"], endpoint_url=options["endpoint_url"])


def _map(options: dict[str, str]) -> str:
    return "MAP {" + ", ".join(f"'{k}': '{v}'" for k, v in options.items()) + "}"


def test_a_table_written_to_s3_reads_back_and_appends(s3: dict[str, str]) -> None:
    con = duckdb.connect()
    url = f"s3://{BUCKET}/table.zarr"
    first = con.sql("SELECT range AS n, 'r' || range AS s FROM range(10)")
    write_table(first.to_arrow_reader(), url, chunks=4, storage_options=s3)
    more = con.sql("SELECT range AS n, 'r' || range AS s FROM range(10, 15)")
    write_table(more.to_arrow_reader(), url, mode="a", storage_options=s3)
    zc = zarrsql.connect()
    got = zc.sql(f"SELECT * FROM read_zarr('{url}', storage_options := {_map(s3)})").fetchall()
    assert got == con.sql("SELECT range AS n, 'r' || range AS s FROM range(15)").fetchall()
    with pytest.raises(StoreExistsError):
        write_table(first.to_arrow_reader(), url, storage_options=s3)


def _writer(fs: Any, root: str, seen: list[bool], *, fail: bool = False) -> Any:
    def write(target: StoreTarget) -> None:
        group = zarr.open_group(target.zarr_store, mode="w", zarr_format=target.zarr_format)
        group.create_array("x", shape=(5,), chunks=(2,), dtype="i4")[:] = np.arange(5)
        seen.append(fs.exists(f"{root}/zarr.json"))  # the chunks are there, the root not yet
        if fail:
            raise RuntimeError("failed on purpose")

    return write


def test_the_root_document_is_written_last(s3: dict[str, str]) -> None:
    fs, seen = _fs(s3), []
    root = f"{BUCKET}/last.zarr"
    publish_new(f"s3://{root}", "w-", s3, _writer(fs, root, seen))
    assert seen == [False]
    fs.invalidate_cache()
    assert fs.exists(f"{root}/zarr.json")
    assert fs.exists(f"{root}/x/c/0")
    opened = zarr.open_group(f"s3://{root}", mode="r", storage_options=dict(s3), use_consolidated=True)
    np.testing.assert_array_equal(opened["x"][:], np.arange(5))


def test_a_failed_new_store_on_s3_leaves_no_key(s3: dict[str, str]) -> None:
    fs, seen = _fs(s3), []
    root = f"{BUCKET}/failed.zarr"
    with pytest.raises(RuntimeError, match="on purpose"):
        publish_new(f"s3://{root}", "w-", s3, _writer(fs, root, seen, fail=True))
    fs.invalidate_cache()
    assert fs.find(root) == []
