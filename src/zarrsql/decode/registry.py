"""The one place a convention's record becomes a reader: encoding record type → decoder.

Conventions describe (`zarrsql.conventions.records`), decode decides. `DECODERS` maps each
record type to a function `(record, store, options) -> Codec`; a decoder may read small
parts once (categories, sparse pointers). A plain `ArrayMeta` is read by the CF rules.
A new encoding adds its record and one entry here; a new convention that reuses the
existing encodings adds nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zarrsql.conventions import records as r
from zarrsql.decode.characters import character_codec
from zarrsql.decode.columns import DecodeOptions, column_codec
from zarrsql.decode.encodings import categorical_codec, nullable_codec
from zarrsql.decode.geometry import point_codec, ragged_codec
from zarrsql.decode.lists import list_codec
from zarrsql.decode.sparse import dense_codec
from zarrsql.decode.table_columns import (
    FixedListCodec,
    StringSentinelCodec,
    fixed_list_logical,
    inline_categorical,
)
from zarrsql.decode.variables import Codec, PlainCodec, Variable
from zarrsql.errors import UnsupportedError
from zarrsql.store import Store


def _categorical(rec: r.Categorical, store: Store, options: DecodeOptions) -> Codec:
    return categorical_codec(rec.path, rec.codes, rec.categories, ordered=rec.ordered, store=store, options=options)


def _inline_categorical(rec: r.InlineCategorical, store: Store, options: DecodeOptions) -> Codec:
    values = column_codec(rec.array, options)
    return inline_categorical(
        rec.column, rec.array, values, list(rec.categories), ordered=rec.ordered, zarr_fill=options.zarr_fill_missing
    )


def _nullable(rec: r.Nullable, store: Store, options: DecodeOptions) -> Codec:
    return nullable_codec(rec.path, rec.values, rec.mask, options)


def _string_sentinel(rec: r.StringSentinel, store: Store, options: DecodeOptions) -> Codec:
    return StringSentinelCodec(column_codec(rec.array, options), rec.missing)


def _fixed_list(rec: r.FixedListArray, store: Store, options: DecodeOptions) -> Codec:
    values = column_codec(rec.array, options)
    return FixedListCodec(values, fixed_list_logical(values.logical, rec.array.shape[1:]))


def _characters(rec: r.CharacterArray, store: Store, options: DecodeOptions) -> Codec:
    return character_codec(rec)


def _offset_list(rec: r.OffsetList, store: Store, options: DecodeOptions) -> Codec:
    return list_codec(rec, options)


def _point(rec: r.PointArray, store: Store, options: DecodeOptions) -> Codec:
    return point_codec(rec.array, column_codec(rec.array, options), rec.axes, options.geometry)


def _ragged(rec: r.RaggedGeometry, store: Store, options: DecodeOptions) -> Codec:
    return ragged_codec(
        rec.column, rec.path, rec.coords, rec.geom_offsets, rec.ring_offsets, rec.axes, options.geometry
    )


def _sparse(rec: r.SparseMatrix, store: Store, options: DecodeOptions) -> Codec:
    return dense_codec(rec, store, options)


DECODERS: dict[type, Callable[[Any, Store, DecodeOptions], Codec]] = {
    r.Categorical: _categorical,
    r.InlineCategorical: _inline_categorical,
    r.Nullable: _nullable,
    r.StringSentinel: _string_sentinel,
    r.FixedListArray: _fixed_list,
    r.CharacterArray: _characters,
    r.OffsetList: _offset_list,
    r.PointArray: _point,
    r.RaggedGeometry: _ragged,
    r.SparseMatrix: _sparse,
}
"""Every encoding record type with the decoder that reads it."""


def codec_for(var: Variable, store: Store, options: DecodeOptions) -> Codec:
    """The codec that reads `var`: the CF rules for a plain array, else its encoding's decoder."""
    if not isinstance(var, r.EncodedVariable):
        return PlainCodec(column_codec(var, options))
    decoder = DECODERS.get(type(var.encoding))
    if decoder is None:
        raise UnsupportedError(
            f"column '{var.path}' has the encoding {type(var.encoding).__name__}, which no decoder reads; "
            "register one in zarrsql.decode.registry.DECODERS"
        )
    return decoder(var.encoding, store, options)
