"""The commit machinery of `zarrsql.write.commit` and `write.lock`, driven with plain
zarr-python writes: a new store appears whole or not at all, an append commits at its
consolidated root document, a failed write leaves the old store as it was, and the writer
lock refuses a live writer and reclaims a dead one's.

Oracles: zarr-python (reading the store back), the file system (what is left beside it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrsql.errors import StoreExistsError, StoreLockedError, StoreNotFoundError, WriteError, ZarrSQLError
from zarrsql.write import commit, journal, lock
from zarrsql.write.commit import StoreTarget, append_commit, publish_new


class Boom(RuntimeError):
    """Raised by a write on purpose, to test what a failure leaves."""


def _writer(values: np.ndarray, *, fail: bool = False):  # noqa: ANN202 - a test callback
    def write(target: StoreTarget) -> None:
        root = zarr.open_group(target.zarr_store, mode="w", zarr_format=target.zarr_format)
        a = root.create_array("x", shape=values.shape, chunks=(4,), dtype=values.dtype)
        a[:] = values
        if fail:
            raise Boom("a failure in the middle of the write")

    return write


def _appender(extra: np.ndarray, *, fail: bool = False):  # noqa: ANN202 - a test callback
    def write(target: StoreTarget) -> None:
        a = zarr.open_array(target.zarr_store, path="x", mode="r+", zarr_format=target.zarr_format)
        n = a.shape[0]
        a.resize((n + len(extra),))
        a[n:] = extra
        if fail:
            raise Boom("a failure after the array grew")

    return write


def _read(path: Path) -> np.ndarray:
    return zarr.open_group(str(path), mode="r", use_consolidated=True)["x"][:]


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_new_store_is_consolidated_and_readable(tmp_path: Path, fmt: int) -> None:
    out = tmp_path / "new.zarr"
    values = np.arange(10, dtype="int32")
    publish_new(str(out), "w-", None, _writer(values), zarr_format=fmt)
    np.testing.assert_array_equal(_read(out), values)
    key = "zarr.json" if fmt == 3 else ".zmetadata"
    doc = json.loads((out / key).read_text())
    assert ("consolidated_metadata" in doc) if fmt == 3 else ("metadata" in doc)
    assert _siblings(out) == []  # no staging directory left beside it


def test_mode_w_dash_refuses_an_existing_store_and_leaves_it(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(3, dtype="int32")))
    with pytest.raises(StoreExistsError, match=r"s\.zarr.*mode=\"w\"") as info:
        publish_new(str(out), "w-", None, _writer(np.arange(5, dtype="int32")))
    assert isinstance(info.value, ZarrSQLError)
    np.testing.assert_array_equal(_read(out), np.arange(3))


def test_mode_w_replaces_only_once_the_new_store_is_complete(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(3, dtype="int32")))
    seen: list[np.ndarray] = []

    def write(target: StoreTarget) -> None:
        _writer(np.arange(7, dtype="int32"))(target)
        seen.append(_read(out))  # the old store is still there, whole, while the new is written

    publish_new(str(out), "w", None, write)
    np.testing.assert_array_equal(seen[0], np.arange(3))
    np.testing.assert_array_equal(_read(out), np.arange(7))
    assert _siblings(out) == []


def test_a_failed_new_store_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    with pytest.raises(Boom):
        publish_new(str(out), "w-", None, _writer(np.arange(3, dtype="int32"), fail=True))
    assert not out.exists()
    assert _siblings(out) == []


def test_a_failed_replacement_leaves_the_old_store_intact(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(3, dtype="int32")))
    with pytest.raises(Boom):
        publish_new(str(out), "w", None, _writer(np.arange(9, dtype="int32"), fail=True))
    np.testing.assert_array_equal(_read(out), np.arange(3))
    assert _siblings(out) == []


def test_staging_cleanup_removes_only_what_it_created(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    (tmp_path / "neighbour.txt").write_text("keep me")
    with pytest.raises(Boom):
        publish_new(str(out), "w-", None, _writer(np.arange(3, dtype="int32"), fail=True))
    assert _siblings(out) == ["neighbour.txt"]


def test_an_unknown_mode_is_a_parameter_error(tmp_path: Path) -> None:
    with pytest.raises(ZarrSQLError, match="mode"):
        publish_new(str(tmp_path / "s.zarr"), "x", None, _writer(np.arange(3, dtype="int32")))


@pytest.mark.parametrize("fmt", [2, 3])
def test_an_append_commits_at_the_consolidated_root(tmp_path: Path, fmt: int) -> None:
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(6, dtype="int32")), zarr_format=fmt)
    seen: list[np.ndarray] = []

    def write(target: StoreTarget) -> None:
        _appender(np.arange(6, 11, dtype="int32"))(target)
        seen.append(_read(out))  # arrays grown and their documents rewritten, not committed

    append_commit(str(out), None, write)
    np.testing.assert_array_equal(seen[0], np.arange(6))
    np.testing.assert_array_equal(_read(out), np.arange(11))
    assert not (out / commit.BACKUP_NAME).exists()
    assert not (out / lock.LOCK_NAME).exists()


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_failed_append_leaves_the_store_unchanged(tmp_path: Path, fmt: int) -> None:
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(6, dtype="int32")), zarr_format=fmt)
    before = commit.node_documents(out, fmt)
    with pytest.raises(Boom):
        append_commit(str(out), None, _appender(np.arange(6, 11, dtype="int32"), fail=True))
    assert commit.node_documents(out, fmt) == before
    # the array's own document, not only the consolidated copy, is back to 6 rows
    np.testing.assert_array_equal(zarr.open_group(str(out), mode="r", use_consolidated=False)["x"][:], np.arange(6))
    assert not (out / lock.LOCK_NAME).exists()


def test_appending_to_no_store_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match='mode="w-"'):
        append_commit(str(tmp_path / "none.zarr"), None, _appender(np.arange(3)))


def test_a_live_writer_lock_refuses_a_second_writer(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(6, dtype="int32")))
    with lock.held(str(out), out), pytest.raises(StoreLockedError, match=f"process {os.getpid()}") as info:
        append_commit(str(out), None, _appender(np.arange(3, dtype="int32")))
    assert isinstance(info.value, WriteError)
    np.testing.assert_array_equal(_read(out), np.arange(6))


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(child.stdout)


def test_a_dead_writers_lock_and_half_append_are_recovered(tmp_path: Path) -> None:
    """Simulate a writer killed after its arrays grew but before the commit: its lock names a
    dead pid and its backup is there. The next append restores the documents, then appends."""
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(6, dtype="int32")))
    documents = commit.node_documents(out, 3)
    backup = {"commit_sha256": journal.digest(documents["zarr.json"]), "documents": documents}
    (out / commit.BACKUP_NAME).write_text(json.dumps(backup))
    zarr.open_array(str(out / "x"), mode="r+").resize((40,))  # the dead writer's grown array
    (out / lock.LOCK_NAME).write_text(json.dumps({"host": os.uname().nodename, "pid": _dead_pid()}))

    append_commit(str(out), None, _appender(np.arange(6, 9, dtype="int32")))
    np.testing.assert_array_equal(_read(out), np.arange(9))
    np.testing.assert_array_equal(zarr.open_group(str(out), mode="r", use_consolidated=False)["x"][:], np.arange(9))


def test_a_committed_append_is_not_rolled_back_by_recovery(tmp_path: Path) -> None:
    """A writer killed after its commit (the backup not yet removed) appended for good."""
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(6, dtype="int32")))
    documents = commit.node_documents(out, 3)
    append_commit(str(out), None, _appender(np.arange(6, 9, dtype="int32")))
    stale = {"commit_sha256": journal.digest(documents["zarr.json"]), "documents": documents}
    (out / commit.BACKUP_NAME).write_text(json.dumps(stale))
    commit.recover(out, 3)
    np.testing.assert_array_equal(_read(out), np.arange(9))
    assert not (out / commit.BACKUP_NAME).exists()


def test_recovery_removes_only_the_temporary_files_of_killed_writers(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    publish_new(str(out), "w-", None, _writer(np.arange(6, dtype="int32")))
    hex32 = "0123456789abcdef" * 2
    left = [out / f"zarr.{hex32}.partial", out / "x" / f"zarr.{hex32}.partial", out / f"{lock.LOCK_NAME}.{hex32}.tmp"]
    kept = [out / "notes.partial", out / "x" / "c" / "0"]
    for p in left:
        p.write_text("half")
    (out / "notes.partial").write_text("someone else's")
    commit.recover(out, 3)
    assert [p.exists() for p in left] == [False, False, False]
    assert all(p.exists() for p in kept)
