"""Grid stores written to S3 (moto's S3 API server on 127.0.0.1, through fsspec/s3fs) and
appended to there, read back with xarray."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import xarray as xr

import zarrsql
from tests.remote.conftest import moto_client, start_moto
from tests.write.frames import pivot, weather

DIMS = ["time", "lat", "lon"]


@pytest.fixture(scope="module")
def bucket() -> Iterator[dict[str, str]]:
    """Storage options for a fresh bucket `out` on a server of this module's own."""
    saved = dict(os.environ)
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull + "-none"
    os.environ["AWS_CONFIG_FILE"] = os.devnull + "-none"
    server, endpoint = start_moto()
    moto_client("s3", endpoint, "writer", "writer").create_bucket(Bucket="out")
    yield {"endpoint_url": endpoint, "key": "writer", "secret": "writer"}
    server.stop()
    os.environ.clear()
    os.environ.update(saved)


def test_write_and_append_on_s3(bucket: dict[str, str]) -> None:
    frame = weather(n_time=8).to_dataframe().reset_index()
    first = frame[frame.time < frame.time.unique()[5]]  # noqa: F841 (read by DuckDB by name)
    rest = frame[frame.time >= frame.time.unique()[5]]  # noqa: F841
    con = zarrsql.connect()
    url = "s3://out/weather.zarr"
    zarrsql.to_zarr(con.sql("SELECT * FROM first"), url, dims=DIMS, chunks={"time": 3}, storage_options=bucket,
                    connection=con)  # fmt: skip
    opened = xr.open_zarr(url, storage_options=bucket).load()
    xr.testing.assert_equal(opened, pivot(frame[frame.time < frame.time.unique()[5]], DIMS))
    with pytest.raises(zarrsql.StoreExistsError):
        zarrsql.to_zarr(con.sql("SELECT * FROM first"), url, dims=DIMS, storage_options=bucket, connection=con)
    zarrsql.to_zarr(con.sql("SELECT * FROM rest"), url, mode="a", append_dim="time", storage_options=bucket,
                    connection=con)  # fmt: skip
    xr.testing.assert_equal(xr.open_zarr(url, storage_options=bucket).load(), pivot(frame, DIMS))
