"""Native chunks of a local repository read straight from their files (store/icechunk_native.py).

The oracle is Icechunk's own store (`session.store.get` through zarr's buffer API), asked for
the same keys and ranges: every key the direct path answers must give Icechunk's bytes, and
every key it cannot answer (virtual, missing, damaged) must still be answered by Icechunk.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest

import zarrsql
from zarrsql.errors import ZarrSQLError
from zarrsql.store import ByteRange, open_store
from zarrsql.store.icechunk_native import NativeChunks, object_id, read_manifest


def _write(store) -> None:
    """Native chunks (random floats: kilobytes each), inline ones (a few bytes), a chunk never
    written, an array named `c` in a group named `c`, and an array of no dimensions."""
    import zarr

    rng = np.random.default_rng(3)
    root = zarr.open_group(store, mode="w", zarr_format=3)
    big = root.create_array("big", shape=(9, 40, 30), chunks=(2, 40, 15), dtype="float32", fill_value=np.nan)
    big[:8] = rng.random((8, 40, 30), dtype="float32")  # the last row of chunks stays unwritten
    small = root.create_array("small", shape=(6,), chunks=(2,), dtype="int8", fill_value=0)
    small[:] = np.arange(6, dtype="int8")
    odd = root.create_group("c").create_array("c", shape=(500,), chunks=(250,), dtype="float64", fill_value=0.0)
    odd[:] = rng.random(500)
    scalar = root.create_array("scalar", shape=(), dtype="float64", fill_value=0.0)
    scalar[()] = 2.5


def _repository(path: Path, split: bool):
    import icechunk

    config = None
    if split:  # two chunks a manifest along each dimension: an array's references span manifests
        splitting = icechunk.ManifestSplittingConfig.from_dict(
            {icechunk.ManifestSplitCondition.AnyArray(): {icechunk.ManifestSplitDimCondition.Any(): 2}}
        )
        config = icechunk.RepositoryConfig(manifest=icechunk.ManifestConfig(splitting=splitting))
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)), config=config)
    session = repo.writable_session("main")
    _write(session.store)
    session.commit("chunks of every kind")
    return repo


@pytest.fixture(scope="module", params=[False, True], ids=["one-manifest", "split-manifests"])
def repo_path(request, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("native") / "repo"
    _repository(path, request.param)
    return path


def _icechunk_bytes(path: Path, key: str, byte_range: ByteRange | None = None) -> bytes | None:
    """What Icechunk itself answers for `key` (the oracle)."""
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    store = _oracle(path)
    request = None
    if byte_range is not None:
        request = (
            SuffixByteRequest(byte_range.length)
            if byte_range.start < 0
            else RangeByteRequest(byte_range.start, byte_range.start + byte_range.length)
        )
    found = sync(store.get(key, default_buffer_prototype(), request))
    return None if found is None else found.to_bytes()


@functools.cache
def _oracle(path: Path):
    import icechunk

    return icechunk.Repository.open(icechunk.local_filesystem_storage(str(path))).readonly_session("main").store


def _chunk_keys(path: Path) -> list[str]:
    from zarr.core.sync import sync

    store = _oracle(path)

    async def every() -> list[str]:
        return [k async for k in store.list()]

    return sorted(k for k in sync(every()) if not k.endswith("zarr.json"))


def _native(store) -> NativeChunks:
    assert store._native is not None, "a local repository's store reads native chunks itself"
    return store._native


def test_every_chunk_reads_as_icechunk_reads_it(repo_path):
    keys = _chunk_keys(repo_path)
    assert "c/c/c/1" in keys
    assert "scalar/c" in keys
    assert "big/c/3/0/1" in keys
    store = open_store(str(repo_path))
    assert [bytes(v) if v is not None else None for v in store.get_many(keys)] == [
        _icechunk_bytes(repo_path, k) for k in keys
    ]


def test_big_chunks_come_from_files_and_small_ones_from_the_manifest(repo_path):
    native = _native(open_store(str(repo_path)))
    kinds = {k: (native.locate(k) or ("icechunk",))[0] for k in _chunk_keys(repo_path)}
    assert {kinds[k] for k in kinds if k.startswith(("big/", "c/c/"))} == {"native"}
    assert {kinds[k] for k in kinds if k.startswith(("small/", "scalar/"))} == {"inline"}
    for key in ("big/c/4/0/0", "zarr.json", "big/zarr.json", "nope/c/0", "big/c/0/0", "big/c/0/0/9"):
        assert native.locate(key) is None, key  # never written, a document, no array, a wrong rank


def test_native_chunk_names_a_file_of_the_repository(repo_path):
    native = _native(open_store(str(repo_path)))
    kind, chunk, offset, length = native.locate("big/c/1/0/1") or (None,) * 4
    assert kind == "native"
    file = repo_path / "chunks" / chunk
    assert file.is_file()
    assert offset + length <= file.stat().st_size
    assert file.read_bytes()[offset : offset + length] == _icechunk_bytes(repo_path, "big/c/1/0/1")


def test_unwritten_chunks_are_missing(repo_path):
    store = open_store(str(repo_path))
    assert store.get_many(["big/c/4/0/0", "big/c/4/0/1", "small/c/7"]) == [None, None, None]


@pytest.mark.parametrize(
    ("key", "byte_range"),
    [
        ("big/c/0/0/0", ByteRange(0, 10)),
        ("big/c/2/0/1", ByteRange(100, 1000)),
        ("big/c/2/0/1", ByteRange(10, 10**9)),  # past the end: what there is
        ("big/c/1/0/0", ByteRange.last(16)),
        ("c/c/c/0", ByteRange(7, 3)),
        ("small/c/1", ByteRange(1, 1)),
        ("small/c/2", ByteRange.last(1)),
        ("big/c/4/0/0", ByteRange(0, 4)),
    ],
)
def test_ranges_are_parts_of_icechunks_bytes(repo_path, key, byte_range):
    got = open_store(str(repo_path)).get_ranges([(key, byte_range)])[0]
    whole = _icechunk_bytes(repo_path, key)
    start, end = byte_range.bounds()
    assert (bytes(got) if got is not None else None) == (None if whole is None else whole[start:end])
    if whole is not None and byte_range.start >= 0 and byte_range.start + byte_range.length <= len(whole):
        assert bytes(got) == _icechunk_bytes(repo_path, key, byte_range)  # Icechunk's own range read agrees


def test_query_values_equal_zarr_python_on_the_session(repo_path):
    import zarr

    big = zarr.open_array(_oracle(repo_path), path="big", mode="r")[:]
    con = zarrsql.connect()
    got = con.sql(f"SELECT count(big) n, sum(big) s FROM read_zarr('{repo_path}', array_path := 'big')").fetchall()[0]
    assert got[0] == int(np.isfinite(big).sum()) == 8 * 40 * 30
    assert got[1] == pytest.approx(float(np.nansum(big.astype("float64"))), rel=1e-9)


def test_object_ids_name_files_as_icechunk_does(repo_path):
    names = {p.name for p in (repo_path / "chunks").iterdir()}
    ids = set()
    for manifest in (repo_path / "manifests").iterdir():
        parsed = read_manifest(manifest.read_bytes())
        ids |= {ref[1] for node in parsed._arrays for ref in _references(parsed, node) if ref and ref[0] == "native"}
    assert ids == names  # every chunk file is some reference's, and every reference's file is there
    assert object_id(bytes(12)) == "0" * 20
    assert len(object_id(bytes(8))) == 13


def _references(parsed, node):
    start, count = parsed._arrays[node]
    for i in range(count):
        index = parsed._index(parsed._root.table_at(start + 4 * i))
        yield parsed.reference(node, index)


def test_a_damaged_manifest_is_left_to_icechunk(repo_path, tmp_path):
    copy = tmp_path / "damaged"
    shutil.copytree(repo_path, copy)
    for manifest in (copy / "manifests").iterdir():
        manifest.write_bytes(manifest.read_bytes()[:60])  # header kept, body cut
    store = open_store(str(copy))
    assert _native(store).locate("big/c/0/0/0") is None
    with pytest.raises(ZarrSQLError):
        store.get("big/c/0/0/0")  # Icechunk's reading fails too, and says so


def test_a_missing_chunk_file_is_left_to_icechunk(repo_path, tmp_path):
    copy = tmp_path / "gone"
    shutil.copytree(repo_path, copy)
    native = _native(open_store(str(copy)))
    _, chunk, _, _ = native.locate("big/c/0/0/0") or (None,) * 4
    (copy / "chunks" / chunk).unlink()
    store = open_store(str(copy))
    with pytest.raises(ZarrSQLError, match="big/c/0/0/0"):
        store.get("big/c/0/0/0")


def test_a_session_with_changes_reads_through_icechunk(repo_path, tmp_path):
    import icechunk

    copy = tmp_path / "changing"
    shutil.copytree(repo_path, copy)
    session = icechunk.Repository.open(icechunk.local_filesystem_storage(str(copy))).writable_session("main")
    import zarr

    zarr.open_array(session.store, path="big", mode="r+")[0] = 7.0  # uncommitted
    rows = zarrsql.read_zarr(session, array_path="big").filter("dim_0 = 0").aggregate("min(big), max(big)")
    assert rows.fetchall() == [(7.0, 7.0)]


def test_a_range_past_a_chunks_end_gives_the_bytes_to_its_end(repo_path, tmp_path):
    """`RangeReading` promises the bytes up to the value's end for a range that runs past it
    (the leading-rows decode asks for "the first n bytes or fewer"); Icechunk 2 refuses such a
    range, so both the direct path (committed chunks) and Icechunk's (uncommitted) must cut it.
    (A range that starts past the end is not asked for by any reader: Icechunk 1 answers it
    with the value's last byte.)"""
    import zarr

    import icechunk
    from zarrsql.store.icechunk import session_location

    copy = tmp_path / "changing"
    shutil.copytree(repo_path, copy)
    session = icechunk.Repository.open(icechunk.local_filesystem_storage(str(copy))).writable_session("main")
    zarr.open_array(session.store, path="big", mode="r+")[0] = 7.0  # uncommitted: chunk 0 read by Icechunk
    changed = open_store(session_location(session))
    committed = open_store(str(repo_path))
    for store, key in ((changed, "big/c/0/0/0"), (committed, "big/c/1/0/0"), (committed, "small/c/0")):
        whole = store.get(key)
        assert whole is not None
        with zarrsql.trace() as t:
            got = store.get_ranges([(key, ByteRange(0, len(whole) + 5000)), (key, ByteRange(3, len(whole)))])
        assert [None if g is None else bytes(g) for g in got] == [bytes(whole), bytes(whole)[3:]]
        # what crossed: the two answers, or (a refused range read whole, Icechunk's path) the
        # refused request, the whole value read, and the requests counted as made
        assert t.bytes_read in (len(whole) + len(whole) - 3, 2 * len(whole))
        assert t.requests == (2 if t.bytes_read == 2 * len(whole) - 3 else 4), (key, t.requests, t.bytes_read)


def test_chunks_with_files_never_ask_icechunk(repo_path, monkeypatch):
    from zarrsql.store import icechunk as store_module

    asked: list[str] = []
    real = store_module.SnapshotStore._get_one

    async def counted(self, key, byte_range):
        asked.append(key)
        return await real(self, key, byte_range)

    monkeypatch.setattr(store_module.SnapshotStore, "_get_one", counted)
    keys = [k for k in _chunk_keys(repo_path) if k.startswith(("big/", "small/", "c/"))]
    store = open_store(str(repo_path))
    assert all(v is not None for v in store.get_many(keys))
    assert asked == []
    assert store.get_many(["big/c/4/0/0", "big/zarr.json"])[0] is None
    assert asked == ["big/c/4/0/0", "big/zarr.json"]  # no reference, a document: Icechunk's
