"""Data types at the edges of what SQL holds, end to end through DuckDB, against oracles.

- NumPy datetime64 / timedelta64 values whose microseconds leave DuckDB's TIMESTAMP range or
  int64 read as NULL, never wrapped; timedelta64 in months or years read as whole months
  (zarr-python reads the stored values; the expectation is computed from them with Python
  integers, and DuckDB's own TIMESTAMP limits are asked of DuckDB).
- A 0-d string coordinate (xarray's scalar coordinate) is a column on every row, as in
  xarray's `to_dataframe`.
- A Zarr v3 fixed-length bytes fill value is base64 text, as zarr-python reads it.
- A 0-d array named by a `coordinates` attribute has the role `aux_coord`, as documented.
"""

from __future__ import annotations

import warnings

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.engine import grouped

REWRITTEN = "__zarrsql_grouped_"  # the name of the relation a statement rewritten by the scan reads
INT64_MAX = 2**63 - 1


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _quietly_create(group: zarr.Group, name: str, values: np.ndarray, **kwargs) -> None:
    """Write an array whose v3 data type zarr-python warns has no stable specification yet."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        group.create_array(name, shape=values.shape, dtype=values.dtype, **kwargs)[...] = values


def _stored(path, name: str) -> np.ndarray:
    """The array as zarr-python reads it: the oracle's input."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        return zarr.open_array(str(path), path=name, mode="r")[...]


def _duckdb_row(sql: str) -> tuple:
    """One row of a statement run by plain DuckDB (no zarrsql)."""
    with duckdb.connect() as plain:
        row = plain.execute(sql).fetchone()
    assert row is not None
    return row


def _timestamp_limits() -> tuple[int, int]:
    """DuckDB's smallest and largest finite TIMESTAMP, in microseconds since 1970."""
    row = _duckdb_row(
        "SELECT epoch_us('290309-12-22 (BC) 00:00:00'::TIMESTAMP), epoch_us('294247-01-10 04:00:54.775806'::TIMESTAMP)"
    )
    return int(row[0]), int(row[1])


def _expected_micros(stored: np.ndarray) -> list[int | None]:
    """Microseconds since 1970 of each datetime64 value, None where DuckDB has no TIMESTAMP
    for it: exact Python integers for fixed-length units; numpy's calendar for years, which
    it converts exactly once the year is known to be in range."""
    low, high = _timestamp_limits()
    unit, count = np.datetime_data(stored.dtype)
    out: list[int | None] = []
    for v in stored.view(np.int64).tolist():
        if v == -(2**63):  # NaT
            out.append(None)
            continue
        if unit == "Y":
            year = 1970 + v * count
            # 1 January of the year: in range from the year after 290309 BC (astronomical
            # -290308, whose 1 January precedes DuckDB's 22 December) to 294247
            in_range = -290308 < year <= 294247
            out.append(int(np.datetime64(v, "Y").astype("M8[us]").astype(np.int64)) if in_range else None)
            continue
        micros = v * count * int(np.timedelta64(1, unit).astype("m8[us]").astype(np.int64))
        out.append(micros if low <= micros <= high else None)
    return out


DATETIME_CASES = {
    # the reproducers' values (year ~146 billion; ~5.4 million; 300,000) beside ordinary ones
    # and the last and first day-unit values on either side of DuckDB's limits
    "s": [2**62, 0, -(2**62), 1_700_000_000, -(2**63)],
    "D": [2_000_000_000, 0, -2_000_000_000, 106_751_991, 106_751_992, -106_751_991, -106_751_992],
    "Y": [300_000, 54, -300_000, 292_277, 292_278, -292_277, -292_278],
}


@pytest.mark.parametrize("unit", list(DATETIME_CASES))
def test_datetime64_outside_the_timestamp_range_reads_null_not_wrapped(con, tmp_path, unit):
    values = np.array(DATETIME_CASES[unit], dtype=np.int64).view(f"M8[{unit}]")
    root = zarr.open_group(str(tmp_path / "t.zarr"), mode="w", zarr_format=3)
    root.create_array("t", shape=values.shape, dtype=values.dtype, chunks=(3,))[...] = values
    expected = _expected_micros(_stored(tmp_path / "t.zarr", "t"))
    got = con.sql(
        f"SELECT epoch_us(t) FROM read_zarr('{tmp_path / 't.zarr'}', array_path := 't') ORDER BY dim_0"
    ).fetchall()
    assert [r[0] for r in got] == expected


@pytest.mark.parametrize(
    ("unit", "values"),
    [
        ("D", [123_456_789, 1, -123_456_789, 106_751_991, -106_751_991]),
        ("W", [20_000_000, 3, -20_000_000, 15_250_284, 15_250_285]),
    ],
)
def test_timedelta64_whose_microseconds_overflow_reads_null_not_wrapped(con, tmp_path, unit, values):
    stored_values = np.array(values, dtype=f"m8[{unit}]")
    root = zarr.open_group(str(tmp_path / "d.zarr"), mode="w", zarr_format=3)
    root.create_array("d", shape=stored_values.shape, dtype=stored_values.dtype, chunks=(2,))[...] = stored_values
    stored = _stored(tmp_path / "d.zarr", "d")
    per_unit = 86_400_000_000 * (7 if unit == "W" else 1)  # microseconds in a day or a week
    # an INTERVAL's microseconds are an int64; Python's timedelta holds every such duration
    expected = [
        td if abs(v * per_unit) <= INT64_MAX else None
        for v, td in zip(stored.view(np.int64).tolist(), stored.astype(object).tolist(), strict=True)
    ]
    got = con.sql(f"SELECT d FROM read_zarr('{tmp_path / 'd.zarr'}', array_path := 'd') ORDER BY dim_0").fetchall()
    assert [r[0] for r in got] == expected


@pytest.mark.parametrize(("unit", "months_per_unit"), [("M", 1), ("Y", 12)])
def test_timedelta64_in_months_or_years_reads_whole_months(con, tmp_path, unit, months_per_unit):
    stored_values = np.array([1, 12, -5, 0, 2**31, -(2**63)], dtype=np.int64).view(f"m8[{unit}]")
    root = zarr.open_group(str(tmp_path / "m.zarr"), mode="w", zarr_format=3)
    root.create_array("m", shape=stored_values.shape, dtype=stored_values.dtype, chunks=(4,))[...] = stored_values
    stored = _stored(tmp_path / "m.zarr", "m")
    months = [None if np.isnat(v) else int(v.astype(np.int64)) * months_per_unit for v in stored]
    # DuckDB spells the interval of that many months; beyond an int32 of months there is none
    expected = [
        None if m is None or abs(m) > 2**31 - 1 else _duckdb_row(f"SELECT (INTERVAL ({m}) MONTH)::VARCHAR")[0]
        for m in months
    ]
    got = con.sql(
        f"SELECT m::VARCHAR, typeof(m) FROM read_zarr('{tmp_path / 'm.zarr'}', array_path := 'm') ORDER BY dim_0"
    ).fetchall()
    assert [r[0] for r in got] == expected
    assert {r[1] for r in got} == {"INTERVAL"}


def test_scan_aggregates_skip_out_of_range_times(con, tmp_path, monkeypatch):
    """min, max and count computed inside the scan see the NULLs, not wrapped numbers:
    (2**62 + k) seconds wraps to k seconds in int64 microseconds (2**62 * 10**6 is a multiple
    of 2**64), so a wrapped value would be the maximum here."""
    monkeypatch.setattr(grouped, "MIN_ROWS", 0)  # a store this small is left to DuckDB otherwise
    path = tmp_path / "agg.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("x", shape=(6,), dtype="int64", chunks=(2,), dimension_names=["x"])[...] = np.arange(6)
    seconds = np.array([2**62 + 400 * 86_400, 86_400, -(2**63), 0, -(2**62) - 86_400, 3_600], dtype=np.int64)
    times = seconds.view("M8[s]")
    root.create_array("t", shape=(6,), dtype=times.dtype, chunks=(2,), dimension_names=["x"])[...] = times
    weeks = np.array([20_000_000, 3, 1, -20_000_000, 2, 5], dtype="m8[W]")
    root.create_array("w", shape=(6,), dtype=weeks.dtype, chunks=(2,), dimension_names=["x"])[...] = weeks

    kept_times = [m for m in _expected_micros(_stored(path, "t")) if m is not None]
    stored_weeks = _stored(path, "w").astype(np.int64)
    kept_weeks = [int(v) * 7 * 86_400_000_000 for v in stored_weeks if abs(int(v) * 7 * 86_400_000_000) <= INT64_MAX]
    rel = con.sql(f"SELECT min(t), max(t), count(t), min(w), max(w), count(w) FROM read_zarr('{path}')")
    (got,) = rel.fetchall()
    assert REWRITTEN in rel.sql_query()  # computed by the scan
    expected = _duckdb_row(
        f"SELECT make_timestamp({min(kept_times)}), make_timestamp({max(kept_times)}), {len(kept_times)}, "
        f"to_microseconds({min(kept_weeks)}), to_microseconds({max(kept_weeks)}), {len(kept_weeks)}"
    )
    assert got == expected


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_scalar_string_coordinate_is_a_column_on_every_row(con, tmp_path, zarr_format):
    path = tmp_path / "s.zarr"
    ds = xr.Dataset({"v": ("x", np.arange(3.0))}, coords={"x": [1, 2, 3], "label": "abc"})
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        ds.to_zarr(path, zarr_format=zarr_format, consolidated=False)
        expected = (
            xr.open_zarr(path, consolidated=False).to_dataframe().reset_index()[["x", "label", "v"]].values.tolist()
        )
    got = con.sql(f"SELECT x, label, v FROM read_zarr('{path}') ORDER BY x").fetchall()
    assert [list(r) for r in got] == expected
    filtered = con.sql(f"SELECT x FROM read_zarr('{path}') WHERE label = 'abc' ORDER BY x").fetchall()
    assert [r[0] for r in filtered] == [row[0] for row in expected]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_fixed_bytes_fill_value_of_missing_chunks_is_decoded(con, tmp_path, zarr_format):
    path = tmp_path / "b.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        arr = root.create_array("sb", shape=(4,), chunks=(2,), dtype="S3", fill_value=b"q")
        arr[0:2] = [b"a", b"b"]  # the second chunk is never written: it reads as the fill value
    expected = [v.decode() for v in _stored(path, "sb").tolist()]
    got = con.sql(f"SELECT sb FROM read_zarr('{path}', array_path := 'sb') ORDER BY dim_0").fetchall()
    assert [r[0] for r in got] == expected


def test_a_0d_array_named_by_coordinates_has_the_aux_coord_role(con, tmp_path):
    path = tmp_path / "r.zarr"
    ds = xr.Dataset(
        {"v": ("x", np.arange(3.0)), "g": ((), 9.81)},  # g: a 0-d data variable, named by nothing
        coords={"x": [1, 2, 3], "height": 2.0},  # height: xarray's scalar coordinate
    )
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    opened = xr.open_zarr(path, consolidated=False)
    assert "height" in opened.coords
    assert "g" in opened.data_vars
    roles = dict(con.sql(f"SELECT name, role FROM read_zarr_metadata('{path}')").fetchall())
    # the user guide's table: a 0-d array a `coordinates` attribute names is an aux_coord, else a scalar
    assert roles["height"] == "aux_coord"
    assert roles["g"] == "scalar"
    got = con.sql(f"SELECT x, height, v FROM read_zarr('{path}') ORDER BY x").fetchall()
    assert [list(r) for r in got] == opened[["v"]].to_dataframe().reset_index()[["x", "height", "v"]].values.tolist()


def test_array_path_on_a_0d_array_says_where_a_scalar_is_read(con, tmp_path):
    path = tmp_path / "z.zarr"
    xr.Dataset({"v": ("x", np.arange(3.0)), "g": ((), 9.81)}, coords={"x": [1, 2, 3]}).to_zarr(
        path, zarr_format=3, consolidated=False
    )
    assert float(xr.open_zarr(path, consolidated=False).g) == 9.81  # xarray reads it: it is a real value
    with pytest.raises(zarrsql.UnsupportedError, match="0-dimensional scalar.*coordinates attribute.*xarray"):
        con.sql(f"SELECT * FROM read_zarr('{path}', array_path := 'g')").fetchall()
