"""zarrsql's column types as Spark SQL types, and Arrow batches cast to what Spark expects.

Spark has no unsigned integers: uint8/16/32 widen to the next signed type, uint64 becomes
DECIMAL(20,0), which holds every value exactly. CF time is TIMESTAMP_NTZ: zarrsql decodes it
to naive wall-clock times (DuckDB's TIMESTAMP), and Spark's TIMESTAMP would shift them by the
session time zone on display and in string comparisons. Categorical (ENUM) and label columns
are STRING, fixed multi-valued columns ARRAY, points STRUCT<x DOUBLE, ...>, lines and
polygons arrays of such structs, WKB BINARY, durations INTERVAL DAY TO SECOND.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from zarrsql.decode import logical as lg
from zarrsql.errors import UnsupportedError
from zarrsql.expand.columns import Column

_SCALARS: dict[str, T.DataType] = {
    "bool": T.BooleanType(),
    "int8": T.ByteType(),
    "int16": T.ShortType(),
    "int32": T.IntegerType(),
    "int64": T.LongType(),
    "uint8": T.ShortType(),
    "uint16": T.IntegerType(),
    "uint32": T.LongType(),
    "uint64": T.DecimalType(20, 0),
    "float32": T.FloatType(),
    "float64": T.DoubleType(),
    "string": T.StringType(),
    "timestamp_us": T.TimestampNTZType(),
    "duration_us": T.DayTimeIntervalType(),
    lg.WKB: T.BinaryType(),
}


def _point(axes: Sequence[str]) -> T.StructType:
    return T.StructType([T.StructField(a, T.DoubleType(), True) for a in axes])


def spark_type(logical: lg.Logical) -> T.DataType:
    """The Spark type of a column of this logical type."""
    if isinstance(logical, str):
        if logical not in _SCALARS:
            raise UnsupportedError(f"no Spark type for zarrsql's column type {logical!r}")
        return _SCALARS[logical]
    if isinstance(logical, (lg.Labels, lg.Enum)):
        return T.StringType()
    if isinstance(logical, lg.FixedList):
        return T.ArrayType(spark_type(logical.inner), True)
    if isinstance(logical, lg.Point):
        return _point(logical.axes)
    if isinstance(logical, lg.LineString):
        return T.ArrayType(_point(logical.axes), True)
    if isinstance(logical, lg.Polygon):
        return T.ArrayType(T.ArrayType(_point(logical.axes), True), True)
    raise UnsupportedError(f"no Spark type for zarrsql's column type {logical!r}")


def spark_schema(columns: Sequence[Column], metadata: dict[str, Any] | None = None) -> T.StructType:
    """The table's Spark schema, every field nullable; `metadata` goes on every field."""
    return T.StructType([T.StructField(c.name, spark_type(c.logical), True, dict(metadata or {})) for c in columns])


def arrow_target(schema: T.StructType) -> pa.Schema:
    """The Arrow schema Spark checks a data source's batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def to_spark(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """`batch` cast column by column to `target` (dictionaries to strings, fixed-size lists
    to lists, unsigned to wider signed or decimal); a cast never loses a value."""
    if batch.schema.equals(target):
        return batch
    arrays = [col if col.type == f.type else col.cast(f.type) for col, f in zip(batch.columns, target, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)
