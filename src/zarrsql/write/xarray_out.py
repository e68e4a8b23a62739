"""`zarrsql.to_xarray`: a relation pivoted into an xarray Dataset.

The dimension columns become dimensions (coordinates in order of first appearance), every
other column a data variable over all of them. Missing cells are NaN (floats), NaT (times),
NaN (text, as objects); an integer or boolean variable with a missing cell or a NULL becomes
float64 with NaN, as xarray's own pivot does. A dimension tuple given twice is an error
naming it: nothing is silently kept or dropped. `pivot` reads the relation once when it is
small, twice otherwise; memory: the output arrays, a byte per cell to find duplicates, and
one batch of rows (or the rows of a small result). A column name given twice is refused;
names a Zarr store could not hold ('/', 'v' beside 'V') are kept, as xarray keeps them.

A time 'infinity' or '-infinity' is refused, dimension or variable, as the Zarr layouts refuse
it: datetime64 has no infinite time. A TIMESTAMP_NS one is DuckDB's largest count (negated
for '-infinity'), which as datetime64[ns] is a real date, 2262-04-11 (1677-09-21): kept, it
would be a wrong value no reader could tell from a date. Other units' infinities are beyond
datetime64[ns]'s years and refused while the rows are converted.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from zarrsql.errors import WriteError
from zarrsql.write.allocator import returning_memory
from zarrsql.write.cells import check_names, dim_kinds, for_writing
from zarrsql.write.pivot import pivot
from zarrsql.write.source import dims_of, kind_of, schema_of, source_of

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

    opened = None if template is None else _open_template(template)  # refused before any row is read
    source = source_of(relation)
    check_names(source.columns, zarr=False)  # 'v' and 'V' are two variables in memory
    dims_t = dims_of(source, dims)
    source = for_writing(source)
    kinds = dim_kinds(source, dims_t, "xarray")
    schema = schema_of(source)
    variables = {f.name: kind_of(f.name, f.type, "xarray") for f in schema if f.name not in dims_t}
    with returning_memory(source.connection.duckdb):
        grid, data, _ = pivot(source, dims_t, kinds, variables)
    _refuse_infinite_times(grid.coords(), dims=True)
    _refuse_infinite_times(data, dims=False)
    ds = xr.Dataset({name: (dims_t, values) for name, values in data.items()}, coords=grid.coords())
    return ds if opened is None else _apply_template(ds, opened)


#: DuckDB's count of a time 'infinity' ('-infinity': its negation, one above NaT's code).
_INFINITE_COUNT = np.iinfo(np.int64).max


def _refuse_infinite_times(arrays: dict[str, np.ndarray], *, dims: bool) -> None:
    """Refuse a TIMESTAMP_NS 'infinity' or '-infinity' among the time arrays (see the module
    docstring), naming the column and what to do with it: a dimension's row can only be
    dropped (a NULL dimension value is refused too), a variable's value can become NaT."""
    for name, values in arrays.items():
        if values.dtype.kind != "M":
            continue
        counts = values.view(np.int64)
        infinite = (counts == _INFINITE_COUNT) | (counts == -_INFINITE_COUNT)
        if not infinite.any():
            continue
        positive = counts.flat[int(np.argmax(infinite))] > 0
        value, seen = ("infinity", "2262-04-11") if positive else ("-infinity", "1677-09-21")
        col = '"' + name.replace('"', '""') + '"'
        null = "" if dims else f", make it NULL (NaT): CASE WHEN isfinite({col}) THEN {col} END AS {col}"
        raise WriteError(
            f"{'dimension' if dims else 'column'} '{name}' holds the time '{value}', which xarray cannot hold: "
            f"datetime64 has no infinite time (kept, it would read as {seen}); filter such rows out "
            f"(WHERE isfinite({col})){null}, or CAST the column to text"
        )


def _open_template(template: Any) -> xr.Dataset:
    """`template` as a Dataset: a path is opened with `xr.open_zarr`, and a path that holds no
    Zarr store is a `StoreNotFoundError` naming it (xarray's own error names neither the
    parameter nor the fix)."""
    import xarray as xr
    from zarr.errors import NodeNotFoundError

    from zarrsql.errors import ParameterError, StoreNotFoundError

    if isinstance(template, (str, os.PathLike)):
        try:
            template = xr.open_zarr(template)
        except (FileNotFoundError, NodeNotFoundError) as err:
            raise StoreNotFoundError(
                f"template '{os.fspath(template)}' is not a Zarr store xarray can open ({err}); pass the path of "
                "an existing Zarr store, or an xarray Dataset"
            ) from err
    if not isinstance(template, xr.Dataset):
        raise ParameterError(
            f"template must be an xarray Dataset or the path of a store xarray opens, got {type(template).__name__}"
        )
    return template


def _apply_template(ds: xr.Dataset, template: xr.Dataset) -> xr.Dataset:
    """Attributes, encodings and non-dimension coordinates back from `template`."""
    ds = ds.assign_coords(_template_coords(ds, template))
    ds.attrs = dict(template.attrs)
    for name in ds.variables:
        if name in template.variables:
            ds.variables[name].attrs = {**template.variables[name].attrs, **ds.variables[name].attrs}
            encoding = template.variables[name].encoding
            ds.variables[name].encoding = {k: v for k, v in encoding.items() if k not in _DROPPED_ENCODING}
    return ds


def _template_coords(ds: xr.Dataset, template: xr.Dataset) -> dict[Hashable, Any]:
    """The template's non-dimension coordinates as coordinates of `ds`: a column the SQL
    carried (`SELECT *` repeats a coordinate over every dimension) becomes the coordinate,
    reduced to the template's dimensions when its values do not vary along the others; one
    not carried comes from the template, aligned to `ds`'s coordinates (a scalar as it is)."""
    extra: dict[Hashable, Any] = {}
    for name, coord in template.coords.items():
        if name in ds.dims or not set(coord.dims) <= set(ds.dims):
            continue
        if name in ds.data_vars:
            carried = ds[name]
            others = [d for d in carried.dims if d not in coord.dims]
            first = carried.isel(dict.fromkeys(others, 0), drop=True)
            same = (carried == first) | (carried.isnull() & first.isnull())
            if not others or bool(same.all()):
                extra[name] = first.transpose(*coord.dims).variable
        elif not coord.dims:
            extra[name] = coord.variable.copy()
        elif all(d in template.indexes for d in coord.dims):
            extra[name] = coord.reset_coords(drop=True).reindex({d: ds.indexes[d] for d in coord.dims}).variable
    return extra
