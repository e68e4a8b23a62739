"""A local store remembers the real path of each chunk folder it read from (`_checked_folder`),
so a chunk read costs a `stat` and an `open` instead of a `realpath` of the whole path. What
it remembers must never let a read escape the store: a folder replaced by a symbolic link
after it was remembered is resolved again and refused, and the file behind the link is never
opened (an audit hook sees every `open` of the process)."""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import zarrsql.store.local as local
from zarrsql.errors import StoreReadError
from zarrsql.store.base import ByteRange
from zarrsql.store.local import LocalStore

_state = threading.local()
_opened: list[str] = []
_watching = [False]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _watching[0] or getattr(_state, "busy", False):
        return
    if event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
        _state.busy = True
        try:
            _opened.append(os.path.realpath(os.fsdecode(args[0])))
        finally:
            _state.busy = False


sys.addaudithook(_audit)


@pytest.fixture
def opened() -> Iterator[list[str]]:
    _opened.clear()
    _watching[0] = True
    yield _opened
    _watching[0] = False


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "store.zarr"
    (store / "arr" / "c").mkdir(parents=True)
    (store / "arr" / "c" / "0").write_bytes(b"inside-0")
    (store / "arr" / "c" / "1").write_bytes(b"inside-1")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "0").write_bytes(b"SECRET")
    return store, outside


def test_a_folder_turned_into_a_link_out_is_refused_after_it_was_remembered(tmp_path: Path, opened: list[str]) -> None:
    store, outside = _tree(tmp_path)
    st = LocalStore(str(store))
    assert st.get("arr/c/0") == b"inside-0"  # the folder is remembered now
    shutil.rmtree(store / "arr" / "c")
    os.symlink(outside, store / "arr" / "c", target_is_directory=True)
    opened.clear()
    with pytest.raises(StoreReadError, match="symbolic link.*outside the store"):
        st.get("arr/c/0")
    with pytest.raises(StoreReadError, match="symbolic link.*outside the store"):
        st.get_ranges([("arr/c/0", ByteRange(0, 3))])
    assert not [p for p in opened if p.startswith(os.path.realpath(outside))]


def test_a_parent_turned_into_a_link_out_is_refused(tmp_path: Path, opened: list[str]) -> None:
    store, outside = _tree(tmp_path)
    (outside / "c").mkdir()
    (outside / "c" / "0").write_bytes(b"SECRET")
    st = LocalStore(str(store))
    assert st.get("arr/c/1") == b"inside-1"
    shutil.rmtree(store / "arr")
    os.symlink(outside, store / "arr", target_is_directory=True)
    opened.clear()
    with pytest.raises(StoreReadError, match="'arr'.*outside the store"):
        st.get("arr/c/0")
    assert not [p for p in opened if p.startswith(os.path.realpath(outside))]


def test_a_folder_rewritten_in_place_reads_its_new_files(tmp_path: Path) -> None:
    store, _ = _tree(tmp_path)
    st = LocalStore(str(store))
    assert st.get("arr/c/0") == b"inside-0"
    shutil.rmtree(store / "arr" / "c")
    (store / "arr" / "c").mkdir()
    (store / "arr" / "c" / "0").write_bytes(b"rewritten")
    assert st.get("arr/c/0") == b"rewritten"
    assert st.get("arr/c/1") is None  # gone with the old folder: a missing key
    assert st.missing_seen == 1


def test_links_inside_the_store_still_read(tmp_path: Path) -> None:
    store, _ = _tree(tmp_path)
    os.symlink(store / "arr" / "c", store / "alias", target_is_directory=True)
    os.symlink(store / "arr" / "c" / "1", store / "arr" / "c" / "one")
    st = LocalStore(str(store))
    assert st.get("alias/0") == b"inside-0"
    assert st.get("arr/c/one") == b"inside-1"  # a link as the last part, inside: read
    assert st.get_ranges([("alias/1", ByteRange.last(1)), ("arr/c/0", ByteRange(2, 2))]) == [b"1", b"si"]


def test_many_folders_past_what_is_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "MAX_FOLDERS", 3)
    store = tmp_path / "many.zarr"
    for i in range(10):
        (store / "arr" / str(i)).mkdir(parents=True)
        (store / "arr" / str(i) / "0").write_bytes(str(i).encode())
    st = LocalStore(str(store))
    for _ in range(2):
        assert [st.get(f"arr/{i}/0") for i in range(10)] == [str(i).encode() for i in range(10)]
    assert len(st._folders) <= 3


def test_keys_of_a_folder_or_the_root_read_as_missing_or_refused(tmp_path: Path) -> None:
    store, _ = _tree(tmp_path)
    st = LocalStore(str(store))
    assert st.get("arr/c") is None  # a folder, not a file: missing
    assert st.get("arr/c/0/x") is None  # below a file: missing
    assert st.get("nothing/here") is None
