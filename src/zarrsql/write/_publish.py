"""A minimal stand-in for `zarrsql.write.commit` (owned by the table writer's branch).

Same signatures as commit.py's `publish_new` / `append_commit` / `StoreTarget`, so the grid
writer runs before that module is merged; `commit_api()` returns commit.py's functions when
they exist, these otherwise. Local stores are staged beside the target and renamed into
place; an append takes an O_EXCL lock file. Remove this module once commit.py is merged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from zarrsql.errors import WriteError

LOCK_NAME = ".zarrsql-write.lock"


@dataclass(frozen=True)
class StoreTarget:
    url: str
    zarr_store: Any
    zarr_format: int


def commit_api() -> ModuleType:
    """commit.py when it exists, else this module (same three names)."""
    try:
        from zarrsql.write import commit  # type: ignore[attr-defined]
    except ImportError:
        import sys

        return sys.modules[__name__]
    return commit


def _local(store: str) -> str | None:
    if store.startswith("file://"):
        return store.removeprefix("file://")
    return None if "://" in store else os.path.abspath(os.path.expanduser(store))


def _exists_error(store: str) -> WriteError:
    return WriteError(f'a store already exists at \'{store}\'; pass mode="w" to replace it, or mode="a" to append')


def _consolidate(zarr_store: Any) -> None:
    import zarr

    with contextlib.suppress(Warning):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(zarr_store)


def publish_new(
    store: str, mode: str, storage_options: Mapping[str, str] | None, write: Callable[[StoreTarget], None]
) -> None:
    import zarr

    path = _local(store)
    if path is None:
        fs_store = zarr.storage.FsspecStore.from_url(store, storage_options=dict(storage_options or {}))
        target = StoreTarget(store, fs_store, 3)
        write(target)
        _consolidate(fs_store)
        return
    if os.path.exists(path) and mode == "w-":
        raise _exists_error(store)
    parent, name = os.path.split(path.rstrip("/"))
    staging = os.path.join(parent, f".{name}.staging-{uuid.uuid4().hex[:12]}")
    try:
        zstore = zarr.storage.LocalStore(staging)
        write(StoreTarget(store, zstore, 3))
        _consolidate(zstore)
        if os.path.exists(path):
            old = os.path.join(parent, f".{name}.old-{uuid.uuid4().hex[:12]}")
            os.rename(path, old)
            os.rename(staging, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, path)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)


def append_commit(store: str, storage_options: Mapping[str, str] | None, write: Callable[[StoreTarget], None]) -> None:
    import zarr

    path = _local(store)
    if path is None:
        fs_store = zarr.storage.FsspecStore.from_url(store, storage_options=dict(storage_options or {}))
        write(StoreTarget(store, fs_store, 3))
        _consolidate(fs_store)
        return
    lock = os.path.join(path, LOCK_NAME)
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError as err:
        raise WriteError(f"another writer holds the lock {lock}; wait for it to finish") from err
    try:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        zstore = zarr.storage.LocalStore(path)
        write(StoreTarget(store, zstore, 3))
        _consolidate(zstore)
    finally:
        os.unlink(lock)
