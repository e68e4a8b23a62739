"""Geometry table columns: WKB (DuckDB GEOMETRY) or GeoArrow values as the convention's arrays.

Points are one (N, D) array aligned with the rows. Linestrings and polygons are ragged, so
they are a group of `coords` (all vertices, chunked on their own) and offsets into them
(`geom_offsets` per row, `ring_offsets` per ring), each offsets array starting with 0 and
shifted by what earlier blocks (or an earlier write, on append) already stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from zarrsql.errors import UnwritableColumnError
from zarrsql.write import geometry_input
from zarrsql.write.column_arrays import VERTEX_CHUNK, Layout, create_array, grow
from zarrsql.write.wkb import GeometryBlock


@dataclass
class GeometryColumn:
    """A point (N, D) array, or a linestring/polygon group of coords and offsets."""

    name: str
    node: str
    layout: Layout
    source: str  # "wkb" or "native"
    kind: str | None = None
    axes: tuple[str, ...] = ()
    arrays: dict[str, Any] = field(default_factory=dict)

    def create(self, first: GeometryBlock | None) -> None:
        self.kind, self.axes = (first.kind, first.axes) if first is not None else ("point", ("x", "y"))
        width, row = len(self.axes), [self.layout.row_dim]
        attrs = {"type": "float64", "encoding-type": self.kind, "axes": list(self.axes)}
        if self.kind == "point":
            self.arrays["point"] = create_array(
                self.layout,
                self.layout.group,
                self.node,
                np.float64,
                (width,),
                self.layout.chunk,
                attrs=attrs,
                dims=[*row, f"{self.node}_axis"],
            )
            return
        group = self.layout.group.create_group(self.node, attributes=attrs)
        self.arrays["coords"] = create_array(
            self.layout,
            group,
            "coords",
            np.float64,
            (width,),
            VERTEX_CHUNK,
            attrs={},
            dims=[f"{self.node}_vertex", f"{self.node}_axis"],
        )
        names = ("ring_offsets", "geom_offsets") if self.kind == "polygon" else ("geom_offsets",)
        for name in names:
            array = create_array(
                self.layout,
                group,
                name,
                np.int64,
                (),
                VERTEX_CHUNK if name == "ring_offsets" else self.layout.chunk,
                attrs={},
                dims=[f"{self.node}_{name}"],
            )
            grow(array, np.zeros(1, np.int64), 0)  # offsets start with 0
            self.arrays[name] = array

    def open(self, node: Any) -> None:
        import zarr

        attrs = dict(node.attrs)
        self.kind, self.axes = attrs.get("encoding-type"), tuple(attrs.get("axes", ()))
        if isinstance(node, zarr.Group):
            self.arrays = {k: node[k] for k in ("coords", "ring_offsets", "geom_offsets") if k in node}
        else:
            self.arrays = {"point": node}

    def write(self, block: pa.ChunkedArray, start: int) -> None:
        if not len(block):
            return
        geometry = geometry_input.block_of(self.name, self.source, block, start)
        if (geometry.kind, geometry.axes) != (self.kind, self.axes):
            raise UnwritableColumnError(
                f"geometry column '{self.name}', from row {start}: {geometry.kind.upper()} "
                f"{''.join(geometry.axes)} values in a column stored as {str(self.kind).upper()} "
                f"{''.join(self.axes)}; the table convention holds one geometry type per column"
            )
        if self.kind == "point":
            grow(self.arrays["point"], geometry.coords, start)
            return
        self._append_ragged(geometry, start)

    def _append_ragged(self, geometry: GeometryBlock, start: int) -> None:
        coords, geom = self.arrays["coords"], self.arrays["geom_offsets"]
        vertices = coords.shape[0]
        if geometry.ring_offsets is not None:
            rings = self.arrays["ring_offsets"]
            ring_count = rings.shape[0] - 1
            grow(rings, geometry.ring_offsets[1:] + vertices, ring_count + 1)
            base = ring_count
        else:
            base = vertices
        grow(coords, geometry.coords, vertices)
        grow(geom, geometry.geom_offsets[1:] + base, start + 1)

    def finish(self) -> None:
        """Nothing is left to write at the end."""
