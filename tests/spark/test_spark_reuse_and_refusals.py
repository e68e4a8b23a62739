"""A reused DataFrame keeps every row by default; repeated columns and missing paths are refused.

Spark (pyspark 4.3.0) reuses the reader it pickled for a filtered query in a later query on
the same DataFrame, so with filter pushdown on, the later query gets the filter's rows; the
default (`pushdown` off) must give every row back. Expected values come from numpy on the
arrays written to the store, never from zarrsql.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from pyspark.errors import PySparkException
from pyspark.sql.datasource import DataSourceReader

from zarrsql.errors import ParameterError
from zarrsql.spark.source import ZarrDataSource, ZarrPushdownReader

pytestmark = pytest.mark.spark

X = np.arange(10)
V = np.arange(10.0)


@pytest.fixture(scope="module")
def ten_rows(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One table of ten rows: dimension `x` 0..9 and variable `v` 0.0..9.0, in two chunks."""
    store = tmp_path_factory.mktemp("reuse") / "ten.zarr"
    ds = xr.Dataset({"v": (("x",), V)}, coords={"x": X})
    ds.to_zarr(store, mode="w", consolidated=False, encoding={"v": {"chunks": (5,)}})
    return str(store)


def test_a_reused_dataframe_returns_every_row_by_default(spark: Any, ten_rows: str) -> None:
    df = spark.read.format("zarr").load(ten_rows)
    counts = [df.count(), df.filter("x < 3").count(), df.count()]
    assert counts == [len(X), int((X < 3).sum()), len(X)]  # 10, 3, 10
    assert df.groupBy().sum("v").collect()[0][0] == pytest.approx(float(V.sum()))  # 45.0
    assert df.filter("x < 3").count() == int((X < 3).sum())


def test_pushdown_is_opt_in_and_still_prunes(spark: Any, ten_rows: str) -> None:
    """By default Spark filters every unit's rows; with `pushdown=true` a filter prunes units."""
    one_unit = str(5 * 16)  # bytes per partition: one chunk of five rows of x and v
    read = spark.read.format("zarr").option("partition_bytes", one_unit)
    default = read.load(ten_rows).filter("x < 3")
    pushed = read.option("pushdown", "true").load(ten_rows).filter("x < 3")
    assert default.rdd.getNumPartitions() == 2
    assert pushed.rdd.getNumPartitions() == 1  # the chunk of x 5..9 cannot match
    want = sorted((int(x), float(v)) for x, v in zip(X, V, strict=True) if x < 3)
    assert sorted(tuple(r) for r in default.collect()) == want
    assert sorted(tuple(r) for r in pushed.collect()) == want


def test_the_default_reader_takes_no_filters(ten_rows: str) -> None:
    """Spark accepts a reader without `pushFilters` while its pushdown conf is true."""
    source = ZarrDataSource({"path": ten_rows})
    reader = source.reader(source.schema())
    assert type(reader).pushFilters is DataSourceReader.pushFilters
    opted = ZarrDataSource({"path": ten_rows, "pushdown": "TRUE"})
    assert isinstance(opted.reader(opted.schema()), ZarrPushdownReader)


@pytest.mark.parametrize("value", ["yes", "1", ""])
def test_a_pushdown_value_other_than_true_or_false_is_refused(ten_rows: str, value: str) -> None:
    source = ZarrDataSource({"path": ten_rows, "pushdown": value})
    with pytest.raises(ParameterError, match="pushdown: must be 'true' or 'false'"):
        source.reader(source.schema())


def test_a_column_named_twice_is_refused(spark: Any, ten_rows: str) -> None:
    by_option = spark.read.format("zarr").option("columns", "x,v,v")
    with pytest.raises(PySparkException, match="columns: column 'v' is named twice; name each column once"):
        by_option.load(ten_rows).collect()
    by_schema = spark.read.format("zarr").schema("x BIGINT, v DOUBLE, v DOUBLE").load(ten_rows)
    with pytest.raises(PySparkException, match="schema: column 'v' is named twice; give each column once"):
        by_schema.collect()


def test_a_read_without_one_path_says_how_to_give_it(spark: Any, ten_rows: str, tmp_path: Path) -> None:
    with pytest.raises(PySparkException, match=r"no store path reached the zarr source; give one path: \.load\(path\)"):
        spark.read.format("zarr").load().collect()
    with pytest.raises(PySparkException, match=r"reads one store, got the list .*; give one path: \.load\(path\)"):
        spark.read.format("zarr").load([ten_rows, ten_rows]).collect()


def test_a_catalog_table_with_a_column_list_says_what_to_change(spark: Any, ten_rows: str) -> None:
    """Spark gives the reader of such a table no options at all, so it cannot be read."""
    spark.sql("DROP TABLE IF EXISTS ten_cols")
    spark.sql(f"CREATE TABLE ten_cols (x BIGINT, v DOUBLE) USING zarr OPTIONS (path '{ten_rows}')")
    try:
        with pytest.raises(PySparkException, match="drop the column list .* or name the columns with the `columns`"):
            spark.sql("SELECT * FROM ten_cols").collect()
    finally:
        spark.sql("DROP TABLE IF EXISTS ten_cols")
