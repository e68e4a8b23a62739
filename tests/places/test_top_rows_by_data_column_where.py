"""`... WHERE <dimensions> ORDER BY <data variable> LIMIT n`: the first cells are looked for
among the cells the WHERE keeps, and every column is read only where they lie.

Oracle: plain DuckDB over an Arrow table built from the raw arrays (zarr-python for the data,
xarray for the times), running the same statement. A LIMIT over ties may return any of the
tied rows, so a result is checked to be a valid answer: the ORDER BY values DuckDB returns,
in its order, and each row one the oracle's WHERE keeps, no cell twice; where the ORDER BY
keys are unique it must be DuckDB's answer exactly. A WHERE that dropped a cell it should
keep, or kept one it should drop, changes the values or returns fewer rows.
"""

from __future__ import annotations

import math
import random
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import xarray as xr
import zarr

import zarrsql
from tests.places.test_top_rows_by_data_column import run_on_slabs

SHAPE, CHUNKS = (30, 7, 8), (4, 3, 3)  # edge chunks on every axis
FILL = -9999.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(11)
    t2m = (rng.standard_normal(SHAPE) * 10 + 280).astype("float32")
    t2m[rng.random(SHAPE) < 0.03] = np.nan  # written as the sentinel by xarray: NULL
    times = pd.date_range("2021-03-01", periods=SHAPE[0], freq="3h").values.copy()
    times[17] = np.datetime64("NaT")  # a NULL coordinate
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m),
            "cnt": (("time", "latitude", "longitude"), rng.integers(0, 4, SHAPE).astype("int16")),  # ties
            "u10": (("time", "latitude", "longitude"), rng.standard_normal(SHAPE)),  # unique
        },
        coords={
            "time": times,
            "latitude": np.linspace(60, 30, SHAPE[1]).astype("float32"),  # descending
            "longitude": np.arange(SHAPE[2], dtype="float64") * 1.5,
            "zone": ("longitude", np.array([1, 1, 2, 2, 3, 3, 3, 4], dtype="int32")),  # auxiliary
        },
    )
    path = Path(tmp_path_factory.mktemp("where")) / "era5.zarr"
    encoding = {
        "t2m": {"chunks": CHUNKS, "_FillValue": FILL},
        "cnt": {"chunks": CHUNKS},
        "u10": {"chunks": CHUNKS},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, encoding=encoding, zarr_format=3, consolidated=False)
    raw = zarr.open_array(path / "t2m", mode="r+")
    values = raw[...]
    values[(values != FILL) & (rng.random(SHAPE) < 0.03)] = np.nan  # stored NaN, not the sentinel
    values[2, 1, 2] = values[25, 5, 7] = np.float32(400.0)  # a tie at the top
    raw[...] = values
    return str(path)


def _oracle(path: str, nan_as_null: bool) -> duckdb.DuckDBPyConnection:
    group = zarr.open_group(path, mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = xr.open_zarr(path, consolidated=False)["time"].values.astype("datetime64[us]")
    t2m = group["t2m"][...]
    t_null = (t2m == FILL) | (np.isnan(t2m) if nan_as_null else False)
    grid = [g.ravel() for g in np.meshgrid(*[np.arange(n) for n in SHAPE], indexing="ij")]
    frame = pa.table(
        {
            "time": pa.array(times[grid[0]], mask=np.isnat(times[grid[0]])),
            "latitude": pa.array(group["latitude"][...][grid[1]]),
            "longitude": pa.array(group["longitude"][...][grid[2]]),
            "zone": pa.array(group["zone"][...][grid[2]]),
            "cnt": pa.array(group["cnt"][...].ravel()),
            "t2m": pa.array(t2m.ravel(), mask=t_null.ravel()),
            "u10": pa.array(group["u10"][...].ravel()),
        }
    )
    plain = duckdb.connect()
    plain.register("frame", frame)
    return plain


def _norm(row: tuple) -> tuple:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)


def _check(path: str, plain: duckdb.DuckDBPyConnection, sql: str, nan_as_null: bool, key: str, exact: bool) -> None:
    args = "" if nan_as_null else ", nan_as_null := false"
    with zarrsql.connect() as con:
        relation = con.sql(sql.format(T=f"read_zarr('{path}'{args})"))
        names = relation.columns
        got = relation.fetchall()
    want = plain.sql(sql.format(T="frame")).fetchall()
    if exact:
        assert [_norm(r) for r in got] == [_norm(r) for r in want], sql
        return
    assert len(got) == len(want), sql
    at = names.index(key)
    assert [_norm(r)[at] for r in got] == [_norm(r)[at] for r in want], sql
    filtered = sql.partition("{T}")[2].partition(" ORDER BY ")[0]  # [alias] WHERE ...
    kept = {_norm(r) for r in plain.sql(f"SELECT {', '.join(names)} FROM frame{filtered}").fetchall()}
    assert all(_norm(r) in kept for r in got), sql  # each row one the WHERE keeps
    if names[:3] == ["time", "latitude", "longitude"]:
        assert len({r[:3] for r in got}) == len(got), sql  # no cell twice


COLUMNS = "time, latitude, longitude, zone, cnt, t2m, u10"
# (statement, ORDER BY key, unique keys: exact answer)
CASES = [
    ("SELECT * FROM {T} WHERE time >= '2021-03-02' ORDER BY t2m DESC LIMIT 10", "t2m", False),
    ("SELECT * FROM {T} WHERE latitude BETWEEN 35 AND 50 ORDER BY t2m LIMIT 7 OFFSET 3", "t2m", False),
    (
        "SELECT * FROM {T} WHERE longitude > 3 OR time < '2021-03-01 09:00' ORDER BY t2m NULLS FIRST LIMIT 5",
        "t2m",
        False,
    ),
    ("SELECT * FROM {T} WHERE NOT (latitude > 40) ORDER BY t2m DESC NULLS FIRST LIMIT 30", "t2m", False),
    ("SELECT * FROM {T} WHERE time IS NULL ORDER BY u10 DESC LIMIT 4", "u10", True),
    ("SELECT * FROM {T} WHERE zone IN (2, 4) AND time IS NOT NULL ORDER BY cnt DESC, u10 LIMIT 12", "cnt", True),
    ("SELECT * FROM {T} x WHERE x.latitude < 45 AND x.longitude * 2 > 5 ORDER BY cnt LIMIT 9", "cnt", False),
    (f"SELECT {COLUMNS} FROM {{T}} WHERE hour(time) IN (3, 12) ORDER BY 6 DESC, 7 LIMIT 6", "t2m", True),
    ("SELECT * FROM {T} WHERE latitude > 1000 ORDER BY t2m LIMIT 3", "t2m", True),  # keeps nothing
    ("SELECT * FROM {T} WHERE longitude > NULL OR zone = 3 ORDER BY u10 LIMIT 5", "u10", True),  # NULL atoms
    (
        "SELECT * FROM {T} WHERE CASE WHEN latitude > 50 THEN NULL ELSE true END AND time < '2021-03-03' "
        "ORDER BY t2m DESC LIMIT 8",
        "t2m",
        False,
    ),
]


@pytest.mark.parametrize("nan_as_null", [True, False], ids=["nan_as_null", "nan_kept"])
@pytest.mark.parametrize(("sql", "key", "exact"), CASES)
def test_first_rows_under_a_where_are_duckdbs(store: str, sql: str, key: str, exact: bool, nan_as_null: bool) -> None:
    _check(store, _oracle(store, nan_as_null), sql, nan_as_null, key, exact)


ATOMS = [
    "time >= '2021-03-02 06:00'",
    "time < TIMESTAMP '2021-03-01 21:00'",
    "time IS NULL",
    "hour(time) % 2 = 0",
    "latitude > 45",
    "latitude <= 35",
    "latitude = 40",
    "longitude IN (0, 3, 4.5, 9)",
    "longitude / 3 >= 2",
    "zone = 3",
    "zone <> 1",
    "longitude > NULL",
]


def _random_where(rng: random.Random, depth: int = 0) -> str:
    if depth >= 2 or rng.random() < 0.4:
        return rng.choice(ATOMS)
    kind = rng.choice(["AND", "OR", "NOT"])
    if kind == "NOT":
        return f"NOT ({_random_where(rng, depth + 1)})"
    return f"({_random_where(rng, depth + 1)} {kind} {_random_where(rng, depth + 1)})"


def test_random_wheres_keep_duckdbs_rows(store: str) -> None:
    """Random AND/OR/NOT trees of conditions on every dimension, an auxiliary coordinate, a
    NULL time and conditions that are NULL: the first rows are DuckDB's."""
    rng = random.Random(5)
    plain = _oracle(store, True)
    for _ in range(40):
        where = _random_where(rng)
        order, key = rng.choice([("u10 DESC", "u10"), ("u10", "u10"), ("t2m DESC", "t2m"), ("t2m NULLS FIRST", "t2m")])
        sql = f"SELECT * FROM {{T}} WHERE {where} ORDER BY {order} LIMIT {rng.choice([1, 5, 20])}"
        _check(store, plain, sql, True, key, key == "u10")


@pytest.mark.parametrize(("where", "slabs"), [("time >= '2022-02-10'", 7), ("time < '2022-01-07' OR y = 4", 20)])
def test_other_columns_are_read_from_few_chunks(tmp_path: Path, where: str, slabs: int) -> None:
    """Chunked along time only, as ERA5 is: the ORDER BY column is read where the WHERE keeps
    cells (`slabs` of its 20 chunks), then the three data columns of at most 3 time slabs;
    the statement as written decodes the three columns of every slab the WHERE keeps."""
    got, want, tr = run_on_slabs(tmp_path, f"SELECT * FROM {{T}} WHERE {where} ORDER BY a DESC LIMIT 3")
    assert got == want  # unique values: one answer
    assert tr.chunks_decoded <= 3 + slabs + 3 * 3  # the three coordinates, read when the store opens


def test_a_where_on_a_data_variable_runs_as_written(store: str) -> None:
    plain = _oracle(store, True)
    for sql in [
        "SELECT * FROM {T} WHERE t2m > 280 ORDER BY u10 DESC LIMIT 4",
        "SELECT * FROM {T} WHERE latitude > 40 AND cnt = 2 ORDER BY u10 LIMIT 3",
        "SELECT * FROM {T} WHERE latitude > 40 ORDER BY time DESC, u10 LIMIT 3",  # a dimension key
    ]:
        _check(store, plain, sql, True, "u10", True)


def test_a_relation_fetched_after_a_coordinate_changed_gives_no_stale_rows(tmp_path: Path) -> None:
    """The cells were looked for where the WHERE kept them, by the coordinate as it was: after
    the coordinate was rewritten, fetching the relation again must fail and say to run the
    statement again, not return rows of the cells the old coordinate selected."""
    path = tmp_path / "moving.zarr"
    ds = xr.Dataset(
        {"v": (("x", "y"), np.arange(200, dtype="float64").reshape(50, 4))},
        coords={"x": np.arange(50), "y": np.arange(4)},
    )
    ds.to_zarr(path, encoding={"v": {"chunks": (5, 4)}}, zarr_format=3, consolidated=False)
    con = zarrsql.connect()
    relation = con.sql(f"SELECT * FROM read_zarr('{path}') WHERE x < 10 ORDER BY v DESC LIMIT 2")
    assert [r[2] for r in relation.fetchall()] == [39.0, 38.0]
    zarr.open_array(path / "x", mode="r+")[...] = np.arange(50)[::-1]  # x < 10 now the last rows
    with pytest.raises(duckdb.Error, match="run the statement again"):
        relation.fetchall()
    got = con.sql(f"SELECT * FROM read_zarr('{path}') WHERE x < 10 ORDER BY v DESC LIMIT 2").fetchall()
    assert [r[2] for r in got] == [199.0, 198.0]


def test_a_string_dimension_declines_before_the_column_is_read(tmp_path: Path) -> None:
    """A string (labels) dimension cannot be listed with IN: the statement runs as written,
    reading the column once, not once for the search and once more as written."""
    path = tmp_path / "st.zarr"
    rng = np.random.default_rng(0)
    a = rng.standard_normal((60, 400)).astype("float32")
    stations = np.array([f"s{i:03d}" for i in range(60)])
    times = pd.date_range("2020-01-01", periods=400, freq="h")
    with warnings.catch_warnings():  # fixed-length strings have no Zarr v3 specification yet
        warnings.simplefilter("ignore")
        xr.Dataset({"a": (("station", "time"), a)}, coords={"station": stations, "time": times}).to_zarr(
            path, encoding={"a": {"chunks": (20, 100)}}, zarr_format=3, consolidated=False
        )
    sql = "SELECT station, time, a FROM {T} WHERE time >= '2020-01-05' ORDER BY a DESC LIMIT 10"
    with zarrsql.connect() as con:
        as_written = sql.format(T=f"(SELECT * FROM read_zarr('{path}')) s")  # a subquery: never rewritten
        con.sql(as_written).fetchall()  # metadata and coordinates, read once
        with zarrsql.trace() as direct:
            got = con.sql(sql.format(T=f"read_zarr('{path}')")).fetchall()
        with zarrsql.trace() as wrapped:
            con.sql(as_written).fetchall()
    kept = times >= pd.Timestamp("2020-01-05")
    values = a[:, kept]
    order = np.argsort(-values, axis=None, kind="stable")[:10]
    assert [r[2] for r in got] == [float(v) for v in values.ravel()[order]]  # unique values
    assert direct.chunks_decoded == wrapped.chunks_decoded


def test_an_unsigned_coordinate_beyond_two_to_the_63(tmp_path: Path) -> None:
    """DuckDB 1.5 has no Arrow form for an IN list of UBIGINT values of 2**63 or more: there the
    statement runs as written (it failed with an UnsupportedError once rewritten); DuckDB 2
    lists them."""
    path = tmp_path / "u64.zarr"
    rng = np.random.default_rng(0)
    ids = np.uint64(2**63) + np.arange(50, dtype=np.uint64) * np.uint64(1000)
    v = rng.standard_normal((50, 30))
    xr.Dataset({"v": (("id", "k"), v)}, coords={"id": ids, "k": np.arange(30)}).to_zarr(
        path, encoding={"v": {"chunks": (10, 10)}}, zarr_format=3, consolidated=False
    )
    with zarrsql.connect() as con:
        got = con.sql(f"SELECT * FROM read_zarr('{path}') WHERE k < 20 ORDER BY v DESC LIMIT 5").fetchall()
    want = np.sort(v[:, :20], axis=None)[::-1][:5]
    assert [r[2] for r in got] == [float(x) for x in want]
    at = [np.argwhere(v == x)[0] for x in want]
    assert [(r[0], r[1]) for r in got] == [(int(ids[i]), int(j)) for i, j in at]
