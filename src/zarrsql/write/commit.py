"""Crash-safe publication of Zarr stores: a new store appears whole, an append commits at once.

Every writer of zarrsql (grid and table layouts) goes through the two functions here and
only supplies `write(target)`, which writes arrays and groups into `target.zarr_store`
(chunks first, then each array's metadata). This module owns where that happens and when
readers see it:

- `publish_new` (mode "w-" / "w"). On local disk the store is written into a hidden staging
  directory beside the target (`.<name>.zarrsql-staging-<hex>`), consolidated, and renamed
  into place: readers see no store or the whole store (mode "w": the old store until the
  rename). On an object store a new store is written in place, the root document(s) held
  back and written last, with the consolidated metadata; one that replaces a store (mode "w")
  is written whole under a staging prefix beside the target first (`_replace_remote`), since
  an object store cannot rename: the old store is touched only once the new one is complete.
  On failure the staging directory (local), the staging prefix or the keys written (object
  store) are removed, and nothing else. Mode "w" replaces only a
  Zarr store (a root zarr.json, .zgroup or .zarray) or an empty directory, never a user's
  directory or file, nor the current directory or one holding it; it holds the old store's
  writer lock while it writes, so it never interleaves with an append.
- `append_commit` (mode "a"). Under the writer lock (`write.lock`, local disk only),
  `write(target)` adds chunks and then rewrites the changed arrays' documents; last, the
  consolidated root document (v3 `zarr.json`, v2 `.zmetadata`) is replaced atomically
  (zarr's local store writes every key to a temporary name and renames it). That root
  document is the single commit point: a reader using consolidated metadata (zarrsql does
  whenever it is present, and so does `xr.open_zarr`) sees the old or the new store.

Rolling back. Before `write` runs, the documents of every node are copied into a backup key
`.zarrsql-append-backup.json` (local disk). `write` then writes through a journaling store:
before it first creates, replaces or deletes any other key, the key is noted in
`.zarrsql-append-journal` (one JSON line, on disk before the change), and a file it replaces
or deletes is first kept (hard-linked, else copied) in `.zarrsql-append-saved/`. If the append
fails, every journaled key goes back to what it was (a created file removed, a kept one moved
back), the documents are restored and the backup removed; if the writer is killed, the next
writer (which finds the dead writer's lock) does the same unless the commit point had
already moved. So no chunk of a failed append survives it (a later append that writes no
chunk there would otherwise show it), and no file the append did not write is touched.

Without consolidated metadata there is no single commit point: the append is still rolled
back on failure, but a reader walking the store during it can see some arrays grown and
others not. docs/writing.md says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarrsql.errors import ParameterError, StoreExistsError, StoreNotFoundError, WriteError, ZarrSQLError
from zarrsql.store.icechunk import is_session_location, looks_like_repository
from zarrsql.write import lock as writer_lock

BACKUP_NAME = ".zarrsql-append-backup.json"
#: The keys an append changed (JSON lines) and the files it replaced or deleted, kept.
JOURNAL_NAME = ".zarrsql-append-journal"
SAVED_NAME = ".zarrsql-append-saved"
MODES = ("w-", "w")
#: The documents a node may have, by Zarr format.
_DOCUMENTS = {3: ("zarr.json",), 2: (".zgroup", ".zarray", ".zattrs", ".zmetadata")}
#: A directory holding one of these at its root is a Zarr store (v3, v2 group, v2 array).
_ROOT_DOCUMENTS = ("zarr.json", ".zgroup", ".zarray")
#: Every document a node may have, whatever the format.
_ALL_DOCUMENTS = frozenset(("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"))
#: Protocols zarrsql reads but cannot write: HTTP has no way to put or delete keys.
_READ_ONLY_PROTOCOLS = ("http", "https")
#: The key whose replacement commits a write, by Zarr format.
COMMIT_KEY = {3: "zarr.json", 2: ".zmetadata"}
#: Temporary files zarr's local store writes before renaming (`<name>.<32 hex>.partial`).
_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")
#: What a writer killed while taking the lock leaves beside it (see `write.lock`).
_LOCK_LEFTOVER = re.compile(r"^\.zarrsql-write\.lock\.[0-9a-f]{32}\.(tmp|stale)$")


@dataclass(frozen=True)
class StoreTarget:
    """Where `write` writes: a zarr store on the staging directory or the store itself."""

    url: str  # the final location (for messages)
    zarr_store: Any  # a zarr.abc.store.Store
    zarr_format: int


# ----------------------------------------------------------------------------- locations
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


def _remote(store: str, storage_options: Mapping[str, str] | None, *, asynchronous: bool = False) -> tuple[Any, str]:
    """(fsspec filesystem, path) of an object-store URL: the class reads use (for GCS, the
    plain JSON-API class where gcsfs's default would spend 60 s asking an emulator about the
    bucket), with the library's own retries kept (a write is not retried by zarrsql)."""
    from zarrsql.store.backends import backend_for, make_filesystem

    options = _fs_options(store, storage_options)
    if not asynchronous:
        return make_filesystem(store, options)
    # an asynchronous instance that is closed after the write (`_zarr_remote`) is the write's own
    closed_after = backend_for(store.split("://", 1)[0]).close_async is not None
    return make_filesystem(store, options, asynchronous=True, **({"skip_instance_cache": True} if closed_after else {}))


@contextlib.contextmanager
def _zarr_remote(store: str, storage_options: Mapping[str, str] | None, *, read_only: bool = False) -> Iterator[Any]:
    """A zarr-python store at the URL, on an asynchronous filesystem of its own whose clients
    are closed when the write ends (adlfs's, left open, print a traceback when the interpreter
    exits)."""
    from zarr.core.sync import sync
    from zarr.storage import FsspecStore

    from zarrsql.store.backends import backend_for

    fs, path = _remote(store, storage_options, asynchronous=True)
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
    with _zarr_remote(store, storage_options, read_only=True) as remote:
        yield remote


def _check_mode(mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        from zarrsql.errors import ParameterError

        raise ParameterError(f"mode must be one of {list(allowed)} to create a store, got {mode!r}")


def _exists_error(store: str) -> StoreExistsError:
    return StoreExistsError(
        f'\'{store}\' already exists and mode is "w-" (create only); pass mode="w" to replace '
        'it, mode="a" to append to it, or choose another path'
    )


# ----------------------------------------------------------------------------- targets
def check_target(store: str, storage_options: Mapping[str, str] | None) -> None:
    """Refuse, before any row is read, a target no writer can write: an empty path, an HTTP
    URL (read-only), a protocol no installed filesystem knows, an object store that cannot be
    reached (no credentials, a host that does not resolve). Each refusal names the fix."""
    if not store.strip():
        raise ParameterError("the target store is empty (''); pass a path or URL, e.g. 'out.zarr'")
    if is_session_location(store):
        return
    if local_path(store) is not None:
        if looks_like_repository(store):
            raise ParameterError(
                f"'{store}' is an Icechunk repository, which zarrsql writes through a session, not by its path; "
                "pass a writable session instead: session = repo.writable_session('main'), to_zarr(..., session), "
                "then session.commit('...') (see 'Into an Icechunk session' in docs/writing.md)"
            )
        return
    protocol = store.split("://", 1)[0].lower()
    if protocol in _READ_ONLY_PROTOCOLS:
        raise ParameterError(
            f"'{store}' is an {protocol} URL, which zarrsql reads but cannot write ({protocol} has no way to put "
            "keys); write to a local path or an object store (s3://, gs://, az://)"
        )
    import fsspec

    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError as err:
        raise ParameterError(
            f"'{store}' names the protocol '{protocol}://', which no installed filesystem knows; check the "
            "spelling, or write to a local path or an object store (s3://, gs://, az://)"
        ) from err
    except ImportError as err:
        raise ParameterError(f"writing to '{store}' needs the filesystem package of {protocol}:// ({err})") from err
    fs, root = _reach(store, lambda: _remote(store, storage_options))
    _reach(store, lambda: fs.exists(root))


def _unreachable() -> tuple[type[BaseException], ...]:
    """What a filesystem raises when an object store cannot be reached: OSError (s3fs's and
    aiohttp's translations, DNS failures), ValueError (a malformed URL or option) and, once
    botocore is loaded, its own errors (no credentials, a bad endpoint)."""
    kinds: list[type[BaseException]] = [OSError, ValueError]
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is not None:
        kinds.append(botocore.BotoCoreError)
    return tuple(kinds)


def _reach(store: str, request: Callable[[], Any]) -> Any:
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


def _is_zarr_root(path: Path) -> bool:
    return any((path / name).is_file() for name in _ROOT_DOCUMENTS)


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
    if not _occupied(path) or _is_zarr_root(path):
        return None
    if path.is_dir():
        return "a directory that is not a Zarr store (no zarr.json, .zgroup or .zarray at its root)"
    return "a file, not a Zarr store"


def _check_replaceable(store: str, path: Path, mode: str) -> None:
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
    if path is None or is_session_location(store) or not _occupied(path):
        return
    raise _not_found(store, path)


# ----------------------------------------------------------------------------- consolidation
def consolidate(zarr_store: Any, zarr_format: int) -> None:
    """Write the consolidated metadata of the whole store into its root document."""
    import zarr
    from zarr.errors import ZarrUserWarning

    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not yet in the v3 spec; every v3 reader
        # we target (zarr-python, xarray, zarrsql) reads it
        warnings.simplefilter("ignore", ZarrUserWarning)
        zarr.consolidate_metadata(zarr_store, zarr_format=zarr_format)  # type: ignore[arg-type]


def _wrapped(kind: str, store: str, err: OSError, left: str) -> WriteError:
    return WriteError(f"writing '{store}' failed ({kind}): {err}; {left}")


def _failure(err: OSError) -> str:
    """What an OSError met while writing was: one with an errno is the file system's; pyarrow
    carries a failed query (DuckDB's error, from the Arrow stream of its rows) as an OSError
    without one."""
    return "an I/O error" if err.errno is not None else "the query failed"


# ----------------------------------------------------------------------------- new stores
def publish_new(
    store: str,
    mode: str,
    storage_options: Mapping[str, str] | None,
    write: Callable[[StoreTarget], None],
    *,
    zarr_format: int = 3,
    consolidated: bool = True,
) -> None:
    """Create a store at `store` whole, or leave the target as it was (see the module doc).

    mode "w-" refuses (`StoreExistsError`) when anything is at `store`; "w" replaces it once
    the new store is complete. `consolidated=False` skips the consolidated metadata (then a
    remote store's root document is still written last).
    """
    _check_mode(mode, MODES)
    if is_session_location(store):
        _write_session(store, mode, write, zarr_format)
        return
    path = local_path(store)
    if path is None:
        _publish_remote(store, mode, storage_options, write, zarr_format, consolidated=consolidated)
    else:
        _publish_local(store, path, mode, write, zarr_format, consolidated=consolidated)


def _occupied(path: Path) -> bool:
    if path.is_dir():
        return any(path.iterdir())
    return path.exists() or path.is_symlink()


def _publish_local(
    store: str, path: Path, mode: str, write: Callable[[StoreTarget], None], zarr_format: int, *, consolidated: bool
) -> None:
    _check_replaceable(store, path, mode)
    if mode == "w-" and _occupied(path):
        raise _exists_error(store)
    # mode "w" holds the old store's writer lock until the old store is moved aside (the lock
    # goes with it): an append running elsewhere refuses the replacement, and none can start
    held = writer_lock.acquire(store, path) if mode == "w" and path.is_dir() and _is_zarr_root(path) else None
    try:
        _stage_and_move(store, path, mode, write, zarr_format, consolidated=consolidated)
    except BaseException:
        if held is not None:
            writer_lock.release(held)
        raise


def _stage_and_move(
    store: str, path: Path, mode: str, write: Callable[[StoreTarget], None], zarr_format: int, *, consolidated: bool
) -> None:
    from zarr.storage import LocalStore

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.parent / f".{path.name}.zarrsql-staging-{uuid.uuid4().hex}"
        staging.mkdir()
    except OSError as err:
        raise _wrapped("cannot create the staging directory", store, err, "nothing was written") from err
    try:
        zarr_store = LocalStore(staging)
        write(StoreTarget(store, zarr_store, zarr_format))
        if consolidated:
            consolidate(zarr_store, zarr_format)
        _move_into_place(store, staging, path, mode)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        left = "nothing was created" if mode == "w-" else "the old store, if any, is unchanged"
        raise _wrapped(_failure(err), store, err, left) from err
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _move_into_place(store: str, staging: Path, path: Path, mode: str) -> None:
    """Rename the complete staging directory to `path` (mode "w": the old store aside first)."""
    if not (path.exists() or path.is_symlink()):
        os.rename(staging, path)
        return
    _check_replaceable(store, path, mode)  # something else may have appeared while we wrote
    if mode == "w-":
        if _occupied(path):
            raise _exists_error(store)
        path.rmdir()  # an empty directory: ours to fill
        os.rename(staging, path)
        return
    old = path.parent / f".{path.name}.zarrsql-old-{uuid.uuid4().hex}"
    os.rename(path, old)
    try:
        os.rename(staging, path)
    except BaseException:
        os.rename(old, path)
        raise
    _remove(old)


def _publish_remote(
    store: str,
    mode: str,
    storage_options: Mapping[str, str] | None,
    write: Callable[[StoreTarget], None],
    zarr_format: int,
    *,
    consolidated: bool,
) -> None:
    fs, root = _reach(store, lambda: _remote(store, storage_options))
    if _reach(store, lambda: bool(_old_keys(fs, root, store, ""))):
        if mode == "w-":
            raise _exists_error(store)
        _replace_remote(store, fs, root, storage_options, write, zarr_format, consolidated=consolidated)
        return
    try:
        _write_remote(store, store, storage_options, write, zarr_format, consolidated=consolidated)
    except BaseException:
        with contextlib.suppress(OSError):
            if fs.exists(root):
                fs.rm(root, recursive=True)
        raise


def _write_remote(
    store: str,
    url: str,
    storage_options: Mapping[str, str] | None,
    write: Callable[[StoreTarget], None],
    zarr_format: int,
    *,
    consolidated: bool,
) -> None:
    """Write the whole store at `url` (the target `store` or its staging prefix), root last."""
    with _zarr_remote(url, storage_options) as remote:
        zarr_store = _RootLast(remote, zarr_format)
        write(StoreTarget(store, zarr_store, zarr_format))
        if consolidated:
            consolidate(zarr_store, zarr_format)
        zarr_store.flush()


def _staging_url(store: str) -> str:
    """Where a replacement is written first: a hidden prefix beside the store (inside it when
    the store is a whole bucket or container, whose keys then leave that prefix out)."""
    base = store.rstrip("/")
    scheme, _, path = base.partition("://")
    head, slash, name = path.rpartition("/")
    tag = f"zarrsql-staging-{uuid.uuid4().hex}"
    return f"{scheme}://{head}/.{name}.{tag}" if slash else f"{base}/.{tag}"


def _old_keys(fs: Any, root: str, store: str, staging: str) -> list[str]:
    """The keys of the Zarr store at `root` ('/'-joined below it; none when nothing is there),
    leaving out the staging prefix. Objects there that are no Zarr store are refused: zarrsql
    deletes nothing it did not create."""
    fs.invalidate_cache()  # the listing must see what other filesystem instances wrote
    if not fs.exists(root):
        return []
    keys = [str(p)[len(root) + 1 :] for p in fs.find(root) if str(p).startswith(root + "/")]
    hidden = staging[len(root) + 1 :] + "/" if staging.startswith(root + "/") else None
    keys = [k for k in keys if k and not (hidden and k.startswith(hidden))]
    if keys and not any(k in _ROOT_DOCUMENTS for k in keys):
        raise StoreExistsError(
            f"'{store}' holds objects but no Zarr store (no zarr.json, .zgroup or .zarray at its root); "
            f'mode="w" replaces only a Zarr store, as zarrsql never deletes what it did not create: choose '
            "another path, or remove those objects yourself"
        )
    return keys


def _replace_remote(
    store: str,
    fs: Any,
    root: str,
    storage_options: Mapping[str, str] | None,
    write: Callable[[StoreTarget], None],
    zarr_format: int,
    *,
    consolidated: bool,
) -> None:
    """Mode "w" over a store on an object store, which has no rename: the new store is written
    whole under a staging prefix, and only then copied over the old one (`_swap_in`). A
    failure while writing (a duplicate in the last chunk, a failed query) leaves the old store
    unchanged and removes the staging prefix."""
    staging_url = _staging_url(store)
    _, staging = _remote(staging_url, storage_options)
    try:
        _write_remote(store, staging_url, storage_options, write, zarr_format, consolidated=consolidated)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.invalidate_cache()
            if fs.exists(staging):
                fs.rm(staging, recursive=True)
        raise
    _swap_in(store, fs, root, staging, staging_url)


def _is_root_document(key: str) -> bool:
    return key in _ALL_DOCUMENTS  # a key without '/': the documents of nested nodes are not


def _remove_keys(fs: Any, root: str, keys: list[str]) -> None:
    if keys:
        fs.rm([f"{root}/{k}" for k in keys])


def _copy_keys(fs: Any, source: str, target: str, keys: list[str]) -> None:
    """Copy `keys` from below `source` to below `target`, server-side and concurrently."""
    if keys:
        fs.copy([f"{source}/{k}" for k in keys], [f"{target}/{k}" for k in keys])


def _swap_in(store: str, fs: Any, root: str, staging: str, staging_url: str) -> None:
    """Replace the old store's keys with the complete store under `staging`, in the order that
    keeps what readers see whole: the old root documents go first (from then on a reader finds
    no store, never old metadata over new chunks), then the new keys are copied into place
    (server-side), the old keys the new store lacks are removed, and the new root documents
    come last, the commit key last of all. Until its root documents are gone the old store is
    untouched; should the copying fail, the complete new store stays at `staging_url`, which
    the error names (the old one is gone by then)."""
    try:
        old = _old_keys(fs, root, store, staging)  # listed again: it may have changed while we wrote
    except BaseException:
        with contextlib.suppress(OSError):
            fs.rm(staging, recursive=True)  # the old store stays as it is: the new one goes
        raise
    new = _old_keys(fs, staging, staging_url, "")
    new_roots = [k for k in new if _is_root_document(k)]
    try:
        _remove_keys(fs, root, [k for k in old if _is_root_document(k)])
        _copy_keys(fs, staging, root, [k for k in new if k not in new_roots])
        kept = set(new)
        _remove_keys(fs, root, [k for k in old if k not in kept and not _is_root_document(k)])
        for key in sorted(new_roots, key=lambda k: k in COMMIT_KEY.values()):  # the commit key last
            _copy_keys(fs, staging, root, [key])
    except Exception as err:
        raise WriteError(
            f"replacing '{store}' failed while the new store was copied into place ({type(err).__name__}: {err}); "
            f"the old store is gone and the complete new store is at '{staging_url}': copy its keys to "
            f"'{store}' (root documents last), or write the store again"
        ) from err
    fs.rm(staging, recursive=True)


def _root_last_class() -> type:
    """`_RootLast`'s class, built on first use (zarr is imported lazily)."""
    from zarr.storage import WrapperStore

    class RootLast(WrapperStore):  # type: ignore[type-arg]
        """A store that keeps the root group's documents in memory until `flush()`, so that
        on an object store the document readers open first is the last one written."""

        def __init__(self, store: Any, zarr_format: int) -> None:
            super().__init__(store)
            self._held: dict[str, Any] = {}
            self._keys = set(_DOCUMENTS[zarr_format])
            self._commit = COMMIT_KEY[zarr_format]

        async def set(self, key: str, value: Any) -> None:
            if key in self._keys:
                self._held[key] = value
                return
            await self._store.set(key, value)

        async def set_if_not_exists(self, key: str, value: Any) -> None:
            if key in self._keys:
                self._held.setdefault(key, value)
                return
            await self._store.set_if_not_exists(key, value)

        async def _set_many(self, values: Any) -> None:
            for key, value in values:
                await self.set(key, value)

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if key in self._held and byte_range is None:
                return self._held[key]
            return await self._store.get(key, prototype, byte_range)

        async def exists(self, key: str) -> bool:
            return key in self._held or await self._store.exists(key)

        def flush(self) -> None:
            """Write the held root documents, the commit key last."""
            from zarr.core.sync import sync

            for key in sorted(self._held, key=lambda k: k == self._commit):
                sync(self._store.set(key, self._held[key]))
            self._held.clear()

    return RootLast


def _RootLast(store: Any, zarr_format: int) -> Any:  # noqa: N802 - a class made lazily
    return _root_last_class()(store, zarr_format)


# ----------------------------------------------------------------------------- appends
def append_commit(
    store: str,
    storage_options: Mapping[str, str] | None,
    write: Callable[[StoreTarget], None],
) -> None:
    """Append to the existing store at `store`, committed by its consolidated root document
    (see the module doc). Raises `StoreNotFoundError` when there is no store to append to and
    `StoreLockedError` when a live writer holds the lock."""
    if is_session_location(store):
        _write_session(store, "a", write, 3)
        return
    path = local_path(store)
    if path is None:
        _append_remote(store, storage_options, write)
        return
    zarr_format = _format_of(store, path)
    with writer_lock.held(store, path) as held:
        if held.reclaimed or (path / BACKUP_NAME).exists():
            recover(path, zarr_format)
        _append_local(store, path, zarr_format, write)


def _not_found(store: str, path: Path | None = None) -> StoreNotFoundError:
    what = _not_a_store(path) if path is not None else None
    if what is not None:
        return StoreNotFoundError(
            f"cannot append to '{store}': it is {what}; append to a Zarr store, or write a new store at another "
            f"path (zarrsql writes into or removes nothing it did not create)"
        )
    if path is not None and _occupied(path):
        return StoreNotFoundError(
            f"cannot append to '{store}': no Zarr group is at its root (a Zarr array is); append to a group "
            "store, or write a new store at another path"
        )
    return StoreNotFoundError(
        f"cannot append to '{store}': no Zarr store is there (no zarr.json or .zgroup at its "
        'root); create it first with mode="w-" (or mode="w")'
    )


def _format_of(store: str, path: Path) -> int:
    if (path / "zarr.json").is_file():
        return 3
    if (path / ".zgroup").is_file():
        return 2
    raise _not_found(store, path)


def _consolidated(path: Path, zarr_format: int) -> bool:
    if zarr_format == 2:
        return (path / ".zmetadata").is_file()
    try:
        root = json.loads((path / "zarr.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(root, dict) and isinstance(root.get("consolidated_metadata"), dict)


def _append_local(store: str, path: Path, zarr_format: int, write: Callable[[StoreTarget], None]) -> None:
    from zarr.storage import LocalStore

    documents = node_documents(path, zarr_format)
    commit = COMMIT_KEY[zarr_format]
    backup = {"commit_sha256": _digest(documents.get(commit)), "documents": documents}
    _drop_journal(path)  # what a finished (committed or rolled back) writer left, if killed then
    _write_atomic(path / BACKUP_NAME, json.dumps(backup).encode())
    journal = _Journal(path, frozenset(documents))
    try:
        zarr_store = _journaled(LocalStore(path), journal)
        write(StoreTarget(store, zarr_store, zarr_format))
        if _consolidated(path, zarr_format):
            consolidate(zarr_store, zarr_format)
    except OSError as err:
        journal.close()
        _restore(path, documents)
        raise _wrapped(_failure(err), store, err, "the append was rolled back; the store is unchanged") from err
    except BaseException:
        journal.close()
        _restore(path, documents)
        raise
    journal.close()
    (path / BACKUP_NAME).unlink(missing_ok=True)  # committed: the journal is of no more use
    _drop_journal(path)


def _append_remote(store: str, storage_options: Mapping[str, str] | None, write: Callable[[StoreTarget], None]) -> None:
    """On an object store: no lock (one writer is the caller's promise), root document last."""
    fs, root = _reach(store, lambda: _remote(store, storage_options))
    if _reach(store, lambda: fs.exists(f"{root}/zarr.json")):
        zarr_format = 3
    elif fs.exists(f"{root}/.zgroup"):
        zarr_format = 2
    else:
        raise _not_found(store)
    consolidated = fs.exists(f"{root}/.zmetadata") if zarr_format == 2 else _remote_consolidated(fs, root)
    with _zarr_remote(store, storage_options) as zarr_store:
        write(StoreTarget(store, zarr_store, zarr_format))
        if consolidated:
            consolidate(zarr_store, zarr_format)


def _remote_consolidated(fs: Any, root: str) -> bool:
    try:
        doc = json.loads(fs.cat_file(f"{root}/zarr.json"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("consolidated_metadata"), dict)


# ----------------------------------------------------------------------------- documents
def _digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    temp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    temp.write_bytes(data)
    os.replace(temp, path)


def _node_dirs(root: Path, zarr_format: int) -> Iterator[Path]:
    """Every group and array directory of the store (arrays' chunk directories not entered)."""
    stack = [root]
    while stack:
        here = stack.pop()
        yield here
        if _is_array(here, zarr_format):
            continue
        with contextlib.suppress(OSError):
            stack.extend(p for p in here.iterdir() if p.is_dir() and not p.name.startswith("."))


def _is_array(here: Path, zarr_format: int) -> bool:
    if zarr_format == 2:
        return (here / ".zarray").is_file()
    try:
        doc = json.loads((here / "zarr.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("node_type") == "array"


def node_documents(root: Path, zarr_format: int) -> dict[str, str]:
    """The text of every metadata document of the store, by key ('/'-joined, from the root)."""
    out: dict[str, str] = {}
    for here in _node_dirs(root, zarr_format):
        prefix = here.relative_to(root).as_posix()
        for name in _DOCUMENTS[zarr_format]:
            doc = here / name
            if doc.is_file():
                key = name if prefix == "." else f"{prefix}/{name}"
                out[key] = doc.read_text(encoding="utf-8")
    return out


def _restore(root: Path, documents: Mapping[str, str]) -> None:
    """Put every key the append changed and every document back as it was before the append;
    drop the backup, then the journal (a writer killed in between repeats this harmlessly)."""
    _undo_journal(root)
    for key, text in documents.items():
        target = root / key
        with contextlib.suppress(OSError):
            if target.read_text(encoding="utf-8") == text:
                continue
        _write_atomic(target, text.encode())
    (root / BACKUP_NAME).unlink(missing_ok=True)
    _drop_journal(root)


def recover(root: Path, zarr_format: int) -> None:
    """Repair what a killed append left: the journaled keys and the documents come back as
    they were unless the commit point had moved already (then the append is complete and only
    the backup and the journal go); zarr's temporary `.partial` files in node directories are
    removed."""
    for here in _node_dirs(root, zarr_format):
        for p in here.iterdir():
            if p.is_file() and (_PARTIAL.search(p.name) or (here == root and _LOCK_LEFTOVER.match(p.name))):
                p.unlink(missing_ok=True)
    backup_path = root / BACKUP_NAME
    try:
        backup = json.loads(backup_path.read_text(encoding="utf-8"))
    except FileNotFoundError:  # no append under way: a journal left is a finished writer's
        _drop_journal(root)
        return
    except ValueError:  # never half-written (atomic), but refuse to guess if it is not JSON
        backup_path.unlink()
        _drop_journal(root)
        return
    commit = COMMIT_KEY[zarr_format]
    current = (root / commit).read_text(encoding="utf-8") if (root / commit).is_file() else None
    if _digest(current) != backup.get("commit_sha256"):
        backup_path.unlink(missing_ok=True)  # committed: the new documents are the store
        _drop_journal(root)
        return
    _restore(root, backup.get("documents", {}))


# ----------------------------------------------------------------------------- the journal
class _Journal:
    """The keys an append changes, each noted on disk before its first change (see the module
    doc); a file about to be replaced or deleted is kept first. The documents in the backup
    are left to it (`documents`)."""

    def __init__(self, root: Path, documents: frozenset[str]) -> None:
        self.root = root
        self.documents = documents
        self.seen: set[str] = set()
        self.file = (root / JOURNAL_NAME).open("a", encoding="utf-8")

    def before_change(self, key: str) -> None:
        if key in self.seen or key in self.documents:
            return
        self.seen.add(key)
        target = self.root / key
        kept: str | None = None
        if target.exists():
            kept = str(len(self.seen))
            saved = self.root / SAVED_NAME
            saved.mkdir(exist_ok=True)
            _keep(target, saved / kept)  # before the line: a line names only a kept file that exists
        self.file.write(json.dumps({"key": key, "kept": kept}) + "\n")
        self.file.flush()  # in the file system before the change: a killed writer's is complete

    def close(self) -> None:
        self.file.close()


def _keep(target: Path, kept: Path) -> None:
    """Keep `target` as `kept`: a hard link (zarr replaces a key by renaming a new file over it,
    so the link keeps the old bytes), or a copy where links are not allowed."""
    if target.is_dir():
        shutil.copytree(target, kept)
        return
    try:
        os.link(target, kept)
    except OSError:
        shutil.copy2(target, kept)


def _journaled_class() -> type:
    """`_journaled`'s class, built on first use (zarr is imported lazily)."""
    from zarr.storage import WrapperStore

    class Journaled(WrapperStore):  # type: ignore[type-arg]
        """A store that notes every key in the journal before it writes or deletes it."""

        def __init__(self, store: Any, journal: _Journal) -> None:
            super().__init__(store)
            self._journal = journal

        def _with_store(self, store: Any) -> Any:
            return type(self)(store, self._journal)

        async def set(self, key: str, value: Any) -> None:
            self._journal.before_change(key)
            await self._store.set(key, value)

        async def set_if_not_exists(self, key: str, value: Any) -> None:
            self._journal.before_change(key)
            await self._store.set_if_not_exists(key, value)

        async def _set_many(self, values: Any) -> None:
            for key, value in values:
                await self.set(key, value)

        async def delete(self, key: str) -> None:
            self._journal.before_change(key)
            await self._store.delete(key)

        async def delete_dir(self, prefix: str) -> None:
            for key in [k async for k in self._store.list_prefix(prefix)]:
                await self.delete(key)

        async def clear(self) -> None:
            await self.delete_dir("")

    return Journaled


def _journaled(store: Any, journal: _Journal) -> Any:
    return _journaled_class()(store, journal)


def _journal_entries(root: Path) -> list[tuple[str, str | None]]:
    """The (key, kept file) pairs of the journal, oldest first; a last line cut short by a kill
    is skipped (it was written before its change, which then never began)."""
    try:
        lines = (root / JOURNAL_NAME).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        key, kept = (entry.get("key"), entry.get("kept")) if isinstance(entry, dict) else (None, None)
        if isinstance(key, str) and key and not key.startswith("/") and ".." not in key.split("/"):
            entries.append((key, kept if isinstance(kept, str) else None))
    return entries


def _undo_journal(root: Path) -> None:
    """Put every journaled key back, newest first: a created file is removed (with the folders
    it emptied), a kept one moved back. Done twice (a kill in between), it changes nothing."""
    for key, kept in reversed(_journal_entries(root)):
        target = root / key
        if kept is None:
            if target.is_file() or target.is_symlink():
                target.unlink(missing_ok=True)
                _prune(target.parent, root)
            continue
        source = root / SAVED_NAME / kept
        if not (source.exists() or source.is_symlink()):
            continue  # moved back already
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            if target.exists() or target.is_symlink():
                _remove(target)
            os.rename(source, target)
        else:
            os.replace(source, target)


def _prune(folder: Path, root: Path) -> None:
    """Remove `folder` and its parents below `root` while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _drop_journal(root: Path) -> None:
    (root / JOURNAL_NAME).unlink(missing_ok=True)
    shutil.rmtree(root / SAVED_NAME, ignore_errors=True)


def _write_session(store: str, mode: str, write: Callable[[StoreTarget], None], zarr_format: int) -> None:
    """Write into a writable Icechunk session, through a fork merged back only when the write
    is complete: a failure leaves the session as it was. Icechunk's commit (the user's
    `session.commit(...)`) is the commit point, so there is no lock and no consolidated
    metadata; concurrent writers are Icechunk's to reconcile (a conflicting commit fails)."""
    import zarr

    from zarrsql.store.icechunk import writable_session

    if zarr_format != 3:
        raise ParameterError("an Icechunk repository holds Zarr format 3 only; pass zarr_format=3")
    session = writable_session(store)
    if session.has_uncommitted_changes:
        raise WriteError(
            "the Icechunk session has uncommitted changes, which a failed write could not be separated from; "
            "commit them (session.commit(...)) or discard them (session.discard_changes()) first"
        )
    fork = session.fork()
    try:
        existing = zarr.open_group(fork.store, mode="r")
        occupied = bool(list(existing.keys())) or bool(dict(existing.attrs))
    except (FileNotFoundError, KeyError, ValueError):
        occupied = False
    if mode == "w-" and occupied:
        raise StoreExistsError(
            "the Icechunk session's root group already holds arrays; pass mode='w' to replace them or mode='a' "
            "to append (nothing was written)"
        )
    if mode == "a" and not occupied:
        raise StoreNotFoundError(
            'cannot append: the Icechunk session\'s root group is empty; create the store first with mode="w-"'
        )
    if mode == "w" and occupied:
        zarr.open_group(fork.store, mode="w")  # cleared in the fork only
    write(StoreTarget(store, fork.store, 3))
    session.merge(fork)
