"""`table:index` as a key: `=`/IN on it read only the work units (row chunks) that can hold it,
and of a geometry column only the offsets and coordinates of the selected rows."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

needs_sources = pytest.mark.skipif(not HAS_SOURCES, reason="exact row selections need DuckDB 2.x's scan sources")

ROWS, CHUNK = 1000, 100  # sites.zarr (stores.py): 1000 rows chunked by 100


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _warm(con, store: str) -> None:
    """Open the table once: its index (the row coordinate) is decoded and cached with the store."""
    con.sql(f"SELECT count(*) FROM read_zarr('{store}', group_path := 'sites')").fetchall()


def _chunks(lo: int, hi: int, size: int) -> set[int]:
    return set(range(lo // size, (hi - 1) // size + 1)) if hi > lo else set()


def test_equality_on_the_index_reads_one_unit(con, stores, fmt) -> None:
    store = stores("sites.zarr", fmt)
    values = zarr.open_array(store, path="sites/value", mode="r")[...]
    _warm(con, store)
    with zarrsql.trace() as t:
        got = con.sql(
            f"SELECT value FROM read_zarr('{store}', group_path := 'sites') WHERE site_id = 'S0421'"
        ).fetchall()
    assert got == [(float(values[421]),)]
    assert (t.work_units_planned, t.work_units_read) == (ROWS // CHUNK, 1)
    assert t.chunks_decoded == 1  # the value chunk of rows 400-499, nothing else


def test_in_on_the_index_reads_the_units_of_its_values(con, stores, fmt) -> None:
    store = stores("sites.zarr", fmt)
    _warm(con, store)
    picked = [5, 421, 460, 999]
    with zarrsql.trace() as t:
        got = con.sql(
            f"SELECT site_id FROM read_zarr('{store}', group_path := 'sites') WHERE site_id IN "
            f"({', '.join(repr(f'S{i:04d}') for i in picked)}) ORDER BY site_id"
        ).fetchall()
    assert got == [(f"S{i:04d}",) for i in picked]
    assert t.work_units_read == len({i // CHUNK for i in picked}) == 3


@needs_sources
def test_geometry_reads_only_the_selected_rows_offsets_and_coordinates(con, stores, fmt) -> None:
    store = stores("sites.zarr", fmt)
    track = zarr.open_group(store, path="sites/track", mode="r")
    area = zarr.open_group(store, path="sites/area", mode="r")
    offsets = track["geom_offsets"][...]
    geom, rings = area["geom_offsets"][...], area["ring_offsets"][...]
    picked = [7, 421]
    where = f"WHERE site_id IN ({', '.join(repr(f'S{i:04d}') for i in picked)})"
    _warm(con, store)
    # per unit: geom_offsets[unit start : unit end + 1], then the selected rows' children
    go_chunk, co_chunk = track["geom_offsets"].chunks[0], track["coords"].chunks[0]
    want = 0
    for i in picked:
        u0 = i // CHUNK * CHUNK
        want += len(_chunks(u0, u0 + CHUNK + 1, go_chunk)) + len(_chunks(offsets[i], offsets[i + 1], co_chunk))
    with zarrsql.trace() as t:
        con.sql(f"SELECT track FROM read_zarr('{store}', group_path := 'sites') {where}").fetchall()
    assert t.chunks_decoded == want
    ro_chunk, pc_chunk = area["ring_offsets"].chunks[0], area["coords"].chunks[0]
    want = 0
    for i in picked:
        u0 = i // CHUNK * CHUNK
        want += len(_chunks(u0, u0 + CHUNK + 1, area["geom_offsets"].chunks[0]))
        want += len(_chunks(geom[i], geom[i + 1] + 1, ro_chunk))
        want += len(_chunks(rings[geom[i]], rings[geom[i + 1]], pc_chunk))
    with zarrsql.trace() as t:
        con.sql(f"SELECT area FROM read_zarr('{store}', group_path := 'sites') {where}").fetchall()
    assert t.chunks_decoded == want
    assert want < 12  # a handful of chunks, where the whole column has far more
    assert len(_chunks(0, area["coords"].shape[0], pc_chunk)) > 20


def test_pushed_and_unpushed_reads_agree(con, stores, fmt) -> None:
    store = stores("sites.zarr", fmt)
    base = f"read_zarr('{store}', group_path := 'sites', geometry := 'wkb')"
    pushed = con.sql(
        f"SELECT * FROM {base} WHERE site_id IN ('S0003', 'S0550', 'S0551', 'S0998') ORDER BY site_id"
    ).fetchall()
    # OFFSET 0 in a subquery keeps the filter above the scan
    whole = con.sql(
        f"SELECT * FROM (SELECT * FROM {base} OFFSET 0) WHERE site_id IN "
        "('S0003', 'S0550', 'S0551', 'S0998') ORDER BY site_id"
    ).fetchall()
    assert pushed == whole
    assert len(pushed) == 4
    ids = np.array(zarr.open_array(store, path="sites/site_id", mode="r")[...].tolist())
    assert [r[0] for r in pushed] == sorted(ids[[3, 550, 551, 998]].tolist())
