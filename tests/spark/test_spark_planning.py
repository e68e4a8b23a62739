"""The driver plans from metadata and coordinates alone, in bounded memory; partitions are small.

These run the data source's driver side in this process (no Spark job), on a store whose
data variable has 100,000 chunks declared and none written.
"""

from __future__ import annotations

import datetime as dt
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from pyspark.sql import datasource as ds

import zarrsql
from zarrsql.spark.source import ZarrDataSource

pytestmark = pytest.mark.spark

N_TIME = 100_000  # one chunk per hour of a 721 x 1440 field, as ARCO-ERA5 chunks its variables


@pytest.fixture(scope="module")
def metadata_only(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("planning") / "hourly.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    time = root.create_array("time", shape=(N_TIME,), chunks=(N_TIME,), dtype="int64", dimension_names=["time"])
    time[:] = np.arange(N_TIME, dtype=np.int64)
    time.attrs.update({"units": "hours since 2000-01-01", "calendar": "proleptic_gregorian"})
    lat = root.create_array("latitude", shape=(721,), chunks=(721,), dtype="float64", dimension_names=["latitude"])
    lat[:] = np.linspace(90, -90, 721)
    lon = root.create_array("longitude", shape=(1440,), chunks=(1440,), dtype="float64", dimension_names=["longitude"])
    lon[:] = np.arange(1440) * 0.25
    root.create_array(
        "t2m",
        shape=(N_TIME, 721, 1440),
        chunks=(1, 721, 1440),
        dtype="float32",
        dimension_names=["time", "latitude", "longitude"],
        fill_value=np.nan,
    )
    zarr.consolidate_metadata(str(path))
    return str(path)


def _reader(store: str, **options: str) -> Any:
    source = ZarrDataSource({"path": store, **options})
    return source.reader(source.schema())


def test_planning_reads_no_chunk_of_data_and_covers_every_unit_once(metadata_only: str) -> None:
    reader = _reader(metadata_only)
    tracemalloc.start()
    with zarrsql.trace() as t:
        parts = reader.partitions()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    ordinals = np.concatenate([np.arange(a, b) for p in parts for a, b in p.runs])
    assert np.array_equal(ordinals, np.arange(N_TIME))  # each unit once, in order
    # a unit's decoded bytes: 721 x 1440 rows of time, latitude, longitude (8 each) and t2m (4)
    per_unit = 721 * 1440 * (8 + 8 + 8 + 4)
    assert len(parts) == -(-N_TIME // (128 * 2**20 // per_unit))
    assert t.chunks_decoded <= 3  # the three coordinates, not one chunk of t2m
    assert peak < 64 * 2**20
    assert max(len(pickle.dumps(p)) for p in parts) < 300  # a partition is a pair of integers


def test_a_time_filter_plans_only_its_chunks(metadata_only: str) -> None:
    reader = _reader(metadata_only, partition_bytes="1GB", pushdown="true")
    list(reader.pushFilters([ds.GreaterThanOrEqual(("time",), dt.datetime(2001, 1, 1))]))
    parts = reader.partitions()
    ordinals = np.concatenate([np.arange(a, b) for p in parts for a, b in p.runs])
    first = (dt.datetime(2001, 1, 1) - dt.datetime(2000, 1, 1)) // dt.timedelta(hours=1)
    assert np.array_equal(ordinals, np.arange(first, N_TIME))


def test_small_units_share_a_partition(fixture_path: Any) -> None:
    """Never one partition per tiny chunk: the whole air fixture (12 units) is one partition."""
    parts = _reader(fixture_path("air_temperature.zarr")).partitions()
    assert len(parts) == 1
    assert parts[0].runs == ((0, 12),)


def test_secrets_stay_out_of_the_schema_and_partitions(tmp_path: Path, fixture_path: Any) -> None:
    store = fixture_path("air_temperature.zarr")
    source = ZarrDataSource({"path": store, "storage_options.secret": "s3cr3t", "storage_options.timeout": "9"})
    schema = source.schema()
    assert "s3cr3t" not in schema.json()
    assert "timeout" in schema.json()
    reader = source.reader(schema)
    assert all("s3cr3t" not in repr(p) for p in reader.partitions())


def test_grouping_keeps_every_unit_once_in_order() -> None:
    from zarrsql.spark.partitions import group

    rng = np.random.default_rng(3)
    for _ in range(100):
        ordinals = np.unique(rng.integers(0, 400, int(rng.integers(0, 300))))
        step = int(rng.integers(1, 30))
        parts = group(ordinals, step)
        flat = [i for runs in parts for a, b in runs for i in range(a, b)]
        assert flat == ordinals.tolist()
        assert all(sum(b - a for a, b in runs) == step for runs in parts[:-1])
