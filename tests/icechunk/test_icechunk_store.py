"""The snapshot store against the protocol of store/base.py. The expected bytes are those of
the same zarr-python writes to a plain folder (deterministic codecs: identical keys, bytes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import zarrsql
from zarrsql.errors import ParameterError
from zarrsql.store import ByteRange, RangeReading, ZarrPythonAccess, open_store
from zarrsql.store.choice import StoreChoice


def _write(store) -> None:
    import zarr

    root = zarr.open_group(store, mode="w", zarr_format=3)
    a = root.create_array("a", shape=(4, 6), chunks=(2, 3), dtype="int32", fill_value=0)
    a[:] = np.arange(24, dtype="int32").reshape(4, 6)
    sub = root.create_group("g")
    b = sub.create_array("b", shape=(5,), chunks=(5,), dtype="float64", fill_value=0.0)
    b[:] = np.linspace(0, 1, 5)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    import icechunk

    root = tmp_path_factory.mktemp("snapshot_store")
    _write(str(root / "plain"))
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(root / "repo")))
    session = repo.writable_session("main")
    _write(session.store)
    session.commit("one array and a group")
    return root / "plain", root / "repo"


def _plain_keys(plain: Path) -> dict[str, bytes]:
    return {p.relative_to(plain).as_posix(): p.read_bytes() for p in plain.rglob("*") if p.is_file()}


def test_values_are_the_written_bytes(pair):
    plain, repo = pair
    store = open_store(str(repo))
    files = _plain_keys(plain)
    chunks = {k: v for k, v in files.items() if "/c/" in k}
    assert len(chunks) == 4 + 1
    keys = [*chunks, "a/c/9/9", "nope/zarr.json", "a/c/1/0"]
    assert store.get_many(keys) == [files.get(k) for k in keys]
    assert store.get("a/c/0/1") == files["a/c/0/1"]
    assert store.get("zarr.json") is not None


def test_ranges_are_parts_of_the_written_bytes(pair):
    plain, repo = pair
    store = open_store(str(repo))
    blob = (plain / "a" / "c" / "1" / "1").read_bytes()
    assert isinstance(store, RangeReading)
    got = store.get_ranges([("a/c/1/1", ByteRange(2, 5)), ("a/c/1/1", ByteRange.last(3)), ("a/c/7/7", ByteRange(0, 1))])
    assert got == [blob[2:7], blob[-3:], None]


def test_lists_names_below_a_prefix(pair):
    _, repo = pair
    store = open_store(str(repo))
    assert store.list_dir("") == ["a", "g", "zarr.json"]
    assert store.list_dir("a/") == ["c", "zarr.json"]
    assert store.list_dir("g") == ["b", "zarr.json"]
    assert store.list_dir("nope") == []


def test_tokens_exist_for_values_only(pair):
    _, repo = pair
    store = open_store(str(repo))
    keys = ["zarr.json", "a/c/0/0", "a/c/5/5", "nope"]
    tokens = store.token_many(keys)
    assert [t is not None for t in tokens] == [True, True, False, False]
    store.get("a/c/0/0")
    assert store.token_many(keys) == tokens  # the same whether or not a key was read before
    assert store.metadata_ttl == float("inf")  # a snapshot never changes


@pytest.mark.parametrize("key", ["../x", "/zarr.json", "a//c", "a/../zarr.json"])
def test_keys_leaving_the_store_are_refused(pair, key):
    _, repo = pair
    with pytest.raises(ParameterError, match="not a plain path inside the store"):
        open_store(str(repo)).get(key)


def test_trace_counts_requests_and_bytes(pair):
    plain, repo = pair
    store = open_store(str(repo))
    files = _plain_keys(plain)
    with zarrsql.trace() as t:
        store.get_many(["a/c/0/0", "g/b/c/0", "a/c/8/8"])
    assert t.requests == 3
    assert t.bytes_read == len(files["a/c/0/0"]) + len(files["g/b/c/0"])


def test_zarr_python_store_reads_the_same_array(pair):
    import zarr

    _, repo = pair
    store = open_store(str(repo))
    assert isinstance(store, ZarrPythonAccess)
    values = zarr.open_array(store.zarr_python_store(), path="a", mode="r")[:]
    assert np.array_equal(values, np.arange(24).reshape(4, 6))


def test_cache_key_names_the_snapshot(pair):
    import icechunk

    _, repo = pair
    tip = icechunk.Repository.open(icechunk.local_filesystem_storage(str(repo))).lookup_branch("main")
    store = open_store(str(repo), None, StoreChoice(branch="main"))
    assert store.cache_key.endswith(f"@{tip}")
    assert store.remote is False
