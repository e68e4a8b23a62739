"""Pushed filters prune partitions and never change the answer; only requested columns decode.

"Hidden from pushdown" means the same condition written through an expression Spark cannot
push (`lat + 0 > 60`), so Spark evaluates it itself over a full scan. Pushdown is opt-in, so
these reads pass `pushdown=true`.
"""

from __future__ import annotations

from typing import Any

import pytest
from compare import duck_rows, spark_rows
from pyspark.sql import datasource as ds

import zarrsql
from zarrsql.spark.source import ZarrDataSource

pytestmark = pytest.mark.spark

#: Bytes per partition: three work units of the air fixture (chunks of 40x13x27 cells, 24 bytes
#: a row decoded), so its 3x2x2 chunk grid makes four partitions.
SMALL = str(3 * 40 * 13 * 27 * 24)


def _air(spark: Any, store: str) -> Any:
    return spark.read.format("zarr").option("partition_bytes", SMALL).option("pushdown", "true").load(store)


def test_pushed_filters_prune_partitions_and_keep_every_row(spark: Any, fixture_path: Any) -> None:
    store = fixture_path("air_temperature.zarr")
    df = _air(spark, store)
    full = df.rdd.getNumPartitions()
    # the last of three time chunks (ten days each) and the first of two latitude chunks
    pushed = df.filter("lat > 60 AND time >= timestamp_ntz'2013-01-21'")
    hidden = df.filter("lat + 0 > 60 AND cast(time as string) >= '2013-01-21'")
    assert full == 4
    assert pushed.rdd.getNumPartitions() == 1  # 2 of 12 work units
    assert hidden.rdd.getNumPartitions() == full
    rows = spark_rows(pushed)
    assert rows
    assert rows == spark_rows(hidden)
    duck = zarrsql.sql(f"SELECT * FROM read_zarr('{store}') WHERE lat > 60 AND time >= TIMESTAMP '2013-01-21'")
    assert rows == duck_rows(duck)


def test_not_in_and_null_safe_filters_are_exact(spark: Any, fixture_path: Any) -> None:
    store = fixture_path("air_temperature.zarr")
    df = _air(spark, store)
    cond = "NOT (lon IN (200.0, 202.5)) AND lat <=> 75.0 AND lat IS NOT NULL AND lon <> 205.0"
    hidden = "NOT (lon + 0 IN (200.0, 202.5)) AND lat + 0 <=> 75.0 AND lon + 0 <> 205.0"
    assert spark_rows(df.filter(cond)) == spark_rows(df.filter(hidden))
    duck = zarrsql.sql(
        f"SELECT * FROM read_zarr('{store}') WHERE lon NOT IN (200.0, 202.5) AND lat = 75.0 AND lon <> 205.0"
    )
    assert spark_rows(df.filter(cond)) == duck_rows(duck)


def test_a_prefix_filter_prunes_but_spark_applies_it(spark: Any, fixture_path: Any) -> None:
    store = fixture_path("labels.zarr")
    df = spark.read.format("zarr").option("table_name", "station_hour").option("pushdown", "true").load(store)
    names = sorted({r.station for r in df.select("station").collect()})
    prefix = names[-1][:-1] if len(names[-1]) > 1 else names[-1]
    got = df.filter(f"station LIKE '{prefix}%'")
    want = [r for r in spark_rows(df) if r[0] is not None and r[0].startswith(prefix)]
    assert want
    assert spark_rows(got) == want


def _reader(store: str, **options: str) -> Any:
    source = ZarrDataSource({"path": store, **options})
    return source.reader(source.schema())


def test_only_exact_filters_are_accepted(fixture_path: Any) -> None:
    """pushFilters (called here without Spark) gives back what the scan cannot apply exactly."""
    reader = _reader(fixture_path("air_temperature.zarr"), pushdown="true")
    accepted = [
        ds.GreaterThan(("lat",), 60.0),
        ds.In(("lon",), (200.0,)),
        ds.IsNotNull(("time",)),
        ds.Not(ds.EqualTo(("lat",), 75.0)),
    ]
    declined = [
        ds.GreaterThan(("air",), 250.0),  # a data variable: chunks have no statistics
        ds.In(("lon",), (200.0, None)),  # NULL in an IN list: unknown, not false, under NOT
        ds.EqualTo(("lat",), "75"),  # a constant of another type
        ds.StringStartsWith(("lat",), "7"),
    ]
    returned = list(reader.pushFilters(accepted + declined))
    assert returned == declined
    assert len(reader.exact) == len(accepted)


def test_the_columns_option_decodes_only_those_variables(fixture_path: Any) -> None:
    store = fixture_path("era5_like.zarr")
    table = {"table_name": "time_latitude_longitude"}
    counts = {}
    for cols in (None, "time,2m_temperature"):
        reader = _reader(store, **table, **({} if cols is None else {"columns": cols}))
        parts = reader.partitions()
        with zarrsql.trace() as t:
            batches = [b for p in parts for b in reader.read(p)]
        counts[cols] = t.chunks_decoded
        if cols is not None:
            assert [f.name for f in reader.schema.fields] == ["time", "2m_temperature"]
            assert all(b.schema.names == ["time", "2m_temperature"] for b in batches)
    # three variables against one: a third of the data chunks
    assert counts["time,2m_temperature"] * 3 == counts[None]


def test_aggregates_group_by_and_join_match_duckdb(spark: Any, fixture_path: Any) -> None:
    air = fixture_path("air_temperature.zarr")
    mixed = fixture_path("mixed_chunks.zarr")
    spark.read.format("zarr").load(air).createOrReplaceTempView("air")
    spark.read.format("zarr").load(mixed).createOrReplaceTempView("mixed")
    queries = [
        "SELECT lat, count(*), sum(air), min(air), max(air) FROM {air} GROUP BY lat",
        "SELECT count(*), count(air) FROM {air}",
        "SELECT a.lat, a.lon, count(*), sum(a.air - m.Tair) FROM {air} a JOIN {mixed} m "
        "ON a.time = m.time AND a.lat = m.lat AND a.lon = m.lon GROUP BY a.lat, a.lon",
    ]
    for q in queries:
        got = spark.sql(q.format(air="air", mixed="mixed"))
        want = zarrsql.sql(q.format(air=f"read_zarr('{air}')", mixed=f"read_zarr('{mixed}')"))
        g, w = spark_rows(got), duck_rows(want)
        assert g, q
        assert len(g) == len(w), q
        for row_g, row_w in zip(g, w, strict=True):  # float sums: the same up to summation order
            assert row_g == pytest.approx(row_w, rel=1e-9), q


def test_create_table_using_zarr(spark: Any, fixture_path: Any) -> None:
    """Spark gives the reader of a catalog table no options: they travel in the schema."""
    store = fixture_path("era5_like.zarr")
    spark.sql("DROP TABLE IF EXISTS era5_small")
    spark.sql(f"CREATE TABLE era5_small USING zarr OPTIONS (path '{store}', table_name 'time_latitude_longitude')")
    try:
        got = spark.sql("SELECT * FROM era5_small WHERE latitude > 50")
        want = zarrsql.sql(
            f"SELECT * FROM read_zarr('{store}', table_name := 'time_latitude_longitude') WHERE latitude > 50"
        )
        assert spark_rows(got) == duck_rows(want)
    finally:
        spark.sql("DROP TABLE IF EXISTS era5_small")


def test_a_given_schema_reads_only_its_columns(spark: Any, fixture_path: Any) -> None:
    store = fixture_path("air_temperature.zarr")
    df = spark.read.format("zarr").schema("air DOUBLE, time TIMESTAMP_NTZ").load(store).filter("air > 290")
    want = zarrsql.sql(f"SELECT air, time FROM read_zarr('{store}') WHERE air > 290")
    assert spark_rows(df) == duck_rows(want)
    wrong = spark.read.format("zarr").schema("air FLOAT").load(store)
    with pytest.raises(Exception, match="column 'air' of table 'time_lat_lon' is double, not float"):
        wrong.collect()
