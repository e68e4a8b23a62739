"""A store that changes while its rows stream, and a relation over an Icechunk branch that
moves: no row pairs one version's coordinates with another version's values.

A scan keeps the coordinates it decoded when its table opened and reads data chunks as it
goes. A local store replaced (or a coordinate rewritten in place) while the scan streams
must stop the scan with "changed during the query" instead of handing over rows of kept
coordinates beside the new version's values; a store that only grew still reads the rows
the scan started from. A relation over a branch's tip, fetched again after a new commit,
reads the branch as it is then or refuses, as over a plain store; reads pinned to a tag or
a snapshot id keep their version.

Every version written here has `v == x` in each row, and the oracle is the writer's own
arrays (or xarray reading the repository): a row in neither version is a mix. Where the
reader's threads would race the writer, the rewrite is made from inside the read of a data
chunk (a hook on `LocalStore`), so that it lands mid-scan every time.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.scan import open_scan
from zarrsql.store.local import LocalStore

#: Rows and chunk length of the fixture: 8 rows in 4 chunks of 2, so 4 work units.
ROWS, CHUNK = 8, 2


def _dataset(offset: int, rows: int = ROWS) -> xr.Dataset:
    values = np.arange(rows) + offset
    return xr.Dataset({"v": (("x",), values.astype("f8"))}, coords={"x": values})


def _write(path: Path, offset: int, *, rows: int = ROWS, mode: str = "w", append: bool = False) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = _dataset(offset, rows)
        if append:
            ds.to_zarr(path, append_dim="x", zarr_format=3, consolidated=False)
        else:
            chunks = {"chunks": (CHUNK,)}
            ds.to_zarr(path, mode=mode, encoding={"v": chunks, "x": chunks}, zarr_format=3, consolidated=False)


def _pairs(offset: int, rows: int = ROWS) -> set[tuple[int, float]]:
    """The (x, v) rows of the version written with `offset` (the writer's own arrays)."""
    ds = _dataset(offset, rows)
    return set(zip(ds.x.values.tolist(), ds.v.values.tolist(), strict=True))


def _rewrite_during_data_read(monkeypatch: pytest.MonkeyPatch, nth: int, rewrite: Callable[[], None]) -> None:
    """Run `rewrite` once, inside the `nth` read (from 0) of a chunk of `v` by any local
    store, before that read: the store changes while the scan is between its units."""
    seen = [0]
    lock = threading.Lock()
    original_get, original_many = LocalStore.get, LocalStore.get_many

    def before(keys: list[str]) -> None:
        if not any(k.startswith("v/c/") for k in keys):
            return
        with lock:
            now, seen[0] = seen[0], seen[0] + 1
            if now == nth:
                rewrite()

    def get(self: LocalStore, key: str) -> bytes | None:
        before([key])
        return original_get(self, key)

    def get_many(self: LocalStore, keys: list[str]) -> list[bytes | None]:
        before(list(keys))
        return original_many(self, keys)

    monkeypatch.setattr(LocalStore, "get", get)
    monkeypatch.setattr(LocalStore, "get_many", get_many)


# -- a local store changed while a scan streams ---------------------------------------------


def _rows_until_failure(
    parts: Callable[[], Iterator[Any]], columns: tuple[str, str] = ("x", "v")
) -> tuple[list[tuple[Any, Any]], str]:
    """The rows (two `columns`) of the parts `parts()` gives (numpy parts or Arrow batches)
    until they end or fail, and the failure's message ("" when they ended)."""
    rows: list[tuple[Any, Any]] = []
    try:
        for part in parts():
            if isinstance(part, dict):
                rows += zip(*(part[c][0].tolist() for c in columns), strict=True)
            else:
                rows += zip(*(part.column(c).to_pylist() for c in columns), strict=True)
    except (zarrsql.StoreReadError, duckdb.Error, OSError) as err:
        return rows, str(err)
    return rows, ""


def test_parts_of_a_store_replaced_mid_scan_are_refused_not_mixed(tmp_path: Path) -> None:
    """The scan read x = 0..7 when it opened; after its first part the store is replaced by
    x = 100..107. Before: the next parts paired x = 2.. with v = 102.."""
    path = tmp_path / "s.zarr"
    _write(path, 0)
    parts = open_scan({"store": str(path)}, batch_rows=CHUNK).arrays()
    first, _ = _rows_until_failure(lambda: iter([next(parts)]))
    _write(path, 100)
    rows, failure = _rows_until_failure(lambda: parts)
    assert set(first + rows) <= _pairs(0)
    assert "changed during the query" in failure
    assert "run the query again" in failure


def test_batches_of_a_store_replaced_mid_scan_are_refused_not_mixed(tmp_path: Path, monkeypatch) -> None:
    """The threaded reader (`Scan.batches`): the store is replaced inside the read of the
    third unit's chunk, so that unit's rows would be the new version's values."""
    path = tmp_path / "s.zarr"
    _write(path, 0)
    scan = open_scan({"store": str(path)}, columns=["x", "v"])
    _rewrite_during_data_read(monkeypatch, 2, lambda: _write(path, 100))
    rows, failure = _rows_until_failure(scan.batches)
    assert set(rows) <= _pairs(0)
    assert "changed during the query" in failure


def test_an_sql_stream_of_a_store_replaced_mid_scan_fails_without_mixed_rows(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "s.zarr"
    _write(path, 0)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT x, v FROM read_zarr('{path}')")
        _rewrite_during_data_read(monkeypatch, 2, lambda: _write(path, 100))
        rows, failure = _rows_until_failure(lambda: iter(rel.to_arrow_reader(CHUNK)))  # DuckDB 1.5 reads ahead in it
    assert set(rows) <= _pairs(0)
    assert "changed during the query" in failure


def test_a_coordinate_rewritten_in_place_mid_scan_stops_the_unit_that_pairs_with_it(tmp_path: Path) -> None:
    """Another writer rewrites rows 4-5 of x and v in place (no metadata document changes):
    the units before them were handed over as they were; the unit over them is refused."""
    path = tmp_path / "s.zarr"
    _write(path, 0)
    parts = open_scan({"store": str(path)}, batch_rows=CHUNK).arrays()
    first = next(parts)
    group = zarr.open_group(str(path), mode="r+")
    group["x"][4:6] = [40, 50]
    group["v"][4:6] = [40.0, 50.0]
    second = next(parts)
    with pytest.raises(zarrsql.StoreReadError, match="changed during the query: 'x/c/2'"):
        next(parts)
    got = [(x, v) for p in (first, second) for x, v in zip(p["x"][0].tolist(), p["v"][0].tolist(), strict=True)]
    assert got == sorted(_pairs(0))[:4]


def test_an_auxiliary_coordinate_rewritten_in_place_mid_scan_stops_the_unit_over_it(tmp_path: Path) -> None:
    """A 2-D auxiliary coordinate lat(y, x), kept decoded like a dimension's, in the same
    2 x 3 chunks as v (4 units of 6 rows): rewriting the last chunk of both in place leaves
    the first three units as they were and refuses the last one (before: lat = 15.. beside
    v = -1)."""
    path = tmp_path / "aux.zarr"
    lat = np.arange(24, dtype="f8").reshape(4, 6)
    chunks = {"chunks": (2, 3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.Dataset({"v": (("y", "x"), lat.copy())}, coords={"lat": (("y", "x"), lat)})
        ds.to_zarr(path, mode="w", encoding={"v": chunks, "lat": chunks}, zarr_format=3, consolidated=False)
    parts = open_scan({"store": str(path)}, columns=["lat", "v"], batch_rows=6).arrays()
    first, _ = _rows_until_failure(lambda: iter([next(parts)]), ("lat", "v"))
    group = zarr.open_group(str(path), mode="r+")
    group["lat"][2:4, 3:6] = -1.0
    group["v"][2:4, 3:6] = -1.0
    rest, failure = _rows_until_failure(lambda: parts, ("lat", "v"))
    rows = first + rest
    assert all(a == b for a, b in rows)  # lat == v in every row of the fixture
    assert len(rows) == 18  # three units of 2 x 3 cells
    assert "changed during the query: 'lat/c/1/1'" in failure


@pytest.mark.parametrize("reader", ["arrays", "batches"])
def test_a_store_appended_to_mid_scan_still_reads_the_rows_it_started_from(tmp_path: Path, reader: str) -> None:
    """An append grows the store (and rewrites its metadata documents): every row the scan
    was planned with is still there as it was, so the scan goes on and returns them."""
    path = tmp_path / "s.zarr"
    _write(path, 0)
    scan = open_scan({"store": str(path)}, columns=["x", "v"], batch_rows=CHUNK)
    rows: list[tuple[int, float]] = []
    if reader == "arrays":
        for i, part in enumerate(scan.arrays()):
            rows += zip(part["x"][0].tolist(), part["v"][0].tolist(), strict=True)
            if i == 0:
                _write(path, ROWS, append=True)
    else:
        for i, batch in enumerate(scan.batches()):
            rows += zip(batch.column("x").to_pylist(), batch.column("v").to_pylist(), strict=True)
            if i == 0:
                _write(path, ROWS, append=True)
    with xr.open_zarr(path, consolidated=False) as ds:
        assert ds.sizes["x"] == 2 * ROWS  # the oracle: the append landed
    assert sorted(rows) == sorted(_pairs(0))


# -- Icechunk: a relation over a branch's tip, fetched again after a commit -----------------


def _repository(path: Path):
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    _commit(repo, _dataset(0, 6), "six rows")
    return repo


def _commit(repo, ds: xr.Dataset, message: str) -> str:
    session = repo.writable_session("main")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunks = {"chunks": (CHUNK,)}
        ds.to_zarr(session.store, zarr_format=3, consolidated=False, mode="w", encoding={"v": chunks, "x": chunks})
    return str(session.commit(message))


def _branch_now(repo) -> xr.Dataset:
    """The oracle: xarray reading the tip of main as it is now."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_zarr(repo.readonly_session(branch="main").store, consolidated=False).load()


def test_answers_from_coordinates_over_a_branch_refuse_after_a_new_commit(tmp_path: Path) -> None:
    """count/min/max and ORDER BY x LIMIT n are answered from the coordinates decoded when
    the relation was made; before, fetched after a commit, they repeated the old snapshot's
    answer (6, 0, 5) while xarray and a new statement saw the new one."""
    path = tmp_path / "repo"
    repo = _repository(path)
    with zarrsql.connect() as con:
        counted = con.sql(f"SELECT count(*), min(x), max(x) FROM read_zarr('{path}')")
        top = con.sql(f"SELECT x, v FROM read_zarr('{path}') ORDER BY x DESC LIMIT 2")
        assert counted.fetchall() == [(6, 0, 5)]  # the fixture's six rows, x = 0..5
        assert top.fetchall() == [(5, 5.0), (4, 4.0)]
        _commit(repo, _dataset(100, 4), "four rows")
        now = _branch_now(repo)
        fresh = con.sql(f"SELECT count(*), min(x), max(x) FROM read_zarr('{path}')").fetchall()
        assert fresh == [(now.sizes["x"], int(now.x.min()), int(now.x.max()))]
        for relation in (counted, top):
            with pytest.raises(
                (zarrsql.ZarrSQLError, duckdb.Error), match="store changed since this relation was made"
            ):
                relation.fetchall()


def test_a_scan_relation_over_a_branch_reads_the_new_commit_when_fetched_again(tmp_path: Path) -> None:
    """Before: the relation read the snapshot the branch pointed at when it was made."""
    path = tmp_path / "repo"
    repo = _repository(path)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT x, v FROM read_zarr('{path}') ORDER BY x")
        assert rel.fetchall() == sorted(_pairs(0, 6))
        _commit(repo, _dataset(100, 4), "four rows")
        now = _branch_now(repo)
        assert rel.fetchall() == list(zip(now.x.values.tolist(), now.v.values.tolist(), strict=True))


def test_open_scan_of_a_branch_reads_the_commit_made_since_it_was_planned(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    repo = _repository(path)
    scan = open_scan({"store": str(path)}, columns=["x", "v"])
    _commit(repo, _dataset(100, 4), "four rows")
    now = _branch_now(repo)
    rows = [(x, v) for p in scan.arrays() for x, v in zip(p["x"][0].tolist(), p["v"][0].tolist(), strict=True)]
    assert rows == list(zip(now.x.values.tolist(), now.v.values.tolist(), strict=True))


def test_relations_pinned_to_a_tag_or_a_snapshot_keep_their_version(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    repo = _repository(path)
    first = str(repo.lookup_branch("main"))
    repo.create_tag("v1", first)
    with zarrsql.connect() as con:
        pinned = [
            con.sql(f"SELECT count(*), max(x) FROM read_zarr('{path}', tag := 'v1')"),
            con.sql(f"SELECT x, v FROM read_zarr('{path}', snapshot := '{first}') ORDER BY x"),
        ]
        before = [rel.fetchall() for rel in pinned]
        _commit(repo, _dataset(100, 4), "four rows")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old = xr.open_zarr(repo.readonly_session(snapshot_id=first).store, consolidated=False).load()
        assert before[0] == [(old.sizes["x"], int(old.x.max()))]
        assert [rel.fetchall() for rel in pinned] == before


def test_a_commit_landing_mid_scan_of_a_branch_leaves_the_scan_on_its_snapshot(tmp_path: Path) -> None:
    """A snapshot never changes: the scan that started on it reads it whole, without error."""
    path = tmp_path / "repo"
    repo = _repository(path)
    rows: list[tuple[int, float]] = []
    for i, part in enumerate(open_scan({"store": str(path)}, columns=["x", "v"], batch_rows=CHUNK).arrays()):
        rows += zip(part["x"][0].tolist(), part["v"][0].tolist(), strict=True)
        if i == 0:
            _commit(repo, _dataset(100, 4), "four rows")
    assert sorted(rows) == sorted(_pairs(0, 6))
