"""Numpy values and null masks to Arrow arrays, and the Arrow schema of a table's columns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from zarrsql.scan import Column

_TYPES = {
    "bool": pa.bool_(), "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(),
    "int64": pa.int64(), "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(),
    "uint64": pa.uint64(), "float32": pa.float32(), "float64": pa.float64(),
    "string": pa.string(), "timestamp_us": pa.timestamp("us"), "duration_us": pa.duration("us"),
}


def arrow_type(logical: str) -> pa.DataType:
    return _TYPES[logical]


def schema_of(columns: Sequence[Column]) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.logical)) for c in columns])


def to_arrow(values: np.ndarray, nulls: np.ndarray | None, logical: str) -> pa.Array:
    """Build an Arrow array; fixed-width values are wrapped without copying."""
    typ = _TYPES[logical]
    if logical in ("string", "bool"):
        return pa.array(values, type=typ, mask=nulls)
    values = np.ascontiguousarray(values)
    validity = None
    null_count = 0
    if nulls is not None:
        null_count = int(np.count_nonzero(nulls))
        if null_count:
            validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    return pa.Array.from_buffers(typ, len(values), [validity, pa.py_buffer(values)], null_count)
