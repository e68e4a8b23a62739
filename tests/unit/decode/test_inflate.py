"""ISA-L inflation (decode/inflate.py) gives the bytes Python's zlib and numcodecs give."""

from __future__ import annotations

import gzip
import zlib

import numcodecs
import numpy as np
import pytest

from zarrsql.decode import inflate
from zarrsql.decode.chunks import _numcodec


def _payload() -> bytes:
    rng = np.random.default_rng(7)
    field = np.cumsum(rng.normal(size=200_000)).astype("<f4")  # smooth, so it compresses
    return bytes(numcodecs.Shuffle(elementsize=4).encode(field.tobytes()))


def test_isal_is_what_decodes_deflate() -> None:
    """`isal` is a dependency: zlib and gzip chunks are inflated by it, not by numcodecs."""
    assert inflate.isal() is not None
    assert type(_numcodec({"id": "zlib", "level": 1})).__module__ == "zarrsql.decode.inflate"
    assert type(_numcodec({"id": "gzip", "level": 5})).__module__ == "zarrsql.decode.inflate"
    assert isinstance(_numcodec({"id": "zstd", "level": 1}), numcodecs.Zstd)


@pytest.mark.parametrize("level", [1, 6, 9])
def test_zlib_streams_inflate_to_the_same_bytes(level: int) -> None:
    raw = _payload()
    for stream in (zlib.compress(raw, level), numcodecs.Zlib(level=level).encode(raw)):
        got = _numcodec({"id": "zlib", "level": level}).decode(memoryview(stream))
        assert got == zlib.decompress(stream) == raw


def test_gzip_streams_inflate_every_member() -> None:
    raw = _payload()
    one = numcodecs.GZip(level=5).encode(raw)
    two = gzip.compress(raw[:1000]) + gzip.compress(raw[1000:])  # two members, as `cat a.gz b.gz`
    codec = _numcodec({"id": "gzip", "level": 5})
    assert codec.decode(one) == numcodecs.GZip().decode(one) == raw
    assert codec.decode(two) == gzip.decompress(two) == raw


def test_a_damaged_stream_raises() -> None:
    """ISA-L refuses a cut or foreign stream (the pipeline turns it into a DecodeError naming
    the chunk and codec: tests/integration/test_corrupt_chunks.py)."""
    stream = zlib.compress(_payload(), 1)
    assert inflate.isal() is not None
    for bad in (stream[: len(stream) // 2], b"not a zlib stream at all"):
        with pytest.raises(inflate.isal()[1].error):
            _numcodec({"id": "zlib"}).decode(bad)


@pytest.mark.parametrize("hint", [None, 1, 4096, "exact", "double"])
def test_a_size_hint_only_sizes_the_buffer(hint: object) -> None:
    """The pipeline's hint (the chunk's bytes) may be wrong, e.g. after a filter that changes
    sizes: the output is the stream's whatever the hint."""
    raw = _payload()
    size = {"exact": len(raw), "double": 2 * len(raw)}.get(hint, hint)  # type: ignore[call-overload]
    assert _numcodec({"id": "zlib"}).decode(zlib.compress(raw, 1), size_hint=size) == raw
