"""Sharded arrays read in parts: a work unit fetches only the inner chunks its rows lie in.

A shard (the `sharding_indexed` codec) is one stored value holding many inner chunks and an
index of where each lies, at the shard's end or start (`index_location`). A work unit covers
a whole shard, but a query's filter often keeps a few of its cells, so reading the whole shard
would fetch mostly bytes nobody uses. When the store reads byte ranges (`RangeReading`) and
sharding is the array's only codec (nothing compresses the shard as a whole), a unit is read
in two rounds of concurrent requests: the index of every shard it touches, then the inner
chunks holding a selected cell, adjacent ones joined into one range. A shard whose every inner
chunk is wanted is read whole, one request as before. Inner chunks not read stay the fill
value, and the unit's selection never picks their cells.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from zarrsql import counters
from zarrsql.decode import chunks
from zarrsql.errors import StoreReadError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import ByteRange, RangeReading, Store

Region = tuple[tuple[int, int], ...]
#: A work unit's selection within its region (see plan/units.py's `WorkUnit.select`).
Select = None | tuple[np.ndarray | None, ...] | np.ndarray


def _sharding_alone(array: ArrayMeta) -> dict | None:
    """The sharding codec's configuration when it is the array's only codec, else None."""
    if array.zarr_format != 3 or not chunks.fast_path(array) or len(array.codecs) != 1:
        return None
    codec = array.codecs[0]
    return (codec.get("configuration") or {}) if codec.get("name") == chunks.SHARDING else None


@dataclass(frozen=True)
class _Shard:
    """A shard a region touches: its grid index, first cell and the inner chunks wanted."""

    index: tuple[int, ...]
    origin: tuple[int, ...]
    wanted: list[tuple[int, ...]]
    whole: bool  # every inner chunk that holds array cells is wanted


def _wanted_along(lo: int, hi: int, origin: int, inner: int, picked: np.ndarray | None) -> list[int]:
    """Inner chunk positions along one axis holding a picked cell of [lo, hi) (all if None)."""
    if picked is None:
        return list(range((lo - origin) // inner, (hi - 1 - origin) // inner + 1)) if hi > lo else []
    cells = picked[(picked >= lo) & (picked < hi)]
    return sorted(set(((cells - origin) // inner).tolist()))


def _wanted(
    region: Region, select: Select, origin: tuple[int, ...], shard: tuple[int, ...], inner: tuple[int, ...]
) -> list[tuple[int, ...]]:
    """The inner chunk positions (relative to the shard) holding a cell `select` picks."""
    box = [(max(a, o), min(b, o + s)) for (a, b), o, s in zip(region, origin, shard, strict=True)]
    if isinstance(select, np.ndarray):
        return _wanted_by_mask(region, select, origin, inner, box)
    axes = []
    for k, ((lo, hi), o, c) in enumerate(zip(box, origin, inner, strict=True)):
        picked = None if select is None or select[k] is None else region[k][0] + np.asarray(select[k])
        axes.append(_wanted_along(lo, hi, o, c, picked))
    return list(itertools.product(*axes))


def _wanted_by_mask(
    region: Region, mask: np.ndarray, origin: tuple[int, ...], inner: tuple[int, ...], box: list[tuple[int, int]]
) -> list[tuple[int, ...]]:
    part = mask[tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(box, region, strict=True))]
    firsts = []
    for k, ((lo, hi), o, c) in enumerate(zip(box, origin, inner, strict=True)):
        first = (lo - o) // c
        edges = [0] + [o + j * c - lo for j in range(first + 1, (hi - 1 - o) // c + 1)]
        part = np.logical_or.reduceat(part, edges, axis=k)
        firsts.append(first)
    return [tuple(int(p) + f for p, f in zip(pos, firsts, strict=True)) for pos in zip(*np.nonzero(part), strict=True)]


def _shards(array: ArrayMeta, region: Region, select: Select, inner: tuple[int, ...]) -> list[_Shard]:
    """The shards of `region` that hold a picked cell, with the inner chunks wanted of each."""
    full = tuple((0, n) for n in array.shape)
    out = []
    for index in chunks.region_chunks(array, region):
        origin = tuple(i * s for i, s in zip(index, array.chunks, strict=True))
        wanted = _wanted(region, select, origin, array.chunks, inner)
        if wanted:
            present = _wanted(full, None, origin, array.chunks, inner)
            out.append(_Shard(index, origin, wanted, len(wanted) == len(present)))
    return out


def _whole_shards(array: ArrayMeta, region: Region, select: Select) -> bool:
    """Whether every cell of every shard `region` touches is wanted (a full scan's units),
    told without listing inner chunks."""
    return select is None and all(
        a % s == 0 and (b % s == 0 or b == n) for (a, b), s, n in zip(region, array.chunks, array.shape, strict=True)
    )


def selected_keys(array: ArrayMeta, region: Region, select: Select) -> list[str] | None:
    """The store keys `read_selected` gets whole, or None when it reads parts of some shard
    (or zarr-python reads the array): what the reader may fetch ahead."""
    config = _sharding_alone(array)
    if config is None or _whole_shards(array, region, select):
        return chunks.region_keys(array, region)
    with chunks.naming_chunk(array, None, None):
        inner, _ = chunks.inner_grid(config, array.chunks)
    shards = _shards(array, region, select, inner)
    if not all(s.whole for s in shards):
        return None
    return [array.chunk_key(s.index) for s in shards]


def read_selected(store: Store, array: ArrayMeta, region: Region, select: Select) -> np.ndarray:
    """The cells of `region`, exact wherever `select` picks a cell (see the module docstring)."""
    config = _sharding_alone(array)
    if config is None or not isinstance(store, RangeReading) or _whole_shards(array, region, select):
        return chunks.read_region(store, array, region)
    with chunks.naming_chunk(array, None, store.url):
        inner, _ = chunks.inner_grid(config, array.chunks)
    shards = _shards(array, region, select, inner)
    out = chunks.fill_chunk(array, tuple(b - a for a, b in region))
    whole = [s for s in shards if s.whole]
    keys = [array.chunk_key(s.index) for s in whole]
    for shard, key, raw in zip(whole, keys, store.get_many(keys), strict=True):
        _place(out, region, shard.origin, chunks.decode_chunk(array, raw, key, store.url))
    parts = [s for s in shards if not s.whole]
    if parts:
        _read_parts(store, array, config, region, parts, out)
    return out


def _place(out: np.ndarray, region: Region, origin: tuple[int, ...], block: np.ndarray) -> None:
    """Copy the part of `block` (its first cell at `origin`) that lies in `region` into `out`."""
    dst, src = [], []
    for (a, b), o, n in zip(region, origin, block.shape, strict=True):
        lo, hi = max(a, o), min(b, o + n)
        dst.append(slice(lo - a, hi - a))
        src.append(slice(lo - o, hi - o))
    out[tuple(dst)] = block[tuple(src)]


@dataclass(frozen=True)
class _Piece:
    """An inner chunk to decode: `length` bytes at `at` in the answer to request `request`."""

    request: int
    at: int
    length: int
    key: str
    pos: tuple[int, ...]
    first: tuple[int, ...]  # the inner chunk's first cell in the array


def _read_parts(
    store: Store, array: ArrayMeta, config: dict, region: Region, parts: list[_Shard], out: np.ndarray
) -> None:
    """Read the wanted inner chunks of `parts`: their indexes, then the chunks' byte ranges."""
    assert isinstance(store, RangeReading)
    inner, grid = chunks.inner_grid(config, array.chunks)
    keys = [array.chunk_key(s.index) for s in parts]
    size = chunks.index_size(config, grid)
    where = ByteRange.last(size) if config.get("index_location", "end") == "end" else ByteRange(0, size)
    requests: list[tuple[str, ByteRange]] = []
    pieces: list[_Piece] = []
    for shard, key, raw in zip(parts, keys, store.get_ranges([(k, where) for k in keys]), strict=True):
        counters.count(chunks_decoded=1)
        if raw is None:
            continue  # a shard never written: fill
        for start, length, run in _adjacent(_entries(array, config, (key, store.url), raw, grid, shard.wanted)):
            for offset, piece_length, pos in run:
                first = tuple(o + p * c for o, p, c in zip(shard.origin, pos, inner, strict=True))
                pieces.append(_Piece(len(requests), offset - start, piece_length, key, pos, first))
            requests.append((key, ByteRange(start, length)))
    data = store.get_ranges(requests) if requests else []
    for piece in pieces:
        raw = data[piece.request]
        if raw is None:
            raise StoreReadError(
                f"shard '{piece.key}' of array '{array.path}' in store '{store.url}' disappeared while the query "
                "read it; run the query again"
            )
        with chunks.naming_chunk(array, piece.key, store.url):
            if len(raw) < piece.at + piece.length:
                start = requests[piece.request][1].start
                raise chunks.past_end(start + piece.at + piece.length, start + len(raw))
            part = memoryview(raw)[piece.at : piece.at + piece.length]
            block = chunks.decode_inner(array, config, part, piece.pos, inner)
        _place(out, region, piece.first, block)


def _entries(
    array: ArrayMeta, config: dict, where: tuple[str, str], raw: bytes, grid: tuple[int, ...], wanted: list
) -> list[tuple[int, int, tuple[int, ...]]]:
    """(offset, length, position) of each wanted inner chunk that was written, by offset."""
    size = chunks.index_size(config, grid)
    with chunks.naming_chunk(array, *where):
        if len(raw) < size:
            raise chunks.too_short(len(raw), size)
        index = chunks.decode_index(array, config, raw, grid)
    entries = ((int(index[pos][0]), int(index[pos][1]), pos) for pos in wanted)
    return sorted(e for e in entries if not chunks.is_absent(e[0], e[1]))


def _adjacent(
    entries: list[tuple[int, int, tuple[int, ...]]],
) -> list[tuple[int, int, list[tuple[int, int, tuple[int, ...]]]]]:
    """(start, length, entries) of each run of byte-adjacent entries (sorted by offset)."""
    runs: list[tuple[int, int, list[tuple[int, int, tuple[int, ...]]]]] = []
    for offset, length, pos in entries:
        if runs and runs[-1][0] + runs[-1][1] == offset:
            start, total, run = runs[-1]
            runs[-1] = (start, total + length, [*run, (offset, length, pos)])
        else:
            runs.append((offset, length, [(offset, length, pos)]))
    return runs
