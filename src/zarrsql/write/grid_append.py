"""Grid appends: new steps along `append_dim` of an existing grid store.

The relation must have the store's variables over the same dimensions, kinds that the
stored arrays hold (integers within the stored dtype's range, text in every cell; a bare
`NULL AS v`, which DuckDB 2 gives no type, as a NULL of the stored array's type),
coordinates of the other dimensions among the stored ones (and of their sort: text is no
number), and new `append_dim` coordinates that follow the stored ones (past the last, in the
stored direction; a value already there is a clash). The new steps are placed sorted in the
store's direction, whatever the relation's order. Then, under `append_commit`: every new chunk
is written beyond the committed end (a chunk straddling the old end is rewritten with its
old cells kept, atomically on local disk), then each grown array's metadata, and the
consolidated root last, the one commit point a reader sees.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from zarrsql.decode.sentinel import declared_fill
from zarrsql.errors import AppendSchemaError, ParameterError, WriteError
from zarrsql.store.icechunk import is_session_location, writable_session
from zarrsql.write.cells import Grid, Values, column_values, discover_grid, quote
from zarrsql.write.chunking import chunk_shape
from zarrsql.write.commit import append_commit
from zarrsql.write.encoding import ArraySpec, missing_text_error
from zarrsql.write.grid import completeness, grid_columns, write_chunks
from zarrsql.write.source import Source
from zarrsql.write.targets import existing_store, local_path, quiet_dtype_notes

__all__ = ["append_grid"]

_CODES = {"days": "D", "hours": "h", "minutes": "m", "seconds": "s", "milliseconds": "ms",
          "microseconds": "us", "nanoseconds": "ns"}  # fmt: skip


def append_grid(
    source: Source,
    store: str,
    dims_given: Sequence[str] | None,
    append_dim: str | None,
    storage_options: Mapping[str, str] | None,
    *,
    chunks: Any = None,
    zarr_format: int | None = None,
) -> int | None:
    """Append the relation along `append_dim`: the rows appended (None: no store there yet;
    `dims` default to the store's). `chunks` and `zarr_format`, when given, must be the
    store's (an append keeps both): they are checked, never silently ignored."""
    if is_session_location(store):
        return _append_grid(
            source, store, writable_session(store).store, dims_given, append_dim, storage_options, chunks, zarr_format
        )
    with existing_store(store, storage_options) as where:
        return _append_grid(source, store, where, dims_given, append_dim, storage_options, chunks, zarr_format)


def _append_grid(
    source: Source,
    store: str,
    where: Any,
    dims_given: Sequence[str] | None,
    append_dim: str | None,
    storage_options: Mapping[str, str] | None,
    chunks: Any,
    zarr_format: int | None,
) -> int | None:
    """`append_grid`, reading the existing store from `where` (`existing_store`)."""
    existing = _open_existing(store, where)
    _refuse_table_layout(store, existing)
    source = _typed_nulls(source, existing)
    dims, kinds, variables, schema = grid_columns(
        source, dims_given if dims_given is not None else _stored_dims(store, where, append_dim)
    )
    if append_dim not in dims:
        raise ParameterError(f"append_dim '{append_dim}' is not one of the dims {list(dims)}; name one of them")
    group = _open_existing(store, where)
    if group is None:
        return None
    import xarray as xr

    # chunks=None: no dask, which would tokenize (pickle, so re-create) the filesystem of `where`
    old = xr.open_zarr(where, consolidated=False if is_session_location(store) else None, chunks=None)
    steps = _check_variables(store, old, group, dims, append_dim, variables)
    step_kinds = {n: variables.pop(n) for n in steps}  # grown from one value per step, not per cell
    everything = source
    if steps:
        source = replace(source, relation=source.relation.project(", ".join(quote(c) for c in [*dims, *variables])))
    _check_dimension_kinds(store, group, dims, kinds)
    _check_layout_arguments(store, group, dims, append_dim, variables, chunks, zarr_format)
    new = discover_grid(source, dims, kinds)
    if not len(new.indexes[dims.index(append_dim)]):
        return 0  # no rows: nothing to append
    coord_spec = _stored_spec(store, group[append_dim], append_dim, kinds[append_dim], True)
    full, start = _full_grid(store, old, new, append_dim)
    block = Grid(dims, tuple(full.indexes[k] if d != append_dim else new.indexes[k] for k, d in enumerate(dims)))
    # a time variable is asked too: an integer time array without `_FillValue` has no NaT code
    complete = completeness(source, block, {n: "int" if k == "time" else k for n, k in variables.items()})
    specs = {name: _stored_spec(store, group[name], name, kind, complete[name]) for name, kind in variables.items()}
    axis = dims.index(append_dim)
    fresh = np.asarray(full.indexes[axis][start:])
    grown_steps = {}
    for name in steps:
        values = _step_values(everything, store, append_dim, name, {**kinds, **step_kinds}, fresh)
        spec = _stored_spec(store, group[name], name, step_kinds[name], values.nulls is None or not values.nulls.any())
        grown_steps[name] = (spec, values)
    _check_integer_ranges(
        source,
        store,
        specs,
        schema,
        {append_dim: (coord_spec, fresh), **{n: (sp, v.data) for n, (sp, v) in grown_steps.items()}},
    )
    stored_chunks = tuple(group[next(iter(variables))].chunks) if variables else ()

    rows: list[int] = []
    length = len(full.indexes[axis])
    axes = {**dict.fromkeys(variables, axis), **dict.fromkeys([*grown_steps, append_dim], 0)}

    def write(target: Any) -> None:
        import zarr

        root = zarr.open_group(store=target.zarr_store, mode="r+")
        try:
            _write(root)
        except BaseException:
            if local_path(store) is None and not is_session_location(store):
                _withdraw(root, axes, start, length)  # an object store has no journal to roll back with
            raise

    def _write(root: Any) -> None:
        import zarr

        grown = {name: _future(root[name], axis, len(full.indexes[axis])) for name in variables}
        coord = _future(root[append_dim], 0, len(full.indexes[axis]))
        coord[start:] = coord_spec.encode(fresh, None)
        for name, (spec, values) in grown_steps.items():
            _future(root[name], 0, len(full.indexes[axis]))[start:] = spec.encode(values.data, values.nulls)
        stored = {name: root[name] for name in variables}
        rows.append(write_chunks(source, full, stored_chunks, grown, specs, old=stored, first={append_dim: start}))
        for name in [*variables, *grown_steps, append_dim]:  # the metadata, after every chunk
            array = root[name]
            assert isinstance(array, zarr.Array)  # checked when the append was planned
            shape = list(array.shape)
            shape[axis if name in variables else 0] = len(full.indexes[axis])
            with quiet_dtype_notes():
                array.resize(tuple(shape))

    append_commit(store, storage_options, write)
    return rows[0]


def _withdraw(root: Any, axes: Mapping[str, int], start: int, length: int) -> None:
    """Undo a failed append on an object store: each grown array back at its committed length
    `start` along its axis, with the chunks this append wrote beyond it deleted (zarr deletes
    the chunks outside the shape an array shrinks to), so that no later append that leaves
    those cells empty shows them. A chunk straddling the old end keeps the old cells, which a
    reader sees, and new ones beyond the end, which none does. Best effort: the append's own
    error is what the caller sees."""
    import contextlib

    for name, axis in axes.items():
        with contextlib.suppress(Exception), quiet_dtype_notes():
            array = root[name]
            shape = list(array.shape)
            shape[axis] = start
            _future(array, axis, max(length, array.shape[axis])).resize(tuple(shape))


def _refuse_table_layout(store: str, group: Any) -> None:
    """A table-layout store has one `row` axis and columns, not variables over dimensions: a
    grid append would fail on whatever it met first (a dimension not in the store, a column
    named `row`). Refused up front, in the words the table append uses for the opposite case."""
    from zarrsql.conventions.table import registered

    if group is not None and registered(dict(group.attrs)):
        raise AppendSchemaError(
            f"'{store}' is a table-layout store (its root group registers the Zarr table convention), which a "
            'grid append (append_dim=...) cannot grow; append its rows with layout="table", mode="a" and no '
            "append_dim, or write a new grid store"
        )


def _stored_dims(store: str, where: Any, append_dim: str | None) -> tuple[str, ...] | None:
    """The dimensions of an existing grid store's variables along `append_dim` (None: no store,
    or none): those with the most dimensions, so that a land mask over (lat, lon) beside
    `t2m(time, lat, lon)` does not decide them."""
    group = _open_existing(store, where)
    if group is None:
        return None
    found: list[tuple[str, ...]] = []
    for name, array in group.arrays():
        names = getattr(array.metadata, "dimension_names", None) or array.attrs.get("_ARRAY_DIMENSIONS")
        if names and name not in names:  # a variable, not a coordinate
            found.append(tuple(names))
    along = [d for d in found if append_dim in d] or found
    return max(along, key=len) if along else None


def _open_existing(store: str, where: Any) -> Any:
    """The existing store's root group, read from `where` (None: no store there)."""
    import zarr

    if is_session_location(store):
        try:
            group = zarr.open_group(where, mode="r")
        except (FileNotFoundError, KeyError, ValueError):
            return None
        return group if list(group.keys()) else None
    if "://" not in store and not os.path.exists(os.path.expanduser(store)):
        return None
    try:
        return zarr.open_group(where, mode="r")
    except FileNotFoundError:
        return None
    except (ValueError, KeyError) as err:
        raise WriteError(
            f"the store at '{store}' cannot be appended to: it is not a Zarr group zarr-python opens ({err}); "
            "write a new store with mode='w'"
        ) from err


def _typed_nulls(source: Source, group: Any) -> Source:
    """The source with each bare NULL column (`NULL AS v`: DuckDB 2 gives it the type null, which
    no array holds; 1.5 gave it INTEGER) cast to the type of the stored array of its name, so it
    appends as a NULL of that type does: every cell missing (NaN, NaT or the `_FillValue`), and
    refused where the array cannot mark a missing cell. Other columns are kept as they are."""
    types = source.relation.types
    if group is None or not any(t.id == "null" for t in types):
        return source
    picked = []
    for k, (name, column_type) in enumerate(zip(source.columns, types, strict=True)):
        array = _array_of(group, name) if column_type.id == "null" else None
        sql_type = None if array is None else _SQL_TYPES.get(_stored_kind(_dtype_of(array), dict(array.attrs)))
        picked.append(f"#{k + 1}{'' if sql_type is None else '::' + sql_type} AS {quote(name)}")  # by position
    return replace(source, relation=source.relation.project(", ".join(picked)))


#: The SQL type of the values that go into a stored array of each kind (`_stored_kind`).
_SQL_TYPES = {"float": "DOUBLE", "packed": "DOUBLE", "int": "BIGINT", "bool": "BOOLEAN", "time": "TIMESTAMP",
              "string": "VARCHAR"}  # fmt: skip


def _array_of(group: Any, name: str) -> Any:
    """The array `name` of the store's root group, or None (no such node, or a group)."""
    import zarr

    node = group.get(name)
    return node if isinstance(node, zarr.Array) else None


def _dtype_of(array: Any) -> np.dtype[Any] | None:
    """The stored array's numpy dtype; None for a text array (Zarr's variable-length strings)."""
    return np.dtype(array.dtype) if not str(array.dtype).startswith(("<U", "|U", "str", "String")) else None


def _check_variables(
    store: str, old: Any, group: Any, dims: tuple[str, ...], append_dim: str, variables: dict[str, str]
) -> list[str]:
    """The relation's columns are the store's variables along `append_dim`, over the same
    dimensions, and its arrays over `append_dim` alone (a coordinate such as `valid_time(time)`
    or ERA5's `expver`), each of which grows from a column of its name (one value per step):
    their names are returned. A variable without `append_dim` (a land mask over lat and lon)
    stays as stored, as xarray's append leaves it. Any other array along `append_dim` (CF
    bounds `time_bnds(time, nv)`, a variable over another set of dimensions) cannot grow from
    one row per cell, and would be left shorter than `append_dim`, which no reader opens:
    refused before anything is written."""
    names = [str(n) for n in (*old.data_vars, *old.coords) if n != append_dim]
    along = {n for n in names if append_dim in old[n].dims}
    cells = {n for n in along if tuple(old[n].dims) == dims and n in old.data_vars}
    steps = sorted(n for n in along - cells if tuple(old[n].dims) == (append_dim,))  # (a 1-D grid's are cells)
    others = sorted(along - cells - set(steps))
    if others:
        name = others[0]
        raise AppendSchemaError(
            f"the store '{store}' has '{name}' over {list(old[name].dims)}, along append_dim '{append_dim}' but not "
            f"over the relation's dims {list(dims)} nor '{append_dim}' alone: an append cannot grow it, and left "
            f"shorter than '{append_dim}' it would leave a store no reader opens; write the whole data again with "
            "mode='w' (or drop that array from the store first)"
        )
    lacking = [n for n in steps if n not in variables]
    if lacking:
        name = lacking[0]
        raise AppendSchemaError(
            f"the store '{store}' has '{name}' over ['{append_dim}'], which grows with each new step: add a column "
            f"'{name}' holding its value for each new '{append_dim}' (the same in every row of a step)"
        )
    static = {str(n) for n in old.data_vars} - along
    extra = sorted(set(variables) - cells - set(steps))
    if extra:
        name = extra[0]
        if name in static:
            raise AppendSchemaError(
                f"column '{name}' is the store's variable over {list(old[name].dims)}, without append_dim "
                f"'{append_dim}': an append keeps it as stored (as xarray's does); drop it from the SELECT"
            )
        raise AppendSchemaError(
            f"column '{name}' is not a variable of the store '{store}' along '{append_dim}' (those are "
            f"{sorted(cells | set(steps))}); an append must have the same columns: drop it from the SELECT, or "
            "write a new store"
        )
    missing = sorted(cells - set(variables))
    if missing:
        raise AppendSchemaError(
            f"the store '{store}' has the variable '{missing[0]}', which the relation lacks; an append must have "
            f"every variable along '{append_dim}': add the column{_none_hint(group, missing[0])}"
        )
    for name in variables:
        if name not in steps and tuple(old[name].dims) != dims:
            raise AppendSchemaError(
                f"variable '{name}' of the store '{store}' has dimensions {list(old[name].dims)}, the relation's dims "
                f"are {list(dims)}; pass dims in the store's order"
            )
    return steps


def _step_values(
    source: Source, store: str, append_dim: str, name: str, kinds: Mapping[str, str], fresh: np.ndarray
) -> Values:
    """The value of the column `name` at each new step `fresh` of `append_dim`: the same in every
    row of a step (else refused: the array holds one value per step)."""
    d, n = quote(append_dim), quote(name)
    table = source.relation.aggregate(
        f"{d} AS step, min({n}) AS value, count(DISTINCT {n}) AS kinds, count({n}) AS given, count(*) AS rows", d
    ).to_arrow_table()
    uneven = [
        k
        for k, (kinds_, given, rows) in enumerate(
            zip(*(table.column(c).to_pylist() for c in ("kinds", "given", "rows")), strict=True)
        )
        if kinds_ > 1 or 0 < given < rows
    ]
    steps = column_values(append_dim, table.column("step"), kinds[append_dim]).data
    if uneven:
        raise AppendSchemaError(
            f"column '{name}' has more than one value in the rows of the '{append_dim}' step {steps[uneven[0]]}, but "
            f"the store's '{name}' holds one value per '{append_dim}'; give it one value per step"
        )
    found = column_values(name, table.column("value"), kinds[name])
    at = pd.Index(steps).get_indexer(fresh)
    nulls = found.nulls[at] if found.nulls is not None else None
    return Values(found.data[at], nulls)


def _none_hint(group: Any, name: str) -> str:
    """How to append a variable the rows have no value for: a NULL of the stored array's type,
    where that array can mark a missing cell."""
    array = _array_of(group, name)
    if array is None:
        return ""
    dtype = _dtype_of(array)
    stored_kind = _stored_kind(dtype, dict(array.attrs))
    sql_type = _SQL_TYPES.get(stored_kind)
    if sql_type is None:
        return ""
    kind = "float" if stored_kind == "packed" else stored_kind  # the kind of a NULL::<sql_type>
    if _fits(kind, stored_kind, False, dtype, _missing_code(array, stored_kind)):
        return f' (NULL::{sql_type} AS "{name}" where the rows have none: those cells are missing)'
    return f" (every cell needs a value: the store's {array.dtype} array '{name}' cannot mark a missing one)"


#: What a dimension's values are, by kind (the relation's, or `_stored_kind` of its coordinates):
#: values of different sorts never match, so their coordinates are not compared.
_VALUE_SORTS = {"float": "numbers", "int": "numbers", "bool": "numbers", "packed": "numbers", "time": "times",
                "string": "text"}  # fmt: skip


def _check_dimension_kinds(store: str, group: Any, dims: tuple[str, ...], kinds: Mapping[str, str]) -> None:
    """Each dimension's values are of the sort of the store's coordinates (a VARCHAR '0' is no
    coordinate 0): refused here by its type, rather than as a value the store lacks."""
    for d in dims:
        array = _array_of(group, d)
        if array is None:  # no coordinate array: xarray numbers the positions
            continue
        stored_kind = _stored_kind(_dtype_of(array), dict(array.attrs))
        given, stored = _VALUE_SORTS.get(kinds[d]), _VALUE_SORTS.get(stored_kind)
        if given is not None and stored is not None and given != stored:
            raise AppendSchemaError(
                f"dimension '{d}' holds {given} in the relation, but the store '{store}' has {stored} as its '{d}' "
                f"coordinates ({array.dtype}); CAST it to the store's type, e.g. "
                f'CAST("{d}" AS {_SQL_TYPES[stored_kind]}) AS "{d}"'
            )


def _full_grid(store: str, old: Any, new: Grid, append_dim: str) -> tuple[Grid, int]:
    """The store's coordinates with the new steps along `append_dim`, and where they start."""
    indexes = []
    start = 0
    for d, index in zip(new.dims, new.indexes, strict=True):
        stored = pd.Index(old.indexes[d]) if d in old.indexes else pd.Index(np.asarray(old[d].values))
        if d != append_dim:
            unknown = index.difference(stored)
            if len(unknown):
                raise WriteError(
                    f"dimension '{d}' has the value {unknown[0]} in the relation, which the store '{store}' does not "
                    f"have; only '{append_dim}' grows in an append: filter the relation to the stored '{d}' values"
                )
            indexes.append(stored)
            continue
        # one stored step has no direction: steps all below it make the axis a falling one
        falling = (
            stored.is_monotonic_decreasing if len(stored) > 1 else bool(len(index)) and bool(index.max() < stored.min())
        )
        steps = index.sort_values(ascending=not falling)
        _check_follows(store, d, stored, steps, falling=falling)
        start = len(stored)
        indexes.append(stored.append(steps))
    return Grid(new.dims, tuple(indexes)), start


def _check_follows(store: str, dim: str, stored: pd.Index, fresh: pd.Index, *, falling: bool) -> None:
    """The new steps (sorted in the store's direction: the relation's order does not matter)
    are not in the store and all lie past its last step."""
    clash = fresh.intersection(stored)
    if len(clash):
        raise WriteError(
            f"the append's '{dim}' value {clash[0]} is already in the store '{store}'; an append adds new steps "
            f"only: filter out the '{dim}' values already written"
        )
    if not len(stored):
        return
    last = stored[-1]
    behind = fresh[fresh > last] if falling else fresh[fresh < last]
    if len(behind):
        direction = "below" if falling else "above"
        raise WriteError(
            f"the append's '{dim}' value {behind[0]} does not follow the store's last '{dim}' {last}; new '{dim}' "
            f"values must be {direction} it"
        )


def _stored_spec(store: str, array: Any, name: str, kind: str, complete: bool) -> ArraySpec:
    """How the relation's column goes into the array as stored, or why it cannot. A CF-packed
    array (`scale_factor` / `add_offset`) takes any number, packed as xarray packs it; a time
    axis stored as counts `<unit> since <origin>` (integer or float) takes times."""
    dtype = _dtype_of(array)
    attrs = dict(array.attrs)
    stored_kind = _stored_kind(dtype, attrs)
    if stored_kind == "string" and kind == "string" and not complete:
        raise missing_text_error(name)  # as a new store refuses it: a text array has no missing marker
    fill = _missing_code(array, stored_kind)
    if not _fits(kind, stored_kind, complete, dtype, fill):
        raise _misfit(store, array, name, kind, stored_kind, complete)
    code, origin = _time_units(store, name, attrs) if stored_kind == "time" else (None, None)
    packing = (float(attrs.get("scale_factor", 1.0)), float(attrs.get("add_offset", 0.0)))
    return ArraySpec(name, kind, dtype if dtype is not None else "str", fill, attrs, code, origin,
                     packing if stored_kind == "packed" else None)  # fmt: skip


def _missing_code(array: Any, stored_kind: str) -> Any:
    """The fill value a missing cell is written as. A packed or time array marks one by what
    xarray masks (`_FillValue`), not by Zarr's fill value (xarray's v3 arrays have 0 there,
    which would read as a value)."""
    return _declared_fill(array, dict(array.attrs)) if stored_kind in ("packed", "time") else array.fill_value


def _fits(kind: str, stored_kind: str, complete: bool, dtype: np.dtype[Any] | None, fill: Any) -> bool:
    """Whether a column of `kind` (with a missing cell or a NULL unless `complete`) goes into a
    stored array of `stored_kind`, whose missing cells are written as `fill`."""
    fits = {
        "time": kind == "time" and stored_kind == "time" and (complete or _marks_nat(dtype, fill)),
        "float": kind in ("float", "int", "bool") and stored_kind == "float",
        "int": kind in ("int", "bool") and stored_kind in ("int", "bool") and complete,
        "bool": kind == "bool" and stored_kind == "bool" and complete,
        "string": kind == "string" and stored_kind == "string" and complete,  # text has no missing marker
        "packed": kind in ("float", "int", "bool") and (complete or fill is not None or _is_float(dtype)),
    }
    return fits.get(stored_kind, False)


def _misfit(store: str, array: Any, name: str, kind: str, stored_kind: str, complete: bool) -> AppendSchemaError:
    """The refusal of a column the stored array cannot take, with the fix for that array."""
    holes = " and would have missing cells" if stored_kind in ("int", "bool", "packed", "time") and not complete else ""
    if stored_kind == "time" and kind == "time":
        fix = "the time array cannot mark a missing time (no _FillValue, not int64): COALESCE it, or write a new store"
    elif stored_kind == "time":
        fix = "the array holds times: give TIMESTAMP values (CAST the column AS TIMESTAMP), or write a new store"
    elif stored_kind == "packed":
        fix = "the packed array has no _FillValue for missing cells: fill them (COALESCE), or write a new store"
    else:
        fix = "CAST the column to the stored type (and fill missing cells), or write a new store"
    return AppendSchemaError(
        f"column '{name}' ({kind}{holes}) does not fit the store's array '{name}' ({array.dtype}) in '{store}'; {fix}"
    )


def _marks_nat(dtype: np.dtype[Any] | None, fill: Any) -> bool:
    """Whether a time array can mark a missing time (`ArraySpec` stores it so): NaN in a float
    one, its `_FillValue`, or NaT in an int64 one."""
    return dtype is not None and (dtype.kind == "f" or fill is not None or dtype == np.dtype(np.int64))


def _declared_fill(array: Any, attrs: Mapping[str, Any]) -> Any:
    """The fill value xarray masks in a packed or time array: `_FillValue` (Zarr v3 keeps it in the
    attributes, a float one as base64 of a little-endian double; v2 as the array's fill value),
    None when there is none (then a missing cell has no code)."""
    declared = attrs.get("_FillValue")
    if declared is None:
        return array.fill_value if int(array.metadata.zarr_format) == 2 else None
    return declared_fill(declared, np.dtype(array.dtype))  # as the reader will mask it


def _check_integer_ranges(
    source: Source, store: str, specs: Mapping[str, ArraySpec], schema: pa.Schema,
    coordinates: Mapping[str, tuple[ArraySpec, np.ndarray]],
) -> None:  # fmt: skip
    """Refuse integers outside the stored integer dtype's range: numpy would wrap them (300
    into int8 is 44). A column whose type the stored dtype holds whole is not read; another
    (a BIGINT into int8) is checked by its actual minimum and maximum, one aggregate for all."""
    limits = {}
    for name, spec in specs.items():
        stored = np.dtype(spec.dtype) if spec.kind == "int" and not spec.promoted and not spec.packed else None
        arrow = schema.field(name).type
        if stored is not None and pa.types.is_integer(arrow) and not np.can_cast(arrow.to_pandas_dtype(), stored):
            limits[name] = stored
    if limits:
        aggregates = ", ".join(f"min({quote(n)})::VARCHAR, max({quote(n)})::VARCHAR" for n in limits)
        (row,) = source.relation.aggregate(aggregates).fetchall()
        for k, (name, stored) in enumerate(limits.items()):
            _check_range(store, name, stored, row[2 * k], row[2 * k + 1])
    for name, (spec, values) in coordinates.items():
        if spec.kind == "int" and np.dtype(spec.dtype).kind in "iu" and len(values):
            _check_range(store, name, np.dtype(spec.dtype), str(values.min()), str(values.max()))


def _check_range(store: str, name: str, stored: np.dtype[Any], low: str | None, high: str | None) -> None:
    """Both ends (as decimal text, exact for any integer width; None: all NULL) fit `stored`."""
    info = np.iinfo(stored)
    outside = [int(v) for v in (low, high) if v is not None and not info.min <= int(v) <= info.max]
    if outside:
        raise AppendSchemaError(
            f"column '{name}' has the value {outside[0]}, which the store's {stored} array '{name}' in '{store}' "
            f"cannot hold (its range is {info.min} to {info.max}); filter or clip the values, or write a new store "
            "with a wider type"
        )


def _check_layout_arguments(
    store: str, group: Any, dims: tuple[str, ...], append_dim: str, variables: Mapping[str, str],
    chunks: Any, zarr_format: int | None,
) -> None:  # fmt: skip
    """An append keeps the store's format and chunks; other ones asked for are refused.

    `zarr_format` defaults to 3 in `to_zarr`, so only 2 for a Zarr v3 store is known to be
    asked for. Chunks are compared as `to_zarr` would have made them for the store's shape; a
    stored chunk clipped to its dimension's length (as zarrsql once wrote them) matches a
    longer one given, and along `append_dim` the stored chunk may be shorter than the one
    given (a store created with clipped chunks)."""
    stored_format = int(group.metadata.zarr_format)
    if zarr_format == 2 and stored_format != 2:
        raise ParameterError(
            f"zarr_format=2 was given, but the store '{store}' is Zarr format {stored_format}, which an append "
            "keeps; drop zarr_format, or write a new store with mode='w'"
        )
    if chunks is None or not variables:
        return
    array = group[next(iter(variables))]
    stored = tuple(int(c) for c in array.chunks)
    given = chunk_shape(chunks, dims, array.shape)
    for d, want, have, n in zip(dims, given, stored, array.shape, strict=True):
        clipped = have == min(want, n)  # a store from a writer that clipped chunks to the shape
        if want != have and not clipped and not (d == append_dim and have < want):
            raise ParameterError(
                f"chunks={chunks!r} asks for chunks of {want} along '{d}', but the store '{store}' has chunks "
                f"{dict(zip(dims, stored, strict=True))}, which an append keeps; drop chunks, or write a new store "
                "with mode='w'"
            )


def _stored_kind(dtype: np.dtype[Any] | None, attrs: dict[str, Any]) -> str:
    """What the stored array holds, as xarray decodes it: text, times (counts since an
    origin, integer or float), CF-packed numbers, or plain numbers of the dtype's kind."""
    if dtype is None or dtype.kind in "OUT":
        return "string"
    if " since " in str(attrs.get("units", "")) and dtype.kind in "iuf":
        return "time"
    if ("scale_factor" in attrs or "add_offset" in attrs) and dtype.kind in "iuf":
        return "packed"
    return {"f": "float", "i": "int", "u": "int", "b": "bool"}.get(dtype.kind, "other")


def _time_units(store: str, name: str, attrs: dict[str, Any]) -> tuple[str, np.datetime64]:
    unit, _, origin = str(attrs["units"]).partition(" since ")
    calendar = str(attrs.get("calendar", "standard")).lower()
    code = _CODES.get(unit.strip().lower())
    if code is None or calendar not in ("standard", "gregorian", "proleptic_gregorian"):
        raise WriteError(
            f"the time array '{name}' of '{store}' has units '{attrs['units']}' and calendar '{calendar}', which an "
            "append cannot encode; write a new store"
        )
    # in the origin's own resolution: as nanoseconds, "0001-01-01" would wrap (1677-2262 only)
    return code, pd.Timestamp(origin.strip()).tz_localize(None).to_datetime64()


def _future(array: Any, axis: int, length: int) -> Any:
    """The array at its grown shape, without writing its metadata: chunks written through it
    land beyond the committed end while readers still see the old shape."""
    from zarr.core.array import Array, AsyncArray

    shape = list(array.shape)
    shape[axis] = length
    if type(array.store).__name__ == "IcechunkStore":
        # Icechunk takes no chunk beyond an array's shape; its session is the transaction
        # (written through a fork, published by the user's commit), so grow it first
        array.resize(tuple(shape))
        return array
    inner = array._async_array
    grown = AsyncArray(metadata=inner.metadata.update_shape(tuple(shape)), store_path=inner.store_path,
                       config=inner.config)  # fmt: skip
    return Array(grown)


def _is_float(dtype: np.dtype[Any] | None) -> bool:
    return dtype is not None and dtype.kind == "f"
