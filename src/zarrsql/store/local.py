"""A store in a local folder: keys are files below the root."""

from __future__ import annotations

import os

from zarrsql import counters
from zarrsql.errors import StoreReadError
from zarrsql.store.base import check_key


class LocalStore:
    """Reads files below `root`; symbolic links that leave the root are refused."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.url = self.root

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
