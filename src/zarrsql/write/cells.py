"""From rows to cells: a relation's coordinates and where each row lands in the grid.

Coordinates keep the order in which their values first appear in the relation, so an
`ORDER BY lat DESC` gives a descending `lat`. They are found by streaming the dimension
columns alone (DuckDB reads nothing else), a first pass that costs little beside the
second, which places every row: a relation is streamed twice rather than holding a cell
index per row (which would cost more than the output for wide dimensions).

Values become numpy as xarray holds them: times as datetime64[ns] (NaT for NULL), integers
and booleans with a mask of their NULLs, floats with NaN, text as objects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from zarrsql.errors import WriteError
from zarrsql.write.source import Source, batches, kind_of, schema_of

__all__ = [
    "Grid",
    "Values",
    "column_values",
    "dimension_values",
    "discover_grid",
    "finish_grid",
    "grow",
    "grow_and_place",
    "quote",
]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Values:
    """One column of one batch as numpy: `data`, and where it is NULL (None: nowhere)."""

    data: np.ndarray
    nulls: np.ndarray | None


def column_values(name: str, array: pa.Array | pa.ChunkedArray, kind: str) -> Values:
    """A column's values as numpy for its kind (see the module docstring)."""
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    nulls = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    if pa.types.is_decimal(array.type):
        array = array.cast(pa.float64())
    if kind == "time":
        try:
            target = pa.timestamp("ns") if not pa.types.is_timestamp(array.type) else pa.timestamp("ns", array.type.tz)
            array = pc.cast(array.cast(pa.timestamp("s")) if pa.types.is_date(array.type) else array, target)
        except pa.ArrowInvalid as err:
            raise WriteError(
                f"column '{name}' holds times outside the years 1678-2262 that datetime64[ns] (xarray's time "
                "type) can hold; filter them out or CAST the column to text"
            ) from err
        data = array.to_numpy(zero_copy_only=False)
        if data.dtype.kind == "M" and data.dtype != np.dtype("datetime64[ns]"):
            data = data.astype("datetime64[ns]")
        return Values(data.astype("datetime64[ns]"), nulls)
    if kind in ("int", "bool") and nulls is not None:
        array = array.fill_null(False if kind == "bool" else 0)
    return Values(array.to_numpy(zero_copy_only=False), nulls)


@dataclass(frozen=True)
class Grid:
    """The dimensions and their coordinate values, in order of first appearance."""

    dims: tuple[str, ...]
    indexes: tuple[pd.Index, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(i) for i in self.indexes)

    def coords(self) -> dict[str, np.ndarray]:
        return {d: np.asarray(i.values) for d, i in zip(self.dims, self.indexes, strict=True)}

    def positions(self, batch: pa.RecordBatch, kinds: dict[str, str]) -> list[np.ndarray]:
        """Each row's index along every dimension (every value is a known coordinate)."""
        out = []
        for d, index in zip(self.dims, self.indexes, strict=True):
            pos = index.get_indexer(column_values(d, batch.column(d), kinds[d]).data)
            if (pos < 0).any():  # the relation changed between the two passes
                raise WriteError(
                    f"dimension column '{d}' gave a value in the second read of the relation that the first did "
                    "not: the query is not deterministic (random(), a LIMIT without ORDER BY); make it so, or "
                    "write its result to a table first"
                )
            out.append(pos.astype(np.int64))
        return out

    def cell_name(self, flat: int) -> str:
        """The dimension tuple of a flat cell index, for messages."""
        at = np.unravel_index(flat, self.shape)
        return ", ".join(f"{d}={self.indexes[k][at[k]]}" for k, d in enumerate(self.dims))

    def duplicate_error(self, flat: int) -> WriteError:
        return WriteError(
            f"the relation has more than one row for the dimension tuple ({self.cell_name(flat)}); "
            f"each tuple of ({', '.join(self.dims)}) must appear once: aggregate with GROUP BY "
            f"{', '.join(self.dims)}, add the missing dimension to dims, or filter the duplicates"
        )


def dim_kinds(source: Source, dims: tuple[str, ...], layout: str) -> dict[str, str]:
    schema = schema_of(source)
    return {d: kind_of(d, schema.field(d).type, layout) for d in dims}


def discover_grid(source: Source, dims: tuple[str, ...], kinds: dict[str, str]) -> Grid:
    """Stream the dimension columns once: their coordinates in order of first appearance.
    A NULL in a dimension column is refused (it has no place on an axis)."""
    projected = source.relation.select(", ".join(quote(d) for d in dims))
    found: list[pd.Index | None] = [None] * len(dims)
    for batch in batches(source, projected):
        for k, d in enumerate(dims):
            found[k] = grow(found[k], dimension_values(d, batch.column(d), kinds[d]))
    return finish_grid(dims, kinds, found)


def dimension_values(name: str, array: pa.Array | pa.ChunkedArray, kind: str) -> np.ndarray:
    """A batch's values of a dimension column; a NULL is refused (it has no place on an axis)."""
    values = column_values(name, array, kind)
    if values.nulls is not None and values.nulls.any():
        raise WriteError(
            f"dimension column '{name}' is NULL in some rows, and a NULL has no place on the '{name}' axis; "
            f"filter them (WHERE {quote(name)} IS NOT NULL) or replace them with COALESCE"
        )
    return values.data


def grow(known: pd.Index | None, values: np.ndarray) -> pd.Index:
    """The coordinate index with the values not seen before appended, in order of appearance."""
    fresh = pd.unique(values)
    if known is None:
        return pd.Index(fresh)  # keeps the column's dtype (float32 stays float32)
    seen = known.get_indexer(fresh)
    return known.append(pd.Index(fresh[seen < 0])) if (seen < 0).any() else known


def grow_and_place(known: pd.Index | None, values: np.ndarray) -> tuple[pd.Index, np.ndarray]:
    """`grow`, and each value's position in the grown index, in one hash pass over the batch
    (factorize, then look up only the batch's distinct values)."""
    codes, fresh = pd.factorize(values, use_na_sentinel=False)  # a NaN coordinate is a value
    if known is None:
        return pd.Index(fresh), codes
    seen = known.get_indexer(fresh)
    if (seen < 0).any():
        new = seen < 0
        seen[new] = len(known) + np.arange(int(new.sum()))
        known = known.append(pd.Index(fresh[new]))
    return known, seen[codes]


def finish_grid(dims: tuple[str, ...], kinds: dict[str, str], found: list[pd.Index | None]) -> Grid:
    indexes = [pd.Index([], dtype=_index_dtype(kinds[d])) if i is None else i for d, i in zip(dims, found, strict=True)]
    return Grid(dims, tuple(indexes))


def _index_dtype(kind: str) -> object:
    return {"time": "datetime64[ns]", "float": "float64", "int": "int64", "bool": "bool"}.get(kind, "object")
