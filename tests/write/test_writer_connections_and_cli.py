"""Writers and the connection they run on, appends aimed at the other layout, and COPY to
Zarr from the command line.

- A write that fails midway (a full disk, a value refused in a later batch) leaves its
  connection usable: DuckDB 2 refuses every query on a connection whose Arrow stream of rows
  is still open ("connection has an open result"), and a failed write's stream stayed open
  while a reference cycle (the asyncio future holding the I/O error) kept its frames alive.
  The cyclic garbage collector is paused during the write so that the leak, if any, shows
  every time instead of when the collector happens not to run.
- A grid append (`append_dim=`) to a table-layout store is an `AppendSchemaError` that says
  so, as a table append to a grid store is.
- `zarrsql query` runs every COPY to Zarr a Python connection runs (`LAYOUT table`, `MODE
  create`: words DuckDB's own parser refuses in a COPY), and option words are case-insensitive.

Oracles: xarray (`xr.open_zarr`) for what is stored, numpy for the values each query defines,
DuckDB itself for the connection's state.
"""

from __future__ import annotations

import errno
import gc
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from zarr.storage import LocalStore

import zarrsql
import zarrsql.write.grid as grid_writer
from tests.cli_runner import assert_one_error, run_cli
from zarrsql.errors import AppendSchemaError, UnwritableColumnError, WriteError

#: Rows of the failing writes: several of the writers' Arrow batches (131072 rows each), so the
#: failure comes while DuckDB's stream of the rows is open, not after it was read to its end.
ROWS = 600_000
CHUNK = 100_000
_SETTING = "allocator_background_threads"


def _rows(lo: int, hi: int) -> str:
    """i = lo..hi-1 with v = 1.5 i: the values every store below must hold."""
    return f"SELECT range::BIGINT AS i, range * 1.5 AS v FROM range({lo}, {hi})"


@contextmanager
def _collector_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _FullDisk:
    """LocalStore writes that fail with ENOSPC from the third chunk of variable `v` on, once
    armed: the disk fills while the writer is between two batches of DuckDB's stream."""

    def __init__(self) -> None:
        self.armed = False
        self.chunks = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        plain_set = LocalStore.set

        async def set_or_fail(store: LocalStore, key: str, value: Any) -> None:
            if self.armed and key.startswith("v/c"):
                self.chunks += 1
                if self.chunks > 2:
                    raise OSError(errno.ENOSPC, "No space left on device")
            await plain_set(store, key, value)

        monkeypatch.setattr(LocalStore, "set", set_or_fail)


def _setting(con: zarrsql.Connection) -> Any:
    ((value,),) = con.sql(f"SELECT current_setting('{_SETTING}')").fetchall()
    return value


def _assert_usable(con: zarrsql.Connection, tmp_path: Path, before: Any) -> None:
    """The connection runs a query and another write, and the allocator setting the failed
    write changed for its duration is back."""
    assert con.sql("SELECT 42").fetchall() == [(42,)]
    assert _setting(con) == before
    after = tmp_path / "after.zarr"
    zarrsql.to_zarr(_rows(0, 4), after, dims=["i"], connection=con)
    np.testing.assert_array_equal(xr.open_zarr(after).v.values, np.arange(4) * 1.5)


def _fail_table(con: zarrsql.Connection, path: Path, disk: _FullDisk) -> None:
    disk.armed = True
    zarrsql.to_zarr(_rows(0, ROWS), path, layout="table", chunks=CHUNK, connection=con)


def _fail_table_append(con: zarrsql.Connection, path: Path, disk: _FullDisk) -> None:
    zarrsql.to_zarr(_rows(0, CHUNK), path, layout="table", chunks=CHUNK, connection=con)
    disk.armed = True
    zarrsql.to_zarr(_rows(CHUNK, ROWS), path, layout="table", mode="a", connection=con)


def _fail_grid(con: zarrsql.Connection, path: Path, disk: _FullDisk) -> None:
    disk.armed = True
    zarrsql.to_zarr(_rows(0, ROWS), path, dims=["i"], chunks={"i": CHUNK}, connection=con)


def _fail_grid_append(con: zarrsql.Connection, path: Path, disk: _FullDisk) -> None:
    # as many steps as a chunk: the coordinate array is chunked by its length at creation
    zarrsql.to_zarr(_rows(0, CHUNK), path, dims=["i"], chunks={"i": CHUNK}, connection=con)
    disk.armed = True
    zarrsql.to_zarr(_rows(CHUNK, ROWS), path, mode="a", append_dim="i", connection=con)


_DISK_FULL_WRITES: dict[str, tuple[Callable[[zarrsql.Connection, Path, _FullDisk], None], bool]] = {
    # name: (the write, whether a grid streams its rows sorted by chunk instead of pivoting in memory)
    "table": (_fail_table, False),
    "table append": (_fail_table_append, False),
    "grid in memory": (_fail_grid, False),
    "grid streaming": (_fail_grid, True),
    "grid append": (_fail_grid_append, False),  # an append always streams its rows by chunk
}


# ----------------------------------------------------------------------------- 1: connections
@pytest.mark.parametrize("write", list(_DISK_FULL_WRITES))
def test_a_write_failing_on_a_full_disk_leaves_the_connection_usable(
    write: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    failing_write, streaming = _DISK_FULL_WRITES[write]
    if streaming:  # as a grid larger than memory is written
        monkeypatch.setattr(grid_writer, "IN_MEMORY_BYTES", 0)
    disk = _FullDisk()
    disk.install(monkeypatch)
    con = zarrsql.connect()
    before = _setting(con)
    with _collector_paused(), pytest.raises(WriteError, match="No space left on device"):
        failing_write(con, tmp_path / "big.zarr", disk)
    disk.armed = False
    _assert_usable(con, tmp_path, before)


_REFUSED_MIDWAY = {
    # a DECIMAL value a double does not hold exactly, in the last batch (the table layout refuses it)
    "table": (
        "SELECT range::BIGINT AS i, CASE WHEN range = 299999 THEN 12345678901234567890.123456789 ELSE 1.5 END"
        "::DECIMAL(38,9) AS d FROM range(300000)",
        {"layout": "table"},
        UnwritableColumnError,
    ),
    # the dimension tuple i = 0 again in a later batch
    "grid": ("SELECT range % 250000 AS i, range * 1.0 AS v FROM range(300000)", {"dims": ["i"]}, WriteError),
}


@pytest.mark.parametrize("layout", sorted(_REFUSED_MIDWAY))
def test_a_write_refused_midway_leaves_the_connection_usable(layout: str, tmp_path: Path) -> None:
    sql, keywords, error = _REFUSED_MIDWAY[layout]
    con = zarrsql.connect()
    before = _setting(con)
    with _collector_paused(), pytest.raises(error):
        zarrsql.to_zarr(sql, tmp_path / "refused.zarr", connection=con, **keywords)
    assert not (tmp_path / "refused.zarr").exists()
    _assert_usable(con, tmp_path, before)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a real full disk. Mounting needs root (or CAP_SYS_ADMIN); skipped when
    the mount is refused."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, check=False
        )
    except FileNotFoundError:
        pytest.skip("no mount command to make a full disk with")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.parametrize("layout", ["table", "grid"])
def test_a_write_onto_a_full_tmpfs_leaves_the_connection_usable(tiny_disk: Path, layout: str, tmp_path: Path) -> None:
    con = zarrsql.connect()
    before = _setting(con)
    keywords: dict[str, Any] = {"layout": "table"} if layout == "table" else {"dims": ["i"]}
    with _collector_paused(), pytest.raises(WriteError, match="No space left on device"):
        zarrsql.to_zarr(_rows(0, 200_000), tiny_disk / "big.zarr", connection=con, **keywords)
    assert not (tiny_disk / "big.zarr").exists()
    _assert_usable(con, tmp_path, before)


# ----------------------------------------------------------------------------- 2: grid append on a table
@pytest.mark.parametrize(
    "appended",
    [
        "SELECT (range + 5)::BIGINT AS row, (range + 5)::BIGINT AS i, range * 1.5 AS v FROM range(5)",
        "SELECT (range + 5)::BIGINT AS i, range * 1.5 AS v FROM range(5)",
    ],
    ids=["with_a_row_column", "without"],
)
def test_a_grid_append_to_a_table_store_says_it_is_a_table(appended: str, tmp_path: Path) -> None:
    path = tmp_path / "t.zarr"
    con = zarrsql.connect()
    zarrsql.to_zarr(_rows(0, 5), path, layout="table", connection=con)
    with pytest.raises(AppendSchemaError) as info:
        zarrsql.to_zarr(appended, path, mode="a", append_dim="row", connection=con)
    message = str(info.value)
    assert "table-layout store" in message
    assert 'layout="table"' in message
    assert str(path) in message
    stored = xr.open_zarr(path)  # unchanged
    np.testing.assert_array_equal(stored.i.values, np.arange(5))
    np.testing.assert_array_equal(stored.v.values, np.arange(5) * 1.5)
    # and the append it points to works
    zarrsql.to_zarr(_rows(5, 8), path, layout="table", mode="a", connection=con)
    np.testing.assert_array_equal(xr.open_zarr(path).v.values, np.arange(8) * 1.5)


# ----------------------------------------------------------------------------- 3: COPY from the CLI
@pytest.fixture
def source_store(tmp_path: Path) -> Path:
    """v = 0, 1, 2 over i = 0, 1, 2, written by xarray."""
    path = tmp_path / "s.zarr"
    xr.Dataset({"v": (("i",), np.arange(3.0))}, coords={"i": [0, 1, 2]}).to_zarr(path)
    return path


def _assert_table(path: Path, v: np.ndarray) -> None:
    """A table-layout store (rows along `row`) of i = 0, 1, 2 and `v`."""
    stored = xr.open_zarr(path)
    assert "row" in stored.dims
    np.testing.assert_array_equal(stored.i.values, [0, 1, 2])
    np.testing.assert_array_equal(stored.v.values, v)


def test_cli_copy_with_layout_table(source_store: Path, tmp_path: Path) -> None:
    out = run_cli(
        "query", str(source_store),
        f"COPY (SELECT i, v FROM read_zarr('{source_store}')) TO 'o.zarr' (FORMAT zarr, LAYOUT table)",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    _assert_table(tmp_path / "o.zarr", np.arange(3.0))


def test_cli_copy_among_other_statements_with_words_duckdb_refuses(source_store: Path, tmp_path: Path) -> None:
    """`MODE create` and `LAYOUT TABLE` (reserved words in DuckDB's parser), between a CREATE
    VIEW it needs and a SELECT that reads what it wrote."""
    sql = (
        f"CREATE VIEW doubled AS SELECT i, v * 2 AS v FROM read_zarr('{source_store}');\n"
        "COPY doubled TO 'p.zarr' (LAYOUT TABLE, MODE create);\n"
        "SELECT sum(v) AS total FROM read_zarr('p.zarr')"
    )
    out = run_cli("query", str(source_store), sql, "--format", "csv", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    _assert_table(tmp_path / "p.zarr", np.arange(3.0) * 2)
    assert out.stdout.split() == ["total", str(float(np.sum(np.arange(3.0) * 2)))]


def test_cli_copy_with_a_bad_option_is_one_zarrsql_error(source_store: Path, tmp_path: Path) -> None:
    out = run_cli(
        "query", str(source_store), f"COPY (SELECT * FROM read_zarr('{source_store}')) TO 'o.zarr' (LAYOUT cube)",
        cwd=tmp_path,
    )  # fmt: skip
    assert_one_error(out, "layout must be 'grid' or 'table'", "'cube'")
    assert not (tmp_path / "o.zarr").exists()


@pytest.mark.parametrize(
    "options",
    [
        "LAYOUT TABLE",
        "layout Table, mode CREATE",
        "Layout 'TABLE', Mode 'W', Consolidated 'TRUE'",
        "LAYOUT table, CONSOLIDATED 1",
    ],
)
def test_copy_option_words_are_case_insensitive(options: str, source_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.zarr"
    con = zarrsql.connect()
    con.execute(f"COPY (SELECT i, v FROM read_zarr('{source_store}')) TO '{out}' (FORMAT ZARR, {options})")
    assert con.fetchall() == [(3,)]
    _assert_table(out, np.arange(3.0))
