"""S3 stores read with the user's DuckDB secrets (`CREATE SECRET (TYPE s3, ...)`).

DuckDB redacts secret values, so they cannot be handed to fsspec; DuckDB's own readers use
them, though. When a statement opens an `s3://` store without `storage_options` and a DuckDB
S3 secret covers the URL (`which_secret`), the store is a `DuckDBStore`: each key is read with
`read_blob` and listed with `glob` on cursors of the user's connection (a cursor is a separate
connection, so this works while the user's own query runs). Anything else — storage_options
given, no matching secret, or a DuckDB without httpfs (2.x here: S3 secrets cannot be
created there at all) — goes to fsspec as usual.

Retries and timeouts on this path are DuckDB's (`SET http_retries`, `SET http_timeout`); a
404 (DuckDB's `HTTPException.status_code`) is a missing key, every other failure an error.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from zarrsql import counters
from zarrsql.errors import StoreReadError
from zarrsql.store import Store, check_key

#: Cursors (requests in flight) per store: DuckDB's httpfs issues one request per read_blob.
CONCURRENCY = 16
_SCHEMES = ("s3://", "s3a://")


def _status(err: BaseException) -> int | None:
    code = getattr(err, "status_code", None)
    return code if isinstance(code, int) else None


class DuckDBStore:
    """Keys of an `s3://` store read through DuckDB's httpfs and its secrets."""

    remote = True
    can_list = True
    concurrency = CONCURRENCY
    metadata_ttl = 0.0

    def __init__(self, con: duckdb.DuckDBPyConnection, url: str, secret: str) -> None:
        self.url = url.rstrip("/")
        self.cache_key = f"duckdb-secret:{secret}:{self.url}"
        self._con = con
        self._lock = threading.Lock()
        self._idle: queue.SimpleQueue[duckdb.DuckDBPyConnection] = queue.SimpleQueue()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._keys: list[str] | None = None

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of the user's connection, one per request in flight, reused afterwards."""
        try:
            cur = self._idle.get_nowait()
        except queue.Empty:
            cur = self._con.cursor()
            with self._lock:
                self._cursors.append(cur)
        try:
            yield cur
        finally:
            self._idle.put(cur)

    def where(self, key: str) -> str:
        check_key(key)
        return f"{self.url}/{key}" if key else self.url

    def _query(self, sql: str, key: str) -> list[tuple[Any, ...]] | None:
        counters.count(requests=1)
        try:
            with self._cursor() as cur:
                return cur.execute(sql, [self.where(key)]).fetchall()
        except duckdb.HTTPException as err:
            if _status(err) == 404:
                return None
            raise StoreReadError(f"cannot read '{self.where(key)}' with DuckDB's S3 secret: {err}") from err
        except duckdb.Error as err:
            raise StoreReadError(f"cannot read '{self.where(key)}' with DuckDB's S3 secret: {err}") from err

    def get(self, key: str) -> bytes | None:
        rows = self._query("SELECT content FROM read_blob(?)", key)
        if not rows:
            return None
        data = bytes(rows[0][0])
        counters.count(bytes_read=len(data))
        return data

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if len(keys) < 2:
            return [self.get(k) for k in keys]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(keys))) as pool:
            return list(pool.map(self.get, keys))

    def token(self, key: str) -> str | None:
        rows = self._query("SELECT size, CAST(last_modified AS VARCHAR) FROM read_blob(?)", key)
        return None if not rows else f"{rows[0][1]}|{rows[0][0]}"

    def token_many(self, keys: Sequence[str]) -> list[str | None]:
        return [self.token(k) for k in keys]

    def list_dir(self, prefix: str) -> list[str]:
        """Names directly below `prefix`, from one recursive listing of the store."""
        if self._keys is None:
            counters.count(requests=1)
            try:
                with self._cursor() as cur:
                    rows = cur.execute("SELECT file FROM glob(?)", [self.url + "/**"]).fetchall()
            except duckdb.Error as err:
                raise StoreReadError(f"cannot list '{self.url}' with DuckDB's S3 secret: {err}") from err
            self._keys = [r[0][len(self.url) + 1 :] for r in rows if r[0].startswith(self.url + "/")]
        base = prefix.strip("/") + "/" if prefix.strip("/") else ""
        return sorted({k[len(base) :].split("/", 1)[0] for k in self._keys if k.startswith(base) and k != base})

    def close(self) -> None:
        with self._lock:
            cursors, self._cursors = self._cursors, []
        for cur in cursors:
            cur.close()


class SecretOpener:
    """`open_store`'s hook for one connection: a `DuckDBStore` where a DuckDB S3 secret applies."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._stores: weakref.WeakSet[DuckDBStore] = weakref.WeakSet()

    def _secret_for(self, url: str) -> str | None:
        cur = self._con.cursor()  # the opener runs inside a statement: never the user's connection
        try:
            rows = cur.execute("SELECT name FROM which_secret(?, 's3')", [url]).fetchall()
        except duckdb.Error:
            return None  # a DuckDB without the secret manager's S3 type: fsspec it is
        finally:
            cur.close()
        return rows[0][0] if rows else None

    def __call__(self, location: str, storage_options: Mapping[str, Any]) -> Store | None:
        if storage_options or not location.lower().startswith(_SCHEMES):
            return None
        secret = self._secret_for(location)
        if secret is None:
            return None
        store = DuckDBStore(self._con, location, secret)
        self._stores.add(store)
        return store

    def close(self) -> None:
        """Close the cursors of every store still alive (the connection is closing)."""
        for s in list(self._stores):
            s.close()
