"""Regions in the leading rows of a zstd chunk decode only those rows (`chunks._read_leading`).

The oracle is numpy on the values zarr-python wrote; every array has a ragged edge chunk
along each axis, NaN among its values and a chunk never written. A region that the fast
path may not serve (a checksum, another codec, a transpose, a big-endian or F-order array, a
region past half the chunk) must give the same values through the whole-chunk path, and a
frame that is corrupt where the region needs it must still fail by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, TransposeCodec, ZstdCodec

import zarrsql
from zarrsql.decode import cells as decode_cells
from zarrsql.decode import chunks as chunk_codecs
from zarrsql.engine.source import HAS_SOURCES
from zarrsql.errors import DecodeError
from zarrsql.metadata.arrays import parse_v2_array, parse_v3_array
from zarrsql.store.local import LocalStore

SHAPE = (50, 7, 9)
CHUNKS = (24, 4, 5)


def source() -> np.ndarray:
    rng = np.random.default_rng(5)
    a = (rng.normal(size=SHAPE) * 10).astype("float32")
    a[rng.random(SHAPE) < 0.1] = np.nan
    return a


def write_v3(path: Path, *, compressors=None, serializer=None, filters=None) -> np.ndarray:
    a = source()
    kwargs = {} if serializer is None else {"serializer": serializer}
    if filters is not None:
        kwargs["filters"] = filters
    z = zarr.create_array(
        str(path), shape=SHAPE, chunks=CHUNKS, dtype=a.dtype, fill_value=np.nan,
        compressors=compressors if compressors is not None else ZstdCodec(level=3), **kwargs,
    )  # fmt: skip
    z[:] = a
    z[24:48, 4:7, 5:9] = np.nan  # one whole chunk of fill: zarr-python does not write it
    a[24:48, 4:7, 5:9] = np.nan
    return a


def meta_v3(path: Path):
    return parse_v3_array("", json.loads((path / "zarr.json").read_text()))


def regions():
    """Regions inside one chunk: leading rows (the fast path) and rows past half (the whole
    chunk), over interior, edge and partial columns."""
    for t0, t1 in [(0, 1), (0, 5), (3, 12), (0, 12), (0, 13), (10, 24), (24, 25), (26, 30), (48, 49), (48, 50)]:
        for (y0, y1), (x0, x1) in [((0, 4), (0, 5)), ((1, 3), (2, 4)), ((4, 7), (5, 9)), ((4, 5), (0, 5))]:
            yield ((t0, t1), (y0, y1), (x0, x1))


def test_leading_rows_equal_numpy(tmp_path: Path) -> None:
    a = write_v3(tmp_path / "a")
    array, store = meta_v3(tmp_path / "a"), LocalStore(str(tmp_path / "a"))
    for region in regions():
        got = chunk_codecs.read_region(store, array, region)
        want = a[tuple(slice(lo, hi) for lo, hi in region)]
        np.testing.assert_array_equal(got, want, err_msg=str(region))


def test_the_fast_path_runs_and_decodes_less(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leading region is served by `_read_leading` (reading the frame's start and decoding
    only its rows), a region past half the chunk by the whole decode, and an unwritten chunk
    is the fill value."""
    write_v3(tmp_path / "a")
    array, store = meta_v3(tmp_path / "a"), LocalStore(str(tmp_path / "a"))
    asked: list[int] = []
    real = chunk_codecs._stream_into

    def spy(stream, out):
        asked.append(len(out))
        return real(stream, out)

    monkeypatch.setattr(chunk_codecs, "_stream_into", spy)
    chunk_codecs.read_region(store, array, ((0, 3), (0, 4), (0, 5)))
    assert asked == [3 * 4 * 5 * 4]  # three rows of a (24, 4, 5) float32 chunk
    chunk_codecs.read_region(store, array, ((0, 13), (0, 4), (0, 5)))
    assert len(asked) == 1  # 13 of 24 rows: decoded whole
    got = chunk_codecs.read_region(store, array, ((24, 26), (4, 7), (5, 9)))  # never written
    assert np.isnan(got).all()
    assert len(asked) == 1


def test_only_the_frames_start_is_read(tmp_path: Path) -> None:
    """A chunk of several zstd blocks: its leading rows read `LEADING_SLACK` bytes more
    than they take, not the whole file, and equal numpy's."""
    rng = np.random.default_rng(8)
    a = (rng.normal(size=(24, 64, 128)) * 3).astype("float32")
    z = zarr.create_array(str(tmp_path / "big"), shape=a.shape, chunks=a.shape, dtype=a.dtype, compressors=ZstdCodec())
    z[:] = a
    array, store = meta_v3(tmp_path / "big"), LocalStore(str(tmp_path / "big"))
    size = (tmp_path / "big" / array.chunk_key((0, 0, 0))).stat().st_size
    need = 2 * 64 * 128 * 4
    assert need + chunk_codecs.LEADING_SLACK < size
    with zarrsql.trace() as tr:
        got = chunk_codecs.read_region(store, array, ((1, 2), (3, 60), (0, 128)))
    np.testing.assert_array_equal(got, a[1:2, 3:60, :])
    assert tr.bytes_read == need + chunk_codecs.LEADING_SLACK
    assert tr.requests == 1


@pytest.mark.parametrize(
    "codecs",
    [
        {"compressors": ZstdCodec(level=3, checksum=True)},
        {"compressors": BloscCodec(cname="zstd")},
        {"compressors": GzipCodec()},
        {"compressors": ZstdCodec(), "serializer": BytesCodec(endian="big")},
        {"compressors": ZstdCodec(), "filters": [TransposeCodec(order=(2, 1, 0))]},
    ],
    ids=["zstd-checksum", "blosc", "gzip", "big-endian", "transpose"],
)
def test_other_pipelines_decode_whole_and_equal(tmp_path: Path, codecs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write_v3(tmp_path / "a", **codecs)
    array, store = meta_v3(tmp_path / "a"), LocalStore(str(tmp_path / "a"))
    asked: list[int] = []
    real = chunk_codecs._stream_into
    monkeypatch.setattr(chunk_codecs, "_stream_into", lambda stream, out: asked.append(len(out)) or real(stream, out))
    for region in regions():
        got = chunk_codecs.read_region(store, array, region)
        np.testing.assert_array_equal(got, a[tuple(slice(lo, hi) for lo, hi in region)], err_msg=str(region))
    assert asked == []  # never decoded as a stream


@pytest.mark.parametrize("order", ["C", "F"])
def test_v2_arrays(tmp_path: Path, order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """v2 zstd: C order takes the fast path, F order (rows not leading in memory) does not."""
    import numcodecs

    a = source()
    z = zarr.open_array(
        str(tmp_path / "v2"), mode="w", shape=SHAPE, chunks=CHUNKS, dtype="<f4", zarr_format=2,
        compressor=numcodecs.Zstd(level=1), order=order, fill_value=None,
    )  # fmt: skip
    z[:] = a
    array = parse_v2_array("", json.loads((tmp_path / "v2" / ".zarray").read_text()), {})
    store = LocalStore(str(tmp_path / "v2"))
    assert chunk_codecs.streams_leading_rows(array) == (order == "C")
    for region in regions():
        got = chunk_codecs.read_region(store, array, region)
        np.testing.assert_array_equal(got, a[tuple(slice(lo, hi) for lo, hi in region)], err_msg=str(region))


def test_a_start_too_short_is_read_again_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were the frame's start not enough for the rows, the chunk is read and decoded whole."""
    a = write_v3(tmp_path / "a")
    array, store = meta_v3(tmp_path / "a"), LocalStore(str(tmp_path / "a"))
    monkeypatch.setattr(chunk_codecs, "LEADING_SLACK", -30)  # 30 bytes short of the rows' own
    size = (tmp_path / "a" / array.chunk_key((0, 0, 0))).stat().st_size
    with zarrsql.trace() as tr:
        got = chunk_codecs.read_region(store, array, ((0, 5), (0, 4), (0, 5)))
    np.testing.assert_array_equal(got, a[:5, :4, :5])
    assert tr.bytes_read == 5 * 4 * 5 * 4 - 30 + size
    assert tr.requests == 2


def test_a_frame_corrupt_where_the_rows_are_fails_by_name(tmp_path: Path) -> None:
    write_v3(tmp_path / "a")
    array, store = meta_v3(tmp_path / "a"), LocalStore(str(tmp_path / "a"))
    key = array.chunk_key((0, 0, 0))
    path = tmp_path / "a" / key
    good = path.read_bytes()
    path.write_bytes(good[:20])  # truncated right after the header: no row can be decoded
    with pytest.raises(DecodeError, match="c/0/0/0"):
        chunk_codecs.read_region(store, array, ((0, 1), (0, 4), (0, 5)))
    bad = bytearray(good)
    bad[12:40] = b"\xff" * 28  # garbage at the start of the first block
    path.write_bytes(bytes(bad))
    with pytest.raises(DecodeError, match="c/0/0/0"):
        chunk_codecs.read_region(store, array, ((0, 1), (0, 4), (0, 5)))


def test_needed_region_cuts_after_the_last_selected_row() -> None:
    class Unit:
        def __init__(self, region, select):
            self.region, self.select = region, select

    region = ((24, 48), (0, 4), (0, 5))
    assert decode_cells.needed_region(Unit(region, None)) == region
    assert decode_cells.needed_region(Unit(region, (np.array([0, 2]), None, None))) == ((24, 27), (0, 4), (0, 5))
    assert decode_cells.needed_region(Unit(region, (np.array([23]), None, None))) == region
    assert decode_cells.needed_region(Unit(region, (None, np.array([1]), None))) == region
    mask = np.zeros((24, 4, 5), dtype=bool)
    assert decode_cells.needed_region(Unit(region, mask)) == region
    block = np.arange(24 * 4 * 5).reshape(24, 4, 5)
    unit = Unit(region, (np.array([0, 2]), np.array([1, 3]), None))
    cut = decode_cells.needed_region(unit)
    np.testing.assert_array_equal(
        decode_cells.select_cells(block[: cut[0][1] - cut[0][0]], unit), decode_cells.select_cells(block, unit)
    )


def test_hours_of_a_day_through_sql_equal_xarray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`WHERE time = ...` and short time ranges read leading rows of day-long chunks; the
    answers are xarray's, and an hour in a chunk's first half decodes only the hours up to it."""
    rng = np.random.default_rng(3)
    times = np.arange("2021-01-01T00", "2021-01-04T00", dtype="datetime64[h]").astype("datetime64[ns]")
    t2m = (rng.normal(size=(len(times), 6, 8)) * 5 + 280).astype("float32")
    t2m[rng.random(t2m.shape) < 0.05] = np.nan
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m)},
        coords={"time": times, "lat": np.linspace(60, 35, 6), "lon": np.arange(8) * 2.5},
    )
    path = tmp_path / "hours.zarr"
    ds.to_zarr(path, encoding={"t2m": {"chunks": (24, 6, 8)}}, zarr_format=3, consolidated=True)
    asked: list[int] = []
    real = chunk_codecs._stream_into
    monkeypatch.setattr(chunk_codecs, "_stream_into", lambda stream, out: asked.append(len(out)) or real(stream, out))
    con = zarrsql.connect()
    for when, rows in [("2021-01-01T00", 1), ("2021-01-02T05", 6), ("2021-01-03T11", 12), ("2021-01-03T23", None)]:
        want = ds.t2m.sel(time=np.datetime64(when, "ns"))
        stamp = when.replace("T", " ") + ":00:00"
        sql = f"SELECT lat, lon, t2m FROM read_zarr('{path}') WHERE time = TIMESTAMP '{stamp}' ORDER BY lat DESC, lon"
        asked.clear()
        got = con.sql(sql).fetchall()
        if HAS_SOURCES:  # DuckDB 1.5's dataset path filters after the scan: whole units are read
            assert asked == ([] if rows is None else [rows * 6 * 8 * 4])
        flat = want.values.reshape(-1)
        assert len(got) == flat.size
        places = [(float(y), float(x)) for y in ds.lat.values for x in ds.lon.values]  # lat descends
        for (lat, lon, v), w, place in zip(got, flat, places, strict=True):
            assert (lat, lon) == place
            assert (v is None) if np.isnan(w) else v == pytest.approx(float(w))
    got = con.sql(
        f"SELECT avg(t2m), count(t2m) FROM read_zarr('{path}') "
        "WHERE time BETWEEN TIMESTAMP '2021-01-02 01:00:00' AND TIMESTAMP '2021-01-02 04:00:00'"
    ).fetchall()[0]
    part = ds.t2m.sel(time=slice("2021-01-02T01", "2021-01-02T04")).values
    assert got[1] == int(np.isfinite(part).sum())
    assert got[0] == pytest.approx(float(np.nanmean(part.astype("float64"))))
