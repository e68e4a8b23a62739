"""A store behind an fsspec URL (http, s3, gs, az, memory)."""

from __future__ import annotations

from typing import Any

from zarrsql import counters
from zarrsql.errors import StoreNotFoundError, StoreReadError
from zarrsql.store.base import check_key


class FsspecStore:
    """Reads keys below a URL through fsspec; `storage_options` go to the filesystem."""

    def __init__(self, url: str, storage_options: dict[str, Any]) -> None:
        import fsspec

        self.url = url.rstrip("/")
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, **storage_options)
        except (ImportError, ValueError) as err:
            raise StoreNotFoundError(f"cannot open '{url}': {err}") from err

    def _path(self, key: str) -> str:
        check_key(key)
        return f"{self.root}/{key}" if key else self.root

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError:
            counters.count(requests=1)
            return None
        except Exception as err:  # fsspec backends raise their own types; the edge of the core
            raise StoreReadError(f"cannot read '{self.url}/{key}': {err}") from err
        counters.count(requests=1, bytes_read=len(data))
        return bytes(data)

    def list_dir(self, prefix: str) -> list[str]:
        path = self._path(prefix.rstrip("/"))
        try:
            entries = self.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        except Exception as err:
            raise StoreReadError(f"cannot list '{self.url}/{prefix}': {err}") from err
        counters.count(requests=1)
        return sorted({e.rstrip("/").rsplit("/", 1)[-1] for e in entries})

    def token(self, key: str) -> str | None:
        try:
            info = self.fs.info(self._path(key))
        except FileNotFoundError:
            return None
        except Exception:
            return None
        return str(info.get("ETag") or info.get("mtime") or info.get("size"))
