"""Icechunk sessions given from Python, named by a location the SQL text can carry; and the
check that a local folder is a repository.

Both are needed before any repository is opened (a `read_zarr` of a session object, the
format check of every local store), so they live apart from `store/icechunk.py`, whose
reading machinery (and `asyncio`, `icechunk`) loads only with the first repository.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from typing import Any

from zarrsql.store.base import is_url

#: The location prefix of a session registered from Python (`session_location`).
SESSION_PREFIX = "icechunk-session:"


def looks_like_repository(location: str) -> bool:
    """Whether `location` is a local folder laid out as an Icechunk repository (its
    `snapshots/` folder beside `refs/` (format 1, Icechunk 1.x) or the `repo` object (format 2,
    Icechunk 2.x), no Zarr root document), or a registered session."""
    if location.startswith(SESSION_PREFIX):
        return True
    if is_url(location) and not location.lower().startswith("file://"):
        return False  # a remote layout costs a request to see: format := 'icechunk' says it
    path = os.path.expanduser(location.removeprefix("file://"))
    return (
        (os.path.isdir(os.path.join(path, "refs")) or os.path.isfile(os.path.join(path, "repo")))
        and os.path.isdir(os.path.join(path, "snapshots"))
        and not os.path.exists(os.path.join(path, "zarr.json"))
    )


_registered: dict[str, Any] = {}
#: The last sessions given, held strongly: a relation made from a temporary session may bind
#: its statement again after the call that passed it has returned.
_recent: deque[Any] = deque(maxlen=16)
_registry_lock = threading.Lock()


def is_icechunk_object(value: Any) -> bool:
    """Whether `value` is an Icechunk `Session` or its store (by its class's module, so that
    icechunk need not be imported to tell)."""
    return type(value).__module__.split(".")[0] == "icechunk" and type(value).__name__ in (
        "Session",
        "ForkSession",
        "IcechunkStore",
    )


def session_location(value: Any) -> str:
    """A location naming the Icechunk `Session` or store `value` for later reads in SQL.

    The object is referenced weakly (and the last few strongly), so the SQL text that names it
    reads exactly that session for as long as it lives.
    """
    name = f"{SESSION_PREFIX}{id(value):x}"
    try:
        ref: Any = weakref.ref(value)
    except TypeError:  # a class without weak references: held for good
        ref = lambda: value  # noqa: E731
    with _registry_lock:
        _registered[name] = ref
        _recent.append(value)
        for stale in [k for k, ref in _registered.items() if ref() is None]:
            del _registered[stale]
    return name


def registered(location: str) -> Any:  # noqa: ANN401 - an Icechunk Session or store
    """The session or store `session_location` named `location`, or None once it is gone."""
    with _registry_lock:
        ref = _registered.get(location)
    return ref() if ref is not None else None


def is_session_location(location: str) -> bool:
    """Whether `location` names a session given from Python (`session_location`)."""
    return location.startswith(SESSION_PREFIX)
