"""Array and group metadata records, parsed from v2 (`.zarray`/`.zattrs`) and v3 (`zarr.json`).

Parsing validates once and yields frozen records: `ArrayMeta` and `GroupMeta`. A document that
is not valid Zarr — a field missing or of the wrong JSON type, a shape of more elements than a
table can count, a fill value its type cannot hold — raises `MetadataError` naming the array
and its document's key. A valid array this reader cannot decode (a data type, codec, chunk
grid or key encoding it lacks, chunks too large for memory) still parses, with `dtype.kind`
"unsupported" and the reason, so that listings can show it.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from zarrsql.errors import MetadataError
from zarrsql.metadata.codecs import check_v2_codecs, check_v3_codecs, codec_fix, v2_codec_problem, v3_codec_problem
from zarrsql.metadata.documents import expect_object, field_choice, field_list, field_object, shown
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
    zarr_format: Literal[2, 3]
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: DType
    fill_value: Any
    order: Literal["C", "F"]
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


#: The most elements an array may declare: a table's row count is a signed 64-bit integer.
MAX_ELEMENTS = 2**63 - 1
#: The largest decoded chunk read into memory (2 GiB, also Blosc's own frame limit). Larger
#: chunks (or absurd declared chunk shapes) are listed as unsupported instead of allocated.
MAX_CHUNK_BYTES = 2**31


def _where(path: str, key: str) -> str:
    return f"array '{path or '/'}' ('{key}')"


def _int_tuple(value: Any, what: str, where: str, *, minimum: int = 0) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and minimum <= v <= MAX_ELEMENTS for v in value
    ):
        raise MetadataError(f"{where}: {what} must be a list of integers from {minimum} to 2**63-1, got {shown(value)}")
    return tuple(value)


def _shape(value: Any, where: str) -> tuple[int, ...]:
    shape = _int_tuple(value, "shape", where)
    if math.prod(n for n in shape if n) > MAX_ELEMENTS:
        raise MetadataError(
            f"{where}: shape {list(shape)} has more than 2**63-1 elements, more rows than a table holds"
        )
    return shape


def _check_format(doc: Mapping[str, Any], zarr_format: int, where: str) -> None:
    """`zarr_format`, when given, must be this document's format (a v2 document in a v3 place, say)."""
    value = doc.get("zarr_format", zarr_format)
    if isinstance(value, bool) or value != zarr_format:
        raise MetadataError(f"{where}: zarr_format must be {zarr_format}, got {shown(value)}")


def _chunk_size_problem(chunks: tuple[int, ...], dtype: DType) -> str | None:
    itemsize = dtype.numpy.itemsize if dtype.numpy is not None else 1
    size = math.prod(chunks) * max(itemsize, 1)
    if size > MAX_CHUNK_BYTES:
        return f"its chunks of {list(chunks)} take {size} bytes, more than the {MAX_CHUNK_BYTES} read into memory"
    return None


def _unsupported(dtype: DType, problem: str | None, fix: str) -> DType:
    if problem is None or not dtype.supported:
        return dtype
    return DType(dtype.name, "unsupported", None, reason=f"{problem}; {fix}")


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


def _numeric_fill(value: Any, dtype: DType, dt: np.dtype) -> Any:
    if dtype.kind == "bool":
        if not isinstance(value, (bool, int)):
            raise TypeError(value)
        return np.bool_(bool(value))
    if dtype.kind == "float":
        return _float_from_json(value, dt)
    if dtype.kind in ("datetime", "timedelta"):
        if value == "NaT":
            return dt.type("NaT")
        return np.array(int(value), dtype=np.int64).view(dt)[()]
    if isinstance(value, float) and not value.is_integer():
        # numpy would truncate 1.5 to 1, and every stored 1 would then read as missing
        raise ValueError(value)
    return dt.type(value)


def parse_fill_value(value: Any, dtype: DType, *, zarr_format: int, where: str = "array") -> Any:
    """The array's fill value as a numpy scalar (or str/bytes), None where there is none.

    A fill value that is not a JSON scalar, or that a numeric type cannot hold, raises
    `MetadataError`: reading missing chunks as some other value would give wrong rows. A
    string type's non-string fill value reads as none (writers put 0 or "" there). A
    fixed-bytes fill value is base64 text in either `zarr_format` (as zarr-python writes it).
    """
    if value is None or not dtype.supported:
        return None  # an unsupported type's fill value (a complex pair, say) is never used
    if isinstance(value, (list, dict)):
        raise MetadataError(f"{where}: fill_value must be a JSON number, string, boolean or null, got {shown(value)}")
    dt = dtype.numpy
    assert dt is not None  # a supported type has one
    try:
        if dtype.kind == "fixed_bytes":
            # base64 in both formats: v2's `.zarray` and v3's `null_terminated_bytes` alike
            # (zarr-python writes and reads it so in both; the text itself is never the value)
            return base64.b64decode(value, validate=True) if isinstance(value, str) else None
        if dtype.kind in ("string", "fixed_unicode"):
            return value if isinstance(value, str) else None
        return _numeric_fill(value, dtype, dt)
    except (ValueError, TypeError, OverflowError) as err:
        raise MetadataError(f"{where}: fill_value {shown(value)} is not a value of data type {dtype.name}") from err


def _dimension_names(value: Any, ndim: int, where: str) -> tuple[str | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != ndim:
        raise MetadataError(f"{where}: dimension names {value!r} do not match the array's {ndim} axes")
    wrong = [v for v in value if v is not None and not isinstance(v, str)]
    if wrong:
        raise MetadataError(
            f"{where}: dimension names {value!r} hold {wrong[0]!r}, which is not a string; a dimension name "
            "is a string (or null for an unnamed axis)"
        )
    return tuple(v if v else None for v in value)


def _scoped_dimension_names(path: str, names: tuple[str | None, ...] | None) -> tuple[str | None, ...] | None:
    """`names` of the v2 array at `path` with each group-qualified name made plain.

    kerchunk names a NetCDF4/HDF5 dimension by its dimension scale's path ('grp/inner/k'),
    where netCDF (and xarray reading the file) name it 'k': a dimension is defined in a
    group and seen, by its last name, in that group and every group below. So a name whose
    parent is the array's own group or one of its ancestors becomes its last segment; any
    other name with a '/' (no group of the array's scope) is kept as written, and so are two
    names of one array that would become the same.
    """
    if names is None:
        return None
    groups = path.split("/")[:-1]
    scope = {"/".join(groups[:depth]) for depth in range(len(groups) + 1)}  # '' is the root

    def plain(name: str | None) -> str | None:
        parent, _, last = (name or "").lstrip("/").rpartition("/")
        return last if name and "/" in name and last and parent in scope else name

    plain_names = tuple(plain(n) for n in names)
    if len({n for n in plain_names if n}) < len({n for n in names if n}):
        return names  # two dimensions of the array share a last name: keep them apart
    return plain_names


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


def _v3_dimension_names(
    doc: Mapping[str, Any], attrs: Mapping[str, Any], ndim: int, where: str
) -> tuple[str | None, ...] | None:
    """`dimension_names`, else a valid `_ARRAY_DIMENSIONS` attribute, else None (unnamed)."""
    if doc.get("dimension_names") is not None:
        return _dimension_names(doc.get("dimension_names"), ndim, where)
    value = attrs.get("_ARRAY_DIMENSIONS")
    if value is None or attribute_dims_problem(value, ndim) is not None:
        return None
    return tuple(value)


def _v3_chunk_shape(doc: Mapping[str, Any], shape: tuple[int, ...], where: str) -> tuple[tuple[int, ...], str | None]:
    """The regular grid's chunk shape, and why the grid is unsupported (then one chunk per array)."""
    grid = field_object(doc, "chunk_grid", where, required=True)
    name = grid.get("name")
    if not isinstance(name, str):
        raise MetadataError(f"{where}: chunk_grid must have a string 'name', got {shown(name)}")
    if name != "regular":
        return tuple(max(1, n) for n in shape), f"its chunk grid '{name}' is not supported"
    config = field_object(grid, "configuration", where, required=True)
    chunks = _int_tuple(config.get("chunk_shape"), "chunk_shape", where, minimum=1)
    if len(chunks) != len(shape):
        raise MetadataError(f"{where}: chunk_shape {list(chunks)} does not match shape {list(shape)}")
    return chunks, None


def _v3_keys(doc: Mapping[str, Any], where: str) -> tuple[str, bool, str | None]:
    """(separator, v2-style keys?, why the encoding is unsupported) of the chunk key encoding."""
    key_enc = field_object(doc, "chunk_key_encoding", where) or {"name": "default"}
    name = key_enc.get("name")
    if not isinstance(name, str):
        raise MetadataError(f"{where}: chunk_key_encoding must have a string 'name', got {shown(name)}")
    v2_keys = name == "v2"
    default = "." if v2_keys else "/"
    sep = field_choice(field_object(key_enc, "configuration", where), "separator", where, ("/", "."), default)
    problem = None if name in ("default", "v2") else f"its chunk key encoding '{name}' is not supported"
    return sep, v2_keys, problem


def _v3_dtype(doc: Mapping[str, Any], shape: tuple[int, ...], chunks: tuple[int, ...], where: str) -> DType:
    spec = doc.get("data_type")
    if not isinstance(spec, (str, dict)):
        raise MetadataError(f"{where}: data_type must be a name or an object with a name, got {shown(spec)}")
    dtype = parse_v3_dtype(spec)
    transformers = field_list(doc, "storage_transformers", where)
    dtype = _unsupported(dtype, "its storage transformers are not supported" if transformers else None, "rewrite it")
    return _unsupported(dtype, _chunk_size_problem(chunks, dtype), "rechunk it into smaller chunks")


def parse_v3_array(path: str, doc: Mapping[str, Any], key: str | None = None) -> ArrayMeta:
    """Parse a v3 `zarr.json` of node type array (`key` names the document in errors)."""
    where = _where(path, key or _join(path, "zarr.json"))
    _check_format(doc, 3, where)
    shape = _shape(doc.get("shape"), where)
    chunks, grid_problem = _v3_chunk_shape(doc, shape, where)
    codecs = check_v3_codecs(doc.get("codecs", []), len(shape), where)
    sep, v2_keys, keys_problem = _v3_keys(doc, where)
    dtype = _v3_dtype(doc, shape, chunks, where)
    dtype = _unsupported(dtype, grid_problem or keys_problem, "rewrite it with a regular grid and default keys")
    dtype = _unsupported(dtype, v3_codec_problem(codecs), "install or choose another codec")
    attrs = field_object(doc, "attributes", where)
    return ArrayMeta(
        path=path,
        zarr_format=3,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=parse_fill_value(doc.get("fill_value"), dtype, zarr_format=3, where=where),
        order="C",
        codecs=codecs,
        dimension_names=_v3_dimension_names(doc, attrs, len(shape), where),
        attrs=MappingProxyType(dict(attrs)),
        separator=sep,
        v2_keys=v2_keys,
    )


def _v2_dtype(zarray: Mapping[str, Any], filters: list[dict[str, Any]], chunks: tuple[int, ...], where: str) -> DType:
    spec = zarray.get("dtype")
    if not isinstance(spec, (str, list)):
        raise MetadataError(f"{where}: dtype must be a numpy type string or a list of fields, got {shown(spec)}")
    compressor = zarray.get("compressor")
    problem = v2_codec_problem(compressor, filters)
    dtype = _unsupported(parse_v2_dtype(spec, filters), problem, codec_fix(problem or ""))
    return _unsupported(dtype, _chunk_size_problem(chunks, dtype), "rechunk it into smaller chunks")


def parse_v2_array(path: str, zarray: Mapping[str, Any], zattrs: Any, key: str | None = None) -> ArrayMeta:
    """Parse a v2 `.zarray` with its `.zattrs` (dimension names come from `_ARRAY_DIMENSIONS`)."""
    where = _where(path, key or _join(path, ".zarray"))
    zarray = expect_object(zarray, where, "the document")
    _check_format(zarray, 2, where)
    shape = _shape(zarray.get("shape"), where)
    chunks = _int_tuple(zarray.get("chunks"), "chunks", where, minimum=1)
    if len(chunks) != len(shape):
        raise MetadataError(f"{where}: chunks {list(chunks)} do not match shape {list(shape)}")
    filters = check_v2_codecs(zarray.get("compressor"), zarray.get("filters"), where)
    dtype = _v2_dtype(zarray, filters, chunks, where)
    attrs_where = _where(path, _join(path, ".zattrs"))
    attrs = dict(expect_object({} if zattrs is None else zattrs, attrs_where, "the document"))
    dims = attrs.pop("_ARRAY_DIMENSIONS", None)
    return ArrayMeta(
        path=path,
        zarr_format=2,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=parse_fill_value(zarray.get("fill_value"), dtype, zarr_format=2, where=where),
        order=field_choice(zarray, "order", where, ("C", "F"), "C"),
        codecs={"compressor": zarray.get("compressor"), "filters": filters},
        dimension_names=_scoped_dimension_names(path, _dimension_names(dims, len(shape), attrs_where)),
        attrs=MappingProxyType(attrs),
        separator=field_choice(zarray, "dimension_separator", where, (".", "/"), "."),
        v2_keys=True,
    )


def parse_v3_group(path: str, doc: Mapping[str, Any], key: str | None = None) -> GroupMeta:
    """Parse a v3 `zarr.json` of node type group (its consolidated metadata is the tree's job)."""
    where = f"group '{path or '/'}' ('{key or _join(path, 'zarr.json')}')"
    _check_format(doc, 3, where)
    return GroupMeta(path, 3, dict(field_object(doc, "attributes", where)))


def parse_v2_group(path: str, zgroup: Any, zattrs: Any) -> GroupMeta:
    """Parse a v2 `.zgroup` with its `.zattrs` (either may come from `.zmetadata`)."""
    where = f"group '{path or '/'}' ('{_join(path, '.zgroup')}')"
    _check_format(expect_object(zgroup, where, "the document"), 2, where)
    attrs_where = f"group '{path or '/'}' ('{_join(path, '.zattrs')}')"
    attrs = expect_object({} if zattrs is None else zattrs, attrs_where, "the document")
    return GroupMeta(path, 2, dict(attrs))


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)
