"""Which Arrow columns are geometries, and their blocks as the convention's flat arrays.

Two spellings are geometries: well-known binary (DuckDB's GEOMETRY, which exports as a binary
column tagged `geoarrow.wkb`, or any binary tagged `geoarrow.wkb` / `ogc.wkb`), and GeoArrow's
native layouts as zarrsql itself reads them back — a point is a STRUCT of float fields named
from x, y, z, m (x and y among them), a linestring a list of such points, a polygon a list of
rings. A plain BLOB is not a geometry (the table layout refuses it, naming the cast).

Coordinates are stored as float64. DECIMAL fields (what `{'x': 1.5, 'y': 2.5}` gives in
DuckDB) are taken as a DECIMAL column is: when every value comes back from float64 unchanged,
else refused, naming the cast to DOUBLE.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zarrsql.errors import UnwritableColumnError
from zarrsql.write.wkb import GeometryBlock, parse_wkb, refuse

_WKB_NAMES = (b"geoarrow.wkb", b"ogc.wkb")
_AXES = ("x", "y", "z", "m")


def names_a_point(arrow: pa.DataType) -> bool:
    """Whether `arrow` is a STRUCT whose fields are named as a point's axes (whatever their types)."""
    if not pa.types.is_struct(arrow):
        return False
    names = [arrow.field(i).name for i in range(arrow.num_fields)]
    return len(set(names)) == len(names) and set(names) <= set(_AXES) and {"x", "y"} <= set(names)


def _point_struct(arrow: pa.DataType) -> bool:
    if not names_a_point(arrow):
        return False
    types = [arrow.field(i).type for i in range(arrow.num_fields)]
    return all(pa.types.is_floating(t) or pa.types.is_decimal(t) for t in types)


def _is_list(arrow: pa.DataType) -> bool:
    return pa.types.is_list(arrow) or pa.types.is_large_list(arrow)


def geometry_source(field: pa.Field) -> str | None:
    """ "wkb" or "native" when the field holds geometries, else None."""
    arrow = field.type
    extension = getattr(arrow, "extension_name", None)
    if extension is not None and extension.encode() in _WKB_NAMES:
        return "wkb"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow) or pa.types.is_binary_view(arrow):
        tag = (field.metadata or {}).get(b"ARROW:extension:name")
        return "wkb" if tag in _WKB_NAMES else None
    if _point_struct(arrow):
        return "native"
    if _is_list(arrow) and _point_struct(arrow.value_type):
        return "native"
    if _is_list(arrow) and _is_list(arrow.value_type) and _point_struct(arrow.value_type.value_type):
        return "native"
    return None


def block_of(column: str, source: str, block: pa.ChunkedArray | pa.Array, first_row: int) -> GeometryBlock:
    """The geometries of a block of rows (all of one kind) as coords and offsets."""
    array = block.combine_chunks() if isinstance(block, pa.ChunkedArray) else block
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if source == "wkb":
        return parse_wkb(column, array.to_pylist(), first_row)
    if array.null_count:
        row = first_row + int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise refuse(column, row, "the geometry is NULL")
    if pa.types.is_struct(array.type):
        axes, coords = _coords(column, first_row, array)
        return GeometryBlock("point", axes, coords, None, np.arange(len(array) + 1, dtype=np.int64))
    inner = array.flatten()
    if pa.types.is_struct(inner.type):
        axes, coords = _coords(column, first_row, inner)
        return GeometryBlock("linestring", axes, coords, None, _relative(array))
    if inner.null_count:
        raise refuse(column, first_row, "a polygon has a NULL ring")
    axes, coords = _coords(column, first_row, inner.flatten())
    return GeometryBlock("polygon", axes, coords, _relative(inner), _relative(array))


def _relative(array: pa.Array) -> np.ndarray:
    offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    return offsets - offsets[0]


def _coords(column: str, first_row: int, points: pa.StructArray) -> tuple[tuple[str, ...], np.ndarray]:
    names = tuple(points.type.field(i).name for i in range(points.type.num_fields))
    if points.null_count:
        raise refuse(column, first_row, "a vertex in this block of rows is NULL")
    columns = [_coordinates(column, names[i], points.field(i)) for i in range(len(names))]
    coords = np.stack(columns, axis=1) if columns else np.zeros((0, 2))
    return names, coords


def _coordinates(column: str, axis: str, values: pa.Array) -> np.ndarray:
    """One axis of the vertices as float64: a DECIMAL one only when every value comes back from
    the double unchanged (as a DECIMAL column is stored; NULL stays NaN, as for floats)."""
    if pa.types.is_decimal(values.type):
        doubles = values.cast(pa.float64())
        back = pc.cast(doubles, values.type, safe=False)
        if pc.all(pc.equal(back, values)).as_py() is False:
            raise UnwritableColumnError(
                f"geometry column '{column}': its points' field '{axis}' ({values.type}) has values with more "
                "digits than a double holds exactly, and coordinates are stored as float64; cast the fields "
                "to DOUBLE to accept the rounding, e.g. {'x': x::DOUBLE, 'y': y::DOUBLE}"
            )
        values = doubles
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
