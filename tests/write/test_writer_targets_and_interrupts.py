"""Writer safety at the edges of `write.commit`: a target inside another Zarr store is refused
in every mode before anything is touched; Ctrl-C in a real writer process leaves no staging
directory, no half store and no half append; and the rollback after a killed append removes
the temporary files zarr's local store had left for the append's chunks, and nothing else.

Every expectation comes from xarray (`xr.open_zarr` of the store before and after) or from
the bytes of the store's files before the write; the interrupted writers are real child
processes, interrupted at several points of their progress, and each point must leave the
same invariant, whatever the interleaving.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import StoreExistsError


def _air(values: np.ndarray) -> xr.Dataset:
    return xr.Dataset({"air": (("x",), values)}, coords={"x": np.arange(len(values))})


def _files(root: Path) -> dict[str, bytes]:
    """Every file below `root` with its bytes: the store exactly as it is on disk."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _opened(store: Path | str, **kwargs: object) -> xr.Dataset:
    with xr.open_zarr(store, **kwargs) as ds:  # type: ignore[arg-type]
        return ds.load()


# ----------------------------------------------------------------------------- nested targets
ROWS_SQL = "SELECT range::BIGINT AS x, range * 10.0 AS air FROM range(4)"


@pytest.fixture(params=[3, 2], ids=["v3", "v2"])
def parent(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A store written by xarray: `air` over `x` at the root and the same in group `grp`."""
    store = tmp_path / "parent.zarr"
    _air(np.arange(4.0)).to_zarr(store, zarr_format=request.param)
    _air(np.arange(4.0) + 100).to_zarr(store, group="grp", mode="a", zarr_format=request.param)
    return store


@pytest.mark.parametrize(
    ("inside", "mode", "layout"),
    [
        ("air", "w", "grid"),  # the hunt's case: the array's folder looks like a store (zarr.json)
        ("air", "w-", "grid"),
        ("air", "a", "grid"),
        ("air", "w", "table"),
        ("grp", "w", "grid"),
        ("grp", "a", "table"),
        ("grp/air", "w", "grid"),
        ("new.zarr", "w-", "grid"),  # nothing there yet, but inside the store
        ("air/c/new.zarr", "a", "grid"),  # deep down, in a chunk folder
    ],
)
def test_a_target_inside_another_store_is_refused_and_the_store_is_untouched(
    parent: Path, inside: str, mode: str, layout: str
) -> None:
    root, group = _opened(parent), _opened(parent, group="grp")
    files = _files(parent)
    con = zarrsql.connect()
    with pytest.raises(StoreExistsError, match="inside the Zarr store") as refused:
        zarrsql.to_zarr(
            ROWS_SQL, parent / inside, dims=["x"] if layout == "grid" else None, layout=layout, mode=mode,
            append_dim="x" if mode == "a" and layout == "grid" else None, connection=con,
        )  # fmt: skip
    assert f"'{parent}'" in str(refused.value)  # names the enclosing store
    assert "choose a path outside" in str(refused.value)  # and the fix
    assert _files(parent) == files
    xr.testing.assert_identical(_opened(parent), root)
    xr.testing.assert_identical(_opened(parent, group="grp"), group)


def test_a_link_into_another_store_is_refused(parent: Path, tmp_path: Path) -> None:
    link = tmp_path / "elsewhere.zarr"
    link.symlink_to(parent / "air", target_is_directory=True)
    before, files = _opened(parent), _files(parent)
    with pytest.raises(StoreExistsError, match="inside the Zarr store"):
        zarrsql.to_zarr(ROWS_SQL, link, dims=["x"], mode="w", connection=zarrsql.connect())
    assert _files(parent) == files
    xr.testing.assert_identical(_opened(parent), before)


def test_copy_to_an_array_of_another_store_is_refused(parent: Path) -> None:
    before, files = _opened(parent), _files(parent)
    con = zarrsql.connect()
    with pytest.raises(StoreExistsError, match="inside the Zarr store"):
        con.execute(f"COPY ({ROWS_SQL}) TO '{parent / 'air'}' (FORMAT zarr, DIMS (x), MODE overwrite)")
    assert _files(parent) == files
    xr.testing.assert_identical(_opened(parent), before)


def test_stores_beside_a_store_and_a_whole_array_store_are_still_written(parent: Path, tmp_path: Path) -> None:
    """Documented: mode "w" replaces a Zarr store, an array store (`.zarray` or an array
    `zarr.json` at its root) included; only a store inside another one is refused."""
    import zarr

    array_store = tmp_path / "array.zarr"
    zarr.create_array(array_store, shape=(3,), dtype="f8")[:] = [1.0, 2.0, 3.0]
    con = zarrsql.connect()
    expected = _air(np.arange(4) * 10.0)
    for target, mode in [(tmp_path / "beside.zarr", "w-"), (array_store, "w")]:
        zarrsql.to_zarr(ROWS_SQL, target, dims=["x"], mode=mode, connection=con)
        xr.testing.assert_equal(_opened(target), expected)


def test_on_s3_a_target_inside_another_store_is_refused() -> None:
    from tests.remote.conftest import fresh_bucket

    bucket = fresh_bucket("nested")
    options = next(bucket)
    try:
        parent = "s3://nested/parent.zarr"
        _air(np.arange(4.0)).to_zarr(parent, storage_options=options)
        before = _opened(parent, storage_options=options)
        con = zarrsql.connect()
        for inside, mode in [("air", "w"), ("new.zarr", "w-")]:
            with pytest.raises(StoreExistsError, match=f"inside the Zarr store '{parent}'"):
                zarrsql.to_zarr(ROWS_SQL, f"{parent}/{inside}", dims=["x"], mode=mode, storage_options=options,
                                connection=con)  # fmt: skip
        xr.testing.assert_identical(_opened(parent, storage_options=options), before)
        zarrsql.to_zarr(ROWS_SQL, "s3://nested/beside.zarr", dims=["x"], storage_options=options, connection=con)
        xr.testing.assert_equal(_opened("s3://nested/beside.zarr", storage_options=options), _air(np.arange(4) * 10.0))
    finally:
        bucket.close()


# ----------------------------------------------------------------------------- Ctrl-C
ROWS = 2_000_000
CHUNK = 1000
OLD_ROWS = 1000
_WRITER = r"""
import sys
import zarrsql

kind, target, rows, chunk, old = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
con = zarrsql.connect()
print("READY", flush=True)
if kind == "append":
    zarrsql.to_zarr(f"SELECT (range + {old})::BIGINT AS x, -1.0 AS air FROM range({rows})", target, mode="a",
                    append_dim="x", connection=con)
else:
    zarrsql.to_zarr(f"SELECT range::BIGINT AS x, range * 10.0 AS air FROM range({rows})", target, dims=["x"],
                    chunks=chunk, mode="w" if kind == "replace" else "w-", connection=con)
print("DONE", flush=True)
"""


def _progress(work: Path, kind: str) -> int:
    """How far the writer got: files in its staging directory, or lines of the append's journal."""
    if kind == "append":
        with_journal = work / "s.zarr" / ".zarrsql-append-journal"
        try:
            return with_journal.read_bytes().count(b"\n")
        except OSError:
            return 0
    return sum(len(files) for staging in work.glob(".s.zarr.zarrsql-staging-*") for _, _, files in os.walk(staging))


def _interrupt(work: Path, kind: str, after: int) -> int:
    """Start the writer, send SIGINT once its progress reached `after` (or when it ended), and
    return its exit code."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, kind, str(work / "s.zarr"), str(ROWS), str(CHUNK), str(OLD_ROWS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 120
        while writer.poll() is None and _progress(work, kind) < after and time.monotonic() < deadline:
            time.sleep(0.002)
        if writer.poll() is None:
            writer.send_signal(signal.SIGINT)
        writer.communicate(timeout=180)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    return writer.returncode


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["new", "replace", "append"])
def test_ctrl_c_during_a_write_leaves_the_old_state_or_the_new_one_whole(tmp_path: Path, kind: str) -> None:
    """SIGINT at several points of a grid write (before any chunk, early, midway): no staging
    directory is left, no chunk comes back after the cleanup, and the target is what it was
    (nothing, the old store byte for byte) unless the write had completed."""
    for after in (0, 1, 300, 1500):
        work = tmp_path / f"{kind}-{after}"
        work.mkdir()
        store = work / "s.zarr"
        old: xr.Dataset | None = None
        if kind != "new":
            zarrsql.to_zarr(f"SELECT range::BIGINT AS x, range * 1.0 AS air FROM range({OLD_ROWS})", store,
                            dims=["x"], chunks=CHUNK, connection=zarrsql.connect())  # fmt: skip
            old, files = _opened(store), _files(store)
        code = _interrupt(work, kind, after)
        left = sorted(p.name for p in work.iterdir())
        assert not [name for name in left if "zarrsql-" in name], (after, left)
        if code == 0:  # finished before the signal: the whole new state
            got = _opened(store)
            assert got.sizes["x"] == ROWS + (OLD_ROWS if kind == "append" else 0), after
            continue
        if kind == "new":
            assert left == [], (after, left)
            continue
        assert left == ["s.zarr"], (after, left)
        assert _files(store) == files, after  # rolled back / never touched: every byte as before
        assert old is not None
        xr.testing.assert_identical(_opened(store), old)


# ----------------------------------------------------------------------------- killed appends
_KILLED_BEFORE_A_RENAME = r"""
import os
import pathlib
import signal
import sys

import zarrsql

real_replace = pathlib.Path.replace


def replace(self, target):
    # zarr's local store writes a chunk to `<key>.<hex>.partial` and renames it onto the key:
    # die just before the rename of chunk (3, 0) of `v`, where a SIGKILL may land
    if pathlib.Path(target).as_posix().endswith("/v/c/3/0"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(self, target)


pathlib.Path.replace = replace
zarrsql.to_zarr("SELECT (i + 100)::BIGINT AS i, j::BIGINT AS j, -1.0 AS v FROM range(800) t(i), range(2) u(j)",
                sys.argv[1], mode="a", append_dim="i", connection=zarrsql.connect())
"""


def test_the_rollback_of_a_killed_append_removes_zarrs_temporary_files(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    con = zarrsql.connect()
    grid = "SELECT i::BIGINT AS i, j::BIGINT AS j, (i * 10 + j) * 1.0 AS v FROM range(100) t(i), range(2) u(j)"
    zarrsql.to_zarr(grid, store, dims=["i", "j"], chunks={"i": 100, "j": 1}, connection=con)
    before = _opened(store)
    killed = subprocess.run([sys.executable, "-c", _KILLED_BEFORE_A_RENAME, str(store)],
                            stderr=subprocess.DEVNULL, timeout=180, check=False)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    temporaries = [p for p in store.rglob("*.partial") if p.is_file()]
    assert any(p.parent == store / "v" / "c" / "3" for p in temporaries), "the kill left no temporary"
    # a file that only looks like a temporary, of no key the append wrote: not the rollback's
    decoy = store / "v" / "c" / "3" / ("keep." + "0" * 32 + ".partial")
    decoy.write_bytes(b"not zarr's")

    zarrsql.to_zarr("SELECT 100::BIGINT AS i, j::BIGINT AS j, 5.0 AS v FROM range(2) t(j)", store, mode="a",
                    append_dim="i", connection=con)  # fmt: skip
    assert [p for p in store.rglob("*.partial") if p.is_file()] == [decoy]
    assert decoy.read_bytes() == b"not zarr's"
    step = xr.Dataset({"v": (("i", "j"), [[5.0, 5.0]])}, coords={"i": [100], "j": [0, 1]})
    xr.testing.assert_equal(_opened(store), xr.concat([before, step], dim="i"))
    assert not list(store.glob(".zarrsql-*")), sorted(p.name for p in store.iterdir())
