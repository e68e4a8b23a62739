"""Linestring and polygon offsets stored as unsigned integers.

The table convention allows any integer dtype for `geom_offsets` and `ring_offsets`. Unsigned
offsets that are in order read as their signed twins do; offsets that decrease, or a uint64
offset past 2^63 (read as int64 it would look negative), are refused with a DecodeError naming
the array, the entry and its value as stored, never turned into rows. Expected rows come from
`oracle.expected_rows` (zarr-python and numpy only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import zarrsql
from tests.table_convention.oracle import expected_rows
from tests.table_convention.stores import _Writer

UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]


def _track_store(path: Path, fmt: int, offsets: list[int], dtype: str, n_coords: int = 4) -> str:
    w = _Writer(path, fmt)
    g = w.root.create_group("t")
    w.array(g, "a", np.arange(len(offsets) - 1, dtype=np.float64), 2)
    track = g.create_group("track")
    track.attrs.update({"encoding-type": "linestring", "axes": ["x", "y"]})
    w.array(track, "coords", np.arange(2.0 * n_coords).reshape(n_coords, 2), 4)
    w.array(track, "geom_offsets", np.array(offsets, dtype=dtype), 4)
    w.table(g, [("a", "a"), ("track", "track")])
    return str(path)


def _outline_store(path: Path, fmt: int, rings: list[int], dtype: str) -> str:
    w = _Writer(path, fmt)
    g = w.root.create_group("t")
    w.array(g, "a", np.arange(2.0), 2)
    poly = g.create_group("outline")
    poly.attrs.update({"encoding-type": "polygon", "axes": ["x", "y"]})
    w.array(poly, "coords", np.arange(24.0).reshape(12, 2), 4)
    w.array(poly, "ring_offsets", np.array(rings, dtype=dtype), 4)
    w.array(poly, "geom_offsets", np.array([0, 1, 3], dtype=dtype), 4)
    w.table(g, [("a", "a"), ("outline", "outline")])
    return str(path)


def _read(store: str) -> list[tuple]:
    with zarrsql.connect() as con:
        return con.execute(f"SELECT * FROM read_zarr('{store}', group_path := 't')").fetchall()


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_offsets_in_order_give_the_rows(tmp_path: Path, fmt: int, dtype: str) -> None:
    store = _track_store(tmp_path / "ok.zarr", fmt, [0, 2, 2, 3, 4], dtype)
    columns, want = expected_rows(store, "t")
    assert _read(store) == want
    store = _outline_store(tmp_path / "poly.zarr", fmt, [0, 4, 8, 12], dtype)
    assert _read(store) == expected_rows(store, "t")[1]


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_decreasing_unsigned_offsets_are_refused(tmp_path: Path, fmt: int, dtype: str) -> None:
    store = _track_store(tmp_path / "down.zarr", fmt, [0, 2, 3, 1, 4], dtype)
    with pytest.raises(zarrsql.DecodeError) as err:
        _read(store)
    for word in ("'track'", "geom_offsets[2] = 3 is followed by 1", "non-decreasing"):
        assert word in str(err.value)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_decreasing_unsigned_rings_are_refused(tmp_path: Path, fmt: int, dtype: str) -> None:
    store = _outline_store(tmp_path / "rings.zarr", fmt, [0, 8, 4, 12], dtype)
    with pytest.raises(zarrsql.DecodeError) as err:
        _read(store)
    for word in ("'outline'", "ring_offsets[1] = 8 is followed by 4", "non-decreasing"):
        assert word in str(err.value)


def test_a_uint64_offset_past_2_63_is_named_as_stored(tmp_path: Path, fmt: int) -> None:
    store = _track_store(tmp_path / "huge.zarr", fmt, [0, 2, 3, 2**64 - 1, 2**64 - 1], "uint64")
    with pytest.raises(zarrsql.DecodeError) as err:
        _read(store)
    message = str(err.value)
    assert f"geom_offsets[3] = {2**64 - 1} overruns coords" in message
    assert "-1" not in message
