"""From rows to cells: a relation's coordinates and where each row lands in the grid.

Coordinates keep the order in which their values first appear in the relation, so an
`ORDER BY lat DESC` gives a descending `lat`. They are found by streaming the dimension
columns alone (DuckDB reads nothing else), a first pass that costs little beside the
second, which places every row: a relation is streamed twice rather than holding a cell
index per row (which would cost more than the output for wide dimensions).

Values become numpy as xarray holds them: times as datetime64[ns] (NaT for NULL), integers
and booleans with a mask of their NULLs, floats with NaN, text as objects. HUGEINT, UHUGEINT
and DECIMAL columns are read as DuckDB's own `::DOUBLE` of them (`for_writing`): their Arrow
form cannot be converted right (pyarrow flips the sign of -2**127, and DuckDB exports a
UHUGEINT above 2**127 as a negative decimal128).

Column names are checked before anything is read (`check_names`): a name given twice is
refused by every writer; a name that cannot be a Zarr node's name, and names that differ only
in case, are refused for Zarr output only (an xarray Dataset in memory keeps them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from zarrsql.errors import ParameterError, WriteError
from zarrsql.write.source import Source, batches, kind_of, schema_of

__all__ = [
    "Grid",
    "Values",
    "check_names",
    "column_values",
    "dimension_values",
    "discover_grid",
    "finish_grid",
    "for_writing",
    "grow",
    "grow_and_place",
    "quote",
    "read_columns",
]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


#: DuckDB types whose Arrow form (decimal128) the writers do not convert themselves: DuckDB
#: casts them to DOUBLE in the query (see the module docstring).
_WIDE_TYPES = frozenset({"hugeint", "uhugeint", "decimal"})
#: The 128-bit integers among them: DuckDB hands a UHUGEINT past 2**127 to Arrow wrapped
#: (2**128 - 1 as -1), so no check or cast of the Arrow values can be right for them.
WIDE_INTEGER_TYPES = frozenset({"hugeint", "uhugeint"})


def read_columns(source: Source, names: Sequence[str], cast: frozenset[str] = _WIDE_TYPES) -> duckdb.DuckDBPyRelation:
    """The relation's columns `names` as the writers read them: each by its position, under its
    own name, and a column of a type in `cast` (by default HUGEINT, UHUGEINT and DECIMAL) as
    DuckDB's `::DOUBLE` of it.

    By position, because DuckDB binds names ignoring case (`SELECT "V"` over columns `v` and
    `V` gives `v`) and renames such a pair in any query over the relation (`V_1`)."""
    columns = source.columns
    types = source.relation.types
    picked = []
    for name in names:
        at = columns.index(name)
        as_double = "::DOUBLE" if types[at].id in cast else ""
        picked.append(f"#{at + 1}{as_double} AS {quote(name)}")
    return source.relation.project(", ".join(picked))


def for_writing(source: Source) -> Source:
    """The source as the writers read it (`read_columns` of every column), or itself when no
    column needs a cast and no two names differ only in case."""
    columns = source.columns
    wide = any(t.id in _WIDE_TYPES for t in source.relation.types)
    if not wide and len({c.lower() for c in columns}) == len(columns):
        return source
    return replace(source, relation=read_columns(source, columns))  # the rest (its open streams) shared


#: The longest file or directory name, in UTF-8 bytes, of common file systems (NAME_MAX of
#: ext4, XFS, APFS; NTFS's 255 UTF-16 units): a node is one such name.
NODE_NAME_BYTES = 255
#: Names of Zarr's metadata documents (v3 and v2): a node so named would clash with one. Both
#: formats' names are refused in either, since readers probe a store for both.
_METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})


def check_names(columns: Sequence[str], *, zarr: bool) -> None:
    """Refuse a column name given twice; for Zarr output (`zarr=True`) also names that differ
    only in case (one directory on a case-insensitive file system: macOS, Windows) and names
    that cannot name a node (`_node_name_problem`). Raised before anything is read or written."""
    seen: dict[str, str] = {}
    for name in columns:
        key = name.lower() if zarr else name
        if key in seen:
            if seen[key] == name:
                clash = f"two columns named '{name}'"
            else:
                clash = (
                    f"columns '{seen[key]}' and '{name}', whose names differ only in case (a Zarr store on a "
                    "case-insensitive file system, macOS or Windows, cannot hold them apart)"
                )
            raise ParameterError(
                f"the result has {clash} (its columns: {', '.join(columns)}); give each column a name of its "
                f'own: alias one of them, e.g. AS "{name}_2"'
            )
        seen[key] = name
    if not zarr:
        return
    for name in columns:
        problem = _node_name_problem(name)
        if problem is not None:
            shown = name if len(name) <= 80 else f"{name[:80]}..."
            plain = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")[:64] or "value"
            raise ParameterError(
                f"column '{shown}' cannot name an array of a Zarr store: {problem}; alias it to a plain "
                f'name, e.g. AS "{plain}" (nothing was written)'
            )


def _node_name_problem(name: str) -> str | None:
    """Why `name` cannot be the name of a node (a child array), or None when it can."""
    for mark, meaning in (
        ("/", "separates Zarr node names"),
        ("\\", "is read by zarr-python as the '/' that separates node names"),
    ):
        if mark in name:
            return (
                f"a '{mark}' {meaning}, so the column would be written as an array inside a nested group, "
                "which xarray and read_zarr do not see as a variable"
            )
    if name in ("", ".", ".."):
        return f"'{name}' is not a node name (it means no name, this directory or its parent)"
    if name in _METADATA_NAMES:
        return f"'{name}' is the name of a Zarr metadata document"
    if "\0" in name:
        return "a file name cannot hold a NUL character"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NODE_NAME_BYTES:
        return f"it is {size} bytes long (UTF-8), more than the {NODE_NAME_BYTES} bytes of a file name"
    return None


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
    if pa.types.is_decimal(array.type):  # not from `for_writing`, which has DuckDB cast them
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
    projected = read_columns(source, dims)
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
