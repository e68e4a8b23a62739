"""zarrsql as a Spark data source: `register(spark)`, then `spark.read.format("zarr")`.

Needs pyspark >= 4.1 (`pip install "zarrsql[spark]"`), on the driver and on every worker.
The executors read with zarrsql's engine-neutral core (zarr metadata, numcodecs, fsspec,
numpy, pyarrow); nothing in this package imports DuckDB. See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]

#: Spark refuses a Python reader that implements `pushFilters` unless this is true.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the `zarr` data source with a SparkSession and enable filter pushdown."""
    from zarrsql.spark.source import ZarrDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(ZarrDataSource)
