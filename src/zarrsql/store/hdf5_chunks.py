"""References for HDF5 datasets kerchunk leaves out although their chunks can be read.

kerchunk 0.2 refuses a dataset with HDF5's fletcher32 checksum filter. The filter is plain:
each stored chunk is the (shuffled, deflated) bytes followed by a 4-byte Fletcher-32
checksum, which numcodecs' `fletcher32` codec checks and strips. So such a dataset is
described here from h5py's own chunk index: a v2 `.zarray` whose filters are, in order,
`shuffle`, `zlib` and `fletcher32` (decoded in reverse: the checksum is verified first), and
one `[url, offset, size]` reference per stored chunk. A chunk stored with one of its filters
skipped (HDF5's filter mask) cannot be described; the dataset is then left to the caller's
placeholder, listed as unsupported.

kerchunk also leaves out a dimension scale none of whose chunks is stored (a coordinate
variable never written): it reads as its HDF5 fill value everywhere, so it is described here
as an array without chunks (`unwritten_refs`), as HDF5 and xarray read it.
"""

from __future__ import annotations

import json
from typing import Any

#: Filters this module can describe, by h5py's name for them.
_KNOWN = {"shuffle", "gzip", "fletcher32"}
#: HDF5 and netCDF bookkeeping attributes, left out as kerchunk and h5netcdf leave them out.
_HIDDEN = {"DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid", "_Netcdf4Coordinates", "_nc3_strict"}


def _filters(ds: Any) -> list[dict[str, Any]] | None:
    names = {str(f) for f in ds._filters}
    if "fletcher32" not in names or not names <= _KNOWN or ds.scaleoffset:
        return None
    out: list[dict[str, Any]] = []
    if ds.shuffle:
        out.append({"id": "shuffle", "elementsize": ds.dtype.itemsize})
    if ds.compression == "gzip":
        out.append({"id": "zlib", "level": int(ds.compression_opts or 4)})
    out.append({"id": "fletcher32"})
    return out


def _dims(ds: Any) -> list[str]:
    """Dimension names as kerchunk writes them: the path of the axis's dimension scale (the
    dataset's own for a scale), which metadata/arrays.py makes plain within the group's scope."""
    import h5py

    names = []
    for i, scales in enumerate(ds.dims):
        if len(scales):
            names.append(scales[0].name.lstrip("/"))
        else:
            names.append(ds.name.lstrip("/") if h5py.h5ds.is_scale(ds.id) else f"phony_dim_{i}")
    return names


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "tolist"):
        value = value.tolist()
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return value
    return None


def _attrs(ds: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"_ARRAY_DIMENSIONS": _dims(ds)}
    for name, value in ds.attrs.items():
        if name in _HIDDEN:
            continue
        converted = _attr(value)
        if converted is not None:
            out[name] = converted
    return out


def _fill(ds: Any) -> Any:
    value = ds.fillvalue
    if value is None or ds.dtype.kind not in "biuf":
        return None
    value = value.item() if hasattr(value, "item") else value
    return "NaN" if isinstance(value, float) and value != value else value


def checksummed_refs(name: str, ds: Any, url: str) -> dict[str, str | list[Any]] | None:
    """References of the fletcher32-checked dataset `ds` (at store path `name`), or None
    when it uses something else this module cannot describe."""
    filters = _filters(ds)
    if filters is None or ds.chunks is None or ds.dtype.kind not in "biuf":
        return None
    refs: dict[str, str | list[Any]] = {}
    for i in range(ds.id.get_num_chunks()):
        info = ds.id.get_chunk_info(i)
        if info.filter_mask:
            return None
        index = ".".join(str(o // c) for o, c in zip(info.chunk_offset, ds.chunks, strict=True))
        refs[f"{name}/{index}"] = [url, int(info.byte_offset), int(info.size)]
    zarray = {
        "zarr_format": 2,
        "shape": list(ds.shape),
        "chunks": list(ds.chunks),
        "dtype": ds.dtype.str,
        "fill_value": _fill(ds),
        "order": "C",
        "compressor": None,
        "filters": filters,
    }
    refs[f"{name}/.zarray"] = json.dumps(zarray)
    refs[f"{name}/.zattrs"] = json.dumps(_attrs(ds))
    return refs


def unwritten_refs(name: str, ds: Any) -> dict[str, str | list[Any]] | None:
    """Metadata of the dimension scale `ds` (at store path `name`) when it stores no chunk,
    so every value is its HDF5 fill value; None for any other dataset. Its `_FillValue`
    attribute, if any, stays an attribute, so masking reads it as xarray does."""
    import h5py

    if not h5py.h5ds.is_scale(ds.id) or ds.id.get_storage_size() or ds.dtype.kind not in "biuf":
        return None
    zarray = {
        "zarr_format": 2,
        "shape": list(ds.shape),
        "chunks": [max(1, n) for n in ds.chunks or ds.shape],
        "dtype": ds.dtype.str,
        "fill_value": _fill(ds),
        "order": "C",
        "compressor": None,
        "filters": None,
    }
    return {f"{name}/.zarray": json.dumps(zarray), f"{name}/.zattrs": json.dumps(_attrs(ds))}
