"""mode="w" onto an object store (moto's S3 server on 127.0.0.1): a write that fails leaves the
old store as it was and no staging keys behind, and one that succeeds leaves exactly the new
store (no key of the old one). Both write paths are run: the in-memory one and the streaming
one every grid over `IN_MEMORY_BYTES` takes (lowered to 0 here so that a small grid takes it).
The old and the expected new stores are read with xarray, and keys are listed with s3fs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs
import xarray as xr

import zarrsql
import zarrsql.write.grid as grid
from tests.remote.conftest import fresh_bucket

BUCKET = "replaced"


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """Storage options of a fresh bucket on a local S3 API server."""
    yield from fresh_bucket(BUCKET)


@pytest.fixture(params=["in_memory", "streaming"])
def write_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "streaming":
        monkeypatch.setattr(grid, "IN_MEMORY_BYTES", 0)
    return str(request.param)


def _fs(options: dict[str, str]) -> Any:
    fs = s3fs.S3FileSystem(key=options["key"], secret=options["secret"], endpoint_url=options["endpoint_url"])
    fs.invalidate_cache()
    return fs


def _keys(options: dict[str, str]) -> list[str]:
    """Every key of the bucket, as s3fs lists it."""
    return sorted(_fs(options).find(BUCKET))


def _old_dataset() -> xr.Dataset:
    """The store that is there before: two variables over a larger grid, several chunks each."""
    return xr.Dataset(
        {
            "old": (("t", "x"), np.arange(48.0).reshape(6, 8)),
            "gone": (("t", "x"), np.ones((6, 8), dtype="int32")),
        },
        coords={"t": np.arange(6), "x": np.arange(8)},
    )


def _put_old(url: str, options: dict[str, str]) -> xr.Dataset:
    ds = _old_dataset()
    encoding = {name: {"chunks": (2, 4)} for name in ds.data_vars}
    ds.to_zarr(url, mode="w", storage_options=options, encoding=encoding, consolidated=True)
    return ds


def _source(tmp_path: Path) -> str:
    """A local store of the new data: v over t (3) x x (4)."""
    path = tmp_path / "src.zarr"
    xr.Dataset({"v": (("t", "x"), np.arange(12.0).reshape(3, 4))}, coords={"t": [0, 1, 2], "x": [0, 1, 2, 3]}).to_zarr(
        path
    )
    return str(path)


def test_a_failed_replacement_leaves_the_old_store_and_no_staging(s3, write_path, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/failed-{write_path}.zarr"
    old = _put_old(url, s3)
    before = _keys(s3)
    src = _source(tmp_path)
    # one row twice: the writer finds the duplicate only once it has read the rows
    bad = f"SELECT * FROM read_zarr('{src}') UNION ALL SELECT * FROM read_zarr('{src}') WHERE t = 2 AND x = 3"
    with pytest.raises(zarrsql.ZarrSQLError):
        zarrsql.to_zarr(bad, url, mode="w", dims=["t", "x"], storage_options=s3, connection=zarrsql.connect())
    assert _keys(s3) == before
    xr.testing.assert_identical(xr.open_zarr(url, storage_options=s3).load(), old)


def test_a_replacement_leaves_exactly_the_new_store(s3, write_path, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/replaced-{write_path}.zarr"
    _put_old(url, s3)
    src = _source(tmp_path)
    zarrsql.to_zarr(
        f"SELECT * FROM read_zarr('{src}')",
        url,
        mode="w",
        dims=["t", "x"],
        storage_options=s3,
        connection=zarrsql.connect(),
    )
    got = xr.open_zarr(url, storage_options=s3).load()
    expected = xr.open_zarr(src).load()
    xr.testing.assert_equal(got, expected)
    prefix = f"{BUCKET}/replaced-{write_path}.zarr/"
    keys = _keys(s3)
    assert not [k for k in keys if "zarrsql-staging" in k]
    # no key of the old store's arrays, and none of the old grid's chunks beyond the new one
    assert not [k for k in keys if k.startswith(prefix + "gone/") or k.startswith(prefix + "old/")]
    assert not [k for k in keys if k.startswith(prefix + "t/c/1") or k.startswith(prefix + "x/c/1")]


def test_a_replacement_of_a_store_that_is_not_zarr_is_refused(s3, tmp_path: Path) -> None:
    fs = _fs(s3)
    fs.pipe(f"{BUCKET}/notes/readme.txt", b"mine")
    src = _source(tmp_path)
    with pytest.raises(zarrsql.ZarrSQLError, match="no Zarr store"):
        zarrsql.to_zarr(
            f"SELECT * FROM read_zarr('{src}')",
            f"s3://{BUCKET}/notes",
            mode="w",
            dims=["t", "x"],
            storage_options=s3,
            connection=zarrsql.connect(),
        )
    assert _fs(s3).cat(f"{BUCKET}/notes/readme.txt") == b"mine"
    assert not [k for k in _keys(s3) if "zarrsql-staging" in k]
