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


#: Store formats chosen by name (`format :=`) rather than detected.
FORMATS: dict[str, Callable[[str, Mapping[str, Any] | None], Store]] = {
    "kerchunk": _open_kerchunk,
    "hdf5": _open_hdf5,
}


def _virtual(location: str, path: str | None) -> Callable[[str, Mapping[str, Any] | None], Store] | None:
    """The opener of a location that is a reference set or an HDF5 file, told by its name
    (remote) or its content (local), or None."""
    from zarrsql.store import refsets
    from zarrsql.store.files import is_hdf5_file

    name = location.rstrip("/").lower()
    if path is None:  # remote: by the name alone
        if name.endswith(refsets.JSON_SUFFIXES + refsets.PARQUET_SUFFIXES):
            return _open_kerchunk
        return _open_hdf5 if name.endswith(HDF5_SUFFIXES) else None
    if os.path.isdir(path):
        return _open_kerchunk if refsets.is_parquet_layout(path) else None
    if os.path.isfile(path) and name.endswith(refsets.JSON_SUFFIXES) and os.path.basename(name) != "zarr.json":
        return _open_kerchunk
    if os.path.isfile(path) and not name.endswith(".h5ad") and is_hdf5_file(path):
        return _open_hdf5
    return None


def open_store(location: str, storage_options: Mapping[str, Any] | None = None, *, format: str | None = None) -> Store:
    """Open the store at a local path, a `file://` URL or a remote URL; a kerchunk reference
    set or an HDF5 file is detected, or named with `format`."""
    if not isinstance(location, str) or not location:
        raise ParameterError("the store must be a non-empty path or URL string")
    if format is not None and format in FORMATS:
        return FORMATS[format](location, storage_options)
    if location.lower().startswith("file://"):
        location = location[len("file://") :]
    local = None if is_url(location) else os.path.abspath(os.path.expanduser(location))
    virtual = _virtual(location, local)
    if virtual is not None:
        return virtual(location, storage_options)
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
