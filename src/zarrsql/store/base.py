"""The `Store` protocol, key validation and the choice between local and remote stores.

`open_store` picks the store for a location: a local folder (`file://` or a path), an fsspec
URL, or — when the engine installed one for the current call with `using_opener` — a store
of the engine's own (DuckDB reads `s3://` keys with the user's DuckDB secrets that way). The
opener is a context variable, so the core never learns which engine runs it.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from zarrsql.errors import ParameterError, StoreNotFoundError

URL_SCHEMES = ("http://", "https://", "s3://", "s3a://", "gs://", "gcs://", "az://", "abfs://", "abfss://", "memory://")


class Store(Protocol):
    """Read access to the keys of one store.

    `get` returns None only when the key does not exist; every other failure raises
    `StoreReadError`. `get_many` is `get` for several keys at once (concurrently on remote
    stores), in order. `list_dir` returns the names directly below a prefix (files and
    folders); a store with `can_list` False raises `StoreReadError` instead. `token` is a
    cheap validator of a key's content (mtime and size, ETag), None when the key does not
    exist. `concurrency` is how many reads are worth having in flight (cores for a local
    folder, tens for object storage); `remote` says whether each read is a network request;
    `cache_key` identifies the store (URL and options) for the metadata cache, and
    `metadata_ttl` is how long (seconds) a cached tree is trusted without revalidating.
    A store may also have `refusal(key)`: why it will not read below `key` (a local link out
    of the store), None if it will; the metadata walk lists such an entry instead of failing.
    """

    url: str
    cache_key: str
    remote: bool
    can_list: bool
    concurrency: int
    metadata_ttl: float

    def get(self, key: str) -> bytes | None: ...

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]: ...

    def list_dir(self, prefix: str) -> list[str]: ...

    def token(self, key: str) -> str | None: ...

    def token_many(self, keys: Sequence[str]) -> list[str | None]: ...


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


def check_key(key: str) -> str:
    """Return `key` if it stays inside the store, else raise `ParameterError`."""
    if key == "":
        return key
    parts = key.split("/")
    if key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in key:
        raise ParameterError(
            f"path {key!r} is not a plain path inside the store (no '..', '.', empty or "
            "absolute segments); give the array or group path relative to the store root"
        )
    return key


def is_url(location: str) -> bool:
    return location.lower().startswith(URL_SCHEMES)


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
        from zarrsql.store.remote import FsspecStore

        return FsspecStore(location, dict(storage_options or {}))
    from zarrsql.store.local import LocalStore

    path = os.path.abspath(os.path.expanduser(location))
    if os.path.exists(path) and not os.path.isdir(path):
        from zarrsql.store.files import file_error

        raise file_error(location, path)
    if not os.path.isdir(path):
        raise StoreNotFoundError(
            f"no Zarr store at '{location}': the path does not exist; "
            "check the path (relative paths are resolved from the current directory)"
        )
    return LocalStore(path)
