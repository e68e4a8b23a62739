"""`zarr_sample` / `zarrsql.sample`: the points text is one
query or a table name, never other statements; `bounds :=` limits the cells a point may
match; integer points on integer axes match exactly beyond 2^53; numpy and Decimal
tolerances; float32 near-ties and float32 cells broken and found as xarray does; a pandas
frame's named index kept as columns; the repeated-value and tolerance refusals say what they
mean. Expected values from xarray's `.sel` on the same store, or from Python integers over
the raw coordinates."""

from __future__ import annotations

import decimal
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql

U64 = 2**64


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _write(path: Path, ds: xr.Dataset) -> str:
    ds.to_zarr(path, mode="w", zarr_format=2)
    return str(path)


@pytest.fixture
def grid(tmp_path) -> tuple[str, xr.Dataset]:
    ds = xr.Dataset(
        {"v": (("lat", "lon"), [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])},
        coords={"lat": [0.0, 1.0, 2.0], "lon": [0.0, 1.0]},
    )
    return _write(tmp_path / "grid.zarr", ds), ds


def _tables(con: zarrsql.Connection) -> list[str]:
    return [name for (name,) in con.sql("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]


# -- 1 and 6: the points text is one query or a table name -------------------------------------


@pytest.mark.parametrize(
    "points",
    [
        "SELECT 0.9 AS lat",
        "-- my stations\nSELECT 0.9 AS lat",
        "/* stations */ FROM st",
        "WITH s AS (SELECT 0.9 AS lat) SELECT * FROM s",
        "SELECT * FROM (VALUES (0.9)) t(lat)",
        "FROM st",
        "TABLE st",
        "(SELECT 0.9 AS lat)",
        "SELECT 0.9 AS lat;",
        "st",
        '"st"',
        "main.st",
        "memory.main.st",
        "st -- the stations",
    ],
)
def test_one_query_or_a_table_name_are_the_points(grid, con, points: str) -> None:
    path, ds = grid
    con.execute("CREATE TABLE st AS SELECT 0.9 AS lat")
    expected = ds.v.sel(lat=0.9, method="nearest")
    got = con.execute("SELECT lat, lon, v FROM zarr_sample(?, ?) ORDER BY lon", [path, points]).fetchall()
    assert got == [
        (float(expected.lat), float(lon), float(v)) for lon, v in zip(ds.lon.values, expected.values, strict=True)
    ]


@pytest.mark.parametrize(
    "points",
    [
        "SELECT 0.9 AS lat; DROP TABLE st; SELECT 0.9 AS lat",
        "SELECT 0.9 AS lat; DROP TABLE st",
        "st; DROP TABLE st",
        "st; DROP TABLE st; SELECT 0.9 AS lat",
        "DROP TABLE st",
    ],
)
def test_points_that_hold_other_statements_are_refused_and_none_runs(grid, con, points: str) -> None:
    path, _ = grid
    con.execute("CREATE TABLE st AS SELECT 0.9 AS lat")
    with pytest.raises(zarrsql.ParameterError, match=r"zarr_sample's points"):
        con.execute("SELECT * FROM zarr_sample(?, ?)", [path, points]).fetchall()
    with pytest.raises(zarrsql.ParameterError, match=r"zarr_sample's points"):
        zarrsql.sample(path, points, connection=con).fetchall()
    assert _tables(con) == ["st"]


def test_a_copy_in_the_points_writes_no_file(grid, con, tmp_path) -> None:
    path, _ = grid
    out = tmp_path / "written.csv"
    points = f"SELECT 0.9 AS lat; COPY (SELECT 42 AS secret) TO '{out}'; SELECT 0.9 AS lat"
    with pytest.raises(zarrsql.ParameterError, match=r"not one query \(SELECT, COPY, SELECT\)"):
        con.execute("SELECT * FROM zarr_sample(?, ?)", [path, points]).fetchall()
    assert not out.exists()


@pytest.mark.parametrize(
    ("points", "says"),
    [
        ("SELECT 0.9 AS lat; SELECT 1.9 AS lat", "hold 2 queries"),
        ("-- nothing but a comment", "hold no queries"),
        ("st WHERE lat > 0", "more than a table or view name"),
        ("st AS s", "more than a table or view name"),
        ("st, st AS t", "more than a table or view name"),
        ("read_csv('points.csv')", "give the query whole, e.g. 'SELECT * FROM read_csv('points.csv')'"),
        ("SELEC 0.9 AS lat", 'neither a query nor a table or view name (syntax error at or near "SELEC")'),
    ],
)
def test_points_neither_one_query_nor_a_name_are_refused(grid, con, points: str, says: str) -> None:
    path, _ = grid
    con.execute("CREATE TABLE st AS SELECT 0.9 AS lat")
    with pytest.raises(zarrsql.ParameterError, match=re.escape(says)):
        con.execute("SELECT * FROM zarr_sample(?, ?)", [path, points]).fetchall()


def _refusal(client: Any, sql: str) -> str:
    """The server's error for `sql` (which must fail)."""
    try:
        with client.cursor() as cur:
            cur.execute(sql)
            cur.fetchall()
    except Exception as err:  # noqa: BLE001 - the ADBC driver's error classes vary by version
        return str(err)
    raise AssertionError(f"the server ran {sql!r}")


def test_a_read_only_server_runs_no_statement_hidden_in_the_points(grid, tmp_path) -> None:
    pytest.importorskip("adbc_driver_flightsql.dbapi")
    from tests.server.helpers import adbc_connect

    path, _ = grid
    out = tmp_path / "written_by_client.csv"
    con = zarrsql.connect()
    con.execute("CREATE TABLE keep AS SELECT 1 AS x")
    handle = zarrsql.serve(con, port=0)
    client = adbc_connect(handle)
    try:
        for points in (
            f"SELECT 0.0 AS lat; COPY (SELECT 42 AS secret) TO ''{out}''; SELECT 0.0 AS lat",
            "SELECT 0.0 AS lat; DROP TABLE keep; SELECT 0.0 AS lat",
        ):
            assert "zarr_sample's points" in _refusal(client, f"SELECT * FROM zarr_sample('{path}', '{points}')")
        with client.cursor() as cur:
            cur.execute(f"SELECT lat, lon FROM zarr_sample('{path}', 'SELECT 0.9 AS lat') ORDER BY lon")
            assert cur.fetchall() == [(1.0, 0.0), (1.0, 1.0)]
    finally:
        client.close()
        handle.shutdown()
    assert not out.exists()
    assert _tables(con) == ["keep"]
    con.close()


# -- 2: bounds := limits the cells a point matches ---------------------------------------------


def test_with_bounds_a_point_takes_the_nearest_cell_the_bounds_keep(tmp_path, con) -> None:
    ds = xr.Dataset({"v": ("lat", [1.0, 2.0, 3.0])}, coords={"lat": [0.0, 10.0, 20.0]})
    path = _write(tmp_path / "s.zarr", ds)
    kept = ds.sel(lat=slice(-5, 12))
    for point in (16.0, 11.0, -3.0):
        cell = kept.v.sel(lat=point, method="nearest")
        got = con.sql(
            f"SELECT lat, v FROM zarr_sample('{path}', 'SELECT {point} AS lat', bounds := [['lat', '-5', '12']])"
        ).fetchall()
        assert got == [(float(cell.lat), float(cell))]
    with pytest.raises(KeyError):  # 16 is 4 from the nearest kept cell
        kept.v.sel(lat=16.0, method="nearest", tolerance=3.0)
    beyond = con.sql(
        f"SELECT lat, v FROM zarr_sample('{path}', 'SELECT 16.0 AS lat', bounds := [['lat', '-5', '12']], "
        "tolerance := 3)"
    ).fetchall()
    assert beyond == [(None, None)]


def test_with_bounds_on_a_descending_axis_of_two_dimensions(tmp_path, con) -> None:
    ds = xr.Dataset(
        {"v": (("lat", "lon"), np.arange(12.0).reshape(4, 3))},
        coords={"lat": [30.0, 20.0, 10.0, 0.0], "lon": [0.0, 5.0, 10.0]},
    )
    path = _write(tmp_path / "d.zarr", ds)
    kept = ds.sel(lat=slice(25, 5), lon=slice(4, None))
    frame = pd.DataFrame({"id": [1, 2, 3], "lat": [29.0, 1.0, 16.0], "lon": [0.0, 9.0, 2.0]})
    got = zarrsql.sample(path, frame, bounds=[["lat", "5", "25"], ["lon", "4", None]], connection=con).df()
    for row in got.itertuples():
        cell = kept.v.sel(lat=frame.lat[row.id - 1], lon=frame.lon[row.id - 1], method="nearest")
        assert (row.lat, row.lon, row.v) == (float(cell.lat), float(cell.lon), float(cell))


def test_a_value_repeated_only_outside_the_bounds_is_no_refusal(tmp_path, con) -> None:
    ds = xr.Dataset({"v": ("lat", [1.0, 2.0, 3.0, 4.0])}, coords={"lat": [0.0, 10.0, 20.0, 20.0]})
    path = _write(tmp_path / "r.zarr", ds)
    inside = (ds.lat.values >= -5) & (ds.lat.values <= 12)  # xarray's own subset keeps the index's repeats flag
    kept = xr.Dataset({"v": ("lat", ds.v.values[inside])}, coords={"lat": ds.lat.values[inside]})
    cell = kept.v.sel(lat=16.0, method="nearest")
    got = con.sql(
        f"SELECT lat, v FROM zarr_sample('{path}', 'SELECT 16.0 AS lat', bounds := [['lat', '-5', '12']])"
    ).fetchall()
    assert got == [(float(cell.lat), float(cell))]


# -- 3: integer points on integer axes, exactly --------------------------------------------------


@pytest.fixture
def ids(tmp_path) -> tuple[str, xr.Dataset]:
    cells = np.array([2**53, 2**53 + 1, 2**53 + 2, 2**62], dtype="int64")
    ds = xr.Dataset({"v": ("cell", [10.0, 11.0, 12.0, 13.0])}, coords={"cell": cells})
    return _write(tmp_path / "ids.zarr", ds), ds


def test_bigint_points_beyond_2_53_match_exactly(ids, con) -> None:
    path, ds = ids
    for point in (2**53 + 1, 2**53 + 3, 2**53 + 2**50):
        cell = ds.v.sel(cell=[point], method="nearest")
        got = con.sql(f"SELECT cell, v FROM zarr_sample('{path}', 'SELECT {point}::BIGINT AS cell')").fetchall()
        assert got == [(int(cell.cell[0]), float(cell[0]))]
    exact = ds.v.sel(cell=[2**53 + 1])
    got = con.sql(
        f"SELECT cell, v FROM zarr_sample('{path}', 'SELECT {2**53 + 1}::HUGEINT AS cell', method := 'exact')"
    ).fetchall()
    assert got == [(int(exact.cell[0]), float(exact[0]))]
    assert con.sql(
        f"SELECT v FROM zarr_sample('{path}', 'SELECT {2**53 + 3} AS cell', method := 'exact')"
    ).fetchall() == [(None,)]


def test_bigint_points_with_a_tolerance(ids, con) -> None:
    path, ds = ids
    frame = pd.DataFrame({"id": [1, 2], "cell": np.array([2**53 + 3, 2**53 + 5], dtype="int64")})
    got = zarrsql.sample(path, frame, tolerance=1, connection=con).df()
    for row in got.itertuples():
        try:
            cell = ds.v.sel(cell=[frame.cell[row.id - 1]], method="nearest", tolerance=1)
        except KeyError:
            assert pd.isna(row.v)
            continue
        assert (row.cell, row.v) == (int(cell.cell[0]), float(cell[0]))


def _nearest_python(values: list[int], target: int) -> int:
    """The nearest value by Python integers, ties to the larger (as xarray)."""
    return min(values, key=lambda v: (abs(v - target), -v))


def test_uint64_axes_and_points_of_either_sign(tmp_path, con) -> None:
    cells = np.array([U64 - 7, U64 - 2, 5, 2**63], dtype="uint64")
    ds = xr.Dataset({"v": ("cell", [1.0, 2.0, 3.0, 4.0])}, coords={"cell": cells})
    path = _write(tmp_path / "u.zarr", ds)
    values = [int(c) for c in cells]
    unsigned = np.array([U64 - 4, U64 - 5, 2**63 + 1, 2**63 - 1, U64 - 1], dtype="uint64")
    got = zarrsql.sample(path, pd.DataFrame({"cell": unsigned}), connection=con).df()
    assert [int(c) for c in got.cell] == [_nearest_python(values, int(t)) for t in unsigned]
    signed = np.array([-(2**63), -1, 3, 2**62], dtype="int64")
    got = zarrsql.sample(path, pd.DataFrame({"cell": signed}), connection=con).df()
    assert [int(c) for c in got.cell] == [_nearest_python(values, int(t)) for t in signed]
    tolerated = zarrsql.sample(path, pd.DataFrame({"cell": signed}), tolerance=2, connection=con).df()
    near = [_nearest_python(values, int(t)) for t in signed]
    assert [None if pd.isna(c) else int(c) for c in tolerated.cell] == [
        v if abs(v - int(t)) <= 2 else None for v, t in zip(near, signed, strict=True)
    ]


def test_whole_number_literals_beyond_bigint_on_a_uint64_axis(tmp_path, con) -> None:
    cells = np.array([U64 - 7, U64 - 2, 5], dtype="uint64")
    path = _write(tmp_path / "u.zarr", xr.Dataset({"v": ("cell", [1.0, 2.0, 3.0])}, coords={"cell": cells}))
    values = [int(c) for c in cells]
    for point in (U64 - 3, U64 - 2):  # DuckDB types these literals HUGEINT: a DECIMAL(38, 0) in Arrow
        got = con.sql(f"SELECT cell FROM zarr_sample('{path}', 'SELECT {point} AS cell')").fetchall()
        assert got == [(_nearest_python(values, point),)]
    exact = con.sql(f"SELECT cell FROM zarr_sample('{path}', 'SELECT {U64 - 3} AS cell', method := 'exact')")
    assert exact.fetchall() == [(None,)]
    with pytest.raises(zarrsql.ParameterError, match=r"'cell' holds whole numbers that fit neither BIGINT nor UBIGINT"):
        con.sql(f"SELECT cell FROM zarr_sample('{path}', 'SELECT {U64 + 10} AS cell', method := 'exact')").fetchall()


def test_an_integer_point_beyond_2_53_on_a_float_axis(tmp_path, con) -> None:
    ds = xr.Dataset({"v": ("x", [1.0, 2.0])}, coords={"x": [float(2**53), float(2**53 + 4)]})
    path = _write(tmp_path / "f.zarr", ds)
    cell = ds.v.sel(x=2**53 + 1, method="nearest")
    got = con.sql(f"SELECT x, v FROM zarr_sample('{path}', 'SELECT {2**53 + 1}::BIGINT AS x')").fetchall()
    assert got == [(float(cell.x), float(cell))]


@pytest.mark.parametrize("axis", ["int8", "int32", "int64", "uint8", "uint32", "uint64"])
@pytest.mark.parametrize("points", ["int64", "uint64", "int32"])
def test_integer_matching_equals_python_integers(axis: str, points: str) -> None:
    from zarrsql.plan.sampling import match

    rng = np.random.default_rng(len(axis) * 7 + len(points))
    own, theirs = np.iinfo(axis), np.iinfo(points)

    def draw(info: Any, n: int) -> list[int]:
        ends = [info.min, info.min + 1, info.max - 1, info.max, 0, 1, -1 if info.min < 0 else 2]
        spread = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=np.dtype(info.dtype)).tolist()
        return [*ends, *spread]

    values = sorted(set(draw(own, 6)))
    targets = draw(theirs, 12)
    for method, tolerance in (("nearest", None), ("nearest", 2.5), ("nearest", 1e19), ("exact", None)):
        got = match(
            np.array(values, dtype=axis), None, np.array(targets, dtype=points), method=method, tolerance=tolerance
        )
        for t, position in zip(targets, got.tolist(), strict=True):
            nearest = min(range(len(values)), key=lambda i: (abs(values[i] - t), -values[i]))  # ties: the larger
            gap = abs(values[nearest] - t)
            matches = gap == 0 if method == "exact" else tolerance is None or gap <= tolerance
            assert position == (nearest if matches else -1), (axis, points, t, method, tolerance)


# -- 4: numpy numbers and Decimals as tolerances ----------------------------------------------------


@pytest.fixture
def f32(tmp_path) -> tuple[str, xr.Dataset]:
    lat = np.array([0.0, 0.5, 1.0], dtype="float32")
    ds = xr.Dataset({"v": ("lat", [1.0, 2.0, 3.0])}, coords={"lat": lat})
    return _write(tmp_path / "f32.zarr", ds), ds


@pytest.mark.parametrize(
    "tolerance",
    [np.float32(0.25), np.float64(0.05), np.int64(1), np.int32(0), decimal.Decimal("0.25"), decimal.Decimal("0.05")],
)
def test_numpy_and_decimal_tolerances_are_numbers(f32, con, tolerance: Any) -> None:
    path, ds = f32
    points = [0.6, 0.9]
    expected: list[float | None] = []
    for p in points:
        try:
            expected.append(float(ds.v.sel(lat=p, method="nearest", tolerance=float(tolerance))))
        except KeyError:
            expected.append(None)
    frame = pd.DataFrame({"lat": points})
    for given in (tolerance, {"lat": tolerance}):
        got = zarrsql.sample(path, frame, tolerance=given, connection=con).df()
        assert [None if pd.isna(v) else v for v in got.v] == expected


def test_a_tolerance_of_another_type_is_a_parameter_error(f32, con) -> None:
    path, _ = f32
    with pytest.raises(zarrsql.ParameterError, match=r"tolerance= must be a number.*got a object"):
        zarrsql.sample(path, pd.DataFrame({"lat": [0.6]}), tolerance=object(), connection=con)


# -- 5: float32 near-ties, and float32 cells with long shortest texts --------------------------------


def test_float32_near_ties_go_where_xarray_sends_them(tmp_path, con) -> None:
    lat = np.array([11.13, 9.7, 7.19, 5.14, 2.24, -0.68, -2.77, -3.81], dtype="float32")
    ds = xr.Dataset({"v": ("lat", np.arange(8.0))}, coords={"lat": lat})
    path = _write(tmp_path / "tie.zarr", ds)
    ordered = np.sort(lat.astype(float))
    points = [0.78, *((ordered[1:] + ordered[:-1]) / 2).tolist(), -0.5, 12.0]
    got = zarrsql.sample(path, pd.DataFrame({"id": range(len(points)), "lat": points}), connection=con).df()
    assert got.lat.tolist() == [float(ds.lat.sel(lat=p, method="nearest")) for p in points]


def test_a_float32_tolerance_is_compared_as_xarray_compares_it(f32, con) -> None:
    path, ds = f32
    points = [0.6, 0.35, 0.75]
    expected: list[float | None] = []
    for p in points:
        try:
            expected.append(float(ds.v.sel(lat=p, method="nearest", tolerance=0.1)))
        except KeyError:
            expected.append(None)
    got = zarrsql.sample(path, pd.DataFrame({"lat": points}), tolerance=0.1, connection=con).df()
    assert [None if pd.isna(v) else v for v in got.v] == expected


def test_a_float32_cell_with_a_long_shortest_text_is_read(tmp_path, con) -> None:
    lat = np.array([-0.46, -3.39], dtype="float32")  # -0.46000000834465027 as a float64
    ds = xr.Dataset({"v": ("lat", [1.0, 2.0])}, coords={"lat": lat})
    path = _write(tmp_path / "long.zarr", ds)
    points = [2.4, -1.0, -3.0]
    got = zarrsql.sample(path, pd.DataFrame({"lat": points}), connection=con).df()
    assert got.v.tolist() == [float(ds.v.sel(lat=p, method="nearest")) for p in points]


# -- 7: a pandas frame's index ------------------------------------------------------------------------


@pytest.fixture
def stations() -> pd.DataFrame:
    return pd.DataFrame({"name": ["Oslo", "Rome"], "lat": [0.9, 2.2], "lon": [0.1, 0.8]})


def test_a_named_index_stays_a_column(grid, con, stations) -> None:
    path, ds = grid
    got = zarrsql.sample(path, stations.set_index("name"), connection=con).df()
    assert got.columns.tolist() == ["name", "point_lat", "point_lon", "lat", "lon", "v"]
    for row in got.itertuples():
        station = stations[stations.name == row.name].iloc[0]
        assert row.v == float(ds.v.sel(lat=station.lat, lon=station.lon, method="nearest"))


def test_points_indexed_by_their_dimensions_are_matched_on_them(grid, con, stations) -> None:
    path, ds = grid
    got = zarrsql.sample(path, stations.set_index(["lat", "lon"]), connection=con).df()
    assert got.columns.tolist() == ["point_lat", "point_lon", "name", "lat", "lon", "v"]
    assert got.v.tolist() == [float(ds.v.sel(lat=s.lat, lon=s.lon, method="nearest")) for s in stations.itertuples()]


def test_an_unnamed_index_is_no_column(grid, con, stations) -> None:
    path, _ = grid
    filtered = stations[stations.lat > 1.0]  # its index holds the row number 1
    got = zarrsql.sample(path, filtered, connection=con).df()
    assert got.columns.tolist() == ["name", "point_lat", "point_lon", "lat", "lon", "v"]


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (pd.DataFrame(index=pd.RangeIndex(2)), "the points have no columns"),
        (pd.DataFrame([[0.9, 1.0]], columns=["lat", "lat"]), "two columns named 'lat'"),
        (pd.DataFrame([[0.9, 1.0]], columns=["lat", "LAT"]), "two columns named 'LAT'"),
        (pd.DataFrame({"lat": [0.9]}, index=pd.Index([0.9], name="lat")), "two columns named 'lat'"),
    ],
)
def test_frames_without_usable_columns_are_refused(grid, con, frame: pd.DataFrame, says: str) -> None:
    path, _ = grid
    with pytest.raises(zarrsql.ParameterError, match=re.escape(says)):
        zarrsql.sample(path, frame, connection=con).fetchall()


def test_a_points_query_repeating_a_column_name_is_refused(grid, con) -> None:
    path, _ = grid
    with pytest.raises(zarrsql.ParameterError, match=r"two columns named 'lat'"):
        con.sql(f"SELECT * FROM zarr_sample('{path}', 'SELECT 0.9 AS lat, 2.0 AS lat')").fetchall()


# -- 8 and wordings: what the refusals say -------------------------------------------------------------


def test_a_repeated_time_is_named_as_a_time(tmp_path, con) -> None:
    times = pd.DatetimeIndex([pd.Timestamp("2000-01-01"), pd.Timestamp("2000-01-01"), pd.Timestamp("2000-01-02 06:30")])
    path = _write(tmp_path / "t.zarr", xr.Dataset({"v": ("time", [1.0, 2.0, 3.0])}, coords={"time": times}))
    with pytest.raises(zarrsql.ParameterError) as caught:
        zarrsql.sample(path, pd.DataFrame({"time": [times[0]]}), connection=con).fetchall()
    message = str(caught.value)
    assert f"repeats the coordinate value {times[0]}," in message  # pandas writes 2000-01-01 00:00:00
    assert str(times[0].value // 1000) not in message


def test_a_list_tolerance_is_named_as_a_list(grid, con) -> None:
    path, _ = grid
    with pytest.raises(zarrsql.ParameterError) as caught:
        con.sql(f"SELECT * FROM zarr_sample('{path}', 'SELECT 0.9 AS lat', tolerance := [1, 2])").fetchall()
    message = str(caught.value)
    assert "tolerance := [1, 2] is a list" in message
    assert "give a number" in message
    assert "an interval such as '1 hour'" in message
    assert "MAP {" in message
    assert "is an interval" not in message


@pytest.mark.parametrize("lat_name", ["LAT", "Lat", '"lAt"'])
def test_a_point_column_names_a_dimension_ignoring_case(grid, con, lat_name: str) -> None:
    """`LAT` is the dimension `lat`, as SQL reads identifiers. Before, it was renamed
    `point_LAT` but never matched, and the point came back once per latitude (found by a
    hunter). The oracle: xarray's nearest selection."""
    path, ds = grid
    con.execute(f"CREATE OR REPLACE TABLE stations AS SELECT 'a' AS name, 1.2::DOUBLE AS {lat_name}, 0.9::DOUBLE AS lon")
    rows = con.sql(f"SELECT * FROM zarr_sample('{path}', 'stations')").fetchall()
    expected = ds.sel(lat=1.2, lon=0.9, method="nearest")
    assert rows == [("a", 1.2, 0.9, float(expected.lat), float(expected.lon), float(expected.v))]
    columns = con.sql(f"SELECT * FROM zarr_sample('{path}', 'stations')").columns
    assert columns == ["name", f"point_{lat_name.strip(chr(34))}", "point_lon", "lat", "lon", "v"]
