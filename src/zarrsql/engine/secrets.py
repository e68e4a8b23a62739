"""S3 stores read with the user's DuckDB secrets (`CREATE SECRET (TYPE s3, ...)`).

DuckDB redacts secret values, so they cannot be handed to fsspec; DuckDB's own readers use
them, though. When a statement opens an `s3://` store without `storage_options` and a DuckDB
S3 secret covers the URL (`which_secret`), the store is a `DuckDBStore`: each key is read with
`read_blob` and listed with `glob` on cursors of the user's connection (a cursor is a separate
connection, so this works while the user's own query runs). Anything else — storage_options
given, no matching secret, or a DuckDB without httpfs (2.x here: S3 secrets cannot be
created there at all) — goes to fsspec as usual.

Retries and timeouts on this path are DuckDB's (`SET GLOBAL http_retries`, `SET GLOBAL
http_timeout`: a cursor starts from the database's values, not the session's); a
404 (DuckDB's `HTTPException.status_code`) is a missing key, every other failure an error.

The storage options of a mount are secrets of the same kind: a view's SQL is shown to anyone
who asks (`duckdb_views()`, a database file), so a mount keeps its options in the connection's
`MountOptions` and its views carry only an opaque name, `storage_options := MAP
{'zarrsql_mount_options': 'mount-<hex>'}`, which the connection's opener resolves when a view
is read (`SecretOpener.options_for`). The name is random, not derived from the options: it
tells nothing about them. The options live as long as the connection (and its cursors, which
see the same views); another connection, or a later session reading the views from a
database file, does not know the name and is told to mount again.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from zarrsql import counters
from zarrsql.engine.access import AccessRules
from zarrsql.errors import ParameterError, StoreReadError
from zarrsql.store import Store, check_key
from zarrsql.store.access import AccessPolicy
from zarrsql.store.opening import MOUNT_OPTIONS_KEY

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


class MountOptions:
    """The storage options of a connection's mounts, each under an opaque name (see the module
    docstring). Mounting the same options again reuses their name, so a remount's views read
    as before. Shared with the connection's cursors (`share_with`); never shown (`repr`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, dict[str, Any]] = {}
        self._names: dict[str, str] = {}  # the options, as sorted JSON -> their name

    def __repr__(self) -> str:
        return f"<MountOptions: {len(self._by_name)} option set(s)>"

    def share_with(self, other: MountOptions) -> None:
        """Hold the same option sets as `other` (a cursor's registry, given its connection's)."""
        with other._lock:
            self._lock, self._by_name, self._names = other._lock, other._by_name, other._names

    def name_for(self, storage_options: Mapping[str, Any]) -> str:
        """The name a view carries instead of `storage_options`."""
        options = {str(k): v for k, v in storage_options.items()}
        if MOUNT_OPTIONS_KEY in options:  # a view's options mounted again: the name already held
            self.resolve(options)  # refuses a name this connection does not hold
            return str(options[MOUNT_OPTIONS_KEY])
        identity = json.dumps(options, sort_keys=True, default=repr)
        with self._lock:
            name = self._names.get(identity)
            if name is None:
                name = self._names[identity] = f"mount-{uuid.uuid4().hex}"
                self._by_name[name] = options
        return name

    def resolve_name(self, name: str) -> dict[str, Any]:
        """The options held under `name`; refused by name when this connection holds none."""
        with self._lock:
            options = self._by_name.get(name)
        if options is None:
            raise ParameterError(
                f"storage option '{MOUNT_OPTIONS_KEY}' names the storage options of a mount ('{name}') that this "
                "connection does not hold: a mount keeps its storage_options in the memory of the connection that "
                "mounted the store, never in the view; mount the store again on this connection "
                '(zarr_mount(..., storage_options := MAP {...}), with "replace" := true to remount)'
            )
        return dict(options)

    def resolve(self, storage_options: Mapping[str, Any]) -> dict[str, Any]:
        """`storage_options` with a mount's name replaced by the options it stands for."""
        options = dict(storage_options)
        name = options.pop(MOUNT_OPTIONS_KEY, None)
        if name is None:
            return options
        if options or not isinstance(name, str):
            raise ParameterError(
                f"storage option '{MOUNT_OPTIONS_KEY}' stands for all of a mount's storage options and takes no "
                f"others beside it (got {sorted(options)}); mount the store again with the options it needs"
            )
        return self.resolve_name(name)


class SecretOpener:
    """`open_store`'s hook for one connection: a `DuckDBStore` where a DuckDB S3 secret applies,
    the connection's mount options resolved (`options_for`), and DuckDB's file-access settings
    (`policy`, engine/access.py)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, mount_options: MountOptions | None = None) -> None:
        self._con = con
        self._stores: weakref.WeakSet[DuckDBStore] = weakref.WeakSet()
        self._access = AccessRules(con)  # DuckDB's enable_external_access and allowed lists
        self.mount_options = mount_options if mount_options is not None else MountOptions()

    def options_for(self, storage_options: Mapping[str, Any]) -> dict[str, Any]:
        return self.mount_options.resolve(storage_options)

    def policy(self) -> AccessPolicy:
        return self._access.policy()

    def for_call(self, policy: AccessPolicy | None) -> SecretOpener | CallOpener:
        """This opener for a call that DuckDB handed its file-access settings (`policy`;
        None: the call carries none, and they are read when needed)."""
        return self if policy is None else CallOpener(self, policy)

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


class CallOpener:
    """A connection's `SecretOpener` for one call, with the file-access settings DuckDB
    evaluated for it (engine/functions.py) instead of a query for them."""

    def __init__(self, opener: SecretOpener, policy: AccessPolicy) -> None:
        self._opener = opener
        self._policy = policy

    def __call__(self, location: str, storage_options: Mapping[str, Any]) -> Store | None:
        return self._opener(location, storage_options)

    def options_for(self, storage_options: Mapping[str, Any]) -> dict[str, Any]:
        return self._opener.options_for(storage_options)

    def policy(self) -> AccessPolicy:
        return self._policy
