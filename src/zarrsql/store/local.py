"""A store in a local folder: keys are files below the root.

Reads are cheap and the disk is shared, so `concurrency` is the number of cores (the reader's
decoding threads) and `get_many` reads in order; the metadata cache revalidates by file mtime
and size on every query (`metadata_ttl` 0), which costs a `stat` per document.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from zarrsql import counters
from zarrsql.errors import StoreReadError
from zarrsql.store.base import check_key

#: Reads worth having in flight on a local disk: one per core, capped like the reader's pool.
LOCAL_CONCURRENCY = max(1, min(os.cpu_count() or 1, 8))


class LocalStore:
    """Reads files below `root`; symbolic links that leave the root are refused."""

    remote = False
    can_list = True
    concurrency = LOCAL_CONCURRENCY
    metadata_ttl = 0.0

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.url = self.root
        self.cache_key = self.root

    def _path(self, key: str) -> str:
        check_key(key)
        path = os.path.join(self.root, *key.split("/")) if key else self.root
        return path

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        real = os.path.realpath(path)  # checked before reading: nothing outside is ever read
        if not (real == self.root or real.startswith(self.root + os.sep)):
            raise StoreReadError(f"'{path}' links outside the store '{self.root}'; refusing to read it")
        try:
            with open(real, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            counters.count(requests=1)
            return None
        except OSError as err:
            raise StoreReadError(f"cannot read '{path}': {err.strerror or err}") from err
        counters.count(requests=1, bytes_read=len(data))
        return data

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self.get(k) for k in keys]

    def token_many(self, keys: Sequence[str]) -> list[str | None]:
        return [self.token(k) for k in keys]

    def list_dir(self, prefix: str) -> list[str]:
        path = self._path(prefix.rstrip("/"))
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as err:
            raise StoreReadError(f"cannot list '{path}': {err.strerror or err}") from err

    def token(self, key: str) -> str | None:
        try:
            st = os.stat(self._path(key))
        except OSError:
            return None
        return f"{st.st_mtime_ns}:{st.st_size}"
