"""`zarrsql.to_xarray`: a relation pivoted into an xarray Dataset.

The dimension columns become dimensions (coordinates in order of first appearance), every
other column a data variable over all of them. Missing cells are NaN (floats), NaT (times),
NaN (text, as objects); an integer or boolean variable with a missing cell or a NULL becomes
float64 with NaN, as xarray's own pivot does. A dimension tuple given twice is an error
naming it: nothing is silently kept or dropped. Memory: the output arrays, a byte per cell
to find duplicates, and one batch of rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from zarrsql.write.cells import Grid, column_values, dim_kinds, discover_grid
from zarrsql.write.source import Source, batches, dims_of, kind_of, schema_of, source_of

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["to_xarray"]

#: Encoding keys a template's variable keeps: how values are stored, not how they were chunked
#: in the template's store (the new arrays have their own shape).
_DROPPED_ENCODING = frozenset({"chunks", "preferred_chunks", "shape", "source", "original_shape", "chunksizes"})


def to_xarray(relation: Any, dims: Sequence[str] | None = None, *, template: Any = None) -> xr.Dataset:
    """The relation (or SQL text) as an xarray Dataset with `dims` as its dimensions.

    `dims` defaults to the dimensions of the zarrsql table the relation reads, when it kept
    them all. `template` (a Dataset, or the path of a store xarray opens) gives back the
    attributes, encodings and non-dimension coordinates the SQL did not carry.
    """
    import xarray as xr

    source = source_of(relation)
    dims_t = dims_of(source, dims)
    kinds = dim_kinds(source, dims_t, "xarray")
    schema = schema_of(source)
    variables = {f.name: kind_of(f.name, f.type, "xarray") for f in schema if f.name not in dims_t}
    grid = discover_grid(source, dims_t, kinds)
    data = _fill(source, grid, {**kinds, **variables}, variables)
    ds = xr.Dataset({name: (dims_t, values) for name, values in data.items()}, coords=grid.coords())
    return ds if template is None else _apply_template(ds, template)


def _empty(kind: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "float":
        return np.full(shape, np.nan, dtype=dtype)
    if kind == "time":
        return np.full(shape, np.datetime64("NaT", "ns"))
    if kind == "string":
        return np.full(shape, np.nan, dtype=object)
    return np.zeros(shape, dtype=dtype)


def _fill(source: Source, grid: Grid, kinds: dict[str, str], variables: dict[str, str]) -> dict[str, np.ndarray]:
    """Stream every row into its cell; integer and boolean variables keep a mask of the
    cells they got, and become float with NaN where one is missing."""
    shape = grid.shape
    schema = schema_of(source)
    out: dict[str, np.ndarray] = {}
    for name, kind in variables.items():
        arrow_type = schema.field(name).type
        dtype = None
        if kind in ("float", "int", "bool"):
            dtype = np.dtype(np.float64 if pa.types.is_decimal(arrow_type) else arrow_type.to_pandas_dtype())
        out[name] = _empty(kind, dtype, shape)  # type: ignore[arg-type]
    got = {name: np.zeros(shape, dtype=bool) for name, kind in variables.items() if kind in ("int", "bool")}
    taken = np.zeros(shape, dtype=bool)
    for batch in batches(source):
        flat = np.ravel_multi_index(grid.positions(batch, kinds), shape) if shape else np.zeros(batch.num_rows, int)
        _check_unique(grid, taken, flat)
        for name, kind in variables.items():
            values = column_values(name, batch.column(name), kind)
            out[name].flat[flat] = values.data
            if name in got:
                got[name].flat[flat] = True if values.nulls is None else ~values.nulls
    for name, mask in got.items():
        if not mask.all():
            promoted = out[name].astype(np.float64)
            promoted[~mask] = np.nan
            out[name] = promoted
    return out


def _check_unique(grid: Grid, taken: np.ndarray, flat: np.ndarray) -> None:
    """Refuse a cell written twice (in this batch or an earlier one), naming the tuple."""
    again = taken.flat[flat]
    if again.any():
        raise grid.duplicate_error(int(flat[np.argmax(again)]))
    if len(flat) > 1:
        order = np.sort(flat)
        same = order[1:] == order[:-1]
        if same.any():
            raise grid.duplicate_error(int(order[1:][np.argmax(same)]))
    taken.flat[flat] = True


def _apply_template(ds: xr.Dataset, template: Any) -> xr.Dataset:
    """Attributes, encodings and non-dimension coordinates back from `template`."""
    import xarray as xr

    if isinstance(template, (str, os.PathLike)):
        template = xr.open_zarr(template)
    if not isinstance(template, xr.Dataset):
        from zarrsql.errors import ParameterError

        raise ParameterError(
            f"template must be an xarray Dataset or the path of a store xarray opens, got {type(template).__name__}"
        )
    extra = {}
    for name, coord in template.coords.items():
        if name in ds.variables or not set(coord.dims) <= set(ds.dims) or not coord.dims:
            continue
        if all(d in template.indexes for d in coord.dims):
            extra[name] = coord.reset_coords(drop=True).reindex({d: ds.indexes[d] for d in coord.dims}).variable
    ds = ds.assign_coords(extra)
    ds.attrs = dict(template.attrs)
    for name in ds.variables:
        if name in template.variables:
            ds.variables[name].attrs = {**template.variables[name].attrs, **ds.variables[name].attrs}
            encoding = template.variables[name].encoding
            ds.variables[name].encoding = {k: v for k, v in encoding.items() if k not in _DROPPED_ENCODING}
    return ds
