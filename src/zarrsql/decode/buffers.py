"""Output buffers for chunk decoding, used again once nothing refers to them.

A decoded chunk of a few megabytes written into fresh memory costs the kernel a page fault
per 4 KiB page on first touch: on the ERA5-like store that is a third of the decoding's CPU
time (zstd into a reused buffer: 0.134 CPU-s for 61 chunks; into fresh ones: 0.206). So a
decoder that knows the exact size of its output asks this pool for the memory.

The pool owns `bytearray` blocks and hands out numpy arrays over them. Everything built on a
chunk (reshapes, slices, Arrow arrays made zero-copy, DuckDB holding those) refers to the
block itself: numpy points every view at the first base that is not an ndarray. So a block
whose reference count is back to the pool's own references is free, and only then handed
out again; nothing can see its memory change. (A weak reference to the handed-out array
would not do: numpy collapses view chains, so that array can die while views of its memory
live on.) The pool holds at most `KEPT_BYTES` of blocks; past that, buffers are plain. It lets its
blocks go when the last running scan ends, so memory a scan used is not held after it (what
runs next, an aggregate's results or a writer's arrays, can have it).
"""

from __future__ import annotations

import sys
import threading

import numpy as np

__all__ = ["KEPT_BYTES", "MIN_BYTES", "POOL", "BufferPool", "blosc_content_size", "zstd_content_size"]

#: Memory the pool may own: a few chunks for each decoding thread and for the engine's queue.
KEPT_BYTES = 64 * 2**20
#: Buffers smaller than this come from numpy directly (malloc reuses small blocks itself).
MIN_BYTES = 256 * 2**10

_ZSTD_MAGIC = 0xFD2FB528


def _refcounts(blocks: list[bytearray]) -> list[int]:
    """Each block's reference count, as seen from here (the list's reference, the loop's and
    the call's): `_IDLE` is what a block nobody else holds shows through this very code."""
    return [sys.getrefcount(block) for block in blocks]


_IDLE = _refcounts([bytearray(1)])[0]


class BufferPool:
    """Decode buffers by size (see the module docstring)."""

    def __init__(self, kept_bytes: int = KEPT_BYTES) -> None:
        self.kept_bytes = kept_bytes
        self._blocks: dict[int, list[bytearray]] = {}
        self._owned = 0
        self._scans = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A writeable uint8 array of `nbytes`: over a free block of the pool when there is one."""
        if nbytes < MIN_BYTES:
            return np.empty(nbytes, dtype=np.uint8)
        with self._lock:  # the array is made under the lock, so no other thread sees the block free
            blocks = self._blocks.setdefault(nbytes, [])
            for block, count in zip(blocks, _refcounts(blocks), strict=True):
                if count <= _IDLE:
                    return np.frombuffer(block, dtype=np.uint8)
            if self._owned + nbytes <= self.kept_bytes:
                block = bytearray(nbytes)
                blocks.append(block)
                self._owned += nbytes
                return np.frombuffer(block, dtype=np.uint8)
        return np.empty(nbytes, dtype=np.uint8)

    def scan_started(self) -> None:
        with self._lock:
            self._scans += 1

    def scan_ended(self) -> None:
        """One scan is over; after the last, the pool forgets its blocks (those still held
        are freed by whoever holds them, when they let go)."""
        with self._lock:
            self._scans = max(0, self._scans - 1)
            if not self._scans:
                self._blocks.clear()
                self._owned = 0

    def free_bytes(self) -> int:
        """The bytes of the pool's blocks nobody holds now."""
        with self._lock:
            return sum(n * sum(c <= _IDLE for c in _refcounts(blocks)) for n, blocks in self._blocks.items())


#: The process' pool, shared by every decoding thread.
POOL = BufferPool()


def zstd_content_size(data: object) -> int | None:
    """The decompressed size a zstd frame's header declares, or None when the bytes are not
    a zstd frame that declares it (then a decoder must size its output itself)."""
    view = _bytes_of(data)
    if view is None or len(view) < 6 or int.from_bytes(view[:4], "little") != _ZSTD_MAGIC:
        return None
    descriptor = view[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(view) < at + width:
        return None
    size = int.from_bytes(view[at : at + width], "little")
    return size + 256 if width == 2 else size


def blosc_content_size(data: object) -> int | None:
    """The decompressed size in a Blosc frame's 16-byte header, or None if it has none."""
    view = _bytes_of(data)
    if view is None or len(view) < 16:
        return None
    return int.from_bytes(view[4:8], "little")


def _bytes_of(data: object) -> memoryview | None:
    try:
        return memoryview(data).cast("B")  # type: ignore[arg-type]
    except (TypeError, ValueError):  # not a contiguous buffer: the codec will say what it is
        return None
