"""Bytes by key: where a store lives (local folder or fsspec URL) and how keys are read.

`open_store(location, storage_options)` is the only way in. Keys are '/'-joined paths below
the store root; a key with an empty, '.' or '..' segment is refused, so nothing outside the
store is ever read. What a store can do beyond reading keys is a protocol of its own
(store/base.py); store/opening.py decides which store a location opens. docs/remote.md
describes remote stores for users.
"""

from zarrsql.store.base import (
    ByteRange,
    ChangeWatching,
    Prefetching,
    RangeReading,
    ReadTokens,
    Refusing,
    Store,
    ZarrPythonAccess,
    check_key,
    is_url,
    take_changed,
)
from zarrsql.store.opening import open_store, using_opener

__all__ = [
    "ByteRange",
    "ChangeWatching",
    "Prefetching",
    "RangeReading",
    "ReadTokens",
    "Refusing",
    "Store",
    "ZarrPythonAccess",
    "check_key",
    "is_url",
    "open_store",
    "take_changed",
    "using_opener",
]
