"""`LocalStore.get_many` resolves each folder once per call and opens files without following
a final link: it must answer exactly what `get` answers, key by key, links included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zarrsql import trace
from zarrsql.errors import StoreReadError
from zarrsql.store.local import LocalStore


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    root = tmp_path / "store"
    for key, data in {
        "v/c/0/0": b"a",
        "v/c/0/1": b"bb",
        "v/c/1/0": b"ccc",
        "w/c/0": b"inside",
        "w/c/1": b"",
        "w/c/2": bytes(range(256)) * 5000,
    }.items():
        path = root.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "v" / "c" / "2").mkdir()  # a folder where a chunk key points
    os.symlink(root / "w" / "c" / "0", root / "v" / "c" / "0" / "2")  # a chunk linked inside the store
    os.symlink(root / "w", root / "linked")  # a folder linked inside the store
    outside = tmp_path / "outside"
    (outside / "c").mkdir(parents=True)
    (outside / "c" / "0").write_bytes(b"secret")
    os.symlink(outside / "c" / "0", root / "v" / "c" / "1" / "1")  # a chunk linked outside
    os.symlink(outside, root / "out")  # a folder linked outside
    return LocalStore(str(root))


def test_answers_what_get_answers_key_by_key(store: LocalStore) -> None:
    keys = ["v/c/0/0", "v/c/0/1", "v/c/1/0", "v/c/0/2", "linked/c/0", "v/c/9/9", "v/c/2", "nope/c/0", "w/c/1", "w/c/2"]
    assert store.get_many(keys) == [store.get(k) for k in keys]
    big = bytes(range(256)) * 5000  # more than one read's worth
    assert store.get_many(keys) == [b"a", b"bb", b"ccc", b"inside", b"inside", None, None, None, b"", big]


@pytest.mark.parametrize("key", ["v/c/1/1", "out/c/0"], ids=["chunk link", "folder link"])
def test_a_link_out_of_the_store_is_refused_among_other_keys(store: LocalStore, key: str) -> None:
    with pytest.raises(StoreReadError, match="outside the store"):
        store.get_many(["v/c/0/0", key])


def test_counts_every_request_and_the_bytes_read(store: LocalStore) -> None:
    with trace() as t:
        store.get_many(["v/c/0/0", "v/c/0/1", "v/c/9/9", "v/c/0/2"])
    assert (t.requests, t.bytes_read) == (4, 1 + 2 + 6)
