"""Variables made of more than one array (conventions' encoded columns), beside plain arrays.

A table's data variable is either an `ArrayMeta` (decoded by `columns.ColumnCodec`) or an
`EncodedVariable`: a convention's column (AnnData categorical or nullable, the table
convention's categorical, nullable and geometry columns) that knows its own shape, chunking
and how to read a work unit's rows. Both give a codec with `logical` and
`read(store, unit) -> (values, nulls)`; a codec that can also say which store keys a unit
will read (`keys(unit)`) lets the reader fetch them ahead of decoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from zarrsql.decode.columns import ColumnCodec, DecodeOptions, column_codec
from zarrsql.decode.logical import Logical
from zarrsql.decode.shards import read_selected, selected_keys
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.plan.selection import select_cells
from zarrsql.plan.units import WorkUnit
from zarrsql.store import Store


class Codec(Protocol):
    """How one column's values are produced for a work unit."""

    logical: Logical

    def read(self, store: Store, unit: WorkUnit) -> tuple[Any, np.ndarray | None]: ...


@dataclass(frozen=True)
class EncodedVariable:
    """A convention's column stored in several arrays (see the module docstring).

    `make_codec(store, options)` builds the codec; it may read small parts (categories,
    offsets) once. `problem`, when set, says why the variable cannot be read.
    """

    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    make_codec: Any
    attrs: Mapping[str, Any] = field(default_factory=dict)
    problem: str | None = None
    parts: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def ndim(self) -> int:
        return len(self.shape)


Variable = ArrayMeta | EncodedVariable


def unreadable(var: Variable) -> str | None:
    """Why `var` cannot be read, or None."""
    if isinstance(var, EncodedVariable):
        return var.problem
    return None if var.dtype.supported else var.dtype.reason


def codec_for(var: Variable, store: Store, options: DecodeOptions) -> Codec:
    if isinstance(var, EncodedVariable):
        return var.make_codec(store, options)  # type: ignore[no-any-return]
    return PlainCodec(column_codec(var, options))


@dataclass(frozen=True)
class PlainCodec:
    """A plain array: read the unit's region, select its cells, decode them."""

    inner: ColumnCodec

    @property
    def logical(self) -> Logical:
        return self.inner.logical

    @property
    def array(self) -> ArrayMeta:
        return self.inner.array

    def keys(self, unit: WorkUnit) -> list[str] | None:
        """The chunk keys `read` will get for `unit` (None: read through zarr-python)."""
        return selected_keys(self.inner.array, unit.region, unit.select)

    def read(self, store: Store, unit: WorkUnit) -> tuple[Any, np.ndarray | None]:
        raw = read_selected(store, self.inner.array, unit.region, unit.select)
        return self.inner.decode(select_cells(raw, unit))
