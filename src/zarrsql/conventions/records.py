"""What a convention says about a column: one frozen record per encoding, no behaviour.

A convention reads metadata and returns these records; `zarrsql.decode.registry` turns each
into the codec that reads it. A record holds array metadata and parameters only (never a
function or a reader), so the seam between "what the store says" and "how to read it" is
plain data: it can be compared, listed, cached and tested without reading a byte.

A table's data variable is an `ArrayMeta` (a plain array, decoded by the CF rules alone) or
an `EncodedVariable` whose `encoding` is one of the records below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zarrsql.metadata.arrays import ArrayMeta

#: Geometry coordinate axis names a convention may declare (in canonical order).
GEOMETRY_AXES = ("x", "y", "z", "m")


@dataclass(frozen=True, slots=True)
class Categorical:
    """Integer `codes` into a `categories` array (AnnData's and the table convention's
    categorical sub-group); -1 is NULL."""

    path: str
    codes: ArrayMeta
    categories: ArrayMeta
    ordered: bool = False


@dataclass(frozen=True, slots=True)
class InlineCategorical:
    """A plain array with its categories in an attribute: codes when it is an integer
    array, else the category values themselves."""

    column: str
    array: ArrayMeta
    categories: tuple[Any, ...]
    ordered: bool = False


@dataclass(frozen=True, slots=True)
class Nullable:
    """`values` with a boolean `mask` beside them: NULL where the mask is true."""

    path: str
    values: ArrayMeta
    mask: ArrayMeta


@dataclass(frozen=True, slots=True)
class StringSentinel:
    """A string array whose string `missing` value means NULL."""

    array: ArrayMeta
    missing: str


@dataclass(frozen=True, slots=True)
class FixedListArray:
    """An (N, K, ...) array: one fixed-size list per row."""

    array: ArrayMeta


def known_encoding(name: object) -> bool:
    """Whether `name` is a text encoding Python decodes bytes to text with (an `_Encoding`
    attribute); a bytes-to-bytes codec such as 'hex' is not one."""
    if not isinstance(name, str):
        return False
    try:
        b"A".decode(name, "replace")  # b"" would decode under any name
    except LookupError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class CharacterArray:
    """A CF character array (an `S1` array, NetCDF's `char`): its last dimension holds the
    characters of one fixed-width string per cell of the others, which the column has as
    its rows; `encoding` is the text encoding (the `_Encoding` attribute, else UTF-8)."""

    array: ArrayMeta
    encoding: str = "utf-8"


@dataclass(frozen=True, slots=True)
class OffsetList:
    """A variable-length list per row: row i holds `values[offsets[i]:offsets[i + 1]]`
    (H5Col's list columns); `offsets` has one entry more than the column has rows."""

    column: str
    path: str
    offsets: ArrayMeta
    values: ArrayMeta


@dataclass(frozen=True, slots=True)
class PointArray:
    """An (N, D) array of point coordinates named by `axes`."""

    array: ArrayMeta
    axes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RaggedGeometry:
    """Linestrings (`ring_offsets` None) or polygons: `coords` (M, D) indexed by offsets."""

    column: str
    path: str
    coords: ArrayMeta
    geom_offsets: ArrayMeta
    ring_offsets: ArrayMeta | None
    axes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SparseMatrix:
    """A CSR or CSC matrix of `shape` stored in three arrays under `path`."""

    path: str
    format: str  # "csr" or "csc"
    shape: tuple[int, int]
    data: ArrayMeta
    indices: ArrayMeta
    indptr: ArrayMeta

    @property
    def axis(self) -> int:
        """The compressed axis: 0 for CSR (rows), 1 for CSC (columns)."""
        return 0 if self.format == "csr" else 1


Encoding = (
    Categorical
    | InlineCategorical
    | Nullable
    | StringSentinel
    | FixedListArray
    | CharacterArray
    | OffsetList
    | PointArray
    | RaggedGeometry
    | SparseMatrix
)
"""The closed set of encodings a convention may return (a plain array is its `ArrayMeta`)."""


@dataclass(frozen=True, slots=True)
class EncodedVariable:
    """A convention's column that needs more than the plain rules: its place in the table
    (`shape`, the `chunks` work units are cut by), how it is stored (`encoding`), the
    attributes it lists, why it cannot be read (`problem`, or None) and the arrays it
    reads (`parts`, for listings)."""

    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    encoding: Encoding
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
