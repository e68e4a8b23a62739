"""Encoded columns made of several arrays: categorical (codes + categories) and nullable
(values + mask), as AnnData and the Zarr table convention store them.

Both read a work unit's rows of their row-aligned arrays and decode them; categories are
read once when the codec is made (they are small). Malformed data is refused with the
element's path, never turned into a plausible wrong row: codes outside [-1, number of
categories), a mask of another length than its values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.decode.cells import Cells, select_cells
from zarrsql.decode.chunks import read_region
from zarrsql.decode.columns import ColumnCodec, DecodeOptions, column_codec
from zarrsql.decode.logical import Enum, Logical
from zarrsql.errors import DecodeError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import Store


def read_cells(store: Store, array: ArrayMeta, unit: Cells) -> np.ndarray:
    """The unit's selected cells of a row-aligned array (trailing axes read whole)."""
    region = unit.region + tuple((0, n) for n in array.shape[len(unit.region) :])
    return select_cells(read_region(store, array, region), unit)


def whole(store: Store, array: ArrayMeta) -> np.ndarray:
    return read_region(store, array, tuple((0, n) for n in array.shape))


@dataclass(frozen=True)
class CategoricalCodec:
    """Integer codes into a list of categories; -1 (or a masked code) is NULL.

    When the categories are distinct strings the column is an ENUM of them (`logical` is an
    `Enum` and values are the codes); otherwise values are the categories themselves.
    """

    path: str
    codes: ArrayMeta
    categories: np.ndarray
    category_nulls: np.ndarray | None
    logical: Logical

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        codes = read_cells(store, self.codes, unit).astype(np.int64, copy=False)
        n = len(self.categories)
        bad = (codes < -1) | (codes >= n)
        if bad.any():
            raise DecodeError(
                f"categorical '{self.path}' has code {int(codes[bad][0])} but only {n} categories; "
                "its codes and categories disagree: rewrite the column"
            )
        nulls = codes < 0
        if isinstance(self.logical, Enum):
            return codes.astype(np.int32), nulls if nulls.any() else None
        values = self.categories[np.where(nulls, 0, codes)] if n else np.zeros(len(codes), self.categories.dtype)
        if self.category_nulls is not None:
            nulls = nulls | self.category_nulls[np.where(nulls, 0, codes)]
        return values, nulls if nulls.any() else None


def categorical_codec(
    path: str, codes: ArrayMeta, categories: ArrayMeta, *, ordered: bool, store: Store, options: DecodeOptions
) -> CategoricalCodec:
    """Read the categories and choose the column type (see `CategoricalCodec`)."""
    cat_codec = column_codec(categories, options)
    values, nulls = cat_codec.decode(whole(store, categories))
    labels = values.tolist()
    # DuckDB has no ENUM of no labels: a categorical without categories (every code -1, as
    # anndata writes a subset of zero cells) reads as VARCHAR, all NULL
    if cat_codec.logical == "string" and nulls is None and labels and len(set(labels)) == len(labels):
        logical: Logical = Enum(tuple(labels), ordered)
    else:
        logical = cat_codec.logical
    return CategoricalCodec(path, codes, np.asarray(values), nulls, logical)


@dataclass(frozen=True)
class NullableCodec:
    """Values with a boolean mask beside them: NULL where the mask is true."""

    path: str
    values: ColumnCodec
    mask: ArrayMeta

    @property
    def logical(self) -> Logical:
        return self.values.logical

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        values, nulls = self.values.decode(read_cells(store, self.values.array, unit))
        mask = read_cells(store, self.mask, unit).astype(bool)
        nulls = mask if nulls is None else (nulls | mask)
        return values, nulls if nulls.any() else None


def nullable_codec(path: str, values: ArrayMeta, mask: ArrayMeta, options: DecodeOptions) -> NullableCodec:
    if mask.shape != values.shape:
        raise DecodeError(
            f"nullable column '{path}' has a mask of shape {list(mask.shape)} for values of shape "
            f"{list(values.shape)}; rewrite the column so both have one entry per row"
        )
    return NullableCodec(path, column_codec(values, options), mask)
