"""A DataFrame whose store changed after it was planned refuses; it never mixes two versions.

Spark plans a DataFrame's scan once and runs the same partitions again when the query is run
again, without asking the source. A partition names work units by their ordinal in the chunk
grid it was planned on, so an executor that opens a rewritten store must refuse rather than
read the new grid's units under the old ordinals (10 rows rewritten as 20 used to give 12).
Expected rows come from xarray reading the store, never from zarrsql.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
from pyspark.errors import PySparkException

from zarrsql.errors import StoreReadError
from zarrsql.spark.source import ZarrDataSource

pytestmark = pytest.mark.spark

CHANGED = "changed after this Spark query was planned"


def _write(store: Any, rows: int) -> None:
    """`rows` rows of `v` = 0.0, 1.0, ... over `t`, in chunks of four (a ragged last one)."""
    ds = xr.Dataset({"v": (("t",), np.arange(rows, dtype="float64"))}, coords={"t": np.arange(rows)})
    ds.to_zarr(store, mode="w", consolidated=False, encoding={"v": {"chunks": (4,)}})


def _xarray_rows(ds: xr.Dataset) -> list[tuple[int, float]]:
    return sorted(zip(ds["t"].values.tolist(), ds["v"].values.tolist(), strict=True))


def _read(options: dict[str, str]) -> tuple[Any, list[Any]]:
    """A driver's reader and its partitions, as Spark plans a query."""
    source = ZarrDataSource(options)
    reader = source.reader(source.schema())
    return reader, list(reader.partitions())


def _rows(reader: Any, partitions: list[Any]) -> list[tuple[int, float]]:
    """Every partition read as an executor reads it."""
    table = pa.Table.from_batches([b for p in partitions for b in reader.read(p)])
    return sorted(zip(table["t"].to_pylist(), table["v"].to_pylist(), strict=True))


def test_partitions_of_a_rewritten_store_are_refused(tmp_path: Path) -> None:
    store = tmp_path / "rewritten.zarr"
    _write(store, 10)
    reader, partitions = _read({"path": str(store)})
    assert _rows(reader, partitions) == _xarray_rows(xr.open_zarr(store, consolidated=False))
    _write(store, 20)
    with pytest.raises(StoreReadError, match=CHANGED):
        _rows(reader, partitions)
    reader, partitions = _read({"path": str(store)})  # planned again: the store as it is now
    assert _rows(reader, partitions) == _xarray_rows(xr.open_zarr(store, consolidated=False))


def test_partitions_of_an_older_icechunk_commit_are_refused(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))

    def commit(rows: int) -> None:
        session = repo.writable_session("main")
        _write(session.store, rows)
        session.commit(f"{rows} rows")

    commit(10)
    reader, partitions = _read({"path": str(tmp_path / "repo"), "format": "icechunk"})
    commit(20)
    with pytest.raises(StoreReadError, match=rf"\(branch 'main'\) {CHANGED}"):
        _rows(reader, partitions)


def test_a_reused_dataframe_and_its_view_refuse_a_rewritten_store(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "reused.zarr"
    _write(store, 10)
    df = spark.read.format("zarr").load(str(store))
    df.createOrReplaceTempView("reused_before_rewrite")
    assert df.count() == xr.open_zarr(store, consolidated=False).sizes["t"]  # 10
    _write(store, 20)
    with pytest.raises(PySparkException, match=CHANGED):
        df.count()
    with pytest.raises(PySparkException, match=CHANGED):
        spark.sql("SELECT count(*) FROM reused_before_rewrite").collect()
    now = xr.open_zarr(store, consolidated=False)
    fresh = spark.read.format("zarr").load(str(store))
    assert fresh.count() == now.sizes["t"]  # 20
    assert fresh.groupBy().sum("v").collect()[0][0] == pytest.approx(float(now["v"].sum()))  # 190.0
