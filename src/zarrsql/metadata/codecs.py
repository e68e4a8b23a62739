"""Codec lists of an array's metadata: checked for JSON shape, and judged decodable or not.

Two questions with two answers. A codec list of the wrong shape (codecs that are not a list,
a codec without a name, a configuration that is not an object, a transpose order that is not
a permutation of the axes) is invalid metadata: `check_v3_codecs` / `check_v2_codecs` raise
`MetadataError`, naming the array's document. A well-formed list naming a codec this reader
has no decoder for is valid Zarr that zarrsql cannot read: `v3_codec_problem` /
`v2_codec_problem` return the reason, and the array is listed as unsupported.

After the checks, decoding (decode/chunks.py) may rely on: every codec is an object with a
string `name` (v3) or `id` (v2) and an object `configuration` (or none), and the
configuration fields it reads (`endian`, `order`, a shard's `chunk_shape`, `codecs`,
`index_codecs`, `index_location`) have the right types.
"""

from __future__ import annotations

from typing import Any

from zarrsql.errors import MetadataError
from zarrsql.metadata.documents import expect_object, field_choice, field_list, field_object, wrong_type

_V3_CODECS = {"bytes", "transpose", "vlen-utf8", "vlen-bytes", "gzip", "zstd", "blosc", "crc32c", "sharding_indexed"}
_ARRAY_TO_BYTES = {"bytes", "vlen-utf8", "vlen-bytes", "sharding_indexed"}


def _numcodecs_known(codec_id: Any) -> bool:
    from numcodecs.registry import codec_registry

    return isinstance(codec_id, str) and codec_id in codec_registry


def _int_list(value: Any, where: str, what: str, *, length: int, minimum: int) -> list[int]:
    ok = isinstance(value, list) and len(value) == length
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value):
        raise wrong_type(where, what, f"a list of {length} integers >= {minimum}", value)
    return value


def _check_transpose(config: dict[str, Any], ndim: int, where: str) -> None:
    order = _int_list(config.get("order"), where, "the transpose codec's 'order'", length=ndim, minimum=0)
    if sorted(order) != list(range(ndim)):
        raise MetadataError(f"{where}: the transpose codec's order {order} is not a permutation of 0..{ndim - 1}")


def _check_sharding(config: dict[str, Any], ndim: int, where: str) -> dict[str, Any]:
    _int_list(config.get("chunk_shape"), where, "the sharding codec's 'chunk_shape'", length=ndim, minimum=1)
    field_choice(config, "index_location", where, ("start", "end"), "end")
    return {
        **config,
        "codecs": check_v3_codecs(field_list(config, "codecs", where), ndim, where),
        "index_codecs": check_v3_codecs(field_list(config, "index_codecs", where), ndim + 1, where),
    }


def _check_v3_codec(codec: Any, ndim: int, where: str) -> dict[str, Any]:
    if isinstance(codec, str):  # a bare name: a codec without configuration
        codec = {"name": codec}
    codec = expect_object(codec, where, "each codec")
    if not isinstance(codec.get("name"), str):
        raise wrong_type(where, "a codec's 'name'", "a string", codec.get("name"))
    config = field_object(codec, "configuration", where)
    name = codec["name"]
    if name == "bytes":
        field_choice(config, "endian", where, ("little", "big"), "little")
    elif name == "transpose":
        _check_transpose(config, ndim, where)
    elif name == "sharding_indexed":
        config = _check_sharding(config, ndim, where)
    return {**codec, "configuration": config}


def check_v3_codecs(codecs: Any, ndim: int, where: str) -> list[dict[str, Any]]:
    """`codecs` as a list of codec objects (a bare name becomes `{"name": ...}`, a missing
    configuration `{}`); `MetadataError` unless it is a well-formed v3 list for `ndim` axes."""
    if not isinstance(codecs, list):
        raise wrong_type(where, "'codecs'", "a JSON array of codecs", codecs)
    checked = [_check_v3_codec(c, ndim, where) for c in codecs]
    names = [c["name"] for c in checked]
    # every name known and none turns the array into bytes: no chunk can be decoded (an
    # unknown name may be such a codec; v3_codec_problem reports it)
    if all(n in _V3_CODECS for n in names) and not any(n in _ARRAY_TO_BYTES for n in names):
        raise MetadataError(
            f"{where}: the codecs {names} hold no array-to-bytes codec; Zarr v3 requires exactly one "
            f"({', '.join(sorted(_ARRAY_TO_BYTES))}): rewrite the array's metadata"
        )
    return checked


def v3_codec_problem(codecs: list[dict[str, Any]]) -> str | None:
    """Why a (checked) v3 codec list cannot be decoded here, or None."""
    for c in codecs:
        name = c["name"]
        if name == "sharding_indexed":
            config = c["configuration"]
            inner = v3_codec_problem(config["codecs"]) or v3_codec_problem(config["index_codecs"])
            if inner:
                return inner
        elif name not in _V3_CODECS and not (name.startswith("numcodecs.") and _numcodecs_known(name[10:])):
            return f"codec '{name}' is not supported"
    return None


def check_v2_codecs(compressor: Any, filters: Any, where: str) -> list[dict[str, Any]]:
    """Raise `MetadataError` unless `compressor` is null or a codec, and `filters` null or a
    list of codecs (each an object with a string `id`); return the filters as a list."""
    if compressor is not None:
        expect_object(compressor, where, "'compressor'")
        if not isinstance(compressor.get("id"), str):
            raise wrong_type(where, "the compressor's 'id'", "a string", compressor.get("id"))
    if filters is None:
        return []
    if not isinstance(filters, list):
        raise wrong_type(where, "'filters'", "null or a JSON array of codecs", filters)
    for f in filters:
        expect_object(f, where, "each filter")
        if not isinstance(f.get("id"), str):
            raise wrong_type(where, "a filter's 'id'", "a string", f.get("id"))
    return filters


#: The codec id prefix store/hdf5.py gives a dataset whose HDF5 filter kerchunk cannot express.
HDF5_FILTER = "hdf5:"
#: The codec id store/hdf5.py gives a dataset kerchunk left out without such a filter.
HDF5_UNDESCRIBED = "hdf5-undescribed"
_UNDESCRIBED_PROBLEM = "kerchunk could not describe this HDF5 dataset, so it cannot be read in place"
#: The codec id store/hdf5.py gives a dataset whose values lie outside the file: external raw
#: storage (`H5Pset_external`) or a virtual dataset (VDS) mapping other files.
HDF5_ELSEWHERE = "hdf5-elsewhere"
_ELSEWHERE_PROBLEM = (
    "this HDF5 dataset keeps its values outside the file (external raw storage or a virtual dataset), "
    "which cannot be read in place"
)


def codec_fix(problem: str) -> str:
    """What to do about a codec `problem` (an HDF5 filter has no codec to install)."""
    if problem.startswith("the HDF5 filter"):
        return "rewrite the dataset with gzip, shuffle or no filter (e.g. h5repack -f GZIP=4), or convert the file"
    if problem in (_UNDESCRIBED_PROBLEM, _ELSEWHERE_PROBLEM):
        return "convert the file once, e.g. xarray.open_dataset(...).to_zarr(...)"
    return "install the codec"


def v2_codec_problem(compressor: dict[str, Any] | None, filters: list[dict[str, Any]]) -> str | None:
    """Why (checked) v2 codecs cannot be decoded here, or None."""
    for c in ([compressor] if compressor else []) + filters:
        if c["id"] == HDF5_UNDESCRIBED:
            return _UNDESCRIBED_PROBLEM
        if c["id"] == HDF5_ELSEWHERE:
            return _ELSEWHERE_PROBLEM
        if c["id"].startswith(HDF5_FILTER):
            name = c["id"][len(HDF5_FILTER) :]
            return f"the HDF5 filter '{name}' has no Zarr codec, so its chunks cannot be read in place"
        if not _numcodecs_known(c["id"]):
            return f"codec '{c['id']}' is not supported"
    return None
