"""Array and group metadata records, parsed from v2 (`.zarray`/`.zattrs`) and v3 (`zarr.json`).

Parsing validates once and yields frozen records: `ArrayMeta` and `GroupMeta`. A document that
is not valid Zarr raises `MetadataError` naming the key; an array whose data type is not
supported still parses (its `dtype.kind` is "unsupported") so that listings can show it.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from zarrsql.errors import MetadataError
from zarrsql.metadata.dtypes import DType, parse_v2_dtype, parse_v3_dtype

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ArrayMeta:
    """One array of a store: shape, chunking, type, fill value, codecs and attributes.

    `path` is the array's '/'-joined path from the store root (no leading slash).
    `dimension_names` is None when the array declares none; entries may be None.
    `codecs` holds the v3 codec list, or for v2 `{"compressor": ..., "filters": [...]}`.
    """

    path: str
    zarr_format: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: DType
    fill_value: Any
    order: str
    codecs: Any
    dimension_names: tuple[str | None, ...] | None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    separator: str = "/"
    v2_keys: bool = False

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def chunk_key(self, index: tuple[int, ...]) -> str:
        """The store key of the chunk at grid position `index`."""
        if self.v2_keys:
            body = self.separator.join(str(i) for i in index) if index else "0"
        else:
            body = "c" + "".join(self.separator + str(i) for i in index)
        return f"{self.path}/{body}" if self.path else body


@dataclass(frozen=True, slots=True)
class GroupMeta:
    """A group: its path ('' for the root), Zarr format and attributes."""

    path: str
    zarr_format: int
    attrs: Mapping[str, Any] = field(default_factory=dict)


def _int_tuple(value: Any, what: str, where: str, *, minimum: int = 0) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise MetadataError(f"{where}: {what} must be a list of integers >= {minimum}, got {value!r}")
    return tuple(value)


_V3_CODECS = {"bytes", "transpose", "vlen-utf8", "vlen-bytes", "gzip", "zstd", "blosc", "crc32c", "sharding_indexed"}


def _numcodecs_known(codec_id: Any) -> bool:
    from numcodecs.registry import codec_registry

    return isinstance(codec_id, str) and codec_id in codec_registry


def _v3_codec_problem(codecs: Any) -> str | None:
    """Why the v3 codec list cannot be decoded here, or None."""
    if not isinstance(codecs, list):
        return "its codecs are not a list"
    for c in codecs:
        name = c.get("name") if isinstance(c, dict) else c
        if not isinstance(name, str):
            return f"codec {c!r} has no name"
        if name == "sharding_indexed":
            config = c.get("configuration") or {}
            inner = _v3_codec_problem(config.get("codecs", [])) or _v3_codec_problem(config.get("index_codecs", []))
            if inner:
                return inner
        elif name not in _V3_CODECS and not (name.startswith("numcodecs.") and _numcodecs_known(name[10:])):
            return f"codec '{name}' is not supported"
    return None


def _v2_codec_problem(compressor: Any, filters: Any) -> str | None:
    for c in ([compressor] if compressor else []) + list(filters or []):
        if not isinstance(c, dict) or not _numcodecs_known(c.get("id")):
            return f"codec {c.get('id') if isinstance(c, dict) else c!r} is not supported"
    return None


def _unsupported_codecs(dtype: DType, problem: str | None) -> DType:
    if problem is None or not dtype.supported:
        return dtype
    return DType(dtype.name, "unsupported", None, reason=f"{problem}; install or choose another codec")


def _float_from_json(value: Any, dt: np.dtype) -> Any:
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if value in special:
            return dt.type(special[value])
        if value.startswith("0x"):
            raw = int(value, 16).to_bytes(dt.itemsize, "big")
            return np.frombuffer(raw, dtype=dt.newbyteorder(">"))[0].astype(dt)
        raise ValueError(value)
    return dt.type(value)


def parse_fill_value(value: Any, dtype: DType, *, zarr_format: int) -> Any:
    """The array's fill value as a numpy scalar (or str/bytes), None where there is none."""
    if value is None or not dtype.supported:
        return None
    dt = dtype.numpy
    try:
        if dtype.kind == "string":
            return value if isinstance(value, str) else None
        if dtype.kind == "fixed_bytes":
            if zarr_format == 2 and isinstance(value, str):
                return base64.b64decode(value)
            return value.encode() if isinstance(value, str) else None
        if dtype.kind == "fixed_unicode":
            return value if isinstance(value, str) else None
        if dtype.kind == "bool":
            return np.bool_(bool(value))
        if dtype.kind == "float":
            return _float_from_json(value, dt)
        if dtype.kind in ("datetime", "timedelta"):
            if value == "NaT":
                return dt.type("NaT")
            return np.array(int(value), dtype=np.int64).view(dt)[()]
        return dt.type(value)
    except (ValueError, TypeError, OverflowError):
        return None


def _dimension_names(value: Any, ndim: int, where: str) -> tuple[str | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != ndim or not all(v is None or isinstance(v, str) for v in value):
        raise MetadataError(f"{where}: dimension names {value!r} do not match the array's {ndim} axes")
    return tuple(v if v else None for v in value)


def attribute_dims_problem(value: Any, ndim: int) -> str | None:
    """Why a v3 array's `_ARRAY_DIMENSIONS` attribute cannot name its axes, or None when it can.

    Some converters write xarray's v2 attribute into v3 arrays instead of `dimension_names`;
    it names the axes only as a list of one non-empty string per axis.
    """
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        return f"its _ARRAY_DIMENSIONS attribute {value!r} is not a list of non-empty strings"
    if len(value) != ndim:
        return f"its _ARRAY_DIMENSIONS attribute {value!r} names {len(value)} axes but the array has {ndim}"
    return None


def _v3_dimension_names(doc: Mapping[str, Any], ndim: int, where: str) -> tuple[str | None, ...] | None:
    """`dimension_names`, else a valid `_ARRAY_DIMENSIONS` attribute, else None (unnamed)."""
    if doc.get("dimension_names") is not None:
        return _dimension_names(doc.get("dimension_names"), ndim, where)
    value = (doc.get("attributes") or {}).get("_ARRAY_DIMENSIONS")
    if value is None or attribute_dims_problem(value, ndim) is not None:
        return None
    return tuple(value)


def parse_v3_array(path: str, doc: Mapping[str, Any]) -> ArrayMeta:
    """Parse a v3 `zarr.json` of node type array."""
    where = f"array '{path or '/'}'"
    shape = _int_tuple(doc.get("shape"), "shape", where)
    grid = doc.get("chunk_grid") or {}
    if grid.get("name") != "regular":
        raise MetadataError(f"{where}: only the regular chunk grid is supported, got {grid.get('name')!r}")
    chunks = _int_tuple((grid.get("configuration") or {}).get("chunk_shape"), "chunk_shape", where, minimum=1)
    if len(chunks) != len(shape):
        raise MetadataError(f"{where}: chunk_shape {chunks} does not match shape {shape}")
    dtype = _unsupported_codecs(parse_v3_dtype(doc.get("data_type")), _v3_codec_problem(doc.get("codecs") or []))
    key_enc = doc.get("chunk_key_encoding") or {"name": "default"}
    sep = (key_enc.get("configuration") or {}).get("separator")
    v2_keys = key_enc.get("name") == "v2"
    attrs = doc.get("attributes") or {}
    return ArrayMeta(
        path=path,
        zarr_format=3,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=parse_fill_value(doc.get("fill_value"), dtype, zarr_format=3),
        order="C",
        codecs=list(doc.get("codecs") or []),
        dimension_names=_v3_dimension_names(doc, len(shape), where),
        attrs=MappingProxyType(dict(attrs)),
        separator=sep or ("." if v2_keys else "/"),
        v2_keys=v2_keys,
    )


def parse_v2_array(path: str, zarray: Mapping[str, Any], zattrs: Mapping[str, Any]) -> ArrayMeta:
    """Parse a v2 `.zarray` with its `.zattrs` (dimension names come from `_ARRAY_DIMENSIONS`)."""
    where = f"array '{path or '/'}'"
    shape = _int_tuple(zarray.get("shape"), "shape", where)
    chunks = _int_tuple(zarray.get("chunks"), "chunks", where, minimum=1)
    if len(chunks) != len(shape):
        raise MetadataError(f"{where}: chunks {chunks} do not match shape {shape}")
    filters = zarray.get("filters") or []
    dtype = _unsupported_codecs(
        parse_v2_dtype(zarray.get("dtype"), filters), _v2_codec_problem(zarray.get("compressor"), filters)
    )
    attrs = dict(zattrs)
    dims = attrs.pop("_ARRAY_DIMENSIONS", None)
    return ArrayMeta(
        path=path,
        zarr_format=2,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=parse_fill_value(zarray.get("fill_value"), dtype, zarr_format=2),
        order=zarray.get("order", "C"),
        codecs={"compressor": zarray.get("compressor"), "filters": filters},
        dimension_names=_dimension_names(dims, len(shape), where),
        attrs=MappingProxyType(attrs),
        separator=zarray.get("dimension_separator") or ".",
        v2_keys=True,
    )
