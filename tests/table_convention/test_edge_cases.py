"""Tables at the edges of the convention: no rows, geometry only, more than one trailing axis,
inline categories holding values or carrying a sentinel, and registrations without columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import zarrsql
from tests.table_convention.stores import _Writer


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


@pytest.fixture
def edge(tmp_path: Path, fmt: int) -> str:
    w = _Writer(tmp_path / "edge.zarr", fmt)
    g = w.root.create_group("empty")
    w.array(g, "id", np.array([], dtype=object), 4)
    w.array(g, "v", np.zeros(0), 4)
    w.table(g, [("id", "id"), ("v", "v")], index="id")
    g = w.root.create_group("geometry_only")
    poly = g.create_group("shape")
    poly.attrs.update({"encoding-type": "polygon", "axes": ["x", "y"]})
    w.array(poly, "coords", np.arange(16.0).reshape(8, 2), 3)
    w.array(poly, "ring_offsets", np.array([0, 4, 8]), 2)
    w.array(poly, "geom_offsets", np.array([0, 1, 1, 2]), 2)  # the middle row has no ring
    w.table(g, [("shape", "shape")])
    g = w.root.create_group("cube")
    w.array(g, "grid", np.arange(24, dtype=np.float64).reshape(2, 4, 3), 1)
    w.table(g, [("grid", "grid")])
    g = w.root.create_group("coded")
    w.array(g, "grade", np.array([0, 99, 1, -1], dtype=np.int16), 2,
            attrs={"categories": ["low", "high"], "ordered": True, "missing_value": 99})
    w.array(g, "size", np.array([1.5, 2.5, 1.5, 3.5]), 2, attrs={"categories": [1.5, 2.5]})
    w.table(g, [("grade", "grade"), ("size", "size")])
    g = w.root.create_group("duplicate")
    w.array(g, "a", np.arange(2.0), 2)
    w.array(g, "b", np.arange(2.0), 2)
    w.table(g, [("A", "a"), ("a", "b")])
    g = w.root.create_group("no_columns")
    w.array(g, "a", np.arange(2.0), 2)
    w.table(g, [("a", "a")])
    g.attrs.update({"table:columns": []})
    return str(tmp_path / "edge.zarr")


def test_a_table_without_rows(con, edge) -> None:
    rel = con.sql(f"SELECT * FROM read_zarr('{edge}', group_path := 'empty')")
    assert rel.columns == ["id", "v"]
    assert rel.fetchall() == []


def test_a_table_of_one_polygon_column(con, edge) -> None:
    got = con.sql(f"SELECT shape FROM read_zarr('{edge}', group_path := 'geometry_only')").fetchall()
    ring = [{"x": 2.0 * k, "y": 2.0 * k + 1} for k in range(8)]  # coords are 0..15 in (x, y) pairs
    assert got == [([ring[:4]],), ([],), ([ring[4:]],)]


def test_more_trailing_axes_nest_fixed_arrays(con, edge) -> None:
    rel = con.sql(f"SELECT grid FROM read_zarr('{edge}', group_path := 'cube')")
    assert [str(t) for t in rel.types] == ["DOUBLE[3][4]"]
    data = np.arange(24, dtype=np.float64).reshape(2, 4, 3)
    assert [[list(inner) for inner in row[0]] for row in rel.fetchall()] == data.tolist()


def test_inline_categories_with_a_sentinel_and_with_values(con, edge) -> None:
    rel = con.sql(f"SELECT * FROM read_zarr('{edge}', group_path := 'coded')")
    assert [str(t) for t in rel.types] == ["ENUM('low', 'high')", "DOUBLE"]
    # 99 is the sentinel and -1 the missing code; 3.5 is no category: refused, not NULL
    with pytest.raises(zarrsql.DecodeError, match=r"'size'.*3\.5.*not one of its 2 categories"):
        con.execute(f"SELECT size FROM read_zarr('{edge}', group_path := 'coded')").fetchall()
    got = con.sql(f"SELECT grade FROM read_zarr('{edge}', group_path := 'coded')").fetchall()
    assert got == [("low",), (None,), ("high",), (None,)]


@pytest.mark.parametrize(("group", "words"), [("duplicate", "names two columns 'A' and 'a'"),
                                              ("no_columns", "table:columns must be a non-empty list")])
def test_malformed_table_columns(con, edge, group, words) -> None:
    with pytest.raises(zarrsql.SelectionError, match=words):
        con.execute(f"SELECT * FROM read_zarr('{edge}', group_path := '{group}')")
