"""The conformance suite on the DuckDB-secrets store (engine/secrets.py).

That store reads keys with DuckDB's `read_blob` and lists them with `glob`. It is made for
`s3://` URLs under a DuckDB S3 secret, which needs the httpfs extension (tests/remote/
test_secrets.py covers that path where it loads); `read_blob` and `glob` read a local folder
the same way on every DuckDB, so the suite runs it there. It reads whole values only: no
byte ranges (a sharded array is then read a whole shard at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from zarrsql.engine.secrets import DuckDBStore
from zarrsql.store import Store

from .conformance import FILES, StoreTests
from .test_local_store import write_folder


class TestDuckDBStore(StoreTests):
    capabilities = frozenset()

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[DuckDBStore]:
        self.con = duckdb.connect()
        store = self.open_with(tmp_path, FILES)
        yield store
        store.close()
        self.con.close()

    def open_with(self, root: Path, files: dict[str, bytes]) -> DuckDBStore:
        return DuckDBStore(self.con, str(write_folder(root / "store", files)), secret="none")

    def put(self, store: Store, key: str, data: bytes) -> None:
        Path(store.url, *key.split("/")).write_bytes(data)
