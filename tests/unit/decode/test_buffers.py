"""The decode buffer pool: a block is handed out again only when nothing refers to its
memory (views, reshapes, Arrow arrays made zero-copy), and frame headers give exact sizes
(zstandard's own header reader is the oracle)."""

from __future__ import annotations

import numcodecs
import numpy as np
import pyarrow as pa
import pytest
import zstandard

from zarrsql.decode.buffers import MIN_BYTES, BufferPool, blosc_content_size, zstd_content_size

N = MIN_BYTES * 2


def test_a_block_held_through_a_view_is_not_handed_out_again() -> None:
    pool = BufferPool()
    pool.scan_started()
    first = pool.take(N)
    first[:] = 7
    kept = first.view(np.int64).reshape(-1)[:10]  # numpy collapses the chain past `first`
    del first
    second = pool.take(N)
    second[:] = 9
    assert (kept == np.frombuffer(np.full(8, 7, np.uint8).tobytes(), np.int64)[0]).all()
    del second
    del kept
    assert pool.free_bytes() == 2 * N  # both blocks idle now


def test_a_block_held_by_arrow_is_not_reused_until_arrow_lets_go() -> None:
    pool = BufferPool()
    pool.scan_started()
    buf = pool.take(N)
    values = buf.view(np.float64)
    values[:] = 1.5
    arrow = pa.array(values)  # zero-copy
    del buf, values
    assert pool.free_bytes() == 0
    other = pool.take(N)
    other.view(np.float64)[:] = -1.0
    assert arrow.to_numpy().min() == 1.5
    del arrow
    assert pool.free_bytes() == N


def test_an_idle_block_is_reused_and_the_pool_forgets_blocks_after_the_last_scan() -> None:
    pool = BufferPool()
    pool.scan_started()
    a = pool.take(N)
    address = a.ctypes.data
    del a
    assert pool.take(N).ctypes.data == address
    pool.scan_ended()
    assert pool.free_bytes() == 0


def test_small_and_unpooled_requests_get_plain_arrays() -> None:
    pool = BufferPool(kept_bytes=N)
    small = pool.take(100)
    assert small.nbytes == 100 and small.flags.owndata
    held = pool.take(N)
    extra = pool.take(N)  # over the pool's budget: a plain array
    assert extra.flags.owndata and held.nbytes == extra.nbytes == N


@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 65791, 65792, 70_000, 2**20 + 3])
def test_zstd_content_size_agrees_with_zstandard(size: int) -> None:
    data = np.random.default_rng(size).integers(0, 4, size, dtype=np.uint8).tobytes()
    for frame in (numcodecs.Zstd().encode(data), zstandard.ZstdCompressor(level=3).compress(data)):
        assert zstd_content_size(frame) == zstandard.frame_content_size(frame) == size
    assert blosc_content_size(numcodecs.Blosc().encode(data)) == size


def test_frames_without_a_declared_size_are_not_sized() -> None:
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 5000)
    assert zstandard.frame_content_size(streamed) == -1
    assert zstd_content_size(streamed) is None
    assert zstd_content_size(b"not a zstd frame") is None
    assert zstd_content_size(b"") is None
    assert blosc_content_size(b"short") is None


def test_a_frame_declaring_another_size_decodes_as_before() -> None:
    """A chunk whose frame holds fewer bytes than the chunk needs is still an error."""
    from zarrsql.decode.chunks import _decode_bytes_codec

    frame = numcodecs.Zstd().encode(np.zeros(N // 2, np.uint8).tobytes())
    out = _decode_bytes_codec(numcodecs.Zstd(), frame, N)
    assert memoryview(out).nbytes == N // 2  # not padded out to N: the size check sees it
