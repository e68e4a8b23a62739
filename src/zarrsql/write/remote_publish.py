"""Writing a whole store, and appending, on an object store, which has no rename.

A new store is written in place with its root document(s) held back (`RootLast`) and written
last, after the consolidated metadata: a reader finds no store until it is whole. A store
that replaces another (mode "w") is written whole under a staging prefix beside the target
first (`_replace_remote`), and only then copied over the old one in an order that keeps what
readers see whole (`_swap_in`): the old store is touched only once the new one is complete.
On failure the staging prefix, or the keys written, are removed, and nothing else. An append
has no lock (one writer is the caller's promise); its root document is written last.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from zarrsql.errors import StoreExistsError, WriteError
from zarrsql.write.in_flight import InFlight, fenced
from zarrsql.write.journal import COMMIT_KEY, DOCUMENTS
from zarrsql.write.targets import (
    ROOT_DOCUMENTS,
    StoreTarget,
    consolidate,
    exists_error,
    not_found,
    reach,
    remote,
    zarr_remote,
)

#: Every document a node may have, whatever the format.
_ALL_DOCUMENTS = frozenset(("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"))


def publish_remote(
    store: str,
    mode: str,
    storage_options: Mapping[str, str] | None,
    write: Callable[[StoreTarget], None],
    zarr_format: int,
    *,
    consolidated: bool,
) -> None:
    fs, root = reach(store, lambda: remote(store, storage_options))
    if reach(store, lambda: bool(_old_keys(fs, root, store, ""))):
        if mode == "w-":
            raise exists_error(store)
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
    in_flight = InFlight()
    with zarr_remote(url, storage_options) as remote:
        zarr_store = _RootLast(fenced(remote, in_flight), zarr_format)
        try:
            write(StoreTarget(store, zarr_store, zarr_format))
            if consolidated:
                consolidate(zarr_store, zarr_format)
            zarr_store.flush()
        except BaseException:
            in_flight.stop()  # the caller's cleanup then meets no PUT still under way
            raise


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
    if keys and not any(k in ROOT_DOCUMENTS for k in keys):
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
    _, staging = remote(staging_url, storage_options)
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
            self._keys = set(DOCUMENTS[zarr_format])
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


def append_remote(store: str, storage_options: Mapping[str, str] | None, write: Callable[[StoreTarget], None]) -> None:
    """On an object store: no lock (one writer is the caller's promise), root document last."""
    fs, root = reach(store, lambda: remote(store, storage_options))
    if reach(store, lambda: fs.exists(f"{root}/zarr.json")):
        zarr_format = 3
    elif fs.exists(f"{root}/.zgroup"):
        zarr_format = 2
    else:
        raise not_found(store)
    consolidated = fs.exists(f"{root}/.zmetadata") if zarr_format == 2 else _remote_consolidated(fs, root)
    with zarr_remote(store, storage_options) as zarr_store:
        write(StoreTarget(store, zarr_store, zarr_format))
        if consolidated:
            consolidate(zarr_store, zarr_format)


def _remote_consolidated(fs: Any, root: str) -> bool:
    try:
        doc = json.loads(fs.cat_file(f"{root}/zarr.json"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("consolidated_metadata"), dict)
