"""Deflate chunks (the `zlib` and `gzip` codecs) inflated by ISA-L when `isal` is installed.

NetCDF4/HDF5 files compress with deflate, so every chunk a kerchunk or VirtualiZarr reference
set points into is a zlib stream, and many Zarr v2 stores use zlib or gzip too. numcodecs
inflates them with Python's `zlib` module; ISA-L's decoder (the `isal` package, a
dependency of zarrsql) reads the same streams about 2.5 times faster (1.2 ms instead of 3.1
ms for a 2.8 MB chunk of the benchmark). Both implement the same format, so the output is
the same bytes; without `isal` (a platform it has no wheel for) numcodecs' codecs are used.

The codecs here decode only: zarrsql never writes with them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

__all__ = ["Inflate", "codec_for", "isal"]


@lru_cache(maxsize=1)
def isal() -> tuple[Any, Any] | None:
    """ISA-L's `(igzip, isal_zlib)` modules, imported with the first deflate codec (a store
    of zstd chunks never needs their 0.4 MB); None without a wheel for this platform, and
    then numcodecs' own codecs are used."""
    try:
        from isal import igzip, isal_zlib
    except ImportError:
        return None
    return igzip, isal_zlib


#: Bytes beyond the expected size in the output buffer: a stream that fills its buffer
#: exactly is copied into a larger one before ISA-L sees the end (2.9 ms instead of 1.1).
_SLACK = 64


class Inflate:
    """A deflate stream of one wrapping (`zlib`, or `gzip` with every member), inflated by ISA-L.

    `size_hint` (the bytes a chunk decodes to, when the pipeline knows it) sizes the output
    buffer once: without it ISA-L starts small and grows the buffer as it goes, which took
    2.8 ms instead of 1.1 ms for a 2.8 MB chunk. A wrong hint only costs a resize."""

    def __init__(self, codec_id: str) -> None:
        self.codec_id = codec_id

    def decode(self, buf: Any, out: Any = None, size_hint: int | None = None) -> bytes:
        if out is not None:
            raise ValueError("decoding into a given buffer is not supported")
        modules = isal()
        assert modules is not None, "codec_for makes an Inflate only where isal imports"
        igzip, isal_zlib = modules
        if self.codec_id == "gzip":
            return bytes(igzip.decompress(buf))  # every member; igzip takes no size
        if size_hint:  # room past the end: a full buffer is grown once more to see the end
            return bytes(isal_zlib.decompress(buf, bufsize=size_hint + _SLACK))
        return bytes(isal_zlib.decompress(buf))


def codec_for(config: Any) -> Any:
    """An ISA-L decoder for a numcodecs configuration of `zlib` or `gzip`, else None (then
    numcodecs decodes it)."""
    if not isinstance(config, dict) or isal() is None:
        return None
    codec_id = config.get("id")
    if codec_id in ("zlib", "gzip"):
        return Inflate(codec_id)
    return None
