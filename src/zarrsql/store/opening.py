"""Which store a location opens: a local folder, an fsspec URL, or the engine's own store.

`open_store` picks the store for a location: a local folder (`file://` or a path), an fsspec
URL, or — when the engine installed one for the current call with `using_opener` — a store
of the engine's own (DuckDB reads `s3://` keys with the user's DuckDB secrets that way). The
opener is a context variable, so the core never learns which engine runs it. It lives apart
from store/base.py so that the concrete stores can import the protocol without a cycle.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from zarrsql.errors import ParameterError, StoreNotFoundError
from zarrsql.store.base import Store, is_url
from zarrsql.store.files import file_error
from zarrsql.store.local import LocalStore

#: Given (location, storage_options), a store of the engine's own, or None for the default.
Opener = Callable[[str, Mapping[str, Any]], "Store | None"]
_opener: contextvars.ContextVar[Opener | None] = contextvars.ContextVar("zarrsql_store_opener", default=None)


@contextmanager
def using_opener(opener: Opener | None) -> Iterator[None]:
    """Within the block, `open_store` asks `opener` first (see the module docstring)."""
    token = _opener.set(opener)
    try:
        yield
    finally:
        _opener.reset(token)


def open_store(location: str, storage_options: Mapping[str, Any] | None = None) -> Store:
    """Open the store at a local path, a `file://` URL or a remote URL."""
    if not isinstance(location, str) or not location:
        raise ParameterError("the store must be a non-empty path or URL string")
    if location.lower().startswith("file://"):
        location = location[len("file://") :]
    if is_url(location):
        opener = _opener.get()
        store = opener(location, dict(storage_options or {})) if opener is not None else None
        if store is not None:
            return store
        from zarrsql.store.remote import FsspecStore  # fsspec is imported only for URLs

        return FsspecStore(location, dict(storage_options or {}))
    path = os.path.abspath(os.path.expanduser(location))
    if os.path.exists(path) and not os.path.isdir(path):
        raise file_error(location, path)
    if not os.path.isdir(path):
        raise StoreNotFoundError(
            f"no Zarr store at '{location}': the path does not exist; "
            "check the path (relative paths are resolved from the current directory)"
        )
    return LocalStore(path)
