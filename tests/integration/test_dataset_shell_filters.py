"""Filters DuckDB hands a scan, checked against DuckDB on a pandas copy of xarray's reading.

On DuckDB 1.5 the scan is a pyarrow dataset shell: the filter arrives as an opaque Arrow
expression, which prunes work units through Arrow's fragment guarantees and is then applied
to every streamed batch (`engine/dataset.py`). On DuckDB 2.x the same statements run through
the scan source; the rows must be the same either way.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql

DUCKDB_1 = duckdb.__version__.startswith("1.")
BIG = np.array([0, 2**63, 5, 2**64 - 1, 7, 2**63 + 3], dtype="u8")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("shell")
    big = folder / "u64.zarr"
    xr.Dataset({"b": (("big",), np.arange(len(BIG), dtype="float64"))}, coords={"big": BIG}).to_zarr(
        big, mode="w", encoding={"b": {"chunks": (2,)}, "big": {"chunks": (2,)}}
    )
    rng = np.random.default_rng(7)
    v = rng.normal(size=(6, 5, 4))
    v[v > 1.2] = np.nan
    grid = folder / "grid.zarr"
    xr.Dataset(
        {"v": (("time", "station", "level"), v)},
        coords={
            "time": pd.date_range("2021-03-27", periods=6, freq="12h"),
            "station": ["oslo", "rome", "bern", "nice", "lyon"],
            "level": np.array([1000, 850, 500, 250], dtype="int32"),
        },
    ).to_zarr(grid, mode="w", zarr_format=2, encoding={"v": {"chunks": (2, 2, 2)}})
    return {"big": str(big), "grid": str(grid)}


def _oracle(path: str, where: str) -> list[tuple]:
    frame = xr.open_zarr(path).to_dataframe().reset_index()  # noqa: F841 - read by DuckDB by name
    plain = duckdb.connect()
    plain.execute("SET TimeZone = 'UTC'")
    return sorted(plain.sql(f"SELECT * FROM frame {where}").fetchall(), key=repr)


def _ours(path: str, columns: list[str], where: str) -> list[tuple]:
    con = zarrsql.connect()
    con.execute("SET TimeZone = 'UTC'")
    select = ", ".join(columns)
    return sorted(con.sql(f"SELECT {select} FROM read_zarr('{path}') {where}").fetchall(), key=repr)


@pytest.mark.parametrize(
    "where",
    [
        "WHERE big IN (0, 5)",
        "WHERE big = 5",
        "WHERE big NOT IN (0, 7)",
        f"WHERE big >= {2**63}",
        f"WHERE big IN ({2**63}, {2**64 - 1})",
        "WHERE big BETWEEN 1 AND 10",
    ],
)
def test_unsigned_64_bit_dimension_past_2_63(stores: dict[str, str], where: str) -> None:
    if DUCKDB_1 and "IN (9223372036854775808" in where:
        # DuckDB 1.5's own conversion of such an IN list to an Arrow filter overflows, for any
        # pyarrow dataset; an error, never wrong rows
        import pyarrow as pa
        import pyarrow.dataset as pads

        plain = pads.dataset(pa.table({"big": pa.array(BIG)}))  # noqa: F841 - read by DuckDB by name
        with pytest.raises(duckdb.Error, match="too large"):
            duckdb.connect().sql(f"SELECT * FROM plain {where}").fetchall()
        with pytest.raises(zarrsql.UnsupportedError, match=r"DuckDB 1\.5.*2\^63"):
            _ours(stores["big"], ["big", "b"], where)
        return
    assert _ours(stores["big"], ["big", "b"], where) == _oracle(stores["big"], where)


@pytest.mark.parametrize(
    "where",
    [
        "WHERE v > 0.5",
        "WHERE v IS NULL",
        "WHERE v IS NOT NULL AND level IN (850, 250)",
        "WHERE station IN ('rome', 'nice') AND v < 0",
        "WHERE station = 'bern' OR level = 1000",
        "WHERE time >= TIMESTAMP '2021-03-28 00:00:00' AND v <> 0",
        "WHERE time BETWEEN DATE '2021-03-27' AND TIMESTAMP '2021-03-28 12:00:00' AND station > 'lyon'",
        "WHERE isnan(v) OR v IS NULL",
    ],
)
def test_filters_on_data_and_dimensions(stores: dict[str, str], where: str) -> None:
    ours = _ours(stores["grid"], ["time", "station", "level", "v"], where)
    assert ours == _oracle(stores["grid"], where)
    assert ours  # each filter keeps some rows: an empty answer would prove little


def test_a_limit_of_a_filtered_scan_gives_matching_rows(stores: dict[str, str]) -> None:
    con = zarrsql.connect()
    rows = con.sql(f"SELECT station, v FROM read_zarr('{stores['grid']}') WHERE v > 0.2 LIMIT 3").fetchall()
    frame = xr.open_zarr(stores["grid"]).to_dataframe().reset_index()
    allowed = {(s, v) for s, v in zip(frame.station, frame.v, strict=True) if v > 0.2}
    assert len(rows) == 3 and set(rows) <= allowed
