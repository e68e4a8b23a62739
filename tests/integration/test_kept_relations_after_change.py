"""A kept relation (`rel = con.sql(...)`, fetched again later) after other statements ran and
its store's coordinate values were rewritten in place: read as the store is now, as with no
statement in between (docs/user-guide.md), not refused as if the metadata had changed. A
change of the metadata itself still makes the fetch say to run the statement again.

The oracle is a fresh xarray reading of the store as it is on disk.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql

pytestmark = pytest.mark.timeout(120)

#: The error a fetch raises when it cannot read the store as it is now.
CHANGED = "changed since this relation was made"


def _write(path: str) -> None:
    ds = xr.Dataset(
        {"v": (("lat",), np.arange(6.0) * 1.5)},
        coords={"lat": np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])},
    )
    ds.to_zarr(path, mode="w", encoding={"v": {"chunks": (2,)}, "lat": {"chunks": (2,)}})


def _rewrite_coordinates(path: str, scale: float) -> None:
    """New values in the coordinate's chunks: its metadata (and the table's columns) unchanged."""
    lat = zarr.open_array(path + "/lat", mode="r+")
    lat[:] = lat[:] * scale


def _oracle(path: str, keep: Callable[[float], bool] = lambda lat: True) -> list[tuple[float, float]]:
    with xr.open_zarr(path) as ds:
        pairs = zip(ds["lat"].values.tolist(), ds["v"].values.tolist(), strict=True)
        return sorted((lat, v) for lat, v in pairs if keep(lat))


def _rows(rel: duckdb.DuckDBPyRelation) -> list[tuple[float, float]]:
    return sorted((float(lat), float(v)) for lat, v in rel.fetchall())


STATEMENTS_BETWEEN = {
    "fetched": lambda con: con.sql("SELECT 42").fetchall(),
    "only made": lambda con: con.sql("SELECT 42"),
    "executed": lambda con: con.execute("SELECT 42").fetchall(),
}


@pytest.mark.parametrize("between", list(STATEMENTS_BETWEEN))
def test_coordinates_rewritten_after_an_unrelated_statement_are_read(tmp_path, between):
    path = str(tmp_path / "s.zarr")
    _write(path)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT lat, v FROM read_zarr('{path}')")
        assert _rows(rel) == _oracle(path)
        STATEMENTS_BETWEEN[between](con)
        _rewrite_coordinates(path, -1.0)
        assert _rows(rel) == _oracle(path)
        assert min(lat for lat, _ in _rows(rel)) == -60.0  # the fixture's last latitude, negated


def test_a_filter_on_a_rewritten_coordinate_reads_its_new_values(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT lat, v FROM read_zarr('{path}') WHERE lat > 25")
        assert _rows(rel) == _oracle(path, lambda lat: lat > 25)
        con.sql("SELECT 42").fetchall()
        _rewrite_coordinates(path, 0.5)
        expected = _oracle(path, lambda lat: lat > 25)
        assert _rows(rel) == expected
        assert len(expected) == 1  # of 5 .. 30 only 30 is above 25


def test_coordinates_rewritten_again_and_again_between_statements_are_read(tmp_path):
    path = str(tmp_path / "s.zarr")
    other = str(tmp_path / "o.zarr")
    _write(path)
    _write(other)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT lat, v FROM read_zarr('{path}')")
        for scale in (2.0, -1.0, 3.0):
            con.sql(f"SELECT count(*) FROM read_zarr('{other}')").fetchall()
            _rewrite_coordinates(path, scale)
            assert _rows(rel) == _oracle(path)


def test_a_relation_over_a_mounted_view_reads_rewritten_coordinates_after_others(tmp_path):
    path = str(tmp_path / "s.zarr")
    other = str(tmp_path / "o.zarr")
    _write(path)
    _write(other)
    with zarrsql.connect() as con:
        zarrsql.mount(con, path, "m")
        zarrsql.mount(con, other, "o")
        rel = con.sql("SELECT lat, v FROM m.main.lat")
        assert _rows(rel) == _oracle(path)
        later = con.sql("SELECT lat, v FROM o.main.lat")  # another relation, made after it
        _rewrite_coordinates(path, -1.0)
        _rewrite_coordinates(other, 2.0)
        assert _rows(rel) == _oracle(path)
        assert _rows(later) == _oracle(other)


def test_a_changed_metadata_after_an_unrelated_statement_still_fails(tmp_path):
    """Same columns and shape, but every document rewritten (another chunking): the relation
    bound before it is refused after another statement, and the statement run again reads it."""
    path = str(tmp_path / "s.zarr")
    _write(path)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT lat, v FROM read_zarr('{path}')")
        assert _rows(rel) == _oracle(path)
        con.sql("SELECT 42").fetchall()
        ds = xr.Dataset({"v": (("lat",), np.arange(6.0))}, coords={"lat": np.arange(6.0) - 3})
        ds.to_zarr(path, mode="w", encoding={"v": {"chunks": (3,)}, "lat": {"chunks": (3,)}})
        with pytest.raises(duckdb.Error, match=CHANGED) as err:
            rel.fetchall()
        assert "con.sql(" in str(err.value)
        assert _rows(con.sql(f"SELECT lat, v FROM read_zarr('{path}')")) == _oracle(path)
