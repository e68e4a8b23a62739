"""Crash-safe publication of Zarr stores: a new store appears whole, an append commits at once.

Every writer of zarrsql (grid and table layouts) goes through the two functions here and
only supplies `write(target)`, which writes arrays and groups into `target.zarr_store`
(chunks first, then each array's metadata). This module owns where that happens and when
readers see it (where a target may be is `write.targets`' to check):

- `publish_new` (mode "w-" / "w"). On local disk the store is written into a hidden staging
  directory beside the target (`write.staging`), consolidated, and renamed into place:
  readers see no store or the whole store. Mode "w" swaps the new store with the old one in
  one step where the system can (`write.swap`), so readers see the old store until then and
  the path is never empty; elsewhere it renames the old store aside first. On failure the
  staging directory is removed, and nothing else; what a killed writer left is repaired by
  the next write of the target (`staging.tidy`). Mode "w" holds the old store's writer lock
  while it writes, so it never interleaves with an append. On an object store,
  `write.remote_publish` does the same without a rename.
- `append_commit` (mode "a"). Under the writer lock (`write.lock`, local disk only),
  `write(target)` adds chunks and then rewrites the changed arrays' documents; last, the
  consolidated root document (v3 `zarr.json`, v2 `.zmetadata`) is replaced atomically
  (zarr's local store writes every key to a temporary name and renames it). That root
  document is the single commit point: a reader using consolidated metadata (zarrsql does
  whenever it is present, and so does `xr.open_zarr`) sees the old or the new store. A failed
  or killed append is undone from its journal (`write.journal`).
- An Icechunk session is written through a fork merged back when the write is complete.

Writes under way when a write fails or Ctrl-C comes are waited for before any cleanup
(`write.in_flight`). Without consolidated metadata there is no single commit point: the
append is still rolled back on failure, but a reader walking the store during it can see
some arrays grown and others not. docs/writing.md says so.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from zarrsql.errors import ParameterError, StoreExistsError, StoreNotFoundError, WriteError, ZarrSQLError
from zarrsql.store.icechunk import is_session_location
from zarrsql.write import lock as writer_lock
from zarrsql.write import staging as staged
from zarrsql.write.in_flight import InFlight, fenced
from zarrsql.write.journal import (
    BACKUP_NAME,
    COMMIT_KEY,
    Journal,
    digest,
    drop_journal,
    journaled,
    node_documents,
    recover,
    restore,
    write_atomic,
)
from zarrsql.write.remote_publish import append_remote, publish_remote
from zarrsql.write.swap import exchange
from zarrsql.write.targets import (
    StoreTarget,
    check_mode,
    check_not_inside,
    check_replaceable,
    consolidate,
    exists_error,
    is_zarr_root,
    local_path,
    not_found,
    occupied,
)

__all__ = ["BACKUP_NAME", "MODES", "StoreTarget", "append_commit", "node_documents", "publish_new", "recover"]

MODES = ("w-", "w")

logger = logging.getLogger(__name__)


def _wrapped(kind: str, store: str, err: OSError, left: str) -> WriteError:
    return WriteError(f"writing '{store}' failed ({kind}): {err}; {left}")


def _failure(err: OSError) -> str:
    """What an OSError met while writing was: one with an errno is the file system's; pyarrow
    carries a failed query (DuckDB's error, from the Arrow stream of its rows) as an OSError
    without one."""
    return "an I/O error" if err.errno is not None else "the query failed"


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
    check_mode(mode, MODES)
    if is_session_location(store):
        _write_session(store, mode, write, zarr_format)
        return
    path = local_path(store)
    if path is None:
        publish_remote(store, mode, storage_options, write, zarr_format, consolidated=consolidated)
    else:
        _publish_local(store, path, mode, write, zarr_format, consolidated=consolidated)


def _publish_local(
    store: str, path: Path, mode: str, write: Callable[[StoreTarget], None], zarr_format: int, *, consolidated: bool
) -> None:
    check_not_inside(store, path)
    # through a link too (to where it points, even if a killed replacement left it dangling)
    restored = staged.tidy(store, Path(os.path.realpath(path)))
    path = _link_target(path)
    check_replaceable(store, path, mode)
    if mode == "w-" and occupied(path):
        raise exists_error(store) if restored is None else staged.restored_error(store, restored)
    # mode "w" holds the old store's writer lock until the old store is moved aside (the lock
    # goes with it): an append running elsewhere refuses the replacement, and none can start
    held = writer_lock.acquire(store, path) if mode == "w" and path.is_dir() and is_zarr_root(path) else None
    try:
        _stage_and_move(store, path, mode, write, zarr_format, consolidated=consolidated)
    except BaseException:
        if held is not None:
            writer_lock.release(held)
        raise


def _link_target(path: Path) -> Path:
    """The directory a symbolic link at `path` points to (through every link), which a write
    replaces or fills as xarray's does through the link; the link stays. Renaming the link
    itself aside would replace the link by a directory and leave its target as it was, with
    the writer lock of mode "w" in it. A link to nothing or to a file is left for the checks
    to refuse (nothing is written through it)."""
    if path.is_symlink() and path.is_dir():
        return Path(os.path.realpath(path))
    return path


def _stage_and_move(
    store: str, path: Path, mode: str, write: Callable[[StoreTarget], None], zarr_format: int, *, consolidated: bool
) -> None:
    from zarr.storage import LocalStore

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = staged.begin(path)
    except OSError as err:
        raise _wrapped("cannot create the staging directory", store, err, "nothing was written") from err
    in_flight = InFlight()
    try:
        zarr_store = fenced(LocalStore(staging.folder), in_flight)
        write(StoreTarget(store, zarr_store, zarr_format))
        if consolidated:
            consolidate(zarr_store, zarr_format)
        replaced = _move_into_place(store, staging, path, mode)
    except OSError as err:
        _discard(staging, in_flight)
        if isinstance(err, ZarrSQLError):  # zarrsql's own (StoreExistsError: another writer came first)
            raise
        left = "nothing was created" if mode == "w-" else "the old store, if any, is unchanged"
        raise _wrapped(_failure(err), store, err, left) from err
    except BaseException:  # Ctrl-C too: zarr's event loop may still be writing into the staging
        _discard(staging, in_flight)
        raise
    _remove_replaced(store, staging, replaced)


def _discard(staging: staged.Staging, in_flight: InFlight) -> None:
    """Remove a failed write's staging directory once no write into it is under way (removed
    earlier, it would be recreated by the chunk writes still running); when some still ran
    after the bounded wait, wait once more and remove it again. Then its writer's record."""
    for _ in range(2):
        idle = in_flight.stop()
        shutil.rmtree(staging.folder, ignore_errors=True)
        if idle:
            break
    staged.finish(staging)


def _move_into_place(store: str, staging: staged.Staging, path: Path, mode: str) -> Path | None:
    """Put the complete staging directory at `path`; returns where what it replaced (the old
    store, or an empty directory) now is, for the caller to remove, or None.

    Over something, the two are swapped in one step where the system can (`write.swap`);
    elsewhere what is there is renamed aside first (`staging.old`), and put back should the
    second rename fail. A writer killed between those two renames leaves nothing at `path`:
    the next write of the target puts the old store back (`staging.tidy`)."""
    if not (path.exists() or path.is_symlink()):
        os.rename(staging.folder, path)
        return None
    check_replaceable(store, path, mode)  # something else may have appeared while we wrote
    if mode == "w-" and occupied(path):
        raise exists_error(store)
    if exchange(staging.folder, path):
        return staging.folder  # now holding the old store (or the empty directory)
    os.rename(path, staging.old)
    try:
        os.rename(staging.folder, path)
    except BaseException:
        _move_back(store, staging, path)
        raise
    return staging.old


def _move_back(store: str, staging: staged.Staging, path: Path) -> None:
    """Put the old store back after the new one could not be renamed in. Should that fail too
    (another writer put something at `path` in between), the old store stays aside, whole, and
    the error says where; its writer's record goes, so that no later write removes it as
    replaced."""
    try:
        os.rename(staging.old, path)
    except OSError as err:
        staging.record.unlink(missing_ok=True)
        raise WriteError(
            f"writing '{store}' failed: something else was put at '{store}' while the old store was moved aside "
            f"to '{staging.old}', and it could not be moved back ({err}); the old store is there, whole: move it "
            "back yourself"
        ) from err


def _remove_replaced(store: str, staging: staged.Staging, replaced: Path | None) -> None:
    """Remove what the new store replaced. The new store is in place already: a failure here
    is not the write's, and what is left (with its writer's record) is removed by a later
    write of the target once this process has ended (`staging.tidy`)."""
    if replaced is not None:
        try:
            shutil.rmtree(replaced)
        except OSError as err:
            logger.warning("the new store is at %s, but what it replaced could not be removed: %s", store, err)
    staged.finish(staging)


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
        try:
            append_remote(store, storage_options, write)
        except OSError as err:
            if isinstance(err, ZarrSQLError):
                raise
            raise WriteError(
                f"writing '{store}' failed: {err}; the append was withdrawn (the store's arrays keep their "
                "committed length; what it wrote beyond it is deleted or never read): the store reads as before"
            ) from err
        return
    check_not_inside(store, path)
    staged.tidy(store, Path(os.path.realpath(path)))  # an old store a killed replacement left aside comes back
    zarr_format = _format_of(store, path)
    with writer_lock.held(store, path) as held:
        if held.reclaimed or (path / BACKUP_NAME).exists():
            recover(path, zarr_format)
        _append_local(store, path, zarr_format, write)


def _format_of(store: str, path: Path) -> int:
    if (path / "zarr.json").is_file():
        return 3
    if (path / ".zgroup").is_file():
        return 2
    raise not_found(store, path)


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
    backup = {"commit_sha256": digest(documents.get(commit)), "documents": documents}
    drop_journal(path)  # what a finished (committed or rolled back) writer left, if killed then
    write_atomic(path / BACKUP_NAME, json.dumps(backup).encode())
    journal = Journal(path, frozenset(documents))
    in_flight = InFlight()
    try:
        zarr_store = fenced(journaled(LocalStore(path), journal), in_flight)
        write(StoreTarget(store, zarr_store, zarr_format))
        if _consolidated(path, zarr_format):
            consolidate(zarr_store, zarr_format)
    except OSError as err:
        _roll_back(path, documents, journal, in_flight)
        if isinstance(err, ZarrSQLError):
            raise
        raise _wrapped(_failure(err), store, err, "the append was rolled back; the store is unchanged") from err
    except BaseException:  # Ctrl-C too: the chunk writes under way end before the rollback
        _roll_back(path, documents, journal, in_flight)
        raise
    journal.close()
    (path / BACKUP_NAME).unlink(missing_ok=True)  # committed: the journal is of no more use
    drop_journal(path)


def _roll_back(path: Path, documents: Mapping[str, str], journal: Journal, in_flight: InFlight) -> None:
    in_flight.stop()  # a chunk still being written would outlive its rollback
    journal.close()
    restore(path, documents)


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
