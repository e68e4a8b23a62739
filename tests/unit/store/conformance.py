"""What every store must do, as test classes each store's tests subclass unchanged.

A subclass says how to open its kind of store over a set of values (`open_with`), how to
rewrite a value behind the store's back (`put`) and which optional capabilities its stores
have (`capabilities`); the capability mixins below add the tests of each. The expected values
are the bytes written, never what another store returned.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import zarrsql
from zarrsql.errors import ParameterError, StoreReadError
from zarrsql.store import (
    ByteRange,
    ChangeWatching,
    Prefetching,
    RangeReading,
    Refusing,
    Store,
    ZarrPythonAccess,
)

CAPABILITIES = (RangeReading, Prefetching, ChangeWatching, Refusing, ZarrPythonAccess)

#: The values every store under test holds: documents, binary chunks, an empty value, a key
#: deeper down. `BLOB` has every byte value, so a range that is off by one shows.
BLOB = bytes(range(256)) * 4
FILES = {
    "zarr.json": b'{"zarr_format": 3, "node_type": "group"}',
    "a/zarr.json": b'{"zarr_format": 3, "node_type": "array"}',
    "a/c/0/0": BLOB,
    "a/c/0/1": b"",
    "a/c/1/0": bytes(reversed(BLOB)),
    "b/deep/x": b"xyz",
}
MISSING = ("nope", "a/c/9/9", "b/deep/x/under-a-value")


class StoreTests:
    """The `Store` protocol: reads, listing, tokens, key checks, trace() counting."""

    capabilities: frozenset[type] = frozenset()

    def open_with(self, root: Path, files: dict[str, bytes]) -> Store:
        """A store holding `files`; `root` is a fresh folder the subclass may use."""
        raise NotImplementedError

    def put(self, store: Store, key: str, data: bytes) -> None:
        """Write `key` behind the store's back, as another writer would."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return self.open_with(tmp_path, FILES)

    def test_has_exactly_the_declared_capabilities(self, store: Store) -> None:
        have = {p.__name__ for p in CAPABILITIES if isinstance(store, p)}
        assert have == {p.__name__ for p in self.capabilities}

    def test_describes_itself(self, store: Store) -> None:
        assert isinstance(store.url, str)
        assert store.url
        assert isinstance(store.cache_key, str)
        assert isinstance(store.remote, bool)
        assert isinstance(store.can_list, bool)
        assert isinstance(store.concurrency, int)
        assert store.concurrency >= 1
        assert store.metadata_ttl >= 0

    def test_get_returns_each_value(self, store: Store) -> None:
        for key, data in FILES.items():
            assert store.get(key) == data, key

    def test_get_of_a_missing_key_is_none(self, store: Store) -> None:
        for key in MISSING:
            assert store.get(key) is None, key

    def test_get_many_answers_in_order(self, store: Store) -> None:
        keys = [*FILES, *MISSING, "a/c/0/0"]
        random.Random(3).shuffle(keys)
        assert store.get_many(keys) == [FILES.get(k) for k in keys]
        assert store.get_many([]) == []

    @pytest.mark.parametrize("key", ["../x", "/zarr.json", "a//c", "a/./zarr.json", "a/../zarr.json", "a\\b"])
    def test_keys_leaving_the_store_are_refused(self, store: Store, key: str) -> None:
        with pytest.raises(ParameterError, match="not a plain path inside the store"):
            store.get(key)

    def test_lists_the_names_below_a_prefix(self, store: Store) -> None:
        if not store.can_list:
            with pytest.raises(StoreReadError, match="list"):
                store.list_dir("")
            return
        assert store.list_dir("") == ["a", "b", "zarr.json"]
        assert store.list_dir("a") == ["c", "zarr.json"]
        assert store.list_dir("a/c/") == ["0", "1"]
        assert store.list_dir("nope") == []

    def test_tokens_exist_for_values_only_and_are_stable(self, store: Store) -> None:
        keys = [*FILES, *MISSING]
        tokens = store.token_many(keys)
        assert [t is not None for t in tokens] == [k in FILES for k in keys]
        assert store.token_many(keys) == tokens
        assert [store.token(k) for k in keys] == tokens

    def test_token_changes_when_a_value_is_rewritten(self, store: Store) -> None:
        before = store.token("a/zarr.json")
        self.put(store, "a/zarr.json", FILES["a/zarr.json"] + b" ")
        assert store.token("a/zarr.json") != before
        assert store.get("a/zarr.json") == FILES["a/zarr.json"] + b" "

    def test_trace_counts_the_bytes_read(self, store: Store) -> None:
        with zarrsql.trace() as t:
            store.get_many(["a/c/0/0", "b/deep/x", "nope"])
        assert t.bytes_read == len(FILES["a/c/0/0"]) + len(FILES["b/deep/x"])
        assert t.requests >= 3


class RangeReadingTests:
    """`RangeReading`: parts of values, only their bytes fetched."""

    @pytest.mark.parametrize(
        ("start", "length", "cut"),
        [
            (0, 10, slice(0, 10)),
            (100, 300, slice(100, 400)),
            (-16, 16, slice(-16, None)),  # the last 16 bytes
            (1000, 100, slice(1000, 1100)),  # runs past the end: what there is
            (1023, 1, slice(1023, 1024)),
        ],
    )
    def test_get_ranges_returns_each_part(self, store: RangeReading, start: int, length: int, cut: slice) -> None:
        assert store.get_ranges([("a/c/0/0", ByteRange(start, length))]) == [BLOB[cut]]

    def test_get_ranges_answers_in_order_with_missing_keys(self, store: RangeReading) -> None:
        requests = [
            ("a/c/1/0", ByteRange(5, 7)),
            ("nope", ByteRange(0, 4)),
            ("a/c/0/0", ByteRange.last(4)),
            ("zarr.json", ByteRange(0, 1)),
        ]
        reversed_blob = FILES["a/c/1/0"]
        assert store.get_ranges(requests) == [reversed_blob[5:12], None, BLOB[-4:], b"{"]
        assert store.get_ranges([]) == []

    def test_only_the_bytes_asked_for_are_counted(self, store: RangeReading) -> None:
        with zarrsql.trace() as t:
            store.get_ranges([("a/c/0/0", ByteRange(10, 20)), ("a/c/1/0", ByteRange.last(8))])
        assert t.bytes_read == 28

    def test_ranges_of_keys_leaving_the_store_are_refused(self, store: RangeReading) -> None:
        with pytest.raises(ParameterError, match="not a plain path inside the store"):
            store.get_ranges([("../x", ByteRange(0, 1))])


class PrefetchingTests:
    """`Prefetching`: started fetches are what a later `get_many` takes (`store` is a `Store`
    with the capability, so these mixins take it untyped)."""

    def test_get_many_takes_what_prefetch_started(self, store: Any) -> None:
        keys = ["a/c/0/0", "a/c/1/0", "nope"]
        with zarrsql.trace() as t:
            futures = store.prefetch(keys)
            for future in futures:
                future.result(timeout=30)
            assert store.get_many(keys) == [FILES.get(k) for k in keys]
        assert t.requests == len(keys), t  # each key fetched once (a synchronous filesystem: by get_many)

    def test_forgotten_prefetches_are_fetched_again(self, store: Any) -> None:
        store.prefetch(["a/c/0/0"])
        store.forget(["a/c/0/0"])
        assert store.get_many(["a/c/0/0"]) == [BLOB]


class ChangeWatchingTests:
    """`ChangeWatching`: a missing chunk while the watched document changed is an error."""

    def test_missing_key_is_none_while_the_watched_document_is_unchanged(self, store: Any) -> None:
        store.watch("zarr.json", store.token("zarr.json"))
        assert store.get_many(["a/c/9/9"]) == [None]

    def test_missing_key_after_the_watched_document_changed_is_an_error(self, store: Any) -> None:
        store.watch("zarr.json", store.token("zarr.json"))
        self.put(store, "zarr.json", FILES["zarr.json"] + b"  ")
        with pytest.raises(StoreReadError, match="changed during the query"):
            store.get_many(["a/c/9/9"])


class ZarrPythonAccessTests:
    """`ZarrPythonAccess`: zarr-python reads the same bytes under the same keys."""

    def test_zarr_python_store_reads_the_same_values(self, store: ZarrPythonAccess) -> None:
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        zstore = store.zarr_python_store()
        for key in ("a/c/0/0", "b/deep/x", "nope"):
            got = sync(zstore.get(key, prototype=default_buffer_prototype()))
            assert (None if got is None else got.to_bytes()) == FILES.get(key), key
