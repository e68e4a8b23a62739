"""The hidden folders a new store is staged in beside its target, and what a dead writer left.

On local disk a new store (mode "w-" or "w") is written into `.<name>.zarrsql-staging-<hex>`
beside the target and moved into place when complete (`write.commit`). Mode "w" over a store
swaps the two folders in one step (`write.swap`), after which the staging name holds the old
store until it is removed; where the system cannot swap, the old store is first renamed to
`.<name>.zarrsql-old-<hex>`, then the new one into place. Before it creates any of them, a
write records its owner (host and pid, `write.lock.record_owner`) in the file
`.<name>.zarrsql-writer-<hex>` (same <hex>), and it removes that record last, once its
folders are gone. The record lies beside the folders, not in them: zarr's
`open_group(mode="w")` empties the staging folder when the write starts.

A writer killed (SIGKILL, the OOM killer, power loss) leaves its record and folders. The next
write of the same target, in any mode, calls `tidy` first, which repairs each set whose
record names a process of this host that is no longer alive:

- the staging folder is removed: a store never published, or (killed after a swap) the old
  store being replaced;
- an old store renamed aside is put back when nothing is at the target (killed between the
  two renames: the replacement did not happen), and removed when the staging folder is gone
  (killed after them: the new store is in place); when something else was put at the
  target since, it stays where it is;
- then the record.

Nothing else is touched: only those exact names, with the record of a dead writer; never the
folders of a live writer or of another host's (whose pid cannot be checked), never a folder
without a record.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from zarrsql.errors import StoreExistsError, WriteError
from zarrsql.write import lock

logger = logging.getLogger(__name__)

#: The <hex> shared by the names of one write (a uuid4's 32 hex digits).
_KEY = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, slots=True)
class Staging:
    """The names one write uses beside `target` (see the module doc)."""

    target: Path
    key: str

    def _beside(self, kind: str) -> Path:
        return self.target.parent / f".{self.target.name}.zarrsql-{kind}-{self.key}"

    @property
    def folder(self) -> Path:
        """Where the new store is written; after a swap, the old store until it is removed."""
        return self._beside("staging")

    @property
    def old(self) -> Path:
        """Where the old store is renamed when the two folders cannot be swapped."""
        return self._beside("old")

    @property
    def record(self) -> Path:
        """The file that names the writer (host and pid)."""
        return self._beside("writer")


def begin(target: Path) -> Staging:
    """Record this writer beside `target`, then create its empty staging folder."""
    staging = Staging(target, uuid.uuid4().hex)
    lock.record_owner(staging.record)
    try:
        staging.folder.mkdir()
    except BaseException:
        staging.record.unlink(missing_ok=True)
        raise
    return staging


def finish(staging: Staging) -> None:
    """Remove the writer's record once its folders are gone. While one is left (a removal that
    failed or was interrupted), the record stays, for `tidy` to finish once this process ended."""
    if not any(path.exists() or path.is_symlink() for path in (staging.folder, staging.old)):
        staging.record.unlink(missing_ok=True)


def tidy(store: str, target: Path) -> Path | None:
    """Repair what dead writers left beside `target` (see the module doc). Returns the name the
    old store had when one was put back at `target`, else None. Raises `WriteError` when an old
    store that belongs at the empty target cannot be put back."""
    restored = None
    for record in _dead_records(target):
        if record.name.endswith(".tmp"):  # killed while writing its record: nothing else exists
            record.unlink(missing_ok=True)
            continue
        restored = _repair(store, Staging(target, record.name.rpartition("-")[2])) or restored
    return restored


def _dead_records(target: Path) -> list[Path]:
    """The records (and half-written records, `<record>.tmp`) beside `target` of writers of this
    host that are no longer alive."""
    prefix = f".{target.name}.zarrsql-writer-"
    try:
        names = [name for name in os.listdir(target.parent) if name.startswith(prefix)]
    except OSError:  # no parent folder yet, or one we may not list: nothing of ours to repair
        return []
    records = []
    for name in names:
        key, _, rest = name[len(prefix) :].partition(".")
        path = target.parent / name
        if _KEY.fullmatch(key) and rest in ("", "tmp") and path.is_file() and lock.owner_died(path):
            records.append(path)
    return records


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _repair(store: str, staging: Staging) -> Path | None:
    """Repair one dead writer's folders; the old store's name when it was put back."""
    restored = None
    if _is_folder(staging.old):
        if not (staging.target.exists() or staging.target.is_symlink()):
            _put_back(store, staging)
            restored = staging.old
        elif not _is_folder(staging.folder):  # the new store went into place: the old one was replaced
            logger.info("removing the old store a killed replacement of %s left: %s", store, staging.old)
            shutil.rmtree(staging.old, ignore_errors=True)
        # else something else was put at the target since: the old store was not replaced, it stays
    if _is_folder(staging.folder):
        logger.info("removing the staging folder a killed write of %s left: %s", store, staging.folder)
        shutil.rmtree(staging.folder, ignore_errors=True)
    finish(staging)
    return restored


def _put_back(store: str, staging: Staging) -> None:
    logger.warning("putting back the old store a killed replacement of %s left aside: %s", store, staging.old)
    try:
        os.rename(staging.old, staging.target)
    except OSError as err:
        raise WriteError(
            f"no store is at '{store}': a zarrsql write that replaced it (mode=\"w\") was killed after moving the "
            f"old store aside to '{staging.old}', which could not be put back ({err}); rename that folder to "
            f"'{staging.target}' yourself (nothing was written)"
        ) from err


def restored_error(store: str, old: Path) -> StoreExistsError:
    """The refusal of mode "w-" after `tidy` put an old store back at the target."""
    return StoreExistsError(
        f"no store was at '{store}' because a zarrsql write that replaced it (mode=\"w\") had been killed after "
        f"moving the old store aside to '{old.name}'; that store is now back at '{store}', and mode=\"w-\" does "
        'not write over it. Nothing was written: run the write again (mode="a" appends to the store that is '
        'back, mode="w" replaces it)'
    )
