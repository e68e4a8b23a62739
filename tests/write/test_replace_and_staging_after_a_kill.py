"""A writer killed (SIGKILL) while it writes a new store or replaces one (mode="w") on local
disk: the target is never left empty by the replacement, an old store a killed writer had
moved aside is put back by the next write, and the staging folders a killed writer left are
removed by the next write of the target, never another writer's or a user's folder.

The writers are real child processes that kill themselves at one exact point of
`write.commit` (after the old store was renamed aside, after the new one was renamed in,
right after the two were swapped, while the consolidated metadata is written); a system
that cannot swap two folders is simulated by replacing `commit.exchange` in the child.
Expected values come from each query's definition (numpy) and are compared with what
`xr.open_zarr` reads; sentinel files beside and inside the target must survive.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import StoreExistsError, StoreNotFoundError

OLD_ROWS = 6  # the first store: x = 0..5, v = x * 1.0
NEW_ROWS = 9  # the replacement: x = 0..8, v = x * 2.0

_CHILD = r"""
import os
import signal
import sys

import zarrsql
from zarrsql.write import commit

store, layout, point, swap = sys.argv[1:5]


def die():
    os.kill(os.getpid(), signal.SIGKILL)


if swap == "off":  # a system or file system that cannot swap two folders in one step
    commit.exchange = lambda first, second: False
real_rename = os.rename


def rename(source, destination):
    real_rename(source, destination)
    if point == "old-aside" and ".zarrsql-old-" in os.fspath(destination):
        die()  # the old store is aside, the new one not yet in place
    if point == "new-in" and ".zarrsql-staging-" in os.fspath(source):
        die()  # the new store is in place, the old one not yet removed


os.rename = rename
real_exchange = getattr(commit, "exchange", None)
if point == "swapped" and real_exchange is not None:

    def exchange(first, second):
        swapped = real_exchange(first, second)
        if swapped:
            die()  # the two folders swapped, the old store not yet removed
        return swapped

    commit.exchange = exchange
if point == "swapped":
    point = "old-aside"  # without a swap, the first change of the target is this rename
if point == "writing":
    commit.consolidate = lambda *args, **kwargs: die()
dims = ["x"] if layout == "grid" else None
zarrsql.to_zarr("SELECT range::BIGINT AS x, range * 2.0 AS v FROM range(9)", store, dims=dims, layout=layout,
                mode=sys.argv[5], connection=zarrsql.connect())
"""


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _write(con: zarrsql.Connection, store: Path, layout: str, lo: int, hi: int, factor: float, mode: str) -> None:
    """Rows x = lo..hi-1 with v = x * factor."""
    sql = f"SELECT range::BIGINT AS x, range * {factor} AS v FROM range({lo}, {hi})"
    extra = {"dims": ["x"], "append_dim": "x"} if layout == "grid" and mode == "a" else {}
    if layout == "grid" and mode != "a":
        extra = {"dims": ["x"]}
    zarrsql.to_zarr(sql, store, layout=layout, mode=mode, connection=con, **extra)  # type: ignore[arg-type]


def _v(store: Path) -> np.ndarray:
    with xr.open_zarr(store) as ds:
        return np.asarray(ds["v"].values)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "zarrsql-" in p.name)


@pytest.fixture
def work(con: zarrsql.Connection, tmp_path: Path) -> Iterator[Path]:
    """A folder with a sentinel file and, for the tests that need one, nothing else yet."""
    (tmp_path / "neighbour.txt").write_text("the user's")
    yield tmp_path
    assert (tmp_path / "neighbour.txt").read_text() == "the user's"


def _old_store(con: zarrsql.Connection, work: Path, layout: str) -> Path:
    """The store that is then replaced: v = x over x < OLD_ROWS, with a user's file inside."""
    store = work / "s.zarr"
    _write(con, store, layout, 0, OLD_ROWS, 1.0, "w-")
    (store / "notes.txt").write_text("inside")
    return store


def _kill(store: Path, layout: str, point: str, *, swap: bool = True, mode: str = "w") -> None:
    """Run the replacement (or new store, `mode`) in a child that kills itself at `point`."""
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(store), layout, point, "on" if swap else "off", mode],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]


def _swaps(folder: Path) -> bool:
    """Whether this system and file system swap two folders in one step: Linux's
    renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE), asked directly."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None) if sys.platform == "linux" else None
    if renameat2 is None:
        return False
    first, second = folder / "swap-a", folder / "swap-b"
    first.mkdir()
    second.mkdir()
    (first / "mark").touch()
    try:
        swapped = renameat2(-100, os.fsencode(first), -100, os.fsencode(second), 2) == 0
        return swapped and (second / "mark").exists()
    finally:
        for side in (first, second):
            (side / "mark").unlink(missing_ok=True)
            side.rmdir()


# ----------------------------------------------------------------------------- killed between renames
@pytest.mark.parametrize("layout", ["grid", "table"])
def test_a_reader_of_a_store_a_killed_replacement_moved_aside_is_told_where_it_is(
    con: zarrsql.Connection, work: Path, layout: str
) -> None:
    store = _old_store(con, work, layout)
    _kill(store, layout, "old-aside", swap=False)
    assert not store.exists()  # the window the two renames leave, on a system that cannot swap
    with pytest.raises(StoreNotFoundError, match=r"zarrsql-old-.*puts it back"):
        con.sql(f"SELECT count(*) FROM read_zarr('{store}')").fetchall()
    with pytest.raises(StoreNotFoundError, match=r"zarrsql-old-"):
        con.sql(f"SELECT count(*) FROM '{store}'").fetchall()


def test_a_table_append_after_a_killed_replacement_appends_to_the_old_store_put_back(
    con: zarrsql.Connection, work: Path
) -> None:
    store = _old_store(con, work, "table")
    _kill(store, "table", "old-aside", swap=False)
    _write(con, store, "table", OLD_ROWS, OLD_ROWS + 3, 1.0, "a")
    np.testing.assert_array_equal(_v(store), np.arange(OLD_ROWS + 3) * 1.0)
    assert (store / "notes.txt").read_text() == "inside"
    assert _leftovers(work) == []


def test_a_grid_append_after_a_killed_replacement_puts_the_old_store_back_and_says_so(
    con: zarrsql.Connection, work: Path
) -> None:
    store = _old_store(con, work, "grid")
    _kill(store, "grid", "old-aside", swap=False)
    # the grid append found no store and would have created one: it puts the old one back instead
    with pytest.raises(StoreExistsError, match=r"killed.*back"):
        _write(con, store, "grid", OLD_ROWS, OLD_ROWS + 3, 1.0, "a")
    np.testing.assert_array_equal(_v(store), np.arange(OLD_ROWS) * 1.0)
    _write(con, store, "grid", OLD_ROWS, OLD_ROWS + 3, 1.0, "a")  # run again: appended
    np.testing.assert_array_equal(_v(store), np.arange(OLD_ROWS + 3) * 1.0)
    assert (store / "notes.txt").read_text() == "inside"
    assert _leftovers(work) == []


@pytest.mark.parametrize("layout", ["grid", "table"])
def test_mode_w_after_a_killed_replacement_replaces_the_store_put_back(
    con: zarrsql.Connection, work: Path, layout: str
) -> None:
    store = _old_store(con, work, layout)
    _kill(store, layout, "old-aside", swap=False)
    _write(con, store, layout, 0, 4, 3.0, "w")
    np.testing.assert_array_equal(_v(store), np.arange(4) * 3.0)
    assert _leftovers(work) == []


@pytest.mark.parametrize("layout", ["grid", "table"])
def test_a_replacement_killed_after_its_renames_leaves_the_new_store_and_the_next_write_removes_the_old(
    con: zarrsql.Connection, work: Path, layout: str
) -> None:
    store = _old_store(con, work, layout)
    _kill(store, layout, "new-in", swap=False)
    np.testing.assert_array_equal(_v(store), np.arange(NEW_ROWS) * 2.0)
    _write(con, store, layout, NEW_ROWS, NEW_ROWS + 2, 2.0, "a")
    np.testing.assert_array_equal(_v(store), np.arange(NEW_ROWS + 2) * 2.0)
    assert _leftovers(work) == []


# ----------------------------------------------------------------------------- the swap
@pytest.mark.parametrize("layout", ["grid", "table"])
def test_a_replacement_killed_as_it_swaps_the_stores_never_leaves_the_path_empty(
    con: zarrsql.Connection, work: Path, layout: str
) -> None:
    if not _swaps(work):
        pytest.skip("this system or file system cannot swap two folders (RENAME_EXCHANGE)")
    store = _old_store(con, work, layout)
    _kill(store, layout, "swapped")
    np.testing.assert_array_equal(_v(store), np.arange(NEW_ROWS) * 2.0)
    got = con.sql(f"SELECT count(*), sum(v) FROM read_zarr('{store}')").fetchall()
    assert got == [(NEW_ROWS, float(np.sum(np.arange(NEW_ROWS) * 2.0)))]
    _write(con, store, layout, NEW_ROWS, NEW_ROWS + 2, 2.0, "a")  # and the old store, swapped out, goes
    np.testing.assert_array_equal(_v(store), np.arange(NEW_ROWS + 2) * 2.0)
    assert _leftovers(work) == []


# ----------------------------------------------------------------------------- staging left by a kill
def test_a_killed_new_store_leaves_a_staging_folder_the_next_write_removes(con: zarrsql.Connection, work: Path) -> None:
    store = work / "s.zarr"
    _kill(store, "grid", "writing", mode="w-")
    assert not store.exists()
    assert [n for n in _leftovers(work) if "zarrsql-staging-" in n]  # the kill left its staging
    _write(con, store, "grid", 0, 4, 3.0, "w-")
    np.testing.assert_array_equal(_v(store), np.arange(4) * 3.0)
    assert _leftovers(work) == []


@pytest.mark.parametrize("layout", ["grid", "table"])
def test_a_replacement_killed_while_writing_leaves_the_old_store_and_the_next_replacement_removes_its_staging(
    con: zarrsql.Connection, work: Path, layout: str
) -> None:
    store = _old_store(con, work, layout)
    _kill(store, layout, "writing")
    np.testing.assert_array_equal(_v(store), np.arange(OLD_ROWS) * 1.0)
    assert (store / "notes.txt").read_text() == "inside"
    _write(con, store, layout, 0, 4, 3.0, "w")
    np.testing.assert_array_equal(_v(store), np.arange(4) * 3.0)
    assert _leftovers(work) == []


@pytest.fixture
def live_pid() -> Iterator[int]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield child.pid
    child.kill()
    child.wait()


def test_the_cleanup_leaves_live_writers_other_hosts_and_look_alike_folders(
    con: zarrsql.Connection, work: Path, live_pid: int
) -> None:
    """Three staging folders that are not a dead writer's of this host: one of a live process,
    one of another host (its pid cannot be checked), one without a record (a user's folder of
    the same name). A killed writer's staging beside them is removed; they all stay."""
    store = work / "s.zarr"
    kept = {
        "1" * 32: {"host": socket.gethostname(), "pid": live_pid},
        "2" * 32: {"host": socket.gethostname() + "-elsewhere", "pid": 2**22 + 7},
        "3" * 32: None,
    }
    for key, owner in kept.items():
        folder = work / f".s.zarr.zarrsql-staging-{key}"
        folder.mkdir()
        (folder / "zarr.json").write_text("{}")
        if owner is not None:
            (work / f".s.zarr.zarrsql-writer-{key}").write_text(json.dumps(owner))
    before = _leftovers(work)
    _kill(store, "grid", "writing", mode="w-")
    assert len(_leftovers(work)) == len(before) + 2  # the killed writer's staging folder and record
    _write(con, store, "grid", 0, 4, 3.0, "w-")
    np.testing.assert_array_equal(_v(store), np.arange(4) * 3.0)
    assert _leftovers(work) == before
    for key in kept:
        assert (work / f".s.zarr.zarrsql-staging-{key}" / "zarr.json").read_text() == "{}"
    assert os.path.exists(work / "neighbour.txt")
