"""`CREATE TABLE ... USING zarr OPTIONS (...)` keeps secret storage options out of the schema.

Spark SQL hands the source each of a table's OPTIONS twice, as `name` and as `option.name`;
the secret must be dropped in both spellings, and the table must still read (with the
credentials of the environment). Expected rows come from xarray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from zarrsql.spark.options import shareable, spark_read

pytestmark = pytest.mark.spark

SECRET = "hunter2"


def test_spark_sql_copies_of_storage_options_are_storage_options(tmp_path: Path) -> None:
    options = {
        "path": str(tmp_path),
        "option.storage_options.secret_key": SECRET,
        "option.storage_options.endpoint_url": "http://127.0.0.1:9000",
    }
    assert shareable(options) == {
        "path": str(tmp_path),
        "option.storage_options.endpoint_url": "http://127.0.0.1:9000",
    }
    storage = spark_read(options).args["storage_options"]
    assert storage == {"secret_key": SECRET, "endpoint_url": "http://127.0.0.1:9000"}


def test_a_secret_storage_option_stays_out_of_a_table_schema(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "secret.zarr"
    ds = xr.Dataset({"v": (("t",), np.arange(5.0))}, coords={"t": np.arange(5)})
    ds.to_zarr(store, mode="w", consolidated=False)
    spark.sql("DROP TABLE IF EXISTS secret_options")
    spark.sql(
        f"CREATE TABLE secret_options USING zarr OPTIONS (path '{store}', `storage_options.secret_key` '{SECRET}')"
    )
    try:
        assert SECRET not in spark.table("secret_options").schema.json()
        count, total = spark.sql("SELECT count(*), sum(v) FROM secret_options").collect()[0]
        assert (count, total) == (ds.sizes["t"], pytest.approx(float(ds["v"].sum())))  # 5, 10.0
    finally:
        spark.sql("DROP TABLE IF EXISTS secret_options")
