"""Plain-array columns of the Zarr table convention that need more than a `ColumnCodec`.

- A fixed multi-valued column, shape (N, K, ...): one fixed-size list per row (`FixedList`,
  nested for each further axis); every value is decoded by the array's own rules, so a
  sentinel or NaN (with `nan_as_null`) is a NULL value inside the list, not a NULL row.
- A lightweight categorical (a `categories` attribute): an integer array holds codes into
  the categories (-1, or the array's sentinel, is NULL); any other array holds the category
  values themselves. Distinct string categories make an ENUM. A code outside the categories,
  or a value that is not one of them, is refused with the column's name.
- A string column whose `missing_value` is a string (numeric sentinels, "NaN" included, are
  already the `ColumnCodec`'s): NULL where the value equals it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.decode.cells import Cells
from zarrsql.decode.columns import ColumnCodec
from zarrsql.decode.encodings import read_cells
from zarrsql.decode.logical import Enum, FixedList, Logical
from zarrsql.decode.sentinel import Sentinel, find_sentinel
from zarrsql.errors import DecodeError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import Store


def fixed_list_logical(inner: str, trailing: tuple[int, ...]) -> FixedList:
    """The list type of values with these trailing axes: `inner[K]`, `inner[L][K]`, ..."""
    logical: str | FixedList = inner
    for size in reversed(trailing):
        logical = FixedList(logical, size)
    assert isinstance(logical, FixedList)
    return logical


@dataclass(frozen=True)
class FixedListCodec:
    """An (N, K, ...) array: the unit's rows with their trailing axes, values decoded."""

    values: ColumnCodec
    logical: FixedList

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        return self.values.decode(read_cells(store, self.values.array, unit))


@dataclass(frozen=True)
class StringSentinelCodec:
    """A string column with a string `missing_value`."""

    values: ColumnCodec
    missing: str

    @property
    def logical(self) -> Logical:
        return self.values.logical

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        values, nulls = self.values.decode(read_cells(store, self.values.array, unit))
        hit = np.asarray(values == self.missing, dtype=bool)
        nulls = hit if nulls is None else (nulls | hit)
        return values, nulls if nulls.any() else None


def _category_values(categories: list[Any]) -> tuple[np.ndarray, Logical]:
    """The categories as the column's values, and the column type they give."""
    if categories and all(isinstance(c, str) for c in categories) and len(set(categories)) == len(categories):
        return np.array(categories, dtype=object), Enum(tuple(categories))
    values = np.array(categories)
    if values.dtype.kind == "b":
        return values, "bool"
    if values.dtype.kind in "iu":
        return values.astype(np.int64), "int64"
    if values.dtype.kind == "f":
        return values.astype(np.float64), "float64"
    return np.array([None if c is None else str(c) for c in categories], dtype=object), "string"


@dataclass(frozen=True)
class InlineCategoricalCodec:
    """A plain array with a `categories` attribute (see the module docstring)."""

    column: str
    array: ArrayMeta
    values: ColumnCodec
    categories: np.ndarray
    lookup: dict[Any, int] | None  # value → code, when the array holds the values themselves
    sentinel: Sentinel | None
    logical: Logical

    def _codes(self, raw: np.ndarray) -> np.ndarray:
        if self.lookup is None:
            codes = raw.astype(np.int64)
            if self.sentinel is not None:
                codes[self.sentinel.mask(raw)] = -1
            return codes
        values, nulls = self.values.decode(raw)
        codes = np.fromiter((self.lookup.get(v, -2) for v in values.tolist()), np.int64, len(values))
        if nulls is not None:
            codes[nulls] = -1
        return codes

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        raw = read_cells(store, self.array, unit)
        codes = self._codes(raw)
        n = len(self.categories)
        bad = (codes < -1) | (codes >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            found = f"code {int(codes[i])}" if self.lookup is None else f"the value {raw[i]!r}"
            raise DecodeError(
                f"categorical column '{self.column}' (array '/{self.array.path}') holds {found}, which is not "
                f"one of its {n} categories; the table convention requires codes in [-1, {n}) "
                "(or values from the categories attribute): rewrite the column or its categories"
            )
        nulls = codes < 0
        any_null = bool(nulls.any())
        if isinstance(self.logical, Enum):
            return codes.astype(np.int32), nulls if any_null else None
        values = self.categories[np.where(nulls, 0, codes)] if n else np.zeros(len(codes), self.categories.dtype)
        return values, nulls if any_null else None


def inline_categorical(
    column: str, array: ArrayMeta, values: ColumnCodec, categories: list[Any], *, ordered: bool, zarr_fill: bool = True
) -> InlineCategoricalCodec:
    """The codec of a lightweight categorical: codes when `array` is integer, else values."""
    cats, logical = _category_values(categories)
    if isinstance(logical, Enum):
        logical = Enum(logical.categories, ordered)
    lookup = None
    if array.dtype.kind not in ("int", "uint"):
        lookup = {c: k for k, c in enumerate(categories) if c is not None}
    return InlineCategoricalCodec(
        column, array, values, cats, lookup, find_sentinel(array, zarr_fill=zarr_fill), logical
    )
