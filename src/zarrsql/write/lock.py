"""The writer lock of a store on local disk: one writer at a time, a dead writer's lock reclaimed.

The lock is a file `.zarrsql-write.lock` in the store's root directory holding the owner's
host and pid as JSON. It is created whole or not at all: the text goes to a private temporary
file first, which is then hard-linked to the lock's name (`os.link` fails when the name
exists, like `O_EXCL`), so a writer killed at any moment never leaves a half-written lock.

A lock whose pid is not alive on this host is stale (its writer died, e.g. SIGKILL): the
next writer takes it over and is told so (`Lock.reclaimed`), so that it can repair what the
dead writer may have left (see `write.commit`). A lock of another host cannot be checked and
is never taken over. Zarr readers do not look at the file (it is not a Zarr key they know).

The same record of an owner marks the folders a new store is staged in beside its target
(`write.staging`): `record_owner` writes one, `owner_died` says whether its writer is gone.

Object stores have no lock: concurrent writers there are unsupported (docs/writing.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zarrsql.errors import StoreLockedError

LOCK_NAME = ".zarrsql-write.lock"


@dataclass(frozen=True, slots=True)
class Lock:
    """A held writer lock; `reclaimed`: it was taken over from a dead writer."""

    path: Path
    reclaimed: bool


def _owner() -> dict[str, object]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _create(path: Path) -> bool:
    """Create the lock file whole; False when it already exists."""
    temp = path.with_name(f"{LOCK_NAME}.{uuid.uuid4().hex}.tmp")
    temp.write_text(json.dumps(_owner()), encoding="utf-8")
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a live process of another user
        return True
    return True


def _holder(path: Path) -> dict[str, object] | None:
    """The lock's owner, or None when the file vanished in between."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        owner = json.loads(text)
    except ValueError:
        owner = None
    return owner if isinstance(owner, dict) else {}


def _stale(owner: dict[str, object]) -> bool:
    pid = owner.get("pid")
    if owner.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    return not _alive(pid)


def _refuse(store: str, path: Path, owner: dict[str, object]) -> StoreLockedError:
    who = f"process {owner.get('pid')} on host {owner.get('host')}" if owner else "an unknown writer"
    return StoreLockedError(
        f"store '{store}' is being written by {who} (lock file '{path}'); zarrsql allows one "
        "writer at a time: wait for that write to finish, or, if no such process exists any "
        "more, delete the lock file"
    )


def acquire(store: str, root: Path) -> Lock:
    """Take the lock of the store at directory `root`, or raise `StoreLockedError`."""
    path = root / LOCK_NAME
    for _ in range(3):  # a lock released or reclaimed between two steps: look again
        if _create(path):
            return Lock(path, reclaimed=False)
        owner = _holder(path)
        if owner is None:
            continue
        if not _stale(owner):
            raise _refuse(store, path, owner)
        # take over a dead writer's lock: move it aside under a unique name, so that of two
        # writers reclaiming at once only one removes it
        aside = path.with_name(f"{LOCK_NAME}.{uuid.uuid4().hex}.stale")
        with contextlib.suppress(FileNotFoundError):
            os.rename(path, aside)
            aside.unlink()
            if _create(path):
                return Lock(path, reclaimed=True)
    raise _refuse(store, path, _holder(path) or {})


def record_owner(path: Path) -> None:
    """Write this process's host and pid into the file `path`, whole or not at all (a temporary
    `<path>.tmp` renamed onto it), so that a later writer can tell whether its writer is alive."""
    temp = path.with_name(f"{path.name}.tmp")
    temp.write_text(json.dumps(_owner()), encoding="utf-8")
    os.replace(temp, path)


def owner_died(path: Path) -> bool:
    """Whether the file at `path` records a process of this host that is no longer alive. False
    for a live process, another host's (it cannot be checked), a file that is not such a
    record, and no file: what is not known to be dead is left alone."""
    try:
        owner = _holder(path)
    except OSError:  # a folder, or a file we may not read: not known to be dead
        return False
    return owner is not None and _stale(owner)


def release(lock: Lock) -> None:
    """Give the lock back (only a lock this process holds)."""
    owner = _holder(lock.path)
    if owner is not None and owner.get("pid") == os.getpid():
        lock.path.unlink(missing_ok=True)


@contextlib.contextmanager
def held(store: str, root: Path) -> Iterator[Lock]:
    """The lock for the duration of a `with` block."""
    lock = acquire(store, root)
    try:
        yield lock
    finally:
        release(lock)
