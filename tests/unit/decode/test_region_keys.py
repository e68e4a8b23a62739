"""`region_keys` spells every chunk key of a region as `ArrayMeta.chunk_key` does, for each
key encoding (v3 default and v2-style, v2 with either separator, at the root or nested)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from zarrsql.decode.chunks import region_chunks, region_keys
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.dtypes import DType

V3_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}]
V2_CODECS = {"compressor": None, "filters": None}


@pytest.mark.parametrize(
    ("fmt", "separator", "v2_keys"),
    [(3, "/", False), (3, ".", True), (3, "/", True), (2, ".", True), (2, "/", True)],
)
@pytest.mark.parametrize("path", ["", "group/v"])
def test_keys_match_chunk_key(fmt: int, separator: str, v2_keys: bool, path: str) -> None:
    array = ArrayMeta(
        path=path,
        zarr_format=fmt,
        shape=(7, 30, 5),
        chunks=(2, 11, 5),
        dtype=DType("float32", "float", np.dtype("f4")),
        fill_value=0.0,
        order="C",
        codecs=V3_CODECS if fmt == 3 else V2_CODECS,
        dimension_names=None,
        separator=separator,
        v2_keys=v2_keys,
    )
    for region in [((0, 7), (0, 30), (0, 5)), ((3, 6), (10, 23), (1, 2)), ((6, 7), (29, 30), (4, 5))]:
        want = [array.chunk_key(i) for i in region_chunks(array, region)]
        assert region_keys(array, region) == want
        spans = [range(a // c, (b - 1) // c + 1) for (a, b), c in zip(region, array.chunks, strict=True)]
        assert len(want) == len(list(itertools.product(*spans)))
