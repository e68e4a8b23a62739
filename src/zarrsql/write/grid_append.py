"""Grid appends: new steps along `append_dim` of an existing grid store.

The relation must have the store's variables over the same dimensions, kinds that the
stored arrays hold, coordinates of the other dimensions among the stored ones, and new
`append_dim` coordinates that follow the stored ones (past the last, in the stored
direction; a value already there is a clash). Then, under `append_commit`: every new chunk
is written beyond the committed end (a chunk straddling the old end is rewritten with its
old cells kept, atomically on local disk), then each grown array's metadata, and the
consolidated root last, the one commit point a reader sees.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from zarrsql.errors import AppendSchemaError, ParameterError, WriteError
from zarrsql.store.icechunk import is_session_location, writable_session
from zarrsql.write.cells import Grid, discover_grid
from zarrsql.write.commit import append_commit
from zarrsql.write.encoding import ArraySpec
from zarrsql.write.grid import completeness, grid_columns, write_chunks
from zarrsql.write.source import Source

__all__ = ["append_grid"]

_CODES = {"days": "D", "hours": "h", "minutes": "m", "seconds": "s", "milliseconds": "ms",
          "microseconds": "us", "nanoseconds": "ns"}  # fmt: skip


def append_grid(
    source: Source,
    store: str,
    dims_given: Sequence[str] | None,
    append_dim: str | None,
    storage_options: Mapping[str, str] | None,
) -> int | None:
    """Append the relation along `append_dim`: the rows appended (None: no store there yet;
    `dims` default to the store's)."""
    dims, kinds, variables, _ = grid_columns(
        source, dims_given if dims_given is not None else stored_dims(store, storage_options)
    )
    if append_dim not in dims:
        raise ParameterError(f"append_dim '{append_dim}' is not one of the dims {list(dims)}; name one of them")
    group = _open_existing(store, storage_options)
    if group is None:
        return None
    import xarray as xr

    if is_session_location(store):
        old = xr.open_zarr(writable_session(store).store, consolidated=False)
    else:
        old = xr.open_zarr(store, storage_options=dict(storage_options) if storage_options else None)
    _check_variables(store, old, dims, variables)
    new = discover_grid(source, dims, kinds)
    if not len(new.indexes[dims.index(append_dim)]):
        return 0  # no rows: nothing to append
    full, start = _full_grid(store, old, new, append_dim)
    block = Grid(dims, tuple(full.indexes[k] if d != append_dim else new.indexes[k] for k, d in enumerate(dims)))
    complete = completeness(source, block, variables)
    specs = {name: _stored_spec(store, group[name], name, kind, complete[name]) for name, kind in variables.items()}
    coord_spec = _stored_spec(store, group[append_dim], append_dim, kinds[append_dim], True)
    axis = dims.index(append_dim)
    chunks = tuple(group[next(iter(variables))].chunks) if variables else ()

    rows: list[int] = []

    def write(target: Any) -> None:
        import zarr

        root = zarr.open_group(store=target.zarr_store, mode="r+")
        grown = {name: _future(root[name], axis, len(full.indexes[axis])) for name in variables}
        coord = _future(root[append_dim], 0, len(full.indexes[axis]))
        coord[start:] = coord_spec.encode(np.asarray(new.indexes[axis].values), None)
        stored = {name: root[name] for name in variables}
        rows.append(write_chunks(source, full, chunks, grown, specs, old=stored, first={append_dim: start}))
        for name in [*variables, append_dim]:  # the metadata, after every chunk
            array = root[name]
            assert isinstance(array, zarr.Array)  # checked when the append was planned
            shape = list(array.shape)
            shape[axis if name != append_dim else 0] = len(full.indexes[axis])
            array.resize(tuple(shape))

    append_commit(store, storage_options, write)
    return rows[0]


def stored_dims(store: str, storage_options: Mapping[str, str] | None) -> tuple[str, ...] | None:
    """The dimensions of an existing grid store's variables (None: no store, or none)."""
    group = _open_existing(store, storage_options)
    if group is None:
        return None
    for name, array in group.arrays():
        names = getattr(array.metadata, "dimension_names", None) or array.attrs.get("_ARRAY_DIMENSIONS")
        if names and name not in names:  # a variable, not a coordinate
            return tuple(names)
    return None


def _open_existing(store: str, storage_options: Mapping[str, str] | None) -> Any:
    import zarr

    if is_session_location(store):
        try:
            group = zarr.open_group(writable_session(store).store, mode="r")
        except (FileNotFoundError, KeyError, ValueError):
            return None
        return group if list(group.keys()) else None
    if "://" not in store and not os.path.exists(os.path.expanduser(store)):
        return None
    try:
        opts = dict(storage_options) if storage_options else None
        return zarr.open_group(store, mode="r", storage_options=opts)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError) as err:
        raise WriteError(
            f"the store at '{store}' cannot be appended to: it is not a Zarr group zarr-python opens ({err}); "
            "write a new store with mode='w'"
        ) from err


def _check_variables(store: str, old: Any, dims: tuple[str, ...], variables: dict[str, str]) -> None:
    """The relation's columns are the store's variables, over the same dimensions."""
    stored = set(map(str, old.data_vars))
    extra = sorted(set(variables) - stored)
    if extra:
        raise AppendSchemaError(
            f"column '{extra[0]}' is not a variable of the store '{store}' (it has {sorted(stored)}); an append must "
            "have the same columns: drop it from the SELECT, or write a new store"
        )
    missing = sorted(stored - set(variables))
    if missing:
        raise AppendSchemaError(
            f"the store '{store}' has the variable '{missing[0]}', which the relation lacks; an append must have "
            "every variable: add the column (NULL AS ... for none)"
        )
    for name in variables:
        if tuple(old[name].dims) != dims:
            raise AppendSchemaError(
                f"variable '{name}' of the store '{store}' has dimensions {list(old[name].dims)}, the relation's dims "
                f"are {list(dims)}; pass dims in the store's order"
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
        _check_follows(store, d, stored, index)
        start = len(stored)
        indexes.append(stored.append(index))
    return Grid(new.dims, tuple(indexes)), start


def _check_follows(store: str, dim: str, stored: pd.Index, fresh: pd.Index) -> None:
    clash = fresh.intersection(stored)
    if len(clash):
        raise WriteError(
            f"the append's '{dim}' value {clash[0]} is already in the store '{store}'; an append adds new steps "
            f"only: filter out the '{dim}' values already written"
        )
    if not len(stored):
        return
    falling = len(stored) > 1 and stored.is_monotonic_decreasing
    last = stored[-1]
    behind = fresh[fresh > last] if falling else fresh[fresh < last]
    if len(behind):
        direction = "below" if falling else "above"
        raise WriteError(
            f"the append's '{dim}' value {behind[0]} does not follow the store's last '{dim}' {last}; new '{dim}' "
            f"values must be {direction} it"
        )


def _stored_spec(store: str, array: Any, name: str, kind: str, complete: bool) -> ArraySpec:
    """How the relation's column goes into the array as stored, or why it cannot."""
    dtype = np.dtype(array.dtype) if not str(array.dtype).startswith(("<U", "|U", "str", "String")) else None
    attrs = dict(array.attrs)
    stored_kind = _stored_kind(dtype, attrs)
    fits = {
        "time": kind == "time" and stored_kind == "time",
        "float": kind in ("float", "int", "bool") and stored_kind == "float",
        "int": kind in ("int", "bool") and stored_kind in ("int", "bool") and complete,
        "bool": kind == "bool" and stored_kind == "bool" and complete,
        "string": kind == "string" and stored_kind == "string",
    }
    if not fits.get(stored_kind, False):
        holes = " and would have missing cells" if stored_kind in ("int", "bool") and not complete else ""
        raise AppendSchemaError(
            f"column '{name}' ({kind}{holes}) does not fit the store's array '{name}' ({array.dtype}) in '{store}'; "
            "CAST the column to the stored type (and fill missing cells), or write a new store"
        )
    code, origin = _time_units(store, name, attrs) if stored_kind == "time" else (None, None)
    fill = array.fill_value
    return ArraySpec(name, kind, dtype if dtype is not None else "str", fill, attrs, code, origin)


def _stored_kind(dtype: np.dtype[Any] | None, attrs: dict[str, Any]) -> str:
    if dtype is None or dtype.kind in "OUT":
        return "string"
    if " since " in str(attrs.get("units", "")) and dtype.kind in "iu":
        return "time"
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
    return code, np.datetime64(pd.Timestamp(origin.strip()).tz_localize(None).to_datetime64(), "ns")


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
