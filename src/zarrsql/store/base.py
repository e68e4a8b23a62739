"""The `Store` protocol, key validation and the choice between local and remote stores."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

from zarrsql.errors import ParameterError, StoreNotFoundError

URL_SCHEMES = ("http://", "https://", "s3://", "gs://", "gcs://", "az://", "abfs://", "memory://")


class Store(Protocol):
    """Read access to the keys of one store.

    `get` returns None only when the key does not exist; every other failure raises
    `StoreReadError`. `list_dir` returns the names directly below a prefix (files and
    folders). `token` is a cheap validator of a key's content (mtime and size, ETag),
    None when the key does not exist.
    """

    url: str

    def get(self, key: str) -> bytes | None: ...

    def list_dir(self, prefix: str) -> list[str]: ...

    def token(self, key: str) -> str | None: ...


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


def open_store(location: str, storage_options: Mapping[str, str] | None = None) -> Store:
    """Open the store at a local path, a `file://` URL or a remote URL."""
    if not isinstance(location, str) or not location:
        raise ParameterError("the store must be a non-empty path or URL string")
    if location.lower().startswith("file://"):
        location = location[len("file://"):]
    if is_url(location):
        from zarrsql.store.remote import FsspecStore

        return FsspecStore(location, dict(storage_options or {}))
    from zarrsql.store.local import LocalStore

    path = os.path.abspath(os.path.expanduser(location))
    if not os.path.isdir(path):
        raise StoreNotFoundError(
            f"no Zarr store at '{location}': the path does not exist or is not a folder; "
            "check the path (relative paths are resolved from the current directory)"
        )
    return LocalStore(path)
