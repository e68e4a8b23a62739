"""One writer per column of a table-layout store: how an Arrow column becomes the convention's
arrays, block by block.

Every writer is created (a new store) or opened (an append) on the table group, then gets
consecutive blocks of rows (`write(block, start)`: rows `start .. start+len(block)` of the
table) and, once the stream ends, `finish()` for what is only known at the end (categories).
Row-aligned arrays grow with each block (resize, then write), so a block that starts on a
chunk boundary writes whole chunks and memory is one block.

Encodings chosen (docs/writing.md, "Table layout and appends"):

- integers, floats, bool, strings, timestamps, dates (and DECIMALs as float64 when every
  value comes back exactly): a plain array; on the first NULL the
  column becomes a `nullable` group (values + mask);
- dictionaries (DuckDB ENUM, pandas categorical): integer codes, with inline `categories` (up
  to `INLINE_CATEGORIES`) or as a `categorical` group (codes + categories); NULL is code -1;
- fixed-size lists (DuckDB `T[K]`, nested): a plain (N, K, ...) array;
- WKB (DuckDB GEOMETRY) or GeoArrow structs: a `point` (N, D) array, or a `linestring` /
  `polygon` group (coords + offsets).

A NULL in a float column is never turned into NaN: a NaN in the data would become NULL when
read back (or the converse), so NULLs always get a mask. A time or date 'infinity' (or
'-infinity') is refused, as the grid layout refuses it: a datetime64 array has no infinite
time, and DuckDB's code for one (the largest count) would read back as a date (the year
294247 in xarray) or as NULL. A bare `NULL AS v` (no type) is refused in a new table and
appended as NULLs of the stored column's type, as a grid append takes it.

This module holds the scalar and fixed-size-list writers; `categorical_column.py` and
`geometry_column.py` hold the other two, and `column_arrays.py` the arrays they all grow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zarrsql.errors import AppendSchemaError, UnwritableColumnError
from zarrsql.write.column_arrays import Layout, create_array, grow, move_node, type_name

# ----------------------------------------------------------------------------- scalars
#: The dtype `scalar_dtype` gives a bare NULL (`NULL AS v`: DuckDB 2's type null; 1.5 types
#: it INTEGER, an integer column then): no type of its own, so a new store refuses it
#: (`bare_null_error`) and an append takes the stored column's (`ScalarColumn.open`), as a
#: grid append takes the stored array's. Object (as pyarrow gives the null type), so that a
#: categorical column takes it as it takes text, and a fixed-size list of bare NULLs is
#: refused as a list of text is.
BARE_NULL = np.dtype(object, metadata={"zarrsql": "bare NULL"})


def is_bare_null(dtype: np.dtype) -> bool:
    """Whether `dtype` is `BARE_NULL` (numpy's == ignores metadata: object equals it)."""
    metadata: Any = dtype.metadata
    return metadata is not None and metadata.get("zarrsql") == "bare NULL"


def bare_null_error(name: str) -> UnwritableColumnError:
    """The refusal of a bare NULL column in a new table: nothing says what type to store."""
    return UnwritableColumnError(
        f"column '{name}' is a bare NULL (type null), with no type for the table layout to store it as; give "
        f'it one, e.g. NULL::DOUBLE AS "{name}" (an append takes the type of the table\'s column)'
    )


def scalar_dtype(name: str, arrow: pa.DataType) -> np.dtype | None:
    """The numpy dtype a scalar Arrow type is stored as; None when it is not a scalar type."""
    if pa.types.is_null(arrow):
        return BARE_NULL
    if pa.types.is_boolean(arrow):
        return np.dtype(bool)
    if pa.types.is_decimal(arrow):
        return np.dtype(np.float64)  # each value checked to come back exactly (`_doubles`)
    if pa.types.is_integer(arrow) or pa.types.is_floating(arrow):
        return np.dtype(arrow.to_pandas_dtype())
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow) or pa.types.is_string_view(arrow):
        return np.dtype(object)
    if pa.types.is_timestamp(arrow):
        if arrow.tz is not None:
            raise UnwritableColumnError(
                f"column '{name}' is a TIMESTAMP WITH TIME ZONE; the table layout stores times "
                f'without a zone: convert it in SQL, e.g. ("{name}" AT TIME ZONE \'UTC\') AS "{name}"'
            )
        return np.dtype(f"datetime64[{arrow.unit}]")
    if pa.types.is_date32(arrow) or pa.types.is_date64(arrow):
        return np.dtype("datetime64[D]")
    return None


def _doubles(name: str, block: pa.ChunkedArray | pa.Array, caster: Any) -> pa.ChunkedArray:
    """A DECIMAL block as float64, each value DuckDB's own `::DOUBLE` of it (as the grid layout
    and `to_xarray` store it; pyarrow's cast differs in the last digit, 3.300 as
    3.3000000000000003), cast on `caster`, a DuckDB connection of the column's writer. Refused
    unless every value casts back to itself (a double holds about 15 significant digits: SQL
    literals and money amounts fit)."""
    table = pa.table({"value": block})
    doubles = caster.from_arrow(table).project('"value"::DOUBLE AS "value"').to_arrow_table().column(0)
    back = pc.cast(doubles, block.type, safe=False)
    changed = pc.and_kleene(pc.not_equal(back, block), pc.is_valid(block))
    if pc.any(changed).as_py():
        bad = block[pc.index(changed, True).as_py()]
        raise UnwritableColumnError(
            f"column '{name}' ({block.type}) has the value {bad}, with more digits than a double holds "
            "exactly, and the table layout stores decimals as float64; CAST(col AS DOUBLE) to accept "
            "the rounding, or AS VARCHAR to keep every digit"
        )
    return doubles


def _numpy(name: str, block: pa.ChunkedArray | pa.Array, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """(values with NULLs replaced by a placeholder, the NULL mask or None) of column `name`."""
    mask = None
    if block.null_count:
        mask = np.asarray(block.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if dtype.kind == "M":
        _check_finite(name, block)
        times = block.to_numpy(zero_copy_only=False) if isinstance(block, pa.Array) else block.to_numpy()
        return _in_unit(name, np.asarray(times), dtype), mask
    if mask is not None:
        placeholder: Any = "" if dtype.kind == "O" else (False if dtype.kind == "b" else 0)
        block = pc.fill_null(block, placeholder)
    values = block.to_numpy(zero_copy_only=False) if isinstance(block, pa.Array) else block.to_numpy()
    return np.asarray(values, dtype=dtype), mask


#: DuckDB's codes of an infinite time in Arrow: +-(the largest count) of a TIMESTAMP of any unit
#: (int64) and of a DATE (int32 days); -infinity is the negated largest count, not the minimum.
_INFINITE_COUNTS = {pa.int64(): 2**63 - 1, pa.int32(): 2**31 - 1}


def _check_finite(name: str, block: pa.ChunkedArray | pa.Array) -> None:
    """Refuse a TIMESTAMP or DATE 'infinity' / '-infinity' (see the module docstring)."""
    if not (pa.types.is_timestamp(block.type) or pa.types.is_date32(block.type)):
        return  # a DATE64 (from pandas or Arrow, never DuckDB) has no infinite value
    counts_type = pa.int64() if pa.types.is_timestamp(block.type) else pa.int32()
    counts = pc.cast(block, counts_type)
    largest = _INFINITE_COUNTS[counts_type]
    infinite = pc.or_kleene(pc.equal(counts, largest), pc.equal(counts, -largest))
    if not pc.any(infinite).as_py():
        return
    value = "infinity" if counts[pc.index(infinite, True).as_py()].as_py() > 0 else "-infinity"
    raise UnwritableColumnError(
        f"column '{name}' holds the time '{value}', which the table layout cannot store (a datetime64 array has "
        f'no infinite time); filter such rows out (WHERE isfinite("{name}")) or CAST the column to text'
    )


#: Nanoseconds in one of each numpy time unit a table column is stored in.
_UNIT_NS = {"D": 86_400 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def _in_unit(name: str, times: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """datetime64 values (NaT for NULL) in the unit of `dtype`, NULLs as the epoch (the mask
    marks them). A value the unit cannot hold exactly (a time of day into a DATE column) or
    whose count overflows 64 bits (year 3000 in nanoseconds) is refused: numpy's astype
    would truncate or wrap it silently."""
    given, stored = np.datetime_data(times.dtype)[0], np.datetime_data(dtype)[0]
    counts = times.view(np.int64).copy()
    present = ~np.isnat(times)
    if given != stored:
        if _UNIT_NS[given] > _UNIT_NS[stored]:  # into a finer unit: exact unless it overflows
            factor = _UNIT_NS[given] // _UNIT_NS[stored]
            limit = np.iinfo(np.int64).max // factor
            bad = present & (np.abs(np.where(present, counts, 0)) > limit)
            if bad.any():
                raise _time_refused(name, times[bad][0], dtype, "outside its range (it would wrap around)")
            counts = np.where(present, counts, 0) * factor
        else:  # into a coarser unit: exact when nothing finer is lost
            factor = _UNIT_NS[stored] // _UNIT_NS[given]
            bad = present & (counts % factor != 0)
            if bad.any():
                raise _time_refused(name, times[bad][0], dtype, "exactly (it would be truncated)")
            counts = counts // factor
    counts[~present] = 0
    return counts.view(dtype)


def _time_refused(name: str, value: np.datetime64, dtype: np.dtype, problem: str) -> AppendSchemaError:
    return AppendSchemaError(
        f"column '{name}' is stored as {dtype}, which cannot hold the appended value {value} {problem}; "
        "append values the stored unit holds (date_trunc them, or filter them out), or rewrite the whole "
        'table with mode="w"'
    )


@dataclass
class ScalarColumn:
    """A one-value-per-row column: a plain array, a `nullable` group once a NULL arrives."""

    name: str
    node: str
    dtype: np.dtype
    layout: Layout
    values: Any = None
    mask: Any = None
    caster: Any = None  # the DuckDB connection a DECIMAL column is cast on, opened by its first block

    def create(self) -> None:
        if is_bare_null(self.dtype):
            raise bare_null_error(self.name)
        dims = [self.layout.row_dim]
        self.values = create_array(
            self.layout,
            self.layout.group,
            self.node,
            self.dtype,
            (),
            self.layout.chunk,
            attrs={"type": type_name(self.dtype)},
            dims=dims,
        )

    def open(self, node: Any) -> None:
        import zarr

        if isinstance(node, zarr.Group):
            self.values, self.mask = node["values"], node["mask"]
        else:
            self.values = node
        stored = np.dtype(self.values.dtype)
        if is_bare_null(self.dtype) and stored.kind in "biufOUTM":  # NULLs of the stored column's type
            self.dtype = _dtype_for(stored)
            return
        _check_dtype(self.name, self.values.dtype, self.dtype)
        if self.dtype.kind == "M":
            self.dtype = np.dtype(self.values.dtype)  # times are converted (and checked) into the stored unit

    def write(self, block: pa.ChunkedArray, start: int) -> None:
        if pa.types.is_decimal(block.type):
            if self.caster is None:
                import duckdb

                self.caster = duckdb.connect(config={"threads": 1})  # one cast per block: no thread pool
            block = _doubles(self.name, block, self.caster)
        if pa.types.is_null(block.type):  # a bare NULL, appended (`open` took the stored type)
            block = block.cast(_arrow_type(self.dtype))
        values, mask = _numpy(self.name, block, self.dtype)
        if mask is not None and self.mask is None:
            self._become_nullable(start)
        grow(self.values, values, start)
        if self.mask is not None:
            grow(self.mask, np.zeros(len(values), bool) if mask is None else mask, start)

    def finish(self) -> None:
        """Nothing is left to write at the end; the DuckDB connection of a DECIMAL column is closed
        (a failed write leaves it to the garbage collector)."""
        if self.caster is not None:
            self.caster.close()
            self.caster = None

    def _become_nullable(self, rows: int) -> None:
        """Move the plain array written so far to `<node>/values` and add an empty mask."""
        if self.layout.appending:
            raise AppendSchemaError(
                f"column '{self.name}' holds no NULLs in the store (a plain array), but the rows to "
                f'append have NULLs in it; append COALESCE("{self.name}", <value>) instead, or '
                'rewrite the whole table with mode="w"'
            )
        moved = move_node(self.layout.group, self.node, "values")
        group = self.layout.group.create_group(
            self.node, attributes={"type": type_name(self.dtype), "encoding-type": "nullable"}, overwrite=False
        )
        self.values = moved
        self.mask = create_array(
            self.layout, group, "mask", bool, (), self.layout.chunk, attrs={}, dims=[self.layout.row_dim], fill=False
        )
        if rows:
            self.mask.resize((rows,))  # fill (False) where the rows so far were all present


def _dtype_for(stored: np.dtype) -> np.dtype:
    """The dtype of the rows that write into a stored array of dtype `stored`: its own, or
    object for text (Zarr's string dtypes), as text rows are written."""
    return np.dtype(object) if stored.kind in "OUT" else stored


def _arrow_type(dtype: np.dtype) -> pa.DataType:
    """The Arrow type of rows of `dtype` (`_dtype_for`), that a block of bare NULLs is cast to."""
    if dtype.kind == "O":
        return pa.string()
    if dtype.kind == "M":
        unit = np.datetime_data(dtype)[0]
        return pa.date32() if unit == "D" else pa.timestamp(unit)
    return pa.from_numpy_dtype(dtype)


def _check_dtype(name: str, stored: np.dtype, given: np.dtype) -> None:
    """The appended type casts safely to the stored one (numbers: numpy's safe casts, so
    UINTEGER into BIGINT; times of any unit, each value checked when written: `_in_unit`)."""
    same_kind = stored.kind == given.kind or (stored.kind in "OUT" and given.kind in "OUT")
    if same_kind and stored.kind in "OUTM":
        return
    if (same_kind or (stored.kind in "iuf" and given.kind in "iu")) and np.can_cast(given, stored, "safe"):
        return
    wide = given == np.dtype(np.float64) and stored.kind in "iu"
    why = " (a HUGEINT, UHUGEINT or DECIMAL column, e.g. a sum(), is written as float64)" if wide else ""
    raise AppendSchemaError(
        f"column '{name}' is stored as {stored} but the rows to append give {given}{why}; append "
        f'CAST("{name}" AS {_SQL_NAMES.get(stored.str[1:], "<the stored type>")}) (check read_zarr_metadata for '
        "the store's types)"
    )


#: The DuckDB type of the values each stored numeric dtype holds (by its code: "i8", "f4", ...).
_SQL_NAMES = {"i1": "TINYINT", "i2": "SMALLINT", "i4": "INTEGER", "i8": "BIGINT", "u1": "UTINYINT",
              "u2": "USMALLINT", "u4": "UINTEGER", "u8": "UBIGINT", "f4": "FLOAT", "f8": "DOUBLE",
              "b1": "BOOLEAN"}  # fmt: skip


def fixed_shape(arrow: pa.DataType) -> tuple[tuple[int, ...], pa.DataType]:
    """The trailing shape (K, ...) of a (nested) fixed-size list, and its value type."""
    shape: list[int] = []
    while pa.types.is_fixed_size_list(arrow):
        shape.append(arrow.list_size)
        arrow = arrow.value_type
    return tuple(shape), arrow


@dataclass
class FixedListColumn:
    """A fixed number of values per row: one (N, K, ...) array."""

    name: str
    node: str
    dtype: np.dtype
    trailing: tuple[int, ...]
    layout: Layout
    values: Any = None

    def create(self) -> None:
        dims = [self.layout.row_dim, *(f"{self.node}_{i + 1}" for i in range(len(self.trailing)))]
        self.values = create_array(
            self.layout,
            self.layout.group,
            self.node,
            self.dtype,
            self.trailing,
            self.layout.chunk,
            attrs={"type": type_name(self.dtype)},
            dims=dims,
        )

    def open(self, node: Any) -> None:
        if tuple(node.shape[1:]) != self.trailing:
            raise AppendSchemaError(
                f"column '{self.name}' holds {list(node.shape[1:])} values per row in the store but "
                f"the rows to append give {list(self.trailing)}"
            )
        _check_dtype(self.name, node.dtype, self.dtype)
        self.values = node

    def write(self, block: pa.ChunkedArray, start: int) -> None:
        flat = block.combine_chunks() if isinstance(block, pa.ChunkedArray) else block
        n = len(flat)
        for level in range(len(self.trailing) + 1):
            if flat.null_count:
                raise UnwritableColumnError(
                    f"column '{self.name}' is a fixed-size list with NULLs (a NULL list or a NULL "
                    "inside one); the table layout stores it as one (N, K) array with no mask: "
                    "fill them in SQL (e.g. list_transform(col, x -> coalesce(x, 0))) or filter them"
                )
            if level < len(self.trailing):
                flat = flat.flatten()
        values, _ = _numpy(self.name, flat, self.dtype)
        grow(self.values, values.reshape((n, *self.trailing)), start)

    def finish(self) -> None:
        """Nothing is left to write at the end."""
