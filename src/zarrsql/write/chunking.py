"""The chunk shape of a grid store, from the `chunks=` argument or chosen for the shape."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from zarrsql.errors import ParameterError

#: Elements per chunk when `chunks` is not given: 2**20 cells are 8 MiB of float64, a chunk
#: size object stores and zstd handle well, and small enough that one row of chunks fits in
#: memory for any realistic grid.
TARGET_CELLS = 1 << 20
#: Cells of the grid padded to whole chunks at which the chunk writer can no longer number
#: them in 64 bits (`grid._ChunkOrder`): lengths asked for beyond that are clipped to the shape.
PADDED_CELLS_LIMIT = 1 << 62


def plain_lengths(chunks: Any) -> Any:
    """`chunks` with numpy integers (a shape's entries, `np.int64(2)`) as Python ints, as
    xarray and zarr take them; anything else as given, for the checks to judge."""
    if isinstance(chunks, numbers.Integral) and not isinstance(chunks, bool):
        return int(chunks)
    if isinstance(chunks, Mapping):
        return {k: plain_lengths(v) for k, v in chunks.items()}
    if isinstance(chunks, (list, tuple)):
        return [plain_lengths(c) for c in chunks]
    return chunks


def chunk_shape(chunks: Any, dims: Sequence[str], shape: Sequence[int]) -> tuple[int, ...]:
    """The chunk length along every dimension (never 0).

    `chunks` is None (automatic: halve the longest chunk side until a chunk holds at most
    `TARGET_CELLS`), an int (every dimension), a sequence in the order of `dims`, or a
    mapping of dimension name to length (the others whole). A length asked for is kept even
    when longer than the dimension, as xarray keeps it (Zarr allows it), so that appends
    fill chunks of that length; only a grid whose padding to such chunks could not be
    numbered in 64 bits has them clipped to the shape."""
    if chunks is None:
        out = [max(1, n) for n in shape]
        while _cells(out) > TARGET_CELLS:
            k = max(range(len(out)), key=lambda i: out[i])
            out[k] = -(-out[k] // 2)
        return tuple(out)
    if isinstance(chunks, bool):
        raise _bad(chunks, dims)
    if isinstance(chunks, int):
        given = [chunks] * len(dims)
    elif isinstance(chunks, Mapping):
        unknown = [d for d in chunks if d not in dims]
        if unknown:
            raise ParameterError(f"chunks names '{unknown[0]}', which is not one of the dims {list(dims)}")
        given = [chunks.get(d, max(1, n)) for d, n in zip(dims, shape, strict=True)]
    elif isinstance(chunks, Sequence) and not isinstance(chunks, str):
        if len(chunks) != len(dims):
            raise ParameterError(
                f"chunks has {len(chunks)} lengths for {len(dims)} dims {list(dims)}; give one per dimension"
            )
        given = list(chunks)
    else:
        raise _bad(chunks, dims)
    if not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in given):
        raise _bad(chunks, dims)
    kept = tuple(given)
    if _cells([max(c, -(-n // c) * c) for c, n in zip(kept, shape, strict=True)]) >= PADDED_CELLS_LIMIT:
        return tuple(max(1, min(c, n)) for c, n in zip(kept, shape, strict=True))
    return kept


def _cells(sides: Sequence[int]) -> int:
    total = 1
    for s in sides:
        total *= s
    return total


def _bad(chunks: Any, dims: Sequence[str]) -> ParameterError:
    return ParameterError(
        f"chunks must be a positive int, a list of {len(dims)} positive ints (one per dimension of {list(dims)}) "
        f"or a dict of dimension to length, got {chunks!r}"
    )
