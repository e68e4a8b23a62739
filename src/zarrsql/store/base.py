"""The `Store` protocol, the optional capabilities a store may have, and key validation.

Every store reads keys (`Store`). What only some stores can do is a protocol of its own,
checked with `isinstance` where it is used, so callers never test for a concrete store:
`RangeReading` (a part of a key's value: sharded arrays read only the inner chunks a query
touches), `Prefetching` (fetches started ahead of the reader), `ReadTokens` (validators
that came with reads), `ChangeWatching` (a missing
chunk is checked against the metadata the query planned with), `Refusing` (keys a store will
not read, such as a local link out of the store) and `ZarrPythonAccess` (a zarr-python store
over the same keys, for codecs zarrsql does not decode itself).

Which store a location opens is decided in store/opening.py.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from zarrsql.errors import ParameterError

#: The names of a hierarchy's metadata documents (v3 and v2): JSON, never chunk data.
METADATA_DOCUMENTS = frozenset({"zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata"})
URL_SCHEMES = ("http://", "https://", "s3://", "s3a://", "gs://", "gcs://", "az://", "abfs://", "abfss://", "memory://")


class Store(Protocol):
    """Read access to the keys of one store.

    `get` returns None only when the key does not exist; every other failure raises
    `StoreReadError`. `get_many` is `get` for several keys at once (concurrently on remote
    stores), in order. `list_dir` returns the names directly below a prefix (files and
    folders); a store with `can_list` False raises `StoreReadError` instead. `token` is a
    cheap validator of a key's content (a local file's inode, change time, mtime and size;
    an ETag), None when the key does not exist. `concurrency` is how many reads are worth
    having in flight (cores for a local folder, tens for object storage); `remote` says
    whether each read is a network request;
    `cache_key` identifies the store (URL and options) for the metadata cache, and
    `metadata_ttl` is how long (seconds) a cached tree is trusted without revalidating.
    The optional capabilities are the protocols below.
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


@dataclass(frozen=True, slots=True)
class ByteRange:
    """`length` bytes of a value from `start`, or its last `length` bytes when made with
    `ByteRange.last` (then `start` is `-length`): one request either way, without knowing the
    value's size, which is what a shard index at the end needs."""

    start: int
    length: int

    def __post_init__(self) -> None:
        if self.length < 0 or (self.start < 0 and self.start != -self.length):
            raise ValueError(f"not a byte range: start {self.start}, length {self.length}")

    @classmethod
    def last(cls, length: int) -> ByteRange:
        return cls(-length, length)

    def bounds(self) -> tuple[int, int | None]:
        """(start, end) as Python slices and fsspec's `cat_file` take them."""
        return (self.start, None) if self.start < 0 else (self.start, self.start + self.length)


@runtime_checkable
class RangeReading(Protocol):
    """A store that reads parts of values: `get_ranges` is `get_many` for (key, range) pairs,
    each answer the range's bytes (shorter where the value ends first), None where the key
    does not exist. Only the bytes asked for travel, and only they count in `trace()`."""

    def get_ranges(self, requests: Sequence[tuple[str, ByteRange]]) -> list[bytes | None]: ...


@runtime_checkable
class Prefetching(Protocol):
    """A store that fetches keys ahead of `get_many`: `prefetch` starts them and returns a
    future per key (done when its bytes are in); `forget` drops those nobody will take."""

    def prefetch(self, keys: Sequence[str]) -> list[concurrent.futures.Future[bytes | None]]: ...

    def forget(self, keys: Sequence[str]) -> None: ...


@runtime_checkable
class ReadTokens(Protocol):
    """A store whose reads carry validators: `read_tokens` gives, per key, the validator of the
    version its last read returned (as `token` spells them), asking only for keys read
    without one."""

    def read_tokens(self, keys: Sequence[str]) -> list[str | None]: ...


@runtime_checkable
class ChangeWatching(Protocol):
    """A store told which metadata document (and its token) a query planned with, so that a
    chunk found missing while that document changed is an error instead of fill."""

    def watch(self, key: str, token: str | None) -> None: ...


@runtime_checkable
class Refusing(Protocol):
    """A store that refuses some keys: `refusal(key)` says why it will not read below `key`
    (None if it will); the metadata walk lists such an entry instead of failing."""

    def refusal(self, key: str) -> str | None: ...


@runtime_checkable
class ZarrPythonAccess(Protocol):
    """A store zarr-python can read too: `zarr_python_store()` is a read-only zarr-python
    store over the same keys."""

    def zarr_python_store(self) -> Any: ...


#: `cache_key`s of stores a query found changed under it (`note_changed`): their cached
#: metadata is checked again by the next query even within its `metadata_ttl`.
_CHANGED: set[str] = set()
_CHANGED_LOCK = threading.Lock()


def note_changed(cache_key: str) -> None:
    with _CHANGED_LOCK:
        _CHANGED.add(cache_key)


def take_changed(cache_key: str) -> bool:
    """Whether a query found this store changed since the last call (and forget it)."""
    with _CHANGED_LOCK:
        if cache_key in _CHANGED:
            _CHANGED.discard(cache_key)
            return True
        return False


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
