"""Column types of the table layout: AnnData-style nullable columns (values + mask), NaN kept
apart from NULL, geometry against shapely, and the types it refuses (with nothing written).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import zarr

from tests.write.table_oracle import expected, relation, root, zarrsql_read
from zarrsql.errors import ParameterError, StoreExistsError, UnwritableColumnError, ZarrSQLError
from zarrsql.write.table import write_table

N = 29


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def _write(rel: duckdb.DuckDBPyRelation, out: Path, **kw: object) -> None:
    write_table(rel.to_arrow_reader(5), str(out), chunks=8, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", [2, 3])
def test_nullable_columns_are_values_and_mask(con: duckdb.DuckDBPyConnection, tmp_path: Path, fmt: int) -> None:
    rng = np.random.default_rng(11)
    ints = rng.integers(-1000, 1000, N).astype(np.int32)
    bools = rng.random(N) > 0.5
    missing = rng.random(N) < 0.3
    missing[0] = False  # the first NULL arrives after rows were written as a plain array
    table = pa.table(
        {
            "count": pa.array(ints, mask=missing),
            "flag": pa.array(bools, mask=missing[::-1].copy()),
            "label": pa.array([f"l{i}" for i in range(N)], mask=missing),
            "when": pa.array(np.arange(N).astype("datetime64[s]").astype("datetime64[us]"), mask=missing),
        }
    )
    rel = relation(con, table)
    out = tmp_path / "nullable.zarr"
    _write(rel, out, zarr_format=fmt)

    g = root(out)
    for name, mask in (("count", missing), ("flag", missing[::-1]), ("label", missing), ("when", missing)):
        node = g[name]
        assert isinstance(node, zarr.Group), name
        assert node.attrs["encoding-type"] == "nullable"
        np.testing.assert_array_equal(node["mask"][:], mask)
        assert node["values"].chunks[0] == node["mask"].chunks[0] == 8
    np.testing.assert_array_equal(g["count"]["values"][:][~missing], ints[~missing])
    assert g["count"]["values"].dtype == np.int32
    assert zarrsql_read(out) == expected(rel)


def test_nan_and_null_stay_apart(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    rel = con.sql("SELECT * FROM (VALUES (1, 'NaN'::DOUBLE), (2, NULL), (3, 2.5), (4, 'NaN'::DOUBLE)) v(i, x)")
    out = tmp_path / "nan.zarr"
    _write(rel, out)
    node = root(out)["x"]
    assert node["mask"][:].tolist() == [False, True, False, False]
    con2 = duckdb.connect()
    back = zarrsql_read(out, nan_as_null=False)[2]
    want = con2.sql(
        "SELECT * FROM (VALUES (1, 'NaN'::DOUBLE), (2, NULL), (3, 2.5), (4, 'NaN'::DOUBLE)) v(i, x)"
    ).fetchall()
    assert [(i, None if x is None else ("nan" if x != x else x)) for i, x in back] == [
        (i, None if x is None else ("nan" if x != x else x)) for i, x in want
    ]


def _geometry_relation(con: duckdb.DuckDBPyConnection, geoms: list[object]) -> duckdb.DuckDBPyRelation:
    import shapely

    field = pa.field("g", pa.binary(), metadata={"ARROW:extension:name": "geoarrow.wkb"})
    wkb = pa.array(list(shapely.to_wkb(geoms, include_srid=False)), pa.binary())
    table = pa.Table.from_arrays(
        [pa.array(range(len(geoms)), pa.int32()), wkb], schema=pa.schema([pa.field("id", pa.int32()), field])
    )
    return relation(con, table, "SELECT id, g::GEOMETRY AS geom FROM t")


def _polygons(rng: np.random.Generator) -> list[object]:
    import shapely

    out = []
    for i in range(N):
        x, y = rng.uniform(-100, 100, 2)
        outer = [(x, y), (x + 10, y), (x + 10, y + 10), (x, y + 10), (x, y)]
        holes = [[(x + 2, y + 2), (x + 4, y + 2), (x + 4, y + 4), (x + 2, y + 2)]] if i % 3 == 0 else []
        out.append(shapely.Polygon(outer, holes))
    return out


def test_polygons_with_holes_against_shapely(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    import shapely

    geoms = _polygons(np.random.default_rng(12))
    out = tmp_path / "parcels.zarr"
    _write(_geometry_relation(con, geoms), out)

    node = root(out)["geom"]
    assert node.attrs["encoding-type"] == "polygon"
    rings_per_row = [1 + len(p.interiors) for p in geoms]
    np.testing.assert_array_equal(node["geom_offsets"][:], np.concatenate([[0], np.cumsum(rings_per_row)]))
    ring_sizes = [len(r.coords) for p in geoms for r in (p.exterior, *p.interiors)]
    np.testing.assert_array_equal(node["ring_offsets"][:], np.concatenate([[0], np.cumsum(ring_sizes)]))
    np.testing.assert_array_equal(node["coords"][:], shapely.get_coordinates(geoms))
    rows = zarrsql_read(out, geometry="wkb")[2]
    back = shapely.from_wkb([r[1] for r in rows])
    assert all(shapely.equals_exact(a, b, tolerance=0) for a, b in zip(back, geoms, strict=True))


def test_3d_linestrings_and_points(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    import shapely

    rng = np.random.default_rng(13)
    lines = [shapely.LineString(rng.uniform(0, 9, (3 + i % 4, 3))) for i in range(N)]
    out = tmp_path / "lines.zarr"
    _write(_geometry_relation(con, lines), out)
    node = root(out)["geom"]
    assert node.attrs["axes"] == ["x", "y", "z"]
    np.testing.assert_array_equal(node["coords"][:], shapely.get_coordinates(lines, include_z=True))
    back = shapely.from_wkb([r[1] for r in zarrsql_read(out, geometry="wkb")[2]])
    assert all(shapely.equals_exact(a, b, tolerance=0) for a, b in zip(back, lines, strict=True))
    assert all(shapely.has_z(back))


def test_native_geometry_read_back_by_zarrsql_writes_again(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """zarrsql reads geometries as GeoArrow structs; such a result writes back the same."""
    import shapely

    geoms = _polygons(np.random.default_rng(14))
    first, second = tmp_path / "a.zarr", tmp_path / "b.zarr"
    _write(_geometry_relation(con, geoms), first)
    import zarrsql

    zc = zarrsql.connect()
    again = zc.sql(f"SELECT * FROM read_zarr('{first}')")
    write_table(again.to_arrow_reader(), str(second), chunks=8)
    assert zarrsql_read(second) == zarrsql_read(first)
    np.testing.assert_array_equal(root(second)["geom"]["coords"][:], shapely.get_coordinates(geoms))


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT 'POINT(1 2)'::GEOMETRY AS g UNION ALL SELECT 'LINESTRING(0 0, 1 1)'::GEOMETRY", ["'g'", "LINESTRING"]),
        ("SELECT 'MULTIPOINT((1 2), (3 4))'::GEOMETRY AS g", ["'g'", "MULTI"]),
        ("SELECT NULL::GEOMETRY AS g UNION ALL SELECT 'POINT(1 2)'::GEOMETRY", ["'g'", "NULL"]),
    ],
)
def test_geometry_the_convention_cannot_hold_is_refused(
    con: duckdb.DuckDBPyConnection, tmp_path: Path, sql: str, words: list[str]
) -> None:
    out = tmp_path / "bad.zarr"
    with pytest.raises(UnwritableColumnError) as info:
        write_table(con.sql(sql).to_arrow_reader(), str(out))
    message = str(info.value)
    assert all(w in message for w in words), message
    assert not out.exists()


@pytest.mark.parametrize(
    ("sql", "column", "fix"),
    [
        ("SELECT 12345678901234567.89::DECIMAL(38, 2) AS price", "price", "AS VARCHAR"),
        ("SELECT {'a': 1, 'b': 'x'} AS rec", "rec", "col.*"),
        ("SELECT [1, 2, 3] AS xs", "xs", "fixed-size"),
        ("SELECT 'ab'::BLOB AS raw", "raw", "GEOMETRY"),
        ("SELECT MAP {'k': 1} AS m", "m", "cast"),
        ("SELECT TIMESTAMPTZ '2020-01-01 00:00:00+00' AS ts", "ts", "AT TIME ZONE"),
        ("SELECT INTERVAL 3 DAY AS span", "span", "cast"),
    ],
)
def test_a_column_type_the_layout_cannot_hold_names_column_and_fix(
    con: duckdb.DuckDBPyConnection, tmp_path: Path, sql: str, column: str, fix: str
) -> None:
    out = tmp_path / "bad.zarr"
    with pytest.raises(UnwritableColumnError) as info:
        write_table(con.sql(f"SELECT 1 AS ok, * FROM ({sql})").to_arrow_reader(), str(out))
    assert isinstance(info.value, ZarrSQLError)
    assert f"'{column}'" in str(info.value)
    assert fix in str(info.value)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_fixed_size_list_with_nulls_is_refused(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    with pytest.raises(UnwritableColumnError, match="'v'"):
        write_table(con.sql("SELECT [1, NULL]::INTEGER[2] AS v").to_arrow_reader(), str(tmp_path / "x.zarr"))
    assert list(tmp_path.iterdir()) == []


def test_existing_store_with_mode_w_dash_is_refused_and_kept(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    first = con.sql("SELECT range AS i FROM range(5)")
    _write(first, out)
    with pytest.raises(StoreExistsError, match='mode="w"'):
        _write(con.sql("SELECT range AS i FROM range(9)"), out)
    assert zarrsql_read(out) == expected(first)
    _write(con.sql("SELECT range * 2 AS j FROM range(3)"), out, mode="w")
    assert zarrsql_read(out) == expected(con.sql("SELECT range * 2 AS j FROM range(3)"))


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"chunks": 0}, "chunks"),
        ({"mode": "append"}, "mode"),
        ({"zarr_format": 4}, "zarr_format"),
        ({"index": "nope"}, "'nope'"),
    ],
)
def test_bad_parameters_are_refused(con: duckdb.DuckDBPyConnection, tmp_path: Path, kw: dict, words: str) -> None:
    with pytest.raises(ParameterError, match=words):
        write_table(con.sql("SELECT 1 AS i").to_arrow_reader(), str(tmp_path / "x.zarr"), **kw)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_result_is_an_empty_table(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    rel = con.sql("SELECT range::INTEGER AS i, 'x' AS s FROM range(0)")
    out = tmp_path / "empty.zarr"
    _write(rel, out)
    assert root(out)["i"].shape == (0,)
    assert zarrsql_read(out) == expected(rel)


def test_decimals_are_stored_as_doubles_that_cast_back_exactly(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    rel = con.sql("SELECT (range * 0.01)::DECIMAL(18, 2) AS amount FROM range(-50, 50)")
    out = tmp_path / "money.zarr"
    _write(rel, out)
    types, _, rows = zarrsql_read(out)
    assert types == ["DOUBLE"]
    con.register("back", pa.table({"amount": [r[0] for r in rows]}))
    assert con.sql("SELECT amount::DECIMAL(18, 2) FROM back").fetchall() == rel.fetchall()
