"""The executors' code path runs with DuckDB impossible to import, and reads the right values.

A subprocess marks `duckdb` unimportable (`sys.modules['duckdb'] = None`), then does what
Spark does with the source: schema, reader, pushFilters, partitions, and read of every
partition. Its sums are checked against numpy on the raw arrays read with zarr-python.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

pytestmark = pytest.mark.spark

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = """
import json, sys
sys.modules["duckdb"] = None
from pyspark.sql import datasource as ds
from zarrsql.spark.source import ZarrDataSource

source = ZarrDataSource({"path": sys.argv[1], "partition_bytes": "300000", "pushdown": "true"})
reader = source.reader(source.schema())
left = list(reader.pushFilters([ds.GreaterThan(("lat",), 60.0), ds.GreaterThan(("air",), 0.0)]))
parts = reader.partitions()
rows, total = 0, 0.0
for p in parts:
    for batch in reader.read(p):
        rows += batch.num_rows
        total += sum(v for v in batch.column("air").to_pylist() if v is not None)
print(json.dumps({"rows": rows, "sum": total, "partitions": len(parts), "left": len(left),
                  "duckdb": sys.modules.get("duckdb") is not None}))
"""


def test_the_reader_never_needs_duckdb(fixture_path: Any) -> None:
    store = fixture_path("air_temperature.zarr")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, store],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    group = zarr.open_group(store, mode="r")
    lat = group["lat"][:]
    air = group["air"][:]
    kept = air[:, lat > 60, :]
    attrs = group["air"].attrs  # CF packing: _FillValue masks, then scale and offset
    values = kept.astype(np.float64) * attrs.get("scale_factor", 1.0) + attrs.get("add_offset", 0.0)
    values[kept == attrs.get("_FillValue")] = np.nan
    assert got["duckdb"] is False
    assert got["left"] == 1  # the filter on a data variable goes back to Spark
    assert got["partitions"] > 1
    assert got["rows"] == kept.size
    assert got["sum"] == pytest.approx(float(np.nansum(values)), rel=1e-9)


def test_importing_the_package_loads_neither_spark_nor_duckdb() -> None:
    code = (
        "import sys; sys.modules['duckdb'] = None; import zarrsql.spark; "
        "from zarrsql.spark import register; assert callable(register); "
        "print('pyspark' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"  # pyspark loads when register() runs, not before
