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


def test_a_failed_grid_append_on_s3_is_withdrawn(s3: dict[str, str], tmp_path, monkeypatch) -> None:
    """One chunk's PUT fails mid-append (a network failure injected into s3fs, the server real).
    Before, the chunks written until then stayed beyond the arrays' end, and a later append that
    left those cells empty showed the failed append's values (found by a hunter). The oracle is
    xarray reading the store from the server."""
    import pandas as pd
    import s3fs
    import xarray as xr

    local = tmp_path / "src.zarr"
    values = np.random.default_rng(0).standard_normal((4, 15))
    days = pd.date_range("2024-01-01", periods=4, freq="D")
    xr.Dataset({"v": (("time", "lat"), values)}, coords={"time": days, "lat": np.arange(15.0)}).to_zarr(local)
    url = f"s3://{BUCKET}/withdrawn.zarr"
    con = zarrsql.connect()
    zarrsql.to_zarr(
        con.sql(f"SELECT * FROM read_zarr('{local}')"), url, storage_options=s3, chunks={"time": 4, "lat": 5}
    )
    later = f"SELECT time + INTERVAL 4 DAY AS time, lat, v FROM read_zarr('{local}')"

    put = s3fs.S3FileSystem._pipe_file

    async def failing(self: Any, path: str, data: Any, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("/v/c/1/2"):
            raise OSError("the connection was reset")
        return await put(self, path, data, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_pipe_file", failing)
    with pytest.raises(zarrsql.WriteError, match="withdrawn"):
        zarrsql.to_zarr(con.sql(later), url, mode="a", append_dim="time", storage_options=s3, connection=con)
    monkeypatch.setattr(s3fs.S3FileSystem, "_pipe_file", put)

    options = {"key": s3["key"], "secret": s3["secret"], "client_kwargs": {"endpoint_url": s3["endpoint_url"]}}
    xr.testing.assert_equal(xr.open_zarr(url, storage_options=options).load()["v"], xr.open_zarr(local).load()["v"])
    zarrsql.to_zarr(later + " WHERE lat < 5", url, mode="a", append_dim="time", storage_options=s3, connection=con)
    appended = xr.open_zarr(url, storage_options=options).load()["v"].sel(time=slice("2024-01-05", None))
    assert appended.sizes == {"time": 4, "lat": 15}
    np.testing.assert_array_equal(appended.sel(lat=slice(None, 4.0)).values, values[:, :5])
    assert int(appended.sel(lat=slice(5.0, None)).count()) == 0  # the cells no row gave: missing
