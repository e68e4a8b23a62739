"""Aggregates of dimension columns answered from the coordinates, as a user writes them.

`count(*)`, `min`/`max` and `count(DISTINCT)` of dimension columns (with a WHERE on them)
never read a data chunk: the data chunks of a store are overwritten with garbage and the
answers still come, while the same aggregate over a subquery (which is not answered, so it
scans) fails on them. Every answer equals a plain DuckDB connection computing the statement
over xarray's `to_dataframe()` of the store (or numpy arrays), with the same result types as
the scanned statement.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse as sp
import xarray as xr
import zarr

import anndata as ad
import zarrsql

AIR_STATEMENTS = [
    ("min(time) AS t0, max(time) AS t1", ""),
    ("min(lat), max(lat), count(*)", ""),  # lat runs from 75 down to 15
    ("min(lat), max(lat), min(lon), max(lon)", "lat < 40 AND lon BETWEEN 220 AND 260"),
    ("count(*), min(time), max(time)", "time >= '2013-01-10' AND time < '2013-01-20'"),
    ("count(DISTINCT time), count(DISTINCT lat), count(lon)", "lat IN (40, 50) OR time < '2013-01-02'"),
    ("max(time), min(lat)", "NOT (lat > 30) AND hour(time) = 12"),
    ("min(lon), max(time)", "lat = 1000"),  # nothing kept: NULL, as min over no rows
]


def _xarray_cells(path: str, *, data: bool = True) -> pd.DataFrame:
    """Every cell's coordinates (and data, with `data`), from xarray (times as microseconds,
    as zarrsql returns them)."""
    ds = xr.open_zarr(path)
    if not data:  # coordinates only (the data chunks may be unreadable): a dummy variable
        dims = ds[next(iter(ds.data_vars))].dims
        ones = np.ones(tuple(ds.sizes[d] for d in dims), "int8")
        ds = xr.Dataset({"one": (dims, ones)}, coords={d: ds[d] for d in dims})
    frame = ds.to_dataframe().reset_index()
    for name in frame.columns:
        if np.issubdtype(frame[name].dtype, np.datetime64):
            frame[name] = frame[name].astype("datetime64[us]")
    return frame


def _scanned(con: zarrsql.Connection, select: str, source: str, where: str) -> duckdb.DuckDBPyRelation:
    """The statement over a subquery: not answered, so DuckDB aggregates the full scan."""
    return con.sql(f"SELECT {select} FROM (SELECT * FROM {source}) {where}")


@pytest.mark.parametrize(("select", "where"), AIR_STATEMENTS)
def test_answers_equal_xarray_cells(fixture_path: Callable[[str], str], select: str, where: str) -> None:
    path = fixture_path("air_temperature.zarr")
    oracle = duckdb.connect()
    oracle.register("cells", _xarray_cells(path))
    where = f"WHERE {where}" if where else ""
    expected = oracle.sql(f"SELECT {select} FROM cells {where}").fetchall()
    source = f"read_zarr('{path}')"
    with zarrsql.connect() as con:
        with zarrsql.trace() as t:
            got = con.sql(f"SELECT {select} FROM {source} {where}")
            rows = got.fetchall()
        assert rows == expected
        assert t.scans == 0
        assert t.rows == 0
        scanned = _scanned(con, select, source, where)
        assert got.types == scanned.types
        assert got.columns == scanned.columns
        assert scanned.fetchall() == expected


def _garbage_store(path: Path) -> str:
    """A store written by xarray whose data chunks are then overwritten with garbage; its
    coordinates stay readable."""
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), np.ones((48, 5, 8), "float32"))},
        coords={
            "time": pd.date_range("2021-03-01", periods=48, freq="h"),
            "lat": np.linspace(60, 20, 5).astype("float32"),
            "lon": np.arange(8, dtype="float64") * 45,
        },
    )
    ds.to_zarr(path, zarr_format=3, encoding={"t2m": {"chunks": (12, 5, 8)}})
    chunks = [p for p in (path / "t2m").rglob("*") if p.is_file() and p.name != "zarr.json"]
    assert len(chunks) == 4
    for chunk in chunks:
        chunk.write_bytes(b"\x00 not a chunk \xff" * 7)
    return str(path)


def test_no_data_chunk_is_read(tmp_path: Path) -> None:
    """Garbage data chunks: the answers come; a scan fails on them with a zarrsql error."""
    path = _garbage_store(tmp_path / "garbage.zarr")
    source = f"read_zarr('{path}')"
    statements = [
        "SELECT count(*) FROM {s}",
        "SELECT min(time), max(time) FROM {s}",
        "SELECT count(*), min(lat), max(lat) FROM {s} WHERE time >= '2021-03-02' AND lon IN (0, 90)",
        "SELECT count(DISTINCT time) FROM {s} WHERE lat BETWEEN 30 AND 50 OR lon > 300",
    ]
    with zarrsql.connect() as con:
        for sql in statements:
            con.sql(sql.format(s=source)).fetchall()  # the first reads metadata and coordinates
            with zarrsql.trace() as t:
                con.sql(sql.format(s=source)).fetchall()
            assert (t.scans, t.rows, t.chunks_decoded, t.requests, t.bytes_read) == (0, 0, 0, 0, 0), sql
        t0, t1 = con.sql(statements[1].format(s=source)).fetchall()[0]
        assert (t0, t1) == (
            pd.Timestamp("2021-03-01").to_pydatetime(),
            pd.Timestamp("2021-03-02 23:00").to_pydatetime(),
        )
        with pytest.raises(duckdb.Error, match="could not be decoded"):
            con.sql(f"SELECT min(t2m) FROM {source}").fetchall()
        with pytest.raises(duckdb.Error, match="could not be decoded"):
            _scanned(con, "min(time)", source, "WHERE t2m > 0").fetchall()


def test_views_strings_and_mounts_are_answered(tmp_path: Path) -> None:
    path = _garbage_store(tmp_path / "g.zarr")
    oracle = duckdb.connect()
    oracle.register("cells", _xarray_cells(path, data=False))
    select, where = "min(time), max(lat), count(*)", "WHERE lon < 100"
    expected = oracle.sql(f"SELECT {select} FROM cells {where}").fetchall()
    with zarrsql.connect() as con:
        con.sql(f"CREATE VIEW mine AS SELECT * FROM read_zarr('{path}')")
        # DuckDB folds only ASCII letters in names: "Ü" and "ü" are two views, not one name twice
        for name in ("Ü", "ü"):
            con.sql(f"""CREATE VIEW "{name}" AS SELECT * FROM read_zarr('{path}')""")
        zarrsql.mount(con, path, "m")
        (view,) = [r[0] for r in con.sql("SELECT view_name FROM zarr_mounts('m')").fetchall()]
        for source in (f"'{path}'", "mine", '"Ü"', '"ü"', f'm."{view}"', f'm."{view}" AS q'):
            with zarrsql.trace() as t:
                assert con.sql(f"SELECT {select} FROM {source} {where}").fetchall() == expected, source
            assert t.scans == 0, source


def test_nan_and_null_coordinates(tmp_path: Path) -> None:
    """NaN is NULL by default, so min and max skip it; with nan_as_null := false it is a
    value, the largest, as DuckDB orders it. A missing time (its fill value) is NULL."""
    path = tmp_path / "nan.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    x = np.array([2.5, np.nan, -1.0, np.nan, 7.0])
    hours = np.array([5, -1, 0, 30, -1])
    root.create_array("v", shape=(5, 5), chunks=(2, 2), dtype="float32", dimension_names=["x", "t"])
    root.create_array("x", data=x, dimension_names=["x"])
    root.create_array(
        "t", data=hours, dimension_names=["t"], attributes={"units": "hours since 2000-01-01", "_FillValue": -1}
    )
    stamps = np.datetime64("2000-01-01", "us") + hours * np.timedelta64(3600, "s")
    select = "min(x), max(x), count(DISTINCT x), count(x), min(t), max(t), count(t)"
    with zarrsql.connect() as con:
        for nan_as_null in (True, False):
            cells = pa.table(
                {
                    "x": pa.array(np.repeat(x, 5), mask=np.isnan(np.repeat(x, 5)) if nan_as_null else None),
                    "t": pa.array(np.tile(stamps, 5), mask=np.tile(hours == -1, 5)),
                }
            )
            oracle = duckdb.connect()
            # a table of DuckDB's own: DuckDB 1.5 leaves a comparison pushed into a registered
            # Arrow table to Arrow, whose NaN is greater than nothing (DuckDB's: than everything)
            oracle.register("arrow_cells", cells)
            oracle.execute("CREATE TABLE cells AS SELECT * FROM arrow_cells")
            for where in ("", "WHERE x > 0", "WHERE t IS NULL", "WHERE x < -5"):
                expected = oracle.sql(f"SELECT {select} FROM cells {where}").fetchall()
                source = f"read_zarr('{path}', nan_as_null := {str(nan_as_null).lower()})"
                with zarrsql.trace() as t:
                    got = con.sql(f"SELECT {select} FROM {source} {where}").fetchall()
                # DuckDB 1.5 hands a pushed comparison to the dataset, which applies it by
                # DuckDB's NaN rules; a condition on x holding NaN is scanned there, not answered
                arrow_filters = duckdb.__version__.startswith("1.") and not nan_as_null and "x" in where
                assert t.scans == (1 if arrow_filters else 0)
                assert _nan_as_text(got) == _nan_as_text(expected), (nan_as_null, where)
            if not nan_as_null:  # NaN sorts above every number
                assert _nan_as_text(con.sql(f"SELECT max(x) FROM {source}").fetchall()) == [("NaN",)]


def _nan_as_text(rows: list[tuple]) -> list[tuple]:
    """Rows with each NaN replaced by a marker, so that NaN compares equal to NaN."""
    return [tuple("NaN" if isinstance(v, float) and v != v else v for v in row) for row in rows]


def test_bounds_and_an_empty_axis(tmp_path: Path, fixture_path: Callable[[str], str]) -> None:
    """`bounds :=` restricts the cells min and max see; an axis of length 0 leaves no cell."""
    path = fixture_path("air_temperature.zarr")
    oracle = duckdb.connect()
    oracle.register("cells", _xarray_cells(path))
    expected = oracle.sql("SELECT min(lat), max(lat), max(time) FROM cells WHERE lat BETWEEN 30 AND 50").fetchall()
    with zarrsql.connect() as con:
        with zarrsql.trace() as t:
            got = con.sql(
                f"SELECT min(lat), max(lat), max(time) FROM read_zarr('{path}', bounds := [['lat', '30', '50']])"
            ).fetchall()
        assert got == expected
        assert t.scans == 0
        empty = tmp_path / "empty.zarr"
        root = zarr.open_group(empty, mode="w", zarr_format=3)
        root.create_array("v", shape=(3, 0), chunks=(2, 1), dtype="float32", dimension_names=["a", "b"])
        root.create_array("a", data=np.array([1.0, 2.0, 3.0]), dimension_names=["a"])
        with zarrsql.trace() as t:
            got = con.sql(f"SELECT count(*), min(a), max(b), count(DISTINCT a) FROM read_zarr('{empty}')").fetchall()
        assert got == [(0, None, None, 0)]
        assert t.scans == 0


def test_auxiliary_coordinate_along_one_dimension(tmp_path: Path) -> None:
    path = str(tmp_path / "aux.zarr")
    ds = xr.Dataset(
        {"v": (("t", "s"), np.zeros((4, 3), "float32"))},
        coords={
            "t": np.arange(4),
            "s": [10.0, 20.0, 30.0],
            "station": ("s", ["oslo", "bergen", "tromso"]),
            "doy": ("t", np.array([3.0, np.nan, 1.0, 2.0])),
        },
    )
    with warnings.catch_warnings():  # zarr-python calls its fixed-length strings unstable in v3
        warnings.simplefilter("ignore")
        ds.to_zarr(path, zarr_format=3)
    oracle = duckdb.connect()
    oracle.register("cells", ds.to_dataframe().reset_index())
    select, where = "min(station), max(doy), count(DISTINCT doy), count(*)", "WHERE station <> 'oslo' AND t > 0"
    expected = oracle.sql(f"SELECT {select} FROM cells {where}").fetchall()
    with zarrsql.connect() as con, zarrsql.trace() as t:
        assert con.sql(f"SELECT {select} FROM read_zarr('{path}') {where}").fetchall() == expected
    assert t.scans == 0


NOT_ANSWERED = [
    "SELECT min(air) FROM {s}",
    "SELECT min(lat), avg(air) FROM {s}",
    "SELECT max(time) FROM {s} WHERE air > 280",
    "SELECT lat, min(time) FROM {s} GROUP BY lat ORDER BY lat",
    "SELECT CAST(min(time) AS DATE) FROM {s}",
    "SELECT max(lat) - min(lat) FROM {s}",
    "SELECT min(lat) FILTER (WHERE lon > 250) FROM {s}",
    "SELECT sum(lat) FROM {s} WHERE lon > 250",
    "SELECT min(lat) FROM {s} WHERE lat + lon > 300",
    "SELECT max(time) FROM {s} HAVING count(*) > 1",
]


@pytest.mark.parametrize("sql", NOT_ANSWERED)
def test_other_statements_scan_with_the_same_result(fixture_path: Callable[[str], str], sql: str) -> None:
    path = fixture_path("air_temperature.zarr")
    oracle = duckdb.connect()
    oracle.register("cells", _xarray_cells(path))
    expected = oracle.sql(sql.format(s="cells")).fetchall()
    with zarrsql.connect() as con, zarrsql.trace() as t:
        got = con.sql(sql.format(s=f"read_zarr('{path}')")).fetchall()
    assert t.scans == 1
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):  # a sum or mean of floats in another order
        assert [pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for v in g] == list(e)


def _anndata(path: str, fmt: str, layer: bool = False) -> tuple[pd.Index, pd.Index, set[tuple[int, int]]]:
    """A small AnnData store with a sparse X (explicit zeros and empty rows included) and,
    with `layer`, a second sparse matrix stored elsewhere; its obs and var names and the
    stored positions of its matrices."""
    x = sp.random(30, 6, density=0.2, format=fmt, random_state=1, dtype="float32")
    x.data[:3] = 0.0  # explicit zeros are stored entries: rows of the table
    obs = pd.DataFrame(index=[f"cell{i:02d}" for i in range(30)])
    var = pd.DataFrame(index=[f"g{j}" for j in range(6)])
    layers = {"counts": sp.random(30, 6, density=0.3, format=fmt, random_state=2, dtype="float32")} if layer else {}
    with warnings.catch_warnings():  # anndata announces its next default format
        warnings.simplefilter("ignore")
        ad.AnnData(X=x, obs=obs, var=var, layers=layers).write_zarr(path)
    stored = {(int(r), int(c)) for m in (x, *layers.values()) for r, c in zip(*m.nonzero(), strict=True)}
    stored |= {(int(r), int(c)) for r, c in zip(x.tocoo().row, x.tocoo().col, strict=True)}
    return obs.index, var.index, stored


SPARSE_STATEMENTS = [  # (select, where, answered on a CSR matrix, on a CSC matrix)
    ("count(*)", "", True, True),
    ("count(*), min(obs), max(obs), count(DISTINCT obs)", "obs > 'cell05'", True, False),
    ("count(*), min(var), max(var)", "var IN ('g1', 'g3')", False, True),
    ("count(obs)", "obs LIKE 'cell1%' OR obs = 'cell29'", True, False),
    ("count(*)", "obs > 'cell10' AND var = 'g2'", False, False),
]


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_matrix_counts_along_its_compressed_axis(tmp_path: Path, fmt: str) -> None:
    """A sparse table's rows are its stored entries: the index pointer says how many each
    row (CSR) or column (CSC) has, so statements on that axis are answered; the other axis
    is in the entries themselves, so those statements scan. Both as scipy says."""
    path = str(tmp_path / f"{fmt}.zarr")
    obs, var, stored = _anndata(path, fmt)
    rows, cols = zip(*sorted(stored), strict=True)
    oracle = duckdb.connect()
    oracle.register("cells", pd.DataFrame({"obs": obs[list(rows)], "var": var[list(cols)]}))
    with zarrsql.connect() as con:
        for select, where, on_csr, on_csc in SPARSE_STATEMENTS:
            where = f"WHERE {where}" if where else ""
            expected = oracle.sql(f"SELECT {select} FROM cells {where}").fetchall()
            with zarrsql.trace() as t:
                got = con.sql(f"SELECT {select} FROM read_zarr('{path}', table_name := 'obs_var') {where}").fetchall()
            assert got == expected, (select, where)
            assert t.scans == (0 if (on_csr if fmt == "csr" else on_csc) else 1), (select, where)


def test_several_sparse_matrices_scan_with_the_same_result(tmp_path: Path) -> None:
    """X and a layer in one table: its rows are the union of their stored positions."""
    path = str(tmp_path / "layers.zarr")
    obs, var, stored = _anndata(path, "csr", layer=True)
    with zarrsql.connect() as con:
        tables = con.sql(f"SELECT table_name, data_vars FROM read_zarr_tables('{path}')").fetchall()
        (table,) = [name for name, data in tables if len(data) == 2]
        with zarrsql.trace() as t:
            got = con.sql(f"SELECT count(*) FROM read_zarr('{path}', table_name := '{table}')").fetchall()
    assert got == [(len(stored),)]
    assert t.scans == 1
