"""Sparse matrices (CSR / CSC: data, indices, indptr) read by compressed-axis ranges.

`SparseMatrix` (a convention's record, `conventions.records`) holds the three arrays;
`load_indptr` reads and validates the pointer array once (it has one entry per row plus
one). `entries(rows)` returns the stored entries of a set of compressed-axis positions —
reading only the ranges of `indices`/`data` they point to, so a query for 100 cells of a
50,000-cell matrix reads those cells' slices. A sparse matrix beside dense arrays is read
densely with `DenseFromSparse`. Wherever entries become cells (`put_entries`), a cell
stored twice (a non-canonical matrix: scipy allows it, anndata writes it unchanged) holds
the sum of its entries, as scipy's `toarray()` gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrsql import counters
from zarrsql.conventions.records import SparseMatrix
from zarrsql.decode.cells import Cells, select_cells
from zarrsql.decode.chunks import decode_chunk, fast_path, read_region, zstd_module, zstd_prefix
from zarrsql.decode.columns import ColumnCodec, DecodeOptions, column_codec
from zarrsql.errors import DecodeError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.store import Store

#: Ranges of `indices`/`data` closer than this many entries (or one chunk) are read as one.
MERGE_GAP = 4096


def load_indptr(store: Store, m: SparseMatrix) -> np.ndarray:
    """The pointer array, checked: length n+1, starts at 0, never decreases, fits the data."""
    n = m.shape[m.axis]
    if m.indptr.shape != (n + 1,):
        raise DecodeError(
            f"sparse matrix '{m.path}': indptr has shape {list(m.indptr.shape)}, expected [{n + 1}] "
            f"for {n} {'rows' if m.axis == 0 else 'columns'}; the matrix is corrupt"
        )
    ptr = read_region(store, m.indptr, ((0, n + 1),)).astype(np.int64)
    if ptr[0] != 0 or (np.diff(ptr) < 0).any():
        raise DecodeError(f"sparse matrix '{m.path}': indptr is not a non-decreasing run from 0; the matrix is corrupt")
    if ptr[-1] > m.indices.shape[0] or ptr[-1] > m.data.shape[0]:
        raise DecodeError(
            f"sparse matrix '{m.path}': indptr points past the end of indices/data "
            f"({int(ptr[-1])} > {min(m.indices.shape[0], m.data.shape[0])}); the matrix is corrupt"
        )
    return ptr


def _ranges(starts: np.ndarray, ends: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """Merge [start, end) ranges (sorted by start) that lie within `gap` of each other."""
    out: list[list[int]] = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        if b <= a:
            continue
        if out and a - out[-1][1] <= gap:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _plain_zstd(array: ArrayMeta) -> np.dtype | None:
    """The little-endian value type of a 1-D array whose chunks are one bare zstd frame of
    its values (so a prefix of a chunk can be decompressed alone), else None."""
    dt = array.dtype.numpy
    if array.ndim != 1 or dt is None or dt.kind not in "iuf" or zstd_module() is None:
        return None
    if array.zarr_format == 3:
        codecs = array.codecs
        if [c.get("name") for c in codecs] != ["bytes", "zstd"]:
            return None
        endian = (codecs[0].get("configuration") or {}).get("endian", "little")
        return dt.newbyteorder("<") if endian == "little" or dt.itemsize == 1 else None
    compressor = array.codecs.get("compressor") or {}
    if array.codecs.get("filters") or compressor.get("id") != "zstd":
        return None
    stored = np.dtype(array.dtype.name)
    return stored if stored.byteorder in ("<", "|") or (stored.byteorder == "=" and np.little_endian) else None


def _prefix(array: ArrayMeta, dt: np.dtype, raw: Any, count: int, key: str) -> np.ndarray:
    """The first `count` values of a chunk, decompressing only as far as they reach: a row
    that ends early in a chunk does not pay for the rest of it."""
    counters.count(chunks_decoded=1)
    out = np.empty(count, dtype=dt)
    view = out.data.cast("B")
    try:
        got = zstd_prefix(raw, view)
    except Exception as err:  # noqa: BLE001 - zstandard's ZstdError, or a frame it cannot read
        raise DecodeError(f"array '{array.path}': chunk '{key}' is not a readable zstd frame ({err})") from err
    if got < len(view):
        raise DecodeError(
            f"array '{array.path}': chunk '{key}' decompresses to {got} bytes, fewer than the "
            f"{len(view)} its first {count} values need; the chunk is corrupt or truncated"
        )
    return out.astype(dt.newbyteorder("="), copy=False)


def _read_range(store: Store, array: ArrayMeta, a: int, b: int) -> np.ndarray:
    """array[a:b] of a 1-D array; a chunk needed only up to somewhere inside it is
    decompressed only that far when its codecs allow (`_plain_zstd`)."""
    dt = _plain_zstd(array) if fast_path(array) else None
    size = array.chunks[0]
    first, last = a // size, (b - 1) // size
    partial = b < min((last + 1) * size, array.shape[0])
    if dt is None or not partial:
        return read_region(store, array, ((a, b),))
    keys = [array.chunk_key((i,)) for i in range(first, last + 1)]
    raws = store.get_many(keys)  # concurrent on remote stores
    pieces = []
    for i, key, raw in zip(range(first, last + 1), keys, raws, strict=True):
        lo, hi = max(a, i * size) - i * size, min(b, (i + 1) * size) - i * size
        if i == last and raw is not None:
            pieces.append(_prefix(array, dt, raw, hi, key)[lo:hi])
        else:
            pieces.append(decode_chunk(array, raw, key, store.url)[lo:hi])
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _gather(store: Store, array: ArrayMeta, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of array[starts[i]:ends[i]] for every i, reading merged ranges once."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return read_region(store, array, ((0, 0),))
    if (starts[1:] == ends[:-1]).all():  # one run (a whole block of rows): no pieces to join
        return _read_range(store, array, int(starts[0]), int(ends[-1]))
    pieces = []
    # ranges within one chunk of each other share their chunks: read them together, so that
    # no chunk is decoded twice
    merged = _ranges(starts, ends, max(MERGE_GAP, array.chunks[0]))
    blocks = [(a, _read_range(store, array, a, b)) for a, b in merged]
    k = 0
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        while not (blocks[k][0] <= a and b <= blocks[k][0] + len(blocks[k][1])):
            k += 1
        base, block = blocks[k]
        pieces.append(block[a - base : b - base])
    return np.concatenate(pieces)


def _positions_dtype(n: int) -> type:
    return np.int32 if n <= np.iinfo(np.int32).max else np.int64


def entries(
    store: Store,
    m: SparseMatrix,
    ptr: np.ndarray,
    positions: np.ndarray,
    span: tuple[int, int] | None = None,
    *,
    major: bool = True,
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(compressed positions, other-axis indices, raw data) of the stored entries of the
    given compressed-axis positions (sorted ascending), in storage order.

    `span` keeps only the entries stored in [lo, hi) of `indices`/`data` (a work unit that
    ends inside a row, so that a chunk is never decoded by two units); `major=False` skips
    the positions column (a query that does not ask for it). The indices keep a 32-bit type
    when the other axis fits it: they become Arrow dictionary codes as they are."""
    starts, ends = ptr[positions], ptr[positions + 1]
    if span is not None:
        starts, ends = np.maximum(starts, span[0]), np.minimum(ends, span[1])
    counts = np.maximum(ends - starts, 0)
    rows: np.ndarray | None = (
        np.repeat(positions.astype(_positions_dtype(m.shape[m.axis]), copy=False), counts) if major else None
    )
    minor = _gather(store, m.indices, starts, ends)
    data = _gather(store, m.data, starts, ends)
    other = m.shape[1 - m.axis]
    if minor.dtype.kind not in "iu":
        raise DecodeError(
            f"sparse matrix '{m.path}': indices have type {minor.dtype}, not integers; the matrix is corrupt"
        )
    if minor.size and (minor.min() < 0 or minor.max() >= other):
        raise DecodeError(f"sparse matrix '{m.path}': an index is outside 0..{other - 1}; the matrix is corrupt")
    return rows, minor.astype(_positions_dtype(other), copy=False), data


def put_entries(target: np.ndarray, at: np.ndarray, values: np.ndarray, *, order: np.ndarray) -> None:
    """`target[at] = values` for stored entries, except that entries landing on one cell are
    added, as scipy's `toarray()` adds them (on booleans numpy's add is a logical or, as
    scipy's is; integers wrap in their type, as scipy's do). `target` is 1-D and zero.

    `order` is each entry's key in storage order (compressed position, then index); a
    canonical matrix, as anndata and scipy write one, has it strictly increasing, which a
    cheap check proves, and then no cell can be stored twice and plain assignment is exact.
    Anything else (duplicates, or indices unsorted within a row) takes the slower adding."""
    if len(order) < 2 or bool((order[1:] > order[:-1]).all()):
        target[at] = values
    else:
        np.add.at(target, at, values)


@dataclass(frozen=True)
class DenseFromSparse:
    """A sparse matrix read densely (in a table with dense arrays): zeros where not stored,
    the sum of the entries where a cell is stored more than once (`put_entries`)."""

    matrix: SparseMatrix
    ptr: np.ndarray
    values: ColumnCodec

    @property
    def logical(self) -> Any:
        return self.values.logical

    def read(self, store: Store, unit: Cells) -> tuple[Any, np.ndarray | None]:
        m = self.matrix
        (r0, r1), (c0, c1) = unit.region
        lo, hi = (r0, r1) if m.axis == 0 else (c0, c1)
        major, minor, data = entries(store, m, self.ptr, np.arange(lo, hi))
        assert major is not None
        rows, cols = (major, minor) if m.axis == 0 else (minor, major)
        keep = (rows >= r0) & (rows < r1) & (cols >= c0) & (cols < c1)
        block = np.zeros((r1 - r0, c1 - c0), dtype=m.data.dtype.numpy)
        # positions inside the block, in the narrowest type that numbers its cells
        index = _positions_dtype(block.size)
        rows, cols = (rows[keep] - r0).astype(index, copy=False), (cols[keep] - c0).astype(index, copy=False)
        flat = rows * (c1 - c0) + cols  # row-major, the storage order of CSR
        order = flat if m.axis == 0 else cols * (r1 - r0) + rows
        put_entries(block.reshape(-1), flat, data[keep], order=order)
        return self.values.decode(select_cells(block, unit))


def dense_codec(matrix: SparseMatrix, store: Store, options: DecodeOptions) -> DenseFromSparse:
    """Read a sparse matrix densely: its pointers once, its values by the plain rules."""
    return DenseFromSparse(matrix, load_indptr(store, matrix), column_codec(matrix.data, options))
