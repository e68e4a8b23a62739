"""CF character arrays: an `S1` array whose last dimension holds the characters of one
fixed-width string per cell of its other dimensions (NetCDF's `char` variables, and how
xarray writes fixed-width bytes to NetCDF), read as one VARCHAR column.

The rules follow xarray's `CharacterArrayCoder` and the coders `decode_cf` applies after it:
1. the characters of a cell are joined into one string of the dimension's length; trailing
   NULs end it (NULs inside stay), and a dimension of length 0 gives empty strings;
2. a cell whose string equals a value of its `_FillValue` or `missing_value` attribute
   (trailing NULs ignored) is NULL; not when `_Encoding` is set, for xarray then compares
   the decoded text with the stored bytes and masks nothing. The Zarr `fill_value` is no
   sentinel here: kerchunk writes one for every NetCDF character array, whatever the file
   holds;
3. the bytes are text in the `_Encoding` attribute's encoding (UTF-8 without one, as other
   fixed-width bytes read); bytes that are not valid there read as U+FFFD, never failing a scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql.conventions.records import CharacterArray, known_encoding
from zarrsql.decode.cells import Cells
from zarrsql.decode.encodings import read_cells
from zarrsql.decode.logical import Logical
from zarrsql.errors import UnsupportedError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import Store


def _attr_bytes(value: Any) -> list[bytes]:
    """The strings of a `_FillValue`/`missing_value` attribute (one or a list) as UTF-8 bytes
    (how a NetCDF character attribute reaches the store's JSON); other values mask nothing."""
    items = value if isinstance(value, list) else [value]
    return [v.encode("utf-8") for v in items if isinstance(v, str)]


def character_sentinels(array: ArrayMeta) -> tuple[bytes, ...]:
    """The joined strings that read as NULL (rule 2 of the module docstring)."""
    attrs = array.attrs
    if "_Encoding" in attrs:
        return ()
    found = [b for key in ("_FillValue", "missing_value") if key in attrs for b in _attr_bytes(attrs[key])]
    return tuple(dict.fromkeys(b.rstrip(b"\0") for b in found))


def join_characters(chars: np.ndarray) -> np.ndarray:
    """Cells of `S1` characters along the last axis → fixed-width bytes, one per cell of the
    other axes (numpy's `S` type drops the trailing NULs of each)."""
    width = chars.shape[-1]
    if width == 0:
        return np.zeros(chars.shape[:-1], dtype="S1")
    return np.ascontiguousarray(chars).view(f"S{width}").reshape(chars.shape[:-1])


@dataclass(frozen=True)
class CharacterCodec:
    """A CF character array read as one string per cell of its other dimensions."""

    array: ArrayMeta
    encoding: str
    sentinels: tuple[bytes, ...]
    logical: Logical = "string"

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        return self.text(join_characters(read_cells(store, self.array, unit)))

    def text(self, joined: np.ndarray) -> tuple[Any, np.ndarray | None]:
        """Joined cells (`join_characters`) as text, with the cells its sentinels mark as nulls."""
        nulls = None
        for value in self.sentinels:
            hit = joined == value
            nulls = hit if nulls is None else (nulls | hit)
        text = np.char.decode(joined, self.encoding, errors="replace").astype(object)
        return text, nulls if nulls is not None and nulls.any() else None


def character_codec(record: CharacterArray) -> CharacterCodec:
    """The codec of a character array; an `_Encoding` Python does not know is refused."""
    if not known_encoding(record.encoding):
        raise UnsupportedError(
            f"the character array '{record.array.path}' has _Encoding {record.encoding!r}, which is no text "
            "encoding Python knows; fix the attribute (e.g. 'utf-8') or read its characters with "
            f"array_path := '{record.array.path}'"
        )
    return CharacterCodec(record.array, record.encoding, character_sentinels(record.array))
