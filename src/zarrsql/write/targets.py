"""Where a write may go, checked before any row is read, and the stores it is written through.

Every writer (`to_zarr`, COPY, appends) names its target as a path or URL. `check_target`
refuses what no writer can write (an HTTP URL, an unknown protocol, an object store it cannot
reach, an Icechunk repository given by path, a target inside another Zarr store) and
`check_replaceable` what zarrsql may not replace (anything but a Zarr store or an empty
directory, the current directory): zarrsql deletes nothing it did not create. The rest opens
the target: `local_path` for a folder, `remote` and `zarr_remote` for an object store (the
filesystem class reads use, its asynchronous clients closed after the write), and
`StoreTarget`, the zarr store a writer's `write(target)` fills, with `consolidate`, which
gives it its consolidated metadata.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarrsql.errors import ParameterError, StoreExistsError, StoreNotFoundError, WriteError, ZarrSQLError
from zarrsql.store.icechunk import is_session_location, looks_like_repository

#: A directory holding one of these at its root is a Zarr store (v3, v2 group, v2 array).
ROOT_DOCUMENTS = ("zarr.json", ".zgroup", ".zarray")


#: A folder holding one of these is a Zarr node: a store, or a group or array inside one.
_NODE_DOCUMENTS = (*ROOT_DOCUMENTS, ".zmetadata")


#: Protocols zarrsql reads but cannot write: HTTP has no way to put or delete keys.
_READ_ONLY_PROTOCOLS = ("http", "https")


@dataclass(frozen=True)
class StoreTarget:
    """Where `write` writes: a zarr store on the staging directory or the store itself."""

    url: str  # the final location (for messages)
    zarr_store: Any  # a zarr.abc.store.Store
    zarr_format: int


def local_path(store: str) -> Path | None:
    """The directory of a local store (a path or file:// URL); None for any other URL."""
    if store.startswith("file://"):
        return Path(store[len("file://") :]).expanduser().absolute()
    if "://" in store:
        return None
    return Path(store).expanduser().absolute()


def _fs_options(store: str, storage_options: Mapping[str, str] | None) -> dict[str, Any]:
    """The filesystem's keywords, checked as a read checks them (a misspelt S3 option is refused
    by name before anything is written)."""
    from zarrsql.store.backends import backend_for
    from zarrsql.store.options import split_settings

    _, theirs = split_settings(storage_options or {})
    backend_for(store.split("://", 1)[0]).check_options(theirs)
    return theirs


def remote(store: str, storage_options: Mapping[str, str] | None, *, asynchronous: bool = False) -> tuple[Any, str]:
    """(fsspec filesystem, path) of an object-store URL: the class reads use (for GCS, the
    plain JSON-API class where gcsfs's default would spend 60 s asking an emulator about the
    bucket), with the library's own retries kept (a write is not retried by zarrsql)."""
    from zarrsql.store.backends import backend_for, make_filesystem

    options = _fs_options(store, storage_options)
    if not asynchronous:
        return make_filesystem(store, options)
    # an asynchronous instance that is closed after the write (`zarr_remote`) is the write's own
    closed_after = backend_for(store.split("://", 1)[0]).close_async is not None
    return make_filesystem(store, options, asynchronous=True, **({"skip_instance_cache": True} if closed_after else {}))


@contextlib.contextmanager
def zarr_remote(store: str, storage_options: Mapping[str, str] | None, *, read_only: bool = False) -> Iterator[Any]:
    """A zarr-python store at the URL, on an asynchronous filesystem of its own whose clients
    are closed when the write ends (adlfs's, left open, print a traceback when the interpreter
    exits)."""
    from zarr.core.sync import sync
    from zarr.storage import FsspecStore

    from zarrsql.store.backends import backend_for

    fs, path = remote(store, storage_options, asynchronous=True)
    try:
        yield FsspecStore(fs, path=path, read_only=read_only)
    finally:
        closing = backend_for(store.split("://", 1)[0]).close_async
        if closing is not None:
            with contextlib.suppress(Exception):
                sync(closing(fs))


@contextlib.contextmanager
def existing_store(store: str, storage_options: Mapping[str, str] | None) -> Iterator[Any]:
    """What zarr-python and xarray open an append's existing store from: the path of a local
    store, or for a URL a read-only zarr-python store on the filesystem the write uses (its
    options split from zarrsql's own, GCS's plain class, clients closed after)."""
    if local_path(store) is not None:
        yield store
        return
    with zarr_remote(store, storage_options, read_only=True) as remote:
        yield remote


def check_mode(mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        from zarrsql.errors import ParameterError

        raise ParameterError(f"mode must be one of {list(allowed)} to create a store, got {mode!r}")


def exists_error(store: str) -> StoreExistsError:
    return StoreExistsError(
        f'\'{store}\' already exists and mode is "w-" (create only); pass mode="w" to replace '
        'it, mode="a" to append to it, or choose another path'
    )


def check_target(store: str, storage_options: Mapping[str, str] | None) -> None:
    """Refuse, before any row is read, a target no writer can write: an empty path, an HTTP
    URL (read-only), a protocol no installed filesystem knows, an object store that cannot be
    reached (no credentials, a host that does not resolve), a target inside another Zarr
    store. Each refusal names the fix."""
    if not store.strip():
        raise ParameterError("the target store is empty (''); pass a path or URL, e.g. 'out.zarr'")
    if is_session_location(store):
        return
    path = local_path(store)
    if path is not None:
        if looks_like_repository(store):
            raise ParameterError(
                f"'{store}' is an Icechunk repository, which zarrsql writes through a session, not by its path; "
                "pass a writable session instead: session = repo.writable_session('main'), to_zarr(..., session), "
                "then session.commit('...') (see 'Into an Icechunk session' in docs/writing.md)"
            )
        check_not_inside(store, path)
        return
    protocol = store.split("://", 1)[0].lower()
    if protocol in _READ_ONLY_PROTOCOLS:
        raise ParameterError(
            f"'{store}' is an {protocol} URL, which zarrsql reads but cannot write ({protocol} has no way to put "
            "keys); write to a local path or an object store (s3://, gs://, az://)"
        )
    import fsspec

    try:
        filesystem = fsspec.get_filesystem_class(protocol)
    except ValueError as err:
        raise ParameterError(
            f"'{store}' names the protocol '{protocol}://', which no installed filesystem knows; check the "
            "spelling, or write to a local path or an object store (s3://, gs://, az://)"
        ) from err
    except ImportError as err:
        raise ParameterError(f"writing to '{store}' needs the filesystem package of {protocol}:// ({err})") from err
    if not getattr(filesystem, "async_impl", False):
        raise ParameterError(
            f"'{store}' is a {protocol}:// URL, whose filesystem zarr-python cannot write through (it writes "
            "with an asynchronous filesystem, as s3://, gs:// and az:// have); write to a local path or an "
            "object store"
        )
    fs, root = reach(store, lambda: remote(store, storage_options))
    reach(store, lambda: fs.exists(root))
    _refuse_inside(store, reach(store, lambda: _remote_enclosing_node(store, fs, root)))


def _has_node_document(folder: Path) -> bool:
    try:
        return any((folder / name).is_file() for name in _NODE_DOCUMENTS)
    except OSError:  # a folder we may not look into: no store of ours either
        return False


def _enclosing_store(path: Path) -> Path | None:
    """The outermost folder above `path` that is a Zarr node (by its own path, then with links
    resolved), up to the file system root; None when `path` lies in no Zarr store."""
    for start in (path, path.resolve()):
        nodes = [folder for folder in start.parents if _has_node_document(folder)]
        if nodes:
            return nodes[-1]
    return None


def _remote_enclosing_node(store: str, fs: Any, root: str) -> str | None:
    """The URL of the prefix just above an object-store target when it is a Zarr node; None for
    a whole bucket or a plain prefix. Only that prefix is asked (three HEAD requests at most):
    every group of a store has its own document, so an array or group of a store is found by
    its parent, but a target deeper down (in a chunk folder) is not."""
    parent = root.rstrip("/").rpartition("/")[0]
    if not parent or not any(fs.exists(f"{parent}/{name}") for name in ROOT_DOCUMENTS):
        return None
    return f"{store.split('://', 1)[0]}://{parent}"


def check_not_inside(store: str, path: Path) -> None:
    """Refuse, in every mode and before anything is written, a target inside another Zarr
    store (`parent.zarr/air`): written there, zarrsql would replace or change one array or
    group of a store it did not create, behind that store's consolidated metadata."""
    enclosing = _enclosing_store(path)
    _refuse_inside(store, None if enclosing is None else str(enclosing))


def _refuse_inside(store: str, enclosing: str | None) -> None:
    if enclosing is not None:
        raise StoreExistsError(
            f"'{store}' lies inside the Zarr store '{enclosing}' (it is one of its arrays or groups, or in one); "
            "zarrsql writes whole stores and never writes into, replaces or appends to part of a store: choose a "
            f"path outside '{enclosing}', or change that store with zarr or xarray"
        )


def _unreachable() -> tuple[type[BaseException], ...]:
    """What a filesystem raises when an object store cannot be reached: OSError (s3fs's and
    aiohttp's translations, DNS failures), ValueError (a malformed URL or option) and, once
    botocore is loaded, its own errors (no credentials, a bad endpoint)."""
    kinds: list[type[BaseException]] = [OSError, ValueError]
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is not None:
        kinds.append(botocore.BotoCoreError)
    return tuple(kinds)


def reach(store: str, request: Callable[[], Any]) -> Any:
    """`request()`, a first call to an object store; its failure a WriteError naming the fix."""
    try:
        return request()
    except ZarrSQLError:
        raise
    except _unreachable() as err:
        raise WriteError(
            f"cannot reach the target '{store}' ({type(err).__name__}: {err}); check the URL and give credentials "
            "in storage_options (for s3:// e.g. {'key': ..., 'secret': ...}, or the AWS_* environment variables); "
            "nothing was written"
        ) from err


def is_zarr_root(path: Path) -> bool:
    return any((path / name).is_file() for name in ROOT_DOCUMENTS)


def _holds_cwd(path: Path) -> bool:
    """Whether `path` is the current directory or one that contains it."""
    try:
        here = Path.cwd().resolve()
    except OSError:  # the current directory was removed: nothing to protect
        return False
    there = path.resolve()
    return there == here or there in here.parents


def _not_a_store(path: Path) -> str | None:
    """What is at `path`, in words, when it is neither nothing, an empty directory nor a Zarr
    store (the only things zarrsql may replace); None otherwise."""
    if not occupied(path) or is_zarr_root(path):
        return None
    if path.is_dir():
        return "a directory that is not a Zarr store (no zarr.json, .zgroup or .zarray at its root)"
    return "a file, not a Zarr store"


def check_replaceable(store: str, path: Path, mode: str) -> None:
    """zarrsql deletes nothing it did not create: mode "w" replaces a Zarr store or an empty
    directory only, and no mode writes over the current directory (or one that holds it)."""
    if _holds_cwd(path):
        raise StoreExistsError(
            f"'{store}' is the current directory or one that contains it; a store is written into a directory of "
            "its own and zarrsql never replaces this one: choose another path, e.g. 'out.zarr'"
        )
    what = _not_a_store(path) if mode == "w" else None
    if what is not None:
        raise StoreExistsError(
            f"'{store}' is {what}; mode=\"w\" replaces only a Zarr store or an empty directory, as zarrsql never "
            f"deletes what it did not create: choose another path, or remove '{store}' yourself"
        )


def check_append_target(store: str) -> None:
    """Before a first append creates the store at `store` (no store there yet): refuse, in an
    append's words, a local target that holds something else."""
    path = local_path(store)
    if path is None or is_session_location(store) or not occupied(path):
        return
    raise not_found(store, path)


def occupied(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.exists() or path.is_symlink()


def not_found(store: str, path: Path | None = None) -> StoreNotFoundError:
    what = _not_a_store(path) if path is not None else None
    if what is not None:
        return StoreNotFoundError(
            f"cannot append to '{store}': it is {what}; append to a Zarr store, or write a new store at another "
            f"path (zarrsql writes into or removes nothing it did not create)"
        )
    if path is not None and occupied(path):
        return StoreNotFoundError(
            f"cannot append to '{store}': no Zarr group is at its root (a Zarr array is); append to a group "
            "store, or write a new store at another path"
        )
    return StoreNotFoundError(
        f"cannot append to '{store}': no Zarr store is there (no zarr.json or .zgroup at its "
        'root); create it first with mode="w-" (or mode="w")'
    )


def consolidate(zarr_store: Any, zarr_format: int) -> None:
    """Write the consolidated metadata of the whole store into its root document."""
    import zarr
    from zarr.errors import ZarrUserWarning

    with warnings.catch_warnings(), quiet_dtype_notes():
        # zarr warns that consolidated metadata is not yet in the v3 spec; every v3 reader
        # we target (zarr-python, xarray, zarrsql) reads it
        warnings.simplefilter("ignore", ZarrUserWarning)
        zarr.consolidate_metadata(zarr_store, zarr_format=zarr_format)  # type: ignore[arg-type]


@contextlib.contextmanager
def quiet_dtype_notes() -> Iterator[None]:
    """Without zarr's note that a dtype has no Zarr v3 specification yet (xarray's fixed-width
    text), which it repeats whenever an append rewrites the metadata of an array the store
    already holds: nothing the caller of an append can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"The data type .* does not have a Zarr V3 specification")
        yield
