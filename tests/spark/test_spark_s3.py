"""A store on S3 (moto's server on 127.0.0.1) read by Spark's executors through fsspec."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from compare import duck_rows, spark_rows
from tests.remote.conftest import moto_client, start_moto

import zarrsql

pytestmark = pytest.mark.spark

BUCKET = "zarrsql-spark"


@pytest.fixture(scope="module")
def s3_store(fixtures_dir: Any) -> Iterator[tuple[str, str]]:
    """(s3 URL of the air fixture, endpoint URL) on a server holding a copy of it."""
    server, endpoint = start_moto()
    client = moto_client("s3", endpoint, "spark", "spark")
    client.create_bucket(Bucket=BUCKET)
    root = fixtures_dir / "air_temperature.zarr"
    for f in root.rglob("*"):
        if f.is_file():
            client.put_object(Bucket=BUCKET, Key=f"air.zarr/{f.relative_to(root).as_posix()}", Body=f.read_bytes())
    yield f"s3://{BUCKET}/air.zarr", endpoint
    server.stop()


def test_executors_read_s3_with_the_options_given(spark: Any, s3_store: tuple[str, str], fixture_path: Any) -> None:
    url, endpoint = s3_store
    df = (
        spark.read.format("zarr")
        .option("storage_options.endpoint_url", endpoint)
        .option("storage_options.key", "spark")
        .option("storage_options.secret", "do-not-log-me")
        .option("partition_bytes", str(3 * 40 * 13 * 27 * 24))  # three units a partition
        .load(url)
    )
    assert "do-not-log-me" not in df.schema.json()
    got = df.filter("lat < 30")
    assert got.rdd.getNumPartitions() > 1  # read by several tasks
    want = zarrsql.sql(f"SELECT * FROM read_zarr('{fixture_path('air_temperature.zarr')}') WHERE lat < 30")
    assert spark_rows(got) == duck_rows(want)
