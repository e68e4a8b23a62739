"""The writers' values and column names: wide numbers (HUGEINT, UHUGEINT, DECIMAL) become the
double DuckDB's own `::DOUBLE` gives; names a Zarr store cannot hold are refused for a grid
before anything is written (kept by `to_xarray`, renamed by the table layout); names given
twice are refused; a point STRUCT of DECIMAL fields is a point.

Oracles: DuckDB's `::DOUBLE` of the same values and DuckDB's own rows of the relation,
`xr.open_zarr` and zarr-python for what was written.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from tests.write.frames import use_path
from zarrsql.errors import ParameterError, UnwritableColumnError

#: Rows of wide numbers: (HUGEINT, UHUGEINT, DECIMAL(38,10), DECIMAL(38,0)) as SQL literals,
#: with each type's extremes and NULLs. -2**127 is HUGEINT's minimum, 2**128 - 1 UHUGEINT's
#: maximum (which DuckDB exports to Arrow as the decimal128 -1).
_WIDE_ROWS = [
    (str(-(2**127)), str(2**128 - 1), "-9999999999999999999999999999.9999999999", str(10**38 - 1)),
    (str(2**127 - 1), str(2**127), "1234567890123456789012345678.0123456789", str(-(10**38) + 1)),
    (str(-(2**127) + 1), "0", "0.0000000001", "-12345678901234567890123456789"),
    ("NULL", "NULL", "NULL", "NULL"),
    ("-1", "1", "-0.5", "0"),
]
#: The same extremes where every value is exact in float64, as a grid requires of integers.
_EXACT_ROWS = [
    (str(-(2**127)), str(2**127), "-9999999999999999999999999999.9999999999", str(-(2**126))),
    (str(2**100), str(2**128 - 2**75), "1234567890123456789012345678.0123456789", str(2**120)),
    ("NULL", "NULL", "NULL", "NULL"),
    ("-1", "0", "0.0000000001", "7"),
]


def _wide_sql(rows: list[tuple[str, str, str, str]]) -> str:
    values = ", ".join(
        f"({k}::BIGINT, ({h})::HUGEINT, ({u})::UHUGEINT, ({d})::DECIMAL(38,10), ({z})::DECIMAL(38,0))"
        for k, (h, u, d, z) in enumerate(rows)
    )
    return f"SELECT * FROM (VALUES {values}) AS t(i, h, u, d, z)"


def _duckdb_doubles(con: zarrsql.Connection, sql: str) -> dict[str, np.ndarray]:
    """DuckDB's own ::DOUBLE of every wide column, in the order of `i` (NULL as NaN)."""
    rows = con.sql(f"SELECT h::DOUBLE, u::DOUBLE, d::DOUBLE, z::DOUBLE FROM ({sql}) ORDER BY i").fetchall()
    return {name: np.array([np.nan if r[k] is None else r[k] for r in rows]) for k, name in enumerate("hudz")}


@pytest.fixture
def con() -> zarrsql.Connection:
    return zarrsql.connect()


@pytest.mark.parametrize("path", ["one read", "two reads"])
def test_to_xarray_wide_numbers_are_duckdbs_doubles(
    con: zarrsql.Connection, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_path(monkeypatch, path)
    sql = _wide_sql(_WIDE_ROWS)
    ds = zarrsql.to_xarray(con.sql(sql), ["i"])
    for name, expected in _duckdb_doubles(con, sql).items():
        np.testing.assert_array_equal(ds[name].values, expected, err_msg=name)
    assert ds.h.values[0] < 0  # -2**127 keeps its sign


@pytest.mark.parametrize("path", ["one read", "two reads", "sorted by chunk"])
@pytest.mark.parametrize("fmt", [2, 3])
def test_grid_wide_numbers_are_duckdbs_doubles(
    con: zarrsql.Connection, tmp_path: Path, path: str, fmt: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_path(monkeypatch, path)
    sql = _wide_sql(_EXACT_ROWS)
    out = tmp_path / "wide.zarr"
    zarrsql.to_zarr(sql, out, dims=["i"], chunks=2, zarr_format=fmt, connection=con)
    stored = xr.open_zarr(out)
    for name, expected in _duckdb_doubles(con, sql).items():
        np.testing.assert_array_equal(stored[name].values, expected, err_msg=name)


def test_grid_append_wide_numbers_are_duckdbs_doubles(con: zarrsql.Connection, tmp_path: Path) -> None:
    out = tmp_path / "wide.zarr"
    first, rest = _EXACT_ROWS[:1], _EXACT_ROWS[1:]
    zarrsql.to_zarr(_wide_sql(first), out, dims=["i"], connection=con)
    appended = f"SELECT i + 1 AS i, * EXCLUDE (i) FROM ({_wide_sql(rest)})"
    zarrsql.to_zarr(appended, out, mode="a", append_dim="i", connection=con)
    both = f"{_wide_sql(first)} UNION ALL {appended}"
    stored = xr.open_zarr(out)
    for name, expected in _duckdb_doubles(con, both).items():
        np.testing.assert_array_equal(stored[name].values, expected, err_msg=name)


def test_grid_still_refuses_an_integer_a_double_cannot_hold(con: zarrsql.Connection, tmp_path: Path) -> None:
    """2**128 - 1 is no double (it rounds to 2**128): refused, naming the value, not written as -1."""
    with pytest.raises(UnwritableColumnError, match=str(2**128 - 1)):
        zarrsql.to_zarr(
            f"SELECT 0 AS i, ({2**128 - 1})::UHUGEINT AS u", tmp_path / "u.zarr", dims=["i"], connection=con
        )
    assert not (tmp_path / "u.zarr").exists()


_BAD_GRID_NAMES = ["temp/max", "a\\b", ".", "..", "zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata", "x" * 256]


@pytest.mark.parametrize("name", _BAD_GRID_NAMES, ids=lambda n: n[:12])
@pytest.mark.parametrize("fmt", [2, 3])
def test_grid_refuses_a_name_no_node_can_have(con: zarrsql.Connection, tmp_path: Path, name: str, fmt: int) -> None:
    out = tmp_path / "out" / "bad.zarr"
    out.parent.mkdir()
    quoted = name.replace('"', '""')
    sql = f'SELECT range::BIGINT AS i, range * 1.5 AS "{quoted}" FROM range(3)'
    with pytest.raises(ParameterError) as caught:
        zarrsql.to_zarr(sql, out, dims=["i"], zarr_format=fmt, connection=con)
    message = str(caught.value)
    assert f"column '{name[:80]}" in message
    assert "alias it" in message
    assert os.listdir(out.parent) == []  # nothing written, not even a staging folder


def test_grid_refuses_a_bad_dimension_name_too(con: zarrsql.Connection, tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="column 'a/b'"):
        zarrsql.to_zarr(
            'SELECT range AS "a/b", 1.0 AS v FROM range(2)', tmp_path / "d.zarr", dims=["a/b"], connection=con
        )
    assert not (tmp_path / "d.zarr").exists()


@pytest.mark.parametrize("name", ["x" * 255, "é" * 127, "temp max", ".hidden", "c"], ids=lambda n: n[:8])
def test_grid_writes_a_name_a_node_can_have(con: zarrsql.Connection, tmp_path: Path, name: str) -> None:
    """A guard against refusing too much: up to 255 bytes, spaces, a leading dot are node names."""
    out = tmp_path / "ok.zarr"
    zarrsql.to_zarr(
        f'SELECT range::BIGINT AS i, range * 1.5 AS "{name}" FROM range(3)', out, dims=["i"], connection=con
    )
    assert xr.open_zarr(out)[name].values.tolist() == [0.0, 1.5, 3.0]


def test_to_xarray_keeps_names_xarray_accepts(con: zarrsql.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """'temp/max' is a valid variable name in memory, and 'v' and 'V' are two variables."""
    sql = 'SELECT range::BIGINT AS i, range * 1.5 AS v, range * 2.0 AS "V", range * 3 AS "temp/max" FROM range(4)'
    rows = con.sql(sql).fetchall()  # DuckDB's own rows, by position
    for path in ("one read", "two reads"):
        use_path(monkeypatch, path)
        ds = zarrsql.to_xarray(con.sql(sql), ["i"])
        assert sorted(ds.data_vars) == sorted(["v", "V", "temp/max"])
        for k, name in enumerate(["v", "V", "temp/max"], start=1):
            assert ds[name].values.tolist() == [float(r[k]) for r in rows], name


@pytest.mark.parametrize("path", ["one read", "two reads"])
def test_to_xarray_dimension_beside_a_variable_of_another_case(
    con: zarrsql.Connection, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_path(monkeypatch, path)
    sql = 'SELECT range::BIGINT * 10 AS t, range::DOUBLE / 4 AS "T" FROM range(3)'
    rows = con.sql(sql).fetchall()
    ds = zarrsql.to_xarray(con.sql(sql), ["t"])
    assert ds.t.values.tolist() == [r[0] for r in rows]
    assert ds["T"].values.tolist() == [r[1] for r in rows]


_WRITERS = {
    "to_xarray": lambda con, sql, out: zarrsql.to_xarray(con.sql(sql), ["i"]),
    "grid": lambda con, sql, out: zarrsql.to_zarr(sql, out, dims=["i"], connection=con),
    "table": lambda con, sql, out: zarrsql.to_zarr(sql, out, layout="table", connection=con),
}


@pytest.mark.parametrize("writer", sorted(_WRITERS))
def test_a_name_given_twice_is_refused(con: zarrsql.Connection, tmp_path: Path, writer: str) -> None:
    sql = "SELECT range::BIGINT AS i, range * 1.5 AS v, range * 2.0 AS v FROM range(3)"
    with pytest.raises(ParameterError, match="alias"):
        _WRITERS[writer](con, sql, tmp_path / "dup.zarr")
    assert not (tmp_path / "dup.zarr").exists()


@pytest.mark.parametrize("writer", ["grid", "table"])
def test_zarr_output_refuses_names_differing_in_case(con: zarrsql.Connection, tmp_path: Path, writer: str) -> None:
    """'v' and 'V' would be one directory on a case-insensitive file system."""
    sql = 'SELECT range::BIGINT AS i, range * 1.5 AS v, range * 2.0 AS "V" FROM range(3)'
    with pytest.raises(ParameterError, match="alias"):
        _WRITERS[writer](con, sql, tmp_path / "case.zarr")
    assert not (tmp_path / "case.zarr").exists()


@pytest.mark.parametrize("fmt", [2, 3])
def test_table_layout_stores_long_names_under_short_nodes(con: zarrsql.Connection, tmp_path: Path, fmt: int) -> None:
    """Names too long for a file name are stored under a cut node name (two that cut alike get
    distinct nodes); `table:columns` and read_zarr keep the whole name. The first has NULLs
    (its array becomes a nullable group after rows were written)."""
    long_a, long_b, wide = "a" * 300 + "1", "a" * 300 + "2", "é" * 200
    sql = (
        f'SELECT range::BIGINT AS i, CASE WHEN range % 2 = 1 THEN NULL ELSE range * 1.5 END AS "{long_a}", '
        f'range * 2 AS "{long_b}", range::DOUBLE AS "{wide}" FROM range(5)'
    )
    out = tmp_path / "long.zarr"
    zarrsql.to_zarr(sql, out, layout="table", chunks=2, zarr_format=fmt, connection=con)
    expected = con.sql(sql)
    back = con.sql(f"SELECT * FROM read_zarr('{out}') ORDER BY i")
    assert back.columns == expected.columns
    assert back.fetchall() == expected.order("i").fetchall()
    root = zarr.open_group(str(out), mode="r")
    entries = root.attrs["table:columns"]
    assert [e["name"] for e in entries] == expected.columns  # type: ignore[index,union-attr]
    nodes = [e["node"] for e in entries]  # type: ignore[index]
    assert len({n.lower() for n in nodes}) == len(nodes)
    assert all(len(n.encode()) <= 255 for n in nodes)
    column_b = root[nodes[2]]  # a plain array, read as the convention's reader does: through table:columns
    assert column_b[:].tolist() == [r[2] for r in expected.order("i").fetchall()]


def test_point_struct_with_decimal_fields_is_a_point(con: zarrsql.Connection, tmp_path: Path) -> None:
    sql = "SELECT range AS id, {'x': range * 1.0 + 0.25, 'y': 2.5 - range * 0.5} AS pt FROM range(4)"
    out = tmp_path / "points.zarr"
    zarrsql.to_zarr(sql, out, layout="table", connection=con)
    expected = con.sql(f"SELECT id, {{'x': pt.x::DOUBLE, 'y': pt.y::DOUBLE}} FROM ({sql}) ORDER BY id").fetchall()
    assert con.sql(f"SELECT id, pt FROM read_zarr('{out}') ORDER BY id").fetchall() == expected
    stored = zarr.open_group(str(out), mode="r")["pt"][:]
    assert stored.tolist() == [[p["x"], p["y"]] for _, p in expected]


def test_point_decimal_fields_a_double_cannot_hold_are_refused(con: zarrsql.Connection, tmp_path: Path) -> None:
    sql = "SELECT 1 AS id, {'x': 0.1::DECIMAL(18,17), 'y': 2.5} AS pt"
    with pytest.raises(UnwritableColumnError, match=r"cast the fields\s+to DOUBLE"):
        zarrsql.to_zarr(sql, tmp_path / "p.zarr", layout="table", connection=con)
    assert not (tmp_path / "p.zarr").exists()


def test_point_named_struct_of_other_types_asks_for_doubles(con: zarrsql.Connection, tmp_path: Path) -> None:
    """Its fields are already named x, y: the advice is the cast, not the names."""
    with pytest.raises(UnwritableColumnError) as caught:
        zarrsql.to_zarr("SELECT 1 AS id, {'x': 'a', 'y': 2.5} AS pt", tmp_path / "p.zarr", layout="table",
                        connection=con)  # fmt: skip
    assert "cast its fields to DOUBLE" in str(caught.value)
    assert "name its fields" not in str(caught.value)


@pytest.mark.parametrize("fmt", [2, 3])
def test_table_layout_wide_integers_are_duckdbs_doubles(con: zarrsql.Connection, tmp_path: Path, fmt: int) -> None:
    """The table layout reads HUGEINT and UHUGEINT as DuckDB's ::DOUBLE: in Arrow a UHUGEINT past
    2**127 arrives wrapped and pyarrow's cast flips the sign of -2**127."""
    sql = f"SELECT i, h, u FROM ({_wide_sql(_EXACT_ROWS)}) WHERE h IS NOT NULL"  # no NULL: plain arrays
    out = tmp_path / "t.zarr"
    zarrsql.to_zarr(sql, out, layout="table", zarr_format=fmt, connection=con)
    stored = zarr.open_group(str(out), mode="r")
    want = con.sql(f"SELECT h::DOUBLE, u::DOUBLE FROM ({sql}) ORDER BY i").fetchall()
    order = np.argsort(stored["i"][:])
    for k, name in enumerate("hu"):
        np.testing.assert_array_equal(stored[name][:][order], [r[k] for r in want], err_msg=name)
    assert stored["h"][:][order][0] < 0
    with_nulls = f"SELECT i, h, u FROM ({_wide_sql(_EXACT_ROWS)})"
    zarrsql.to_zarr(with_nulls, tmp_path / "n.zarr", layout="table", zarr_format=fmt, connection=con)
    back = con.sql(f"SELECT h, u FROM read_zarr('{tmp_path / 'n.zarr'}') ORDER BY i").fetchall()
    assert back == con.sql(f"SELECT h::DOUBLE, u::DOUBLE FROM ({with_nulls}) ORDER BY i").fetchall()


def test_table_layout_refuses_a_uhugeint_no_double_holds(con: zarrsql.Connection, tmp_path: Path) -> None:
    top = str(2**128 - 1)
    sql = f"SELECT 1 AS i, '{top}'::UHUGEINT AS u"
    with pytest.raises(zarrsql.ZarrSQLError, match=top):
        zarrsql.to_zarr(sql, tmp_path / "t.zarr", layout="table", connection=con)
    assert not (tmp_path / "t.zarr").exists()
