"""Sharded arrays read by byte range: a small box query fetches the shard index and only the
inner chunks it touches, on local disk and over HTTP (tests/remote/httpserver.py, which
serves Range requests as object stores do).

Stores are written by zarr-python; the expected bytes come from each shard's index parsed
here with numpy (16 bytes of little-endian (offset, length) per inner chunk, then a crc32c),
and the expected values from xarray.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from tests.remote import httpserver
from tests.remote.conftest import stop_http
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.metadata.tree import clear_cache

SHAPE = (8, 64, 64)  # time, lat, lon
SHARD = (8, 32, 32)
INNER = (2, 8, 8)
GRID = tuple(s // c for s, c in zip(SHARD, INNER, strict=True))
INDEX_BYTES = int(np.prod(GRID)) * 16 + 4  # (offset, length) per inner chunk + crc32c
BOX = "time = 3 AND lat BETWEEN 10 AND 20 AND lon BETWEEN 40 AND 47"
BOX_CELLS = (slice(3, 4), slice(10, 21), slice(40, 48))
QUERY = "SELECT time, lat, lon, temp FROM read_zarr('{store}') WHERE {where} ORDER BY time, lat, lon"
#: DuckDB 1.5 pushes no WHERE into the scan (it prunes whole work units only): there a box is
#: given as `bounds :=`, the way 1.5 users prune cells. Boxes without a bounds form need 2.x.
BOUNDS = {
    BOX: "[['time', '3', '3'], ['lat', '10', '20'], ['lon', '40', '47']]",
    "lat BETWEEN 33 AND 40 AND lon BETWEEN 1 AND 20": "[['lat', '33', '40'], ['lon', '1', '20']]",
    "true": None,
}
BOUNDS_QUERY = "SELECT time, lat, lon, temp FROM read_zarr('{store}', bounds := {bounds}) ORDER BY time, lat, lon"


def _values() -> np.ndarray:
    """Random (incompressible) values, with one shard's first quarter left at the fill value
    so that its inner chunks there are never written (absent in the index)."""
    data = np.random.default_rng(7).standard_normal(SHAPE).astype("f4")
    data[:, 32:48, 0:32] = 0.0
    return data


def _write(path: Path, shards: dict | None) -> None:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    temp = group.create_array(
        "temp",
        shape=SHAPE,
        chunks=INNER,
        shards=shards,
        dtype="f4",
        fill_value=0.0,
        dimension_names=["time", "lat", "lon"],
    )
    temp[:] = _values()
    for name, n in zip(["time", "lat", "lon"], SHAPE, strict=True):
        coord = group.create_array(name, shape=(n,), chunks=(n,), dtype="f8", dimension_names=[name])
        coord[:] = np.arange(n, dtype="f8")
    zarr.consolidate_metadata(path)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sharded")
    _write(root / "end.zarr", {"shape": SHARD, "index_location": "end"})
    _write(root / "start.zarr", {"shape": SHARD, "index_location": "start"})
    _write(root / "plain.zarr", None)
    return root


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[httpserver.FaultyServer]:
    served = httpserver.start(root)
    yield served
    stop_http(served)


@dataclass(frozen=True)
class Shard:
    """One shard file: its size and its index, parsed with numpy."""

    size: int
    index: np.ndarray  # (*GRID, 2) of (offset, length)

    @classmethod
    def read(cls, file: Path, location: str) -> Shard:
        raw = file.read_bytes()
        part = raw[-INDEX_BYTES:] if location == "end" else raw[:INDEX_BYTES]
        return cls(len(raw), np.frombuffer(part[:-4], dtype="<u8").reshape(*GRID, 2))

    def inner_bytes(self, positions: set[tuple[int, ...]]) -> int:
        absent = 2**64 - 1
        return sum(int(self.index[p][1]) for p in positions if int(self.index[p][0]) != absent)


def _touched(cells: np.ndarray) -> dict[tuple[int, ...], set[tuple[int, ...]]]:
    """Shard index -> inner chunk positions (within the shard) holding a True cell."""
    out: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    for cell in zip(*np.nonzero(cells), strict=True):
        shard = tuple(int(c) // s for c, s in zip(cell, SHARD, strict=True))
        inner = tuple((int(c) % s) // i for c, s, i in zip(cell, SHARD, INNER, strict=True))
        out.setdefault(shard, set()).add(inner)
    return out


def _expected_bytes(root: Path, location: str, cells: np.ndarray) -> tuple[int, int, int]:
    """(inner chunk bytes the cells lie in, index bytes of their shards, whole-shard bytes)."""
    inner = index = whole = 0
    for shard, positions in _touched(cells).items():
        parsed = Shard.read(root / f"{location}.zarr" / "temp" / "c" / "/".join(map(str, shard)), location)
        inner += parsed.inner_bytes(positions)
        index += INDEX_BYTES
        whole += parsed.size
    return inner, index, whole


def _query(store: str, where: str) -> str:
    if HAS_SOURCES or BOUNDS.get(where, "") is None:
        return QUERY.format(store=store, where=where)
    if where not in BOUNDS:
        pytest.skip("DuckDB 1.5 pushes no WHERE into the scan and this box has no bounds := form; the 2.x run has it")
    return BOUNDS_QUERY.format(store=store, bounds=BOUNDS[where])


def _traced(store: str, where: str) -> tuple[list[tuple], zarrsql.Trace]:
    clear_cache()
    query = _query(store, where)
    with zarrsql.connect() as con:
        con.sql(query).fetchall()  # metadata and coordinates cached
        with zarrsql.trace() as t:
            rows = con.sql(query).fetchall()
    return rows, t


def _oracle(root: Path, cells: np.ndarray) -> np.ndarray:
    with xr.open_zarr(root / "plain.zarr", consolidated=True) as ds:
        return ds["temp"].values[cells]


def _box_mask() -> np.ndarray:
    cells = np.zeros(SHAPE, dtype=bool)
    cells[BOX_CELLS] = True
    return cells


@pytest.mark.parametrize(("where", "location"), [("local", "end"), ("local", "start"), ("http", "end")])
def test_box_query_reads_only_the_inner_chunks_it_touches(root, server, where, location):
    store = str(root / f"{location}.zarr") if where == "local" else server.url(f"{location}.zarr")
    rows, t = _traced(store, BOX)
    cells = _box_mask()
    assert np.array_equal(np.array([r[3] for r in rows], dtype="f4"), _oracle(root, cells))
    inner, index, whole = _expected_bytes(root, location, cells)
    assert inner > 0
    assert whole > 10 * (inner + index)
    assert inner <= t.bytes_read <= inner + index, (t, inner, index, whole)


def test_box_query_over_http_sends_only_ranges(root, server):
    server.reset()
    rows, _ = _traced(server.url("end.zarr"), BOX)
    assert len(rows) == _box_mask().sum()
    inner, index, _ = _expected_bytes(root, "end", _box_mask())
    shard_path = "/end.zarr/temp/c/0/0/1"
    served = [count for path, _, count in server.ranges if path == shard_path]
    assert sum(served) == 2 * (inner + index), server.ranges  # the query ran twice (a warm-up)
    assert server.count("GET", lambda p: p == shard_path) == len(served)  # every GET was ranged
    assert all(path == shard_path for path, _, _ in server.ranges)


def test_sharded_and_unsharded_copies_agree_and_read_the_same_chunk_bytes(root):
    sharded_rows, sharded = _traced(str(root / "end.zarr"), BOX)
    plain_rows, plain = _traced(str(root / "plain.zarr"), BOX)
    assert sharded_rows == plain_rows
    inner, index, _ = _expected_bytes(root, "end", _box_mask())
    assert plain.bytes_read == inner  # unsharded: the same chunks as separate files
    assert sharded.bytes_read == inner + index


def test_predicate_across_axes_reads_only_inner_chunks_with_a_kept_cell(root):
    where = "time = 5 AND (lat < 4 OR lon = 47)"  # not one condition per axis: a mask per unit
    rows, t = _traced(str(root / "end.zarr"), where)
    time, lat, lon = np.meshgrid(*(np.arange(n) for n in SHAPE), indexing="ij")
    cells = (time == 5) & ((lat < 4) | (lon == 47))
    assert [r[:3] for r in rows] == [tuple(float(v) for v in c) for c in zip(*np.nonzero(cells), strict=True)]
    assert np.array_equal(np.array([r[3] for r in rows], dtype="f4"), _oracle(root, cells))
    inner, index, _ = _expected_bytes(root, "end", cells)
    assert inner <= t.bytes_read <= inner + index, (t, inner, index)


def test_never_written_inner_chunks_read_as_fill_from_the_index_alone(root):
    where = "lat BETWEEN 33 AND 40 AND lon BETWEEN 1 AND 20"  # inside the block left at fill
    rows, t = _traced(str(root / "end.zarr"), where)
    cells = np.zeros(SHAPE, dtype=bool)
    cells[:, 33:41, 1:21] = True
    assert np.array_equal(np.array([r[3] for r in rows], dtype="f4"), _oracle(root, cells))
    assert all(r[3] == 0.0 for r in rows)
    assert rows
    inner, index, _ = _expected_bytes(root, "end", cells)
    assert inner == 0
    assert t.bytes_read == index


def test_full_scan_reads_each_shard_whole_in_one_request(root):
    rows, t = _traced(str(root / "end.zarr"), "true")
    assert np.array_equal(np.array([r[3] for r in rows], dtype="f4"), _oracle(root, np.ones(SHAPE, dtype=bool)))
    files = [root / "end.zarr" / "temp" / "c" / "0" / str(i) / str(j) for i, j in itertools.product(range(2), range(2))]
    assert t.bytes_read == sum(f.stat().st_size for f in files)
    assert t.requests == len(files)


def test_corrupt_inner_chunk_read_by_range_names_the_shard(root, tmp_path):
    import shutil

    copy = tmp_path / "end.zarr"
    shutil.copytree(root / "end.zarr", copy)
    shard = copy / "temp" / "c" / "0" / "0" / "1"
    parsed = Shard.read(shard, "end")
    offset, length = (int(v) for v in parsed.index[1, 1, 1])  # the box's first inner chunk
    raw = bytearray(shard.read_bytes())
    raw[offset : offset + length] = bytes(length)
    shard.write_bytes(bytes(raw))
    clear_cache()
    with zarrsql.connect() as con, pytest.raises(zarrsql.DecodeError, match=r"temp/c/0/0/1.*inner chunk \[1, 1, 1\]"):
        con.execute(QUERY.format(store=copy, where=BOX)).fetchall()


def test_a_server_ignoring_ranges_still_gives_the_right_rows_and_counts_what_it_sent(root, server):
    server.reset()
    server.serve_ranges = False
    rows, t = _traced(server.url("end.zarr"), BOX)
    assert np.array_equal(np.array([r[3] for r in rows], dtype="f4"), _oracle(root, _box_mask()))
    _, _, whole = _expected_bytes(root, "end", _box_mask())
    assert t.bytes_read == 3 * whole  # the index and the two inner chunks: the whole shard each time
    server.reset()


RAGGED = (7, 45, 38)  # not a whole number of shards along any axis


@pytest.fixture(scope="module")
def ragged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("ragged") / "ragged.zarr"
    data = np.random.default_rng(11).integers(0, 1000, RAGGED).astype("i4")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    v = group.create_array(
        "v", shape=RAGGED, chunks=(2, 4, 4), shards=(4, 16, 8), dtype="i4", dimension_names=["t", "y", "x"]
    )
    v[:] = data
    for name, n in zip(["t", "y", "x"], RAGGED, strict=True):
        group.create_array(name, shape=(n,), chunks=(n,), dtype="i8", dimension_names=[name])[:] = np.arange(n)
    zarr.consolidate_metadata(path)
    return path, data


@pytest.mark.parametrize(
    ("where", "cells"),
    [
        ("t = 6 AND y BETWEEN 40 AND 44 AND x >= 33", lambda t, y, x: (t == 6) & (y >= 40) & (y <= 44) & (x >= 33)),
        ("y IN (3, 17, 44) AND x = 37", lambda t, y, x: np.isin(y, [3, 17, 44]) & (x == 37)),
        ("t >= 4 AND (y = 44 OR x = 0)", lambda t, y, x: (t >= 4) & ((y == 44) | (x == 0))),
        ("true", lambda t, y, x: np.ones_like(t, dtype=bool)),
    ],
)
def test_edge_shards_read_right_by_range_and_whole(ragged, where, cells):
    path, data = ragged
    clear_cache()
    with zarrsql.connect() as con:
        rows = con.sql(f"SELECT t, y, x, v FROM read_zarr('{path}') WHERE {where} ORDER BY t, y, x").fetchall()
    mask = cells(*np.meshgrid(*(np.arange(n) for n in RAGGED), indexing="ij"))
    assert [r[:3] for r in rows] == [tuple(int(i) for i in c) for c in zip(*np.nonzero(mask), strict=True)]
    assert [r[3] for r in rows] == data[mask].tolist()
