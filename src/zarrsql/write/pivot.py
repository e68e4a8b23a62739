"""A relation pivoted whole into numpy arrays over its grid, as `to_xarray` returns them.

Small results are read once: each batch's dimension values grow the coordinates (in order of
first appearance) and are kept as positions beside the batch's values, until the end fixes
the grid's shape and everything is placed. When those kept rows pass `ONE_READ_BYTES`, the
read stops and the relation is read twice instead (`cells.discover_grid` for the
coordinates, then every row straight into its cell), so memory stays the output arrays plus
one batch, however many rows there are.

Missing cells are NaN (floats), NaT (times), NaN (text, as objects); an integer or boolean
variable with a missing cell or a NULL becomes float64 with NaN. A tuple given twice is an
error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from zarrsql.write.cells import (
    Grid,
    Values,
    column_values,
    dimension_values,
    discover_grid,
    finish_grid,
    grow_and_place,
)
from zarrsql.write.source import Source, batches, schema_of

__all__ = ["ONE_READ_BYTES", "Kept", "fill", "keep_rows", "pivot"]

#: The rows a single read may keep before it gives up for two reads: 256 MiB holds ten
#: million rows of three dimensions and a float32 (16 bytes a row), where a second run of the
#: query (an aggregate over a whole store) costs far more than the memory.
ONE_READ_BYTES = 256 * 2**20


def pivot(
    source: Source, dims: tuple[str, ...], kinds: dict[str, str], variables: dict[str, str]
) -> tuple[Grid, dict[str, np.ndarray], int]:
    """The grid, the variables' whole arrays and the rows read (see the module docstring)."""
    kept = keep_rows(source, dims, kinds, variables)
    if kept is not None:
        return kept.grid, kept.arrays(schema_of(source)), kept.rows
    grid = discover_grid(source, dims, kinds)
    arrays, rows = fill(source, grid, kinds, variables)
    return grid, arrays, rows


def fill(
    source: Source, grid: Grid, kinds: dict[str, str], variables: dict[str, str]
) -> tuple[dict[str, np.ndarray], int]:
    """Read the relation again, every row straight into its cell of the known grid."""
    cells = _Cells(grid, variables, schema_of(source))
    rows = 0
    for batch in batches(source):
        rows += batch.num_rows
        values = {name: column_values(name, batch.column(name), kind) for name, kind in variables.items()}
        cells.place(grid.positions(batch, kinds), values)
    return cells.finish(), rows


@dataclass
class Kept:
    """A small result read once: its grid and its rows as positions and values."""

    grid: Grid
    parts: list[tuple[list[np.ndarray], dict[str, Values]]]
    rows: int
    variables: dict[str, str]

    def arrays(self, schema: pa.Schema) -> dict[str, np.ndarray]:
        """The whole arrays (the kept rows are let go as they are placed)."""
        cells = _Cells(self.grid, self.variables, schema)
        while self.parts:
            positions, values = self.parts.pop(0)
            cells.place(positions, values)
        return cells.finish()


def keep_rows(source: Source, dims: tuple[str, ...], kinds: dict[str, str], variables: dict[str, str]) -> Kept | None:
    """Read the relation once, keeping its rows; None when they pass `ONE_READ_BYTES`."""
    found: list[pd.Index | None] = [None] * len(dims)
    parts: list[tuple[list[np.ndarray], dict[str, Values]]] = []
    size = rows = 0
    for batch in batches(source):
        positions = []
        for k, d in enumerate(dims):
            index, at = grow_and_place(found[k], dimension_values(d, batch.column(d), kinds[d]))
            found[k] = index
            positions.append(at.astype(_position_type(len(index))))
        values = {name: _owned(column_values(name, batch.column(name), kind)) for name, kind in variables.items()}
        parts.append((positions, values))
        rows += batch.num_rows
        size += sum(p.nbytes for p in positions) + sum(_nbytes(v) for v in values.values())
        if size > ONE_READ_BYTES:
            return None
    return Kept(finish_grid(dims, kinds, found), parts, rows, variables)


def _owned(values: Values) -> Values:
    """`values` in memory of their own. A column read zero-copy from an Arrow batch that came
    through the C data interface keeps the whole batch alive (pyarrow releases an imported
    batch as one), so a kept float32 column would hold every column of its batches."""
    data = values.data if values.data.flags.owndata else values.data.copy()
    nulls = values.nulls if values.nulls is None or values.nulls.flags.owndata else values.nulls.copy()
    return Values(data, nulls)


def _position_type(n: int) -> type[np.integer]:
    """The narrowest integer that holds positions on an axis of `n` values (0 to n - 1): the
    kept rows are most of a small result's memory, and most axes (days, latitudes, a 240-point
    longitude) have at most 256 values."""
    for t in (np.uint8, np.uint16, np.uint32):
        if n - 1 <= np.iinfo(t).max:
            return t
    return np.int64


def _nbytes(values: Values) -> int:
    extra = values.nulls.nbytes if values.nulls is not None else 0
    width = 8 if values.data.dtype == object else values.data.dtype.itemsize  # a pointer per text
    return values.data.size * width + extra


def _first_repeat(flat: np.ndarray, again: np.ndarray) -> int:
    """The first cell of `flat` taken before, or else the first repeated within it."""
    if again.any():
        return int(flat[np.argmax(again)])
    order = np.sort(flat)
    same = order[1:] == order[:-1]
    return int(order[1:][np.argmax(same)])


def _empty(kind: str, dtype: np.dtype | None, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "float":
        return np.full(shape, np.nan, dtype=dtype)
    if kind == "time":
        return np.full(shape, np.datetime64("NaT", "ns"))
    if kind == "string":
        return np.full(shape, np.nan, dtype=object)
    return np.zeros(shape, dtype=dtype)


class _Cells:
    """The arrays being filled, a mask of the cells taken (to find duplicates), and for
    integer and boolean variables a mask of the cells that got a value."""

    def __init__(self, grid: Grid, variables: dict[str, str], schema: pa.Schema) -> None:
        self.grid, self.variables = grid, variables
        shape = grid.shape
        self.out: dict[str, np.ndarray] = {}
        for name, kind in variables.items():
            arrow_type = schema.field(name).type
            dtype = None
            if kind in ("float", "int", "bool"):
                dtype = np.dtype(np.float64 if pa.types.is_decimal(arrow_type) else arrow_type.to_pandas_dtype())
            self.out[name] = _empty(kind, dtype, shape)
        self.got = {name: np.zeros(shape, dtype=bool) for name, kind in variables.items() if kind in ("int", "bool")}
        self.taken = np.zeros(shape, dtype=bool)
        self.filled = 0

    def place(self, positions: list[np.ndarray], values: dict[str, Values]) -> None:
        shape = self.grid.shape
        n = len(next(iter(values.values())).data) if values else (len(positions[0]) if positions else 0)
        flat = np.ravel_multi_index(positions, shape) if shape else np.zeros(n, dtype=np.int64)
        self._check_unique(flat)
        for name, v in values.items():
            self.out[name].flat[flat] = v.data
            if name in self.got:
                self.got[name].flat[flat] = True if v.nulls is None else ~v.nulls

    def _check_unique(self, flat: np.ndarray) -> None:
        """Refuse a cell written twice (in this batch or an earlier one), naming the tuple:
        a batch that takes fewer new cells than it has rows repeats one."""
        again = self.taken.flat[flat]
        self.taken.flat[flat] = True
        filled = int(np.count_nonzero(self.taken))
        if again.any() or filled - self.filled != len(flat):
            raise self.grid.duplicate_error(_first_repeat(flat, again))
        self.filled = filled

    def finish(self) -> dict[str, np.ndarray]:
        for name, mask in self.got.items():
            if not mask.all():
                promoted = self.out[name].astype(np.float64)
                promoted[~mask] = np.nan
                self.out[name] = promoted
        return self.out
