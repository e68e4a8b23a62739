"""Column types beyond plain scalars, as plain records the engine adapter maps to its types.

A scalar column's type is a name ("float64", "string", "timestamp_us", ...). Encoded columns
use these records; each says what `Codec.read` returns for it:
- `Enum`: int32 codes into `categories` (NULL where masked); an SQL ENUM when the categories
  are distinct strings.
- `FixedList`: an (n, size, ...) array of `inner` values (a fixed multi-valued column; `inner`
  is a `FixedList` again for each further axis); nulls per row (n,) or per value (the
  values' shape).
- `Point`: an (n, len(axes)) float array; `LineString`: (offsets of length n+1, coords);
  `Polygon`: (geometry offsets n+1 into rings, ring offsets into coords, coords). Offsets
  start at 0 for the rows returned.
- `List`: a variable-length list of `inner` scalars per row: (offsets of length n+1 from 0,
  the flat values, their nulls or None); nulls per row.
- `WKB`: an object array of bytes (well-known binary geometry).
- `Labels`: int32 positions into a string coordinate's `values` (a VARCHAR column that never
  builds one Python string per row: AnnData's obs/var names over millions of entries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Enum:
    categories: tuple[str, ...]
    ordered: bool = False


@dataclass(frozen=True, slots=True)
class FixedList:
    inner: str | FixedList
    size: int


@dataclass(frozen=True, slots=True)
class List:
    inner: str


@dataclass(frozen=True, slots=True)
class Point:
    axes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LineString:
    axes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Polygon:
    axes: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Labels:
    """A string coordinate's values; rows hold positions into them (compared by identity)."""

    values: Any


WKB = "wkb"

Logical = str | Enum | FixedList | List | Point | LineString | Polygon | Labels
