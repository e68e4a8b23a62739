"""Numpy values and null masks to Arrow arrays, and the Arrow schema of a table's columns.

Scalar columns wrap their numpy buffers without copying. Encoded columns (see
`decode/logical.py`) become Arrow's nested types: an ENUM a dictionary array, a fixed
multi-valued column a fixed-size list, a point a struct of its axes, a linestring a list of
such structs and a polygon a list of rings (GeoArrow's native layouts), WKB binary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from zarrsql.decode import logical as lg
from zarrsql.expand.columns import Column

_TYPES = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "timestamp_us": pa.timestamp("us"),
    "duration_us": pa.duration("us"),
    "interval_months": pa.month_day_nano_interval(),  # values: decode.columns.INTERVAL_MONTHS records
    lg.WKB: pa.binary(),
}


def _point_type(axes: Sequence[str]) -> pa.DataType:
    return pa.struct([pa.field(a, pa.float64(), nullable=False) for a in axes])


def arrow_type(logical: lg.Logical) -> pa.DataType:
    if isinstance(logical, str):
        return _TYPES[logical]
    if isinstance(logical, lg.Labels):
        return pa.dictionary(pa.int32(), pa.string())
    if isinstance(logical, lg.Enum):
        return pa.dictionary(pa.int32(), pa.string(), ordered=logical.ordered)
    if isinstance(logical, lg.FixedList):
        return pa.list_(arrow_type(logical.inner), logical.size)
    if isinstance(logical, lg.List):
        return pa.list_(arrow_type(logical.inner))
    if isinstance(logical, lg.Point):
        return _point_type(logical.axes)
    if isinstance(logical, lg.LineString):
        return pa.list_(_point_type(logical.axes))
    if isinstance(logical, lg.Polygon):
        return pa.list_(pa.list_(_point_type(logical.axes)))
    raise TypeError(f"no Arrow type for {logical!r}")


def schema_of(columns: Sequence[Column]) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.logical)) for c in columns])


def _validity(nulls: np.ndarray | None) -> tuple[Any, int]:
    if nulls is None:
        return None, 0
    count = int(np.count_nonzero(nulls))
    return (pa.py_buffer(np.packbits(~nulls, bitorder="little")), count) if count else (None, 0)


def _points(coords: np.ndarray, axes: Sequence[str]) -> pa.StructArray:
    coords = np.asarray(coords, dtype=np.float64).reshape(-1, len(axes))
    children = [pa.array(np.ascontiguousarray(coords[:, i])) for i in range(len(axes))]
    return pa.StructArray.from_arrays(children, fields=list(_point_type(axes)))


def _offsets(offsets: np.ndarray) -> pa.Array:
    return pa.array(np.asarray(offsets, dtype=np.int32))


_dictionaries: dict[int, tuple[Any, pa.Array]] = {}


def _labels(logical: lg.Labels) -> pa.Array:
    """The Arrow dictionary of a coordinate's labels, built once per coordinate: by its
    decoded values, which a table opened again while its store is unchanged shares (the
    tree keeps them) in a new `Labels`; 2,000 labels cost about 1.5 ms to build."""
    values = logical.values
    hit = _dictionaries.get(id(values))
    if hit is None or hit[0] is not values:
        if len(_dictionaries) > 64:
            _dictionaries.clear()
        hit = (values, _strings(np.asarray(values).reshape(-1).tolist()))
        _dictionaries[id(values)] = hit
    return hit[1]


def _strings(items: list[Any]) -> pa.Array:
    """A string array built from its buffers: `pa.array` imports pandas (hundreds of modules,
    a few tenths of a second) the first time it runs, and a scan need not pay that."""
    nulls = np.fromiter((v is None for v in items), bool, len(items))
    encoded = [b"" if v is None else str(v).encode("utf-8") for v in items]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:  # too long for 32-bit offsets: let pyarrow split it
        return pa.array(items, type=pa.string())
    validity, null_count = _validity(nulls)
    buffers = [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(items), buffers, null_count)


def _codes(values: Any, nulls: np.ndarray | None) -> pa.Array:
    """Dictionary codes as an int32 Arrow array, wrapped like any fixed-width column: not by
    `pa.array`, which imports pandas (hundreds of modules) on its first numpy input."""
    codes = np.ascontiguousarray(values, dtype=np.int32)
    validity, null_count = _validity(None if nulls is None else np.asarray(nulls, dtype=bool).reshape(-1))
    return pa.Array.from_buffers(pa.int32(), len(codes), [validity, pa.py_buffer(codes)], null_count)


def _nested(values: Any, nulls: np.ndarray | None, logical: lg.Logical) -> pa.Array:
    mask = None if nulls is None or nulls.ndim != 1 or not nulls.any() else pa.array(nulls)
    if isinstance(logical, lg.Labels):
        return pa.DictionaryArray.from_arrays(_codes(values, nulls), _labels(logical))
    if isinstance(logical, lg.Enum):
        indices = _codes(values, nulls)
        return pa.DictionaryArray.from_arrays(
            indices, pa.array(list(logical.categories), pa.string()), ordered=logical.ordered
        )
    if isinstance(logical, lg.FixedList):
        values = np.ascontiguousarray(values)
        per_value = nulls is not None and nulls.ndim > 1  # NULL values inside the lists
        inner = (-1, *values.shape[2:])
        flat = to_arrow(
            values.reshape(inner), nulls.reshape(inner) if per_value and nulls is not None else None, logical.inner
        )
        return pa.FixedSizeListArray.from_arrays(flat, logical.size, mask=mask)
    if isinstance(logical, lg.Point):
        points = _points(values, logical.axes)
        return (
            points
            if mask is None
            else pa.StructArray.from_arrays(points.flatten(), fields=list(points.type), mask=mask)
        )
    if isinstance(logical, lg.List):
        offsets, flat, flat_nulls = values
        return pa.ListArray.from_arrays(_offsets(offsets), to_arrow(flat, flat_nulls, logical.inner), mask=mask)
    if isinstance(logical, lg.LineString):
        offsets, coords = values
        return pa.ListArray.from_arrays(_offsets(offsets), _points(coords, logical.axes), mask=mask)
    if isinstance(logical, lg.Polygon):
        geom, rings, coords = values
        inner = pa.ListArray.from_arrays(_offsets(rings), _points(coords, logical.axes))
        return pa.ListArray.from_arrays(_offsets(geom), inner, mask=mask)
    raise TypeError(f"no Arrow array for {logical!r}")


def to_arrow(values: Any, nulls: np.ndarray | None, logical: lg.Logical) -> pa.Array:
    """Build an Arrow array; fixed-width values are wrapped without copying."""
    if not isinstance(logical, str):
        return _nested(values, nulls, logical)
    typ = _TYPES[logical]
    if logical in ("string", "bool", lg.WKB):
        return pa.array(values, type=typ, mask=nulls)
    values = np.ascontiguousarray(values)
    validity, null_count = _validity(nulls)
    return pa.Array.from_buffers(typ, len(values), [validity, pa.py_buffer(values)], null_count)


def to_numpy(array: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """A fixed-width Arrow array (numbers, timestamps, booleans) as numpy values and a NULL
    mask (None without NULLs), read from its buffers: `to_numpy` of an array that is not
    zero-copy (DuckDB's results) imports pandas, a quarter of a second in a first query.
    A NULL's value is whatever its slot holds."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    n, offset = len(array), array.offset
    validity, data = array.buffers()[:2]
    nulls = None
    if array.null_count and validity is not None:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        nulls = ~bits[offset : offset + n].astype(bool)
    if pa.types.is_boolean(array.type):
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
        return bits[offset : offset + n].astype(bool), nulls
    kind = array.type
    if pa.types.is_integer(kind):
        dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(kind) else 'u'}{kind.bit_width // 8}")
    elif pa.types.is_floating(kind):
        dtype = np.dtype(f"f{kind.bit_width // 8}")
    elif pa.types.is_temporal(kind):
        dtype = np.dtype(f"i{kind.bit_width // 8}")
    else:
        raise TypeError(f"not a fixed-width number, time or boolean: {kind}")
    values = np.frombuffer(data, dtype=dtype, count=offset + n)[offset:] if n else np.zeros(0, dtype=dtype)
    return values, nulls
