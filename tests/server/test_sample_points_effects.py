"""A read-only server judges the points query of `zarr_sample(store, points)` as it judges
`query('...')`: zarr_sample runs that text, so a sequence advanced or a file written from
inside it is refused like the same call written in the statement itself. Points that only
read still sample, with the values xarray's nearest-cell selection gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.server.helpers import adbc_connect


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, zarrsql.Connection, Path]]:
    from zarrsql.server import serve

    root = tmp_path_factory.mktemp("sample_effects")
    store = root / "s.zarr"
    xr.Dataset({"v": (("lat",), [1.0, 2.0, 3.0])}, coords={"lat": [0.0, 1.0, 2.0]}).to_zarr(store)
    con = zarrsql.connect()
    con.execute("CREATE SEQUENCE seq START 1")
    handle = serve(con, "127.0.0.1", 0)
    yield handle, con, root
    handle.shutdown()
    con.close()


def _run(handle: Any, sql: str) -> list[tuple[Any, ...]]:
    client = adbc_connect(handle)
    try:
        with client.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        client.close()


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@pytest.mark.parametrize("spelling", ["positional", "named"])
def test_a_sequence_advanced_inside_the_points_is_refused(served, spelling: str) -> None:
    handle, con, root = served
    points = "SELECT nextval('seq')::DOUBLE AS lat"
    argument = _quoted(points) if spelling == "positional" else f"points := {_quoted(points)}"
    with pytest.raises(Exception, match=r"read-only and refuses nextval\(\)"):
        _run(handle, f"SELECT lat, v FROM zarr_sample('{root / 's.zarr'}', {argument})")
    assert con.execute("SELECT nextval('seq')").fetchone() == (1,)  # never advanced before
    con.execute("DROP SEQUENCE seq")
    con.execute("CREATE SEQUENCE seq START 1")


def test_a_file_written_from_inside_the_points_is_refused(served) -> None:
    handle, _, root = served
    target = root / "profile.json"
    points = f"SELECT 0.0 AS lat FROM enable_profiling(format := 'json', save_location := '{target}')"
    with pytest.raises(Exception, match=r"read-only and refuses enable_profiling\(\)"):
        _run(handle, f"SELECT lat FROM zarr_sample('{root / 's.zarr'}', {_quoted(points)})")
    assert not target.exists()


def test_points_that_are_no_literal_string_are_refused(served) -> None:
    handle, _, root = served
    with pytest.raises(Exception, match=r"zarr_sample\(\) of a text that is not a literal string"):
        _run(handle, f"SELECT lat FROM zarr_sample('{root / 's.zarr'}', 'SELECT 0.9 ' || 'AS lat')")


def test_points_that_only_read_are_sampled_as_xarray_selects(served) -> None:
    handle, _, root = served
    points = [0.9, 2.4, -5.0]
    query = " UNION ALL ".join(f"SELECT {p}::DOUBLE AS lat" for p in points)
    rows = _run(
        handle,
        f"SELECT point_lat, lat, v FROM zarr_sample('{root / 's.zarr'}', {_quoted(query)}) ORDER BY point_lat",
    )
    ds = xr.open_zarr(root / "s.zarr")
    picked = ds.sel(lat=xr.DataArray(sorted(points), dims="p"), method="nearest")
    assert [r[1] for r in rows] == picked["lat"].values.tolist()
    np.testing.assert_array_equal([r[2] for r in rows], picked["v"].values)
