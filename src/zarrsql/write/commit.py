"""Crash-safe publication of Zarr stores: a new store appears whole, an append commits at once.

Every writer of zarrsql (grid and table layouts) goes through the two functions here and
only supplies `write(target)`, which writes arrays and groups into `target.zarr_store`
(chunks first, then each array's metadata). This module owns where that happens and when
readers see it:

- `publish_new` (mode "w-" / "w"). On local disk the store is written into a hidden staging
  directory beside the target (`.<name>.zarrsql-staging-<hex>`), consolidated, and renamed
  into place: readers see no store or the whole store (mode "w": the old store until the
  rename). On an object store it is written in place, the root document(s) held back and
  written last, with the consolidated metadata. On failure the staging directory (local) or
  the keys written (object store) are removed, and nothing else.
- `append_commit` (mode "a"). Under the writer lock (`write.lock`, local disk only),
  `write(target)` adds chunks and then rewrites the changed arrays' documents; last, the
  consolidated root document (v3 `zarr.json`, v2 `.zmetadata`) is replaced atomically
  (zarr's local store writes every key to a temporary name and renames it). That root
  document is the single commit point: a reader using consolidated metadata (zarrsql does
  whenever it is present, and so does `xr.open_zarr`) sees the old or the new store.

Rolling back. Before `write` runs, the documents of every node are copied into a backup key
`.zarrsql-append-backup.json` (local disk). If the append fails, they are restored and the
backup removed; if the writer is killed, the next writer (which finds the dead writer's lock)
restores them unless the commit point had already moved. Chunks written beyond an array's
old shape stay behind, unseen (the shape in the documents is what readers trust); a chunk
across the old end is rewritten with the old rows unchanged.

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
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zarrsql.errors import ParameterError, StoreExistsError, StoreNotFoundError, WriteError
from zarrsql.store.icechunk import is_session_location
from zarrsql.write import lock as writer_lock

BACKUP_NAME = ".zarrsql-append-backup.json"
MODES = ("w-", "w")
#: The documents a node may have, by Zarr format.
_DOCUMENTS = {3: ("zarr.json",), 2: (".zgroup", ".zarray", ".zattrs", ".zmetadata")}
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


def _fs_options(storage_options: Mapping[str, str] | None) -> dict[str, Any]:
    from zarrsql.store.options import split_settings

    _, theirs = split_settings(storage_options or {})
    return theirs


def _remote(store: str, storage_options: Mapping[str, str] | None) -> tuple[Any, str]:
    """(fsspec filesystem, path) of an object-store URL."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(store, **_fs_options(storage_options))
    return fs, path


def _zarr_remote(store: str, storage_options: Mapping[str, str] | None) -> Any:
    from zarr.storage import FsspecStore

    return FsspecStore.from_url(store, storage_options=_fs_options(storage_options), read_only=False)


def _check_mode(mode: str, allowed: tuple[str, ...]) -> None:
    if mode not in allowed:
        from zarrsql.errors import ParameterError

        raise ParameterError(f"mode must be one of {list(allowed)} to create a store, got {mode!r}")


def _exists_error(store: str) -> StoreExistsError:
    return StoreExistsError(
        f'\'{store}\' already exists and mode is "w-" (create only); pass mode="w" to replace '
        'it, mode="a" to append to it, or choose another path'
    )


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
    from zarr.storage import LocalStore

    if mode == "w-" and _occupied(path):
        raise _exists_error(store)
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
        raise _wrapped("an I/O error", store, err, left) from err
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
    if mode == "w-":
        if _occupied(path):
            raise _exists_error(store)  # something appeared while we wrote
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
    fs, root = _remote(store, storage_options)
    if fs.exists(root) and fs.find(root):
        if mode == "w-":
            raise _exists_error(store)
        fs.rm(root, recursive=True)  # an object store cannot rename: the old store goes first
    zarr_store = _RootLast(_zarr_remote(store, storage_options), zarr_format)
    try:
        write(StoreTarget(store, zarr_store, zarr_format))
        if consolidated:
            consolidate(zarr_store, zarr_format)
        zarr_store.flush()
    except BaseException:
        with contextlib.suppress(OSError):
            if fs.exists(root):
                fs.rm(root, recursive=True)
        raise


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


def _not_found(store: str) -> StoreNotFoundError:
    return StoreNotFoundError(
        f"cannot append to '{store}': no Zarr store is there (no zarr.json or .zgroup at its "
        'root); create it first with mode="w-" (or mode="w")'
    )


def _format_of(store: str, path: Path) -> int:
    if (path / "zarr.json").is_file():
        return 3
    if (path / ".zgroup").is_file():
        return 2
    raise _not_found(store)


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
    _write_atomic(path / BACKUP_NAME, json.dumps(backup).encode())
    try:
        zarr_store = LocalStore(path)
        write(StoreTarget(store, zarr_store, zarr_format))
        if _consolidated(path, zarr_format):
            consolidate(zarr_store, zarr_format)
    except OSError as err:
        _restore(path, documents)
        raise _wrapped("an I/O error", store, err, "the append was rolled back; the store is unchanged") from err
    except BaseException:
        _restore(path, documents)
        raise
    (path / BACKUP_NAME).unlink(missing_ok=True)


def _append_remote(store: str, storage_options: Mapping[str, str] | None, write: Callable[[StoreTarget], None]) -> None:
    """On an object store: no lock (one writer is the caller's promise), root document last."""
    fs, root = _remote(store, storage_options)
    if fs.exists(f"{root}/zarr.json"):
        zarr_format = 3
    elif fs.exists(f"{root}/.zgroup"):
        zarr_format = 2
    else:
        raise _not_found(store)
    consolidated = fs.exists(f"{root}/.zmetadata") if zarr_format == 2 else _remote_consolidated(fs, root)
    zarr_store = _zarr_remote(store, storage_options)
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
    """Put every document back as it was before the append; drop the backup."""
    for key, text in documents.items():
        target = root / key
        with contextlib.suppress(OSError):
            if target.read_text(encoding="utf-8") == text:
                continue
        _write_atomic(target, text.encode())
    (root / BACKUP_NAME).unlink(missing_ok=True)


def recover(root: Path, zarr_format: int) -> None:
    """Repair what a killed append left: the documents come back from the backup unless the
    commit point had moved already (then the append is complete and only the backup goes);
    zarr's temporary `.partial` files in node directories are removed."""
    for here in _node_dirs(root, zarr_format):
        for p in here.iterdir():
            if p.is_file() and (_PARTIAL.search(p.name) or (here == root and _LOCK_LEFTOVER.match(p.name))):
                p.unlink(missing_ok=True)
    backup_path = root / BACKUP_NAME
    try:
        backup = json.loads(backup_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except ValueError:  # never half-written (atomic), but refuse to guess if it is not JSON
        backup_path.unlink()
        return
    commit = COMMIT_KEY[zarr_format]
    current = (root / commit).read_text(encoding="utf-8") if (root / commit).is_file() else None
    if _digest(current) != backup.get("commit_sha256"):
        backup_path.unlink(missing_ok=True)  # committed: the new documents are the store
        return
    _restore(root, backup.get("documents", {}))


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
