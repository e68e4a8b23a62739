"""The conformance suite on a local folder, and what only a local store does: refusing links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zarrsql.errors import StoreReadError
from zarrsql.store import ByteRange, RangeReading, Refusing, Store, ZarrPythonAccess, open_store
from zarrsql.store.local import LocalStore

from .conformance import RangeReadingTests, StoreTests, ZarrPythonAccessTests


def write_folder(root: Path, files: dict[str, bytes]) -> Path:
    for key, data in files.items():
        path = root.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


class TestLocalStore(StoreTests, RangeReadingTests, ZarrPythonAccessTests):
    capabilities = frozenset({RangeReading, Refusing, ZarrPythonAccess})

    def open_with(self, root: Path, files: dict[str, bytes]) -> Store:
        return open_store(str(write_folder(root / "store", files)))

    def put(self, store: Store, key: str, data: bytes) -> None:
        assert isinstance(store, LocalStore)
        Path(store.root, *key.split("/")).write_bytes(data)

    def test_a_link_out_of_the_store_is_refused_by_name(self, store: Store, tmp_path: Path) -> None:
        assert isinstance(store, LocalStore)
        outside = write_folder(tmp_path / "outside", {"secret": b"do not read"})
        os.symlink(outside, Path(store.root, "link"))
        assert store.refusal("a/c") is None
        assert "outside the store" in (store.refusal("link/secret") or "")
        with pytest.raises(StoreReadError, match="symbolic link"):
            store.get("link/secret")
        with pytest.raises(StoreReadError, match="symbolic link"):
            store.get_ranges([("link/secret", ByteRange(0, 2))])
