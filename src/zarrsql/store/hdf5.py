"""An HDF5 (or NetCDF4) file read in place: its chunks are byte ranges of the file.

`open_hdf5(location, storage_options)` scans the file's metadata once with kerchunk's
`SingleHdf5ToZarr` (which needs h5py) into a reference set held in memory, and reads it as
a `ReferenceStore`, so an `.h5` file and a kerchunk reference set of the same file are one
code path: the same tables, conventions, pushdown and `trace()` counts. Small chunks are not
inlined, every chunk is a ranged read of the file.

What the in-memory scan keeps that a saved kerchunk set loses: attributes holding HDF5 object
references (H5Col's `CATEGORIES`, `SEARCH_INDEX_LIST`, `INDEX_COLUMNS`) become the store paths
of the objects they point at, instead of kerchunk's placeholder text, and a group's `CLASS =
COLUMN_TABLE` (which kerchunk drops as a netCDF attribute) is kept, and so is an H5Col
column's HDF5 fill value (kerchunk drops it for a column whose `units` look like a CF time);
conventions/h5col.py falls back to names when reading a saved set. A dataset kerchunk
leaves out is described from h5py's chunk index when it only adds HDF5's fletcher32 checksum
or is a dimension scale never written (store/hdf5_chunks.py), and otherwise (an lzf, szip,
lz4, bitshuffle or scaleoffset filter) is listed as unsupported, naming the filter, instead of
failing the file; one left out with no such filter is listed as unsupported without filter
advice. netCDF's stand-in for a dimension without a coordinate variable (`bnds`) is a
dimension, not an array: it is left out, as kerchunk leaves it out. The scanned set is cached
by the file's path and version (`local.file_version`: inode, change time, mtime and size), and
a local file is the store's `SetSource`: a store whose file was replaced or rewritten scans it
again before the reads that follow its next tokens (store/references.py).

While kerchunk scans a file the garbage collector does not run on its own (`_collector_held`):
kerchunk builds its Zarr metadata from inside h5py's `visititems`, which holds h5py's global
lock while it waits for zarr-python's event-loop thread, and a collection started on that
thread that frees an h5py object left in a reference cycle (by xarray, by an earlier failed
scan) waits for the same lock: the query would hang for good.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import threading
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

from zarrsql import counters
from zarrsql.errors import MetadataError, StoreNotFoundError, StoreReadError, UnsupportedError
from zarrsql.store.base import is_url
from zarrsql.store.hdf5_chunks import checksummed_refs, unwritten_refs
from zarrsql.store.redaction import redacted_text, redacted_url
from zarrsql.store.references import ReferenceStore, SetSource, refset_version
from zarrsql.store.refsets import FolderOpener, RefSet, parse_json_refs

#: Scanned files kept (path and version → reference set); a scan reads every object header.
_CACHE_SIZE = 16
_cache: dict[str, RefSet] = {}
_lock = threading.Lock()


def _need_h5py() -> Any:
    try:
        import h5py
        import kerchunk.hdf  # noqa: F401
    except ImportError as err:
        raise UnsupportedError(
            f"reading HDF5 and NetCDF4 files needs h5py and kerchunk ({err}); install them with: "
            "pip install 'zarrsql[hdf5]'"
        ) from err
    return h5py


def _reference_paths(h5: Any, obj: Any) -> dict[str, Any]:
    """Attributes of `obj` that hold object references, as store paths ('' for unresolved)."""
    import h5py

    out: dict[str, Any] = {}
    for name, value in obj.attrs.items():
        if isinstance(value, h5py.Reference):
            out[name] = _deref(h5, value)
        elif getattr(value, "dtype", None) is not None and h5py.check_dtype(ref=value.dtype) is h5py.Reference:
            out[name] = [_deref(h5, v) for v in value.ravel()]
    return out


def _deref(h5: Any, ref: Any) -> str:
    try:
        return str(h5[ref].name).lstrip("/") if ref else ""
    except (ValueError, KeyError):
        return ""


#: HDF5 filter ids kerchunk cannot express as Zarr codecs, by the name users know them by.
_FILTER_NAMES = {"32004": "lz4", "32008": "bitshuffle", "32013": "zfp", "32017": "sz", "307": "bzip2"}


def _filter_name(ds: Any) -> str | None:
    """The HDF5 filter that kept kerchunk from describing `ds`, or None when it uses none
    that lacks a Zarr codec (then something else did)."""
    if ds.scaleoffset:
        return "scaleoffset"
    if ds.compression in ("szip", "lzf"):
        return str(ds.compression)
    known = {"shuffle", "gzip", "fletcher32", "32001", "32015"}
    odd = [str(f) for f in ds._filters if str(f) not in known]
    return _FILTER_NAMES.get(odd[0], f"HDF5 filter {odd[0]}") if odd else None


#: How netCDF names the dimension scale of a dimension that has no coordinate variable
#: (`bnds`, `nv`): its `NAME` attribute starts so, and a number follows.
_DIMENSION_ONLY = "This is a netCDF dimension but not a netCDF variable"


def _dimension_only(ds: Any) -> bool:
    """Whether `ds` is netCDF's stand-in for a dimension without a coordinate variable: a
    dimension, not an array (xarray lists it among the dimensions only; kerchunk skips it)."""
    name = _text(ds.attrs.get("NAME")) or ""
    return _text(ds.attrs.get("CLASS")) == "DIMENSION_SCALE" and name.startswith(_DIMENSION_ONLY)


def _elsewhere(ds: Any) -> bool:
    """Whether the dataset's values lie outside the file (external raw storage, a virtual
    dataset): kerchunk describes it with no chunk, so it would read as its fill value."""
    try:
        return bool(ds.external) or bool(ds.is_virtual)
    except (AttributeError, ValueError):
        return False


def _placeholder(ds: Any, *, elsewhere: bool = False) -> str:
    """A `.zarray` for a dataset kerchunk skipped: its shape, and a codec named after the
    filter it uses, so the array is listed as unsupported, naming the filter, and the rest
    of the file still reads. Without such a filter the codec says only that kerchunk could
    not describe the dataset: no filter advice for a dataset that has no filter to blame."""
    dtype = ds.dtype.str if ds.dtype.kind in "biufcSU" and ds.dtype.names is None else f"|V{ds.dtype.itemsize}"
    filter_name = _filter_name(ds)
    # metadata.codecs.HDF5_FILTER, HDF5_UNDESCRIBED and HDF5_ELSEWHERE (the store layer does not import metadata)
    codec = "hdf5-elsewhere" if elsewhere else f"hdf5:{filter_name}" if filter_name else "hdf5-undescribed"
    doc = {
        "zarr_format": 2,
        "shape": list(ds.shape),
        "chunks": list(ds.chunks or ds.shape or (1,)) if ds.shape else [],
        "dtype": dtype,
        "fill_value": None,
        "order": "C",
        "compressor": {"id": codec},
        "filters": None,
    }
    return json.dumps(doc)


def _fix_attrs(refs: dict[str, Any], h5: Any, url: str) -> None:
    """Object-reference attributes → paths, in the `.zattrs` documents of `refs`; a dataset
    kerchunk skipped is described here (store/hdf5_chunks.py) or gets a placeholder."""
    import h5py

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and _elsewhere(obj):
            refs[f"{name}/.zarray"] = _placeholder(obj, elsewhere=True)  # kerchunk's would read as fill
        elif isinstance(obj, h5py.Dataset) and f"{name}/.zarray" not in refs:
            if _dimension_only(obj):
                return  # a dimension, named by the `_ARRAY_DIMENSIONS` of the arrays using it
            described = checksummed_refs(name, obj, url) or unwritten_refs(name, obj)
            refs.update(described or {f"{name}/.zarray": _placeholder(obj)})
        elif isinstance(obj, h5py.Dataset) and _text(obj.parent.attrs.get("CLASS")) == "COLUMN_TABLE":
            _keep_column_fill(refs, name, obj)
        if isinstance(obj, h5py.Group) and _text(obj.attrs.get("CLASS")) == "COLUMN_TABLE":
            _merge(refs, name, {"CLASS": "COLUMN_TABLE"})
        fixes = _reference_paths(h5, obj)
        if fixes:
            _merge(refs, name, fixes)

    visit("", h5)
    h5.visititems(visit)


def _fix_empty_chunks(refs: dict[str, Any]) -> None:
    """An empty dataset (an AnnData of 0 cells, a categorical column with no categories) is
    contiguous in HDF5 with a shape of 0, and kerchunk gives it chunks of 0, which Zarr does not
    allow: the array was refused, and with it a whole table, or the column was left out. A
    chunk length of 0 becomes 1 (the array holds no chunk either way)."""
    for key, value in refs.items():
        if not key.endswith(".zarray"):
            continue
        doc = json.loads(value) if isinstance(value, (str, bytes)) else value
        chunks = doc.get("chunks") if isinstance(doc, dict) else None
        if isinstance(chunks, list) and any(c == 0 for c in chunks):
            doc["chunks"] = [c if c != 0 else 1 for c in chunks]
            refs[key] = json.dumps(doc)


#: The attribute marking an H5Col column whose HDF5 fill value the writer never set
#: (read by conventions/h5col.py, which takes no missing-value marker from it then).
UNSET_FILL = "zarrsql:fill_unset"


def _keep_column_fill(refs: dict[str, Any], name: str, ds: Any) -> None:
    """The H5Col column `ds` keeps its HDF5 fill value (the dataset creation property) as the
    `.zarray` fill value, which conventions/h5col.py reads as the column's missing value.

    kerchunk writes no fill value for a dataset whose `units` look like a CF time or that
    carries netCDF's hidden attributes (xarray decodes those by `_FillValue` alone), so a
    time column of an H5Col table would lose its missing rows. Only columns of a
    `COLUMN_TABLE` group change: NetCDF variables elsewhere in the file keep kerchunk's
    reading. A `_FillValue` attribute, which kerchunk would prefer, does not count: H5Col's
    fill value is the creation property. Numeric columns only: kerchunk keeps a string
    column's fill itself.

    A fill the writer never set (HDF5's library default: 0, 0.0, empty bytes) marks nothing
    missing: the column gets `UNSET_FILL`, so that its real zeros and empty strings read as
    values, as h5py reads them (and as a Zarr fill of 0 never hides real zeros).
    """
    import h5py

    if ds.id.get_create_plist().fill_value_defined() != h5py.h5d.FILL_VALUE_USER_DEFINED:
        _merge(refs, name, {UNSET_FILL: True})
        return
    fill = ds.fillvalue
    if ds.dtype.kind not in "iuf" or ds.dtype.names is not None or fill is None:
        return
    value = fill.item() if hasattr(fill, "item") else fill
    zarray = json.loads(refs[f"{name}/.zarray"])
    zarray["fill_value"] = "NaN" if isinstance(value, float) and value != value else value
    refs[f"{name}/.zarray"] = json.dumps(zarray)


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value if isinstance(value, str) else None


def _merge(refs: dict[str, Any], name: str, attrs: dict[str, Any]) -> None:
    key = f"{name}/.zattrs" if name else ".zattrs"
    doc = json.loads(refs.get(key) or "{}")
    doc.update(attrs)
    refs[key] = json.dumps(doc)


def _remote_path(location: str, storage_options: Mapping[str, Any]) -> tuple[Any, str]:
    """(filesystem, path) of a remote HDF5 file, through the filesystem zarrsql configures for
    the URL (endpoint, anonymous access and retries as for any store)."""
    from zarrsql.store.remote import FsspecStore

    folder, _, name = location.rstrip("/").rpartition("/")
    store = FsspecStore(folder, dict(storage_options))
    return store.fs, f"{store.root}/{name}"


def _remote_file(location: str, storage_options: Mapping[str, Any]) -> Any:
    """A random-access file object for a remote HDF5 file (`_remote_path`)."""
    fs, path = _remote_path(location, storage_options)
    return fs.open(path, "rb")


def _remote_version(location: str, storage_options: Mapping[str, Any]) -> str:
    """The remote file's version as its server states it (ETag, else modification time and
    size): one metadata request. A reference set scanned from another version would read the
    new bytes at the old offsets."""
    fs, path = _remote_path(location, storage_options)
    counters.count(requests=1)
    try:
        info = fs.info(path)
    except FileNotFoundError as err:
        raise StoreNotFoundError(
            f"no HDF5 file at '{redacted_url(location)}': the file does not exist; check the URL"
        ) from err
    except OSError as err:
        raise StoreReadError(
            f"cannot read the HDF5 file '{redacted_url(location)}': {redacted_text(str(err))}"
        ) from err
    fields = {k.lower(): v for k, v in info.items()}
    stated = [fields.get(k) for k in ("etag", "last_modified", "lastmodified", "mtime", "updated", "size")]
    return hashlib.sha1(repr(stated).encode()).hexdigest()[:16]


class _CollectorHold:
    """How many scans hold the collector off, and whether it ran before the first did."""

    lock = threading.Lock()
    scans = 0
    was_enabled = False


@contextlib.contextmanager
def _collector_held() -> Iterator[None]:
    """No automatic garbage collection while the block runs (see the module's docstring);
    the collector's state before the first of overlapping blocks comes back after the last."""
    with _CollectorHold.lock:
        if _CollectorHold.scans == 0:
            _CollectorHold.was_enabled = gc.isenabled()
            gc.disable()
        _CollectorHold.scans += 1
    try:
        yield
    finally:
        with _CollectorHold.lock:
            _CollectorHold.scans -= 1
            if _CollectorHold.scans == 0 and _CollectorHold.was_enabled:
                gc.enable()


def _scan(location: str, storage_options: Mapping[str, Any]) -> dict[str, Any]:
    h5py = _need_h5py()
    from kerchunk.hdf import SingleHdf5ToZarr

    remote = is_url(location)
    try:
        # a remote file's reads wait for fsspec's event-loop thread under h5py's lock too
        with _collector_held(), _remote_file(location, storage_options) if remote else open(location, "rb") as f:
            url = location if remote else "file://" + location
            refs: dict[str, Any] = SingleHdf5ToZarr(f, url, inline_threshold=0, error="ignore").translate()["refs"]
            f.seek(0)
            with h5py.File(f, "r") as h5:
                _fix_attrs(refs, h5, url)
            _fix_empty_chunks(refs)
    except OSError as err:
        # the frames of a failed scan hold h5py objects, and the error refers back to them:
        # let them go now rather than leave a cycle for a collection on another thread
        traceback.clear_frames(err.__traceback__)
        raise MetadataError(f"cannot read the HDF5 file '{redacted_url(location)}': {redacted_text(str(err))}") from err
    except (TypeError, ValueError, RuntimeError) as err:
        traceback.clear_frames(err.__traceback__)
        raise UnsupportedError(
            f"the HDF5 file '{redacted_url(location)}' holds something zarrsql cannot read in place "
            f"({redacted_text(str(err))}); convert it once, "
            f"e.g. xarray.open_dataset('{redacted_url(location)}').to_zarr(...)"
        ) from err
    return refs


def _refset(location: str, options: Mapping[str, Any], key: str) -> RefSet:
    """The file's reference set, scanned once per `key` (its version, taken before the scan)."""
    with _lock:
        refset = _cache.get(key)
    if refset is None:
        refs = _scan(location, options)
        refset = RefSet(location, parse_json_refs(refs, os.path.dirname(location), location))
        with _lock:
            if len(_cache) >= _CACHE_SIZE:
                _cache.pop(next(iter(_cache)))
            _cache[key] = refset
    return refset


def open_hdf5(location: str, storage_options: Mapping[str, Any] | None, open_folder: FolderOpener) -> ReferenceStore:
    """A store over the HDF5 file at `location` (a path or URL), read in place; `open_folder`
    opens the plain store its chunks are read from."""
    options = dict(storage_options or {})
    if location.lower().startswith("file://"):
        location = location[7:]
    if not is_url(location):
        location = os.path.abspath(os.path.expanduser(location))
        if os.path.isdir(location):
            raise StoreNotFoundError(
                f"'{location}' is a folder, not an HDF5 file: format := 'hdf5' reads one file; for a Zarr store "
                "leave format := out (or pass 'zarr')"
            )
        if not os.path.isfile(location):
            raise StoreNotFoundError(f"no HDF5 file at '{location}': the file does not exist; check the path")
    if is_url(location):
        # the file's version keys the scan: a file replaced at the same URL is scanned again
        version = f"{location}:{_remote_version(location, options)}"
        return ReferenceStore(_refset(location, options, version), options, open_folder, token=version)
    key = refset_version(location, location)
    if key is None:
        raise StoreNotFoundError(f"no HDF5 file at '{location}': the file does not exist; check the path")
    given = location
    source = SetSource(lambda: refset_version(given, given), lambda version: _refset(given, options, version))
    return ReferenceStore(_refset(location, options, key), options, open_folder, token=key, source=source)
