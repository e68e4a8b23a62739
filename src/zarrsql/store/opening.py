"""Which store a location opens: a local folder, an fsspec URL, or the engine's own store.

`open_store` picks the store for a location: a local folder (`file://` or a path), an fsspec
URL, or — when the engine installed one for the current call with `using_opener` — a store
of the engine's own (DuckDB reads `s3://` keys with the user's DuckDB secrets that way). The
opener is a context variable, so the core never learns which engine runs it. It lives apart
from store/base.py so that the concrete stores can import the protocol without a cycle.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from zarrsql.errors import ParameterError, StoreNotFoundError
from zarrsql.store.base import Store, is_url
from zarrsql.store.files import file_error
from zarrsql.store.local import LocalStore

#: Remote names read as HDF5 files in place (`.h5ad` stays AnnData's, refused with a hint).
HDF5_SUFFIXES = (".h5", ".hdf5", ".he5", ".nc", ".nc4")

#: Given (location, storage_options), a store of the engine's own, or None for the default.
Opener = Callable[[str, Mapping[str, Any]], "Store | None"]
_opener: contextvars.ContextVar[Opener | None] = contextvars.ContextVar("zarrsql_store_opener", default=None)


@contextmanager
def using_opener(opener: Opener | None) -> Iterator[None]:
    """Within the block, `open_store` asks `opener` first (see the module docstring)."""
    token = _opener.set(opener)
    try:
        yield
    finally:
        _opener.reset(token)


def _open_kerchunk(location: str, storage_options: Mapping[str, Any] | None) -> Store:
    from zarrsql.store.references import open_references

    return open_references(location, storage_options, open_folder)


def _open_hdf5(location: str, storage_options: Mapping[str, Any] | None) -> Store:
    from zarrsql.store.hdf5 import open_hdf5

    return open_hdf5(location, storage_options, open_folder)


def _local_path(location: str) -> str | None:
    if location.lower().startswith("file://"):
        location = location[len("file://") :]
    return None if is_url(location) else os.path.abspath(os.path.expanduser(location))


def _is_kerchunk(location: str) -> bool:
    """A kerchunk reference set: a remote name ending .json/.parq/.parquet, a local .json
    file (not zarr.json), or a local folder whose .zmetadata has `record_size`."""
    from zarrsql.store import refsets

    name, path = location.rstrip("/").lower(), _local_path(location)
    if path is None:
        return name.endswith(refsets.JSON_SUFFIXES + refsets.PARQUET_SUFFIXES)
    if os.path.isdir(path):
        return refsets.is_parquet_layout(path)
    return os.path.isfile(path) and name.endswith(refsets.JSON_SUFFIXES) and os.path.basename(name) != "zarr.json"


def _is_hdf5(location: str) -> bool:
    """An HDF5 (NetCDF4) file: by its signature when local, by its name when remote; an
    .h5ad file is AnnData's and keeps its conversion hint."""
    from zarrsql.store.files import is_hdf5_file

    name, path = location.rstrip("/").lower(), _local_path(location)
    if path is None:
        return name.endswith(HDF5_SUFFIXES)
    return os.path.isfile(path) and not name.endswith(".h5ad") and is_hdf5_file(path)


#: Formats besides plain Zarr: name (`format :=`) → (how its store opens, whether a
#: location's layout shows it). Detection asks them in order.
FORMATS: dict[str, tuple[Callable[[str, Mapping[str, Any] | None], Store], Callable[[str], bool]]] = {
    "kerchunk": (_open_kerchunk, _is_kerchunk),
    "hdf5": (_open_hdf5, _is_hdf5),
}


def open_store(location: str, storage_options: Mapping[str, Any] | None = None, *, format: str | None = None) -> Store:
    """Open the store at a local path, a `file://` URL or a remote URL; a kerchunk reference
    set or an HDF5 file is detected (`FORMATS`), or named with `format`."""
    if not isinstance(location, str) or not location:
        raise ParameterError("the store must be a non-empty path or URL string")
    name = format or next((n for n, (_, detect) in FORMATS.items() if detect(location)), None)
    if name in FORMATS:
        return FORMATS[name][0](location, storage_options)
    return open_folder(location, storage_options)


def open_folder(location: str, storage_options: Mapping[str, Any] | None = None) -> Store:
    """The plain store of keys below a folder or URL, never a virtual one: how a reference
    set reads its own files and the files it points at."""
    if location.lower().startswith("file://"):
        location = location[len("file://") :]
    if is_url(location):
        opener = _opener.get()
        store = opener(location, dict(storage_options or {})) if opener is not None else None
        if store is not None:
            return store
        from zarrsql.store.remote import FsspecStore  # fsspec is imported only for URLs

        return FsspecStore(location, dict(storage_options or {}))
    path = os.path.abspath(os.path.expanduser(location))
    if os.path.exists(path) and not os.path.isdir(path):
        raise file_error(location, path)
    if not os.path.isdir(path):
        raise StoreNotFoundError(
            f"no Zarr store at '{location}': the path does not exist; "
            "check the path (relative paths are resolved from the current directory)"
        )
    return LocalStore(path)
