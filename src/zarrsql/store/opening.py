"""Which store a location opens: a local folder, an fsspec URL, the engine's own store, or
a versioned or virtual store of another format.

`open_store` first picks the format (`FORMATS`: the one `format :=` names, else the first
whose detector claims the location, else 'zarr'). For Zarr it picks the store for a location:
a local folder (`file://` or a path), an fsspec URL, or — when the engine installed one for
the current call with `using_opener` — a store of the engine's own (DuckDB reads `s3://` keys
with the user's DuckDB secrets that way). An Icechunk repository opens a snapshot store
(store/icechunk.py). The opener is a context variable, so the core never learns which engine
runs it. It lives apart from store/base.py so that the concrete stores can import the
protocol without a cycle.

The engine's opener also resolves storage options that name an option set instead of holding
it (`MOUNT_OPTIONS_KEY`): a mounted view's SQL carries that name, never the options
(credentials) given to the mount, and only the connection that mounted the store knows what
the name stands for. Without an opener such a name is refused.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from zarrsql.errors import ParameterError, StoreNotFoundError, UnsupportedError
from zarrsql.store.access import OPEN, AccessPolicy
from zarrsql.store.base import METADATA_DOCUMENTS, Store, is_url
from zarrsql.store.choice import StoreChoice
from zarrsql.store.files import file_error, missing_error
from zarrsql.store.local import LocalStore
from zarrsql.store.redaction import redacted_url

#: Remote names read as HDF5 files in place (a local file is told by its signature instead);
#: AnnData's `.h5ad` is HDF5 too, and reads with AnnData's tables (conventions/anndata.py).
HDF5_SUFFIXES = (".h5", ".hdf5", ".he5", ".nc", ".nc4", ".h5ad")

#: The storage option whose value names a connection's option set (see the module docstring).
MOUNT_OPTIONS_KEY = "zarrsql_mount_options"


class Opener(Protocol):
    """The engine's hook for the current call (see the module docstring)."""

    def __call__(self, location: str, storage_options: Mapping[str, Any]) -> Store | None:
        """A store of the engine's own for `location`, or None for the default."""

    def options_for(self, storage_options: Mapping[str, Any]) -> dict[str, Any]:
        """The storage options that `storage_options` stand for (an option set's name resolved)."""

    def policy(self) -> AccessPolicy:
        """The locations the engine lets this call read (store/access.py)."""


_opener: contextvars.ContextVar[Opener | None] = contextvars.ContextVar("zarrsql_store_opener", default=None)


@contextmanager
def using_opener(opener: Opener | None) -> Iterator[None]:
    """Within the block, `open_store` asks `opener` first (see the module docstring)."""
    token = _opener.set(opener)
    try:
        yield
    finally:
        _opener.reset(token)


def open_store(
    location: str, storage_options: Mapping[str, Any] | None = None, choice: StoreChoice | None = None
) -> Store:
    """Open the store at a local path, a `file://` URL or a remote URL, in the format `choice`
    names or the one its layout shows (`FORMATS`)."""
    if not isinstance(location, str) or not location:
        raise ParameterError("the store must be a non-empty path or URL string")
    options = _resolved_options(storage_options)
    choice = choice or StoreChoice()
    policy = current_policy()
    if not policy.admits(location) and not given_object(location):
        policy.check(location)  # before detection, which already reads a local file's first bytes
    name = choice.format or detected_format(location)
    if name == "icechunk" and not given_object(location):
        # Icechunk opens the repository's files and its virtual chunks itself, following links
        policy.check_links(location)
        for prefix, _ in choice.virtual_chunks:
            policy.check(prefix)
            policy.check_links(prefix)
    _check_not_repository(location, choice.format)
    _check_choice_applies(location, name, choice)
    if name not in FORMATS:
        raise UnsupportedError(
            f"format := '{name}' is not readable by this zarrsql (it reads {', '.join(sorted(FORMATS))}); "
            "leave format := out to let the location's layout decide"
        )
    return FORMATS[name][0](location, options, choice)


def given_object(location: str) -> bool:
    """Whether `location` names an object handed over from Python (an Icechunk session): the
    caller opened it, as DuckDB lets a registered Python object be read with access off."""
    from zarrsql.store.icechunk import is_session_location

    return is_session_location(location)


def current_policy() -> AccessPolicy:
    """The access rules of the engine's opener for the current call (everything, without one)."""
    opener = _opener.get()
    return opener.policy() if opener is not None else OPEN


def _resolved_options(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options a call gives, with an option set's name resolved by the engine's opener."""
    options = dict(storage_options or {})
    opener = _opener.get()
    if opener is not None:
        return opener.options_for(options)
    if MOUNT_OPTIONS_KEY in options:
        raise ParameterError(
            f"storage option '{MOUNT_OPTIONS_KEY}' names the storage options of a mount, which only the zarrsql "
            "connection that mounted the store holds; run the query on that connection, or mount the store again "
            "(zarr_mount(..., storage_options := MAP {...}))"
        )
    return options


#: What each format other than Icechunk reads a location as, for the errors below.
_READ_AS = {"zarr": "a plain Zarr store", "hdf5": "an HDF5 file", "kerchunk": "a kerchunk reference set"}
#: What each of those formats reads, named as the errors call it ("no Zarr store at ...").
_NAMED = {"zarr": "a Zarr store", "hdf5": "an HDF5 file", "kerchunk": "a kerchunk reference set"}


def _check_choice_applies(location: str, name: str, choice: StoreChoice) -> None:
    """Refuse the parameters the format `name` has no use for, rather than ignore them: the
    version parameters pick an Icechunk snapshot, and `virtual_chunks :=` names the
    containers an Icechunk repository or a kerchunk reference set may read from."""
    if name not in _READ_AS:
        return
    versions = choice.version_parameters()
    virtual = ["virtual_chunks"] if choice.virtual_chunks and name != "kerchunk" else []
    given = [*versions, *virtual]
    if not given:
        return
    where = "Icechunk repositories" if versions else "Icechunk repositories and kerchunk reference sets"
    if versions and virtual:
        where += " (virtual_chunks := also to kerchunk reference sets)"
    reason = ", which has no versions" if versions else ""
    raise ParameterError(
        f"{' and '.join(p + ' :=' for p in given)} apply to {where}, but "
        f"'{redacted_url(location)}' is read as {_READ_AS[name]}{reason}; "
        f"leave {'them' if len(given) > 1 else 'it'} out, or "
        "pass format := 'icechunk' if it is an Icechunk repository"
    )


def _check_not_repository(location: str, name: str | None) -> None:
    """A format other than Icechunk named for a local Icechunk repository (or a session given
    from Python): say that is what the location is, rather than the error of reading its
    folder as `name` ("no zarr.json", "a folder, not an HDF5 file", "no such path"). A format
    left out is detected, and a repository then detected as one."""
    if name not in _READ_AS or not _is_icechunk(location):
        return
    from zarrsql.store.icechunk import is_session_location

    if is_session_location(location):
        raise ParameterError(
            f"format := '{name}' cannot read '{location}', an Icechunk session given from Python, as "
            f"{_READ_AS[name]}; leave format := out (a session is read as the Icechunk store it is)"
        )
    raise StoreNotFoundError(
        f"'{location}' is not {_NAMED[name]}: it is an Icechunk repository (refs/ or repo beside snapshots/, its "
        f"Zarr documents inside the snapshots), which format := '{name}' does not read; pass format := 'icechunk' "
        "or leave format := out (a local repository is detected)"
    )


def detected_format(location: str) -> str:
    """The format a location opens as when no `format :=` names one (`FORMATS`' detectors)."""
    return next((n for n, (_, detect) in FORMATS.items() if detect(location)), "zarr")


def _open_zarr(location: str, storage_options: dict[str, Any], choice: StoreChoice) -> Store:
    if choice.format == "zarr":
        _check_not_other_format(location)
    _check_not_a_document(location)
    if location.lower().startswith(("http://", "https://")):
        # a Zarr store's keys are names ('a#b' is an array, not 'a' and a fragment); the files
        # a reference set reads through `open_folder` are named by URL text
        from zarrsql.store.backends import NAMED_KEYS

        storage_options = {**storage_options, NAMED_KEYS: location}
    return open_folder(location, storage_options)


def _check_not_a_document(location: str) -> None:
    """A URL that names one of a store's metadata documents (copied from a browser or a bucket's
    console): say so, as a local path's error does (store/files.py), rather than read it as a
    folder and report a missing zarr.json below it. Nothing is requested."""
    if not is_url(location) or not _names_document(location):
        return
    shown = redacted_url(location.rstrip("/"))
    folder, _, name = shown.rpartition("/")
    raise StoreNotFoundError(
        f"no Zarr store at '{shown}': '{name}' is a Zarr metadata document, not a store; point at the "
        f"folder that holds it, '{folder}'"
    )


def _check_not_other_format(location: str) -> None:
    """`format := 'zarr'` on a local file zarrsql reads as another format: say which, rather
    than the generic "a file, not a folder" of `open_folder`."""
    path = _local_path(location)
    if path is None or not os.path.isfile(path):
        return
    other = next((n for n in ("hdf5", "kerchunk") if FORMATS[n][1](location)), None)
    if other is not None:
        raise StoreNotFoundError(
            f"no Zarr store at '{location}': format := 'zarr' reads a Zarr folder, and this is a file zarrsql "
            f"reads as {_READ_AS[other]}; pass format := '{other}' or leave format := out"
        )


def _open_kerchunk(location: str, storage_options: dict[str, Any], choice: StoreChoice) -> Store:
    from zarrsql.store.references import open_references

    return open_references(
        location, storage_options, open_folder, virtual_chunks=choice.virtual_chunks, policy=current_policy()
    )


def _open_hdf5(location: str, storage_options: dict[str, Any], choice: StoreChoice) -> Store:
    from zarrsql.store.hdf5 import open_hdf5

    return open_hdf5(location, storage_options, open_folder)


def _local_path(location: str) -> str | None:
    if location.lower().startswith("file://"):
        location = location[len("file://") :]
    return None if is_url(location) else os.path.abspath(os.path.expanduser(location))


def _is_kerchunk(location: str) -> bool:
    """A kerchunk reference set: a remote name ending .json/.parq/.parquet (not zarr.json), a
    local .json file (not zarr.json), or a local folder whose .zmetadata has `record_size`."""
    from zarrsql.store import refsets

    name, path = location.rstrip("/").lower(), _local_path(location)
    if path is None:  # a store's own zarr.json is not a reference set (`_check_not_a_document`)
        return name.endswith(refsets.JSON_SUFFIXES + refsets.PARQUET_SUFFIXES) and not _names_document(location)
    if os.path.isdir(path):
        return refsets.is_parquet_layout(path)
    return os.path.isfile(path) and name.endswith(refsets.JSON_SUFFIXES) and os.path.basename(name) != "zarr.json"


def _names_document(location: str) -> bool:
    """Whether the last part of `location` is a Zarr metadata document's name."""
    return location.rstrip("/").rpartition("/")[2] in METADATA_DOCUMENTS


def _is_hdf5(location: str) -> bool:
    """An HDF5 (NetCDF4, AnnData .h5ad) file: by its signature when local, whatever its name,
    by its name when remote (`HDF5_SUFFIXES`). Only the few header bytes are read here; the
    scan of the file's metadata happens when it is opened."""
    from zarrsql.store.files import is_hdf5_file

    name, path = location.rstrip("/").lower(), _local_path(location)
    if path is None:
        return name.endswith(HDF5_SUFFIXES)
    return os.path.isfile(path) and is_hdf5_file(path)


def open_folder(location: str, storage_options: Mapping[str, Any] | None = None) -> Store:
    """The plain store of keys below a folder or URL, never a virtual one: how a reference
    set reads its own files and the files it points at."""
    options = dict(storage_options or {})
    if location.lower().startswith("file://"):
        location = location[len("file://") :]
    if is_url(location):
        opener = _opener.get()
        store = opener(location, options) if opener is not None else None
        if store is not None:
            return store
        from zarrsql.store.remote import FsspecStore  # fsspec is imported only for URLs

        return FsspecStore(location, options)
    path = os.path.abspath(os.path.expanduser(location))
    if os.path.exists(path) and not os.path.isdir(path):
        raise file_error(location, path)
    if not os.path.isdir(path):
        raise missing_error(location, path)
    return LocalStore(path)


def _open_icechunk(location: str, storage_options: dict[str, Any], choice: StoreChoice) -> Store:
    from zarrsql.store import icechunk  # icechunk is imported only for its repositories

    return icechunk.open_repository_store(location, storage_options, choice)


def _is_icechunk(location: str) -> bool:
    from zarrsql.store.icechunk import looks_like_repository

    return looks_like_repository(location)


def _never(location: str) -> bool:
    return False


#: Each `format :=` value: (how its store opens, whether a location's layout shows it without
#: reading anything counted). Detection asks them in order; nothing claims a location: 'zarr'.
FORMATS: dict[str, tuple[Callable[[str, dict[str, Any], StoreChoice], Store], Callable[[str], bool]]] = {
    "icechunk": (_open_icechunk, _is_icechunk),
    "kerchunk": (_open_kerchunk, _is_kerchunk),
    "hdf5": (_open_hdf5, _is_hdf5),
    "zarr": (_open_zarr, _never),
}
