"""WHERE on dimension columns: random predicates give exactly DuckDB's own answer, and the
scan reads exactly the work units that hold a matching row.

The oracle is DuckDB applying the same WHERE to the table xarray builds (to_dataframe),
with each row's position along every dimension attached, so the expected work units are the
distinct chunk-grid cells of the matching rows. Seeded, so a failure replays.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES


@dataclass(frozen=True)
class Case:
    store: str
    table: str
    dims: tuple[str, ...]
    variable: str
    grid: tuple[int, ...]


CASES = [
    Case("big_edge.zarr", "a_b_c", ("a", "b", "c"), "v", (3, 4, 2)),
    Case("air_temperature.zarr", "time_lat_lon", ("time", "lat", "lon"), "air", (40, 13, 27)),
    Case("mixed_chunks.zarr", "time_lat_lon", ("time", "lat", "lon"), "dTdx", (10, 13, 27)),
    Case("labels.zarr", "station_hour", ("station", "hour"), "temp", (5, 24)),
    Case("labels.zarr", "sample", ("sample",), "noise", (11,)),
    Case(
        "era5_like.zarr",
        "time_level_latitude_longitude",
        ("time", "level", "latitude", "longitude"),
        "temperature",
        (24, 4, 19, 36),
    ),
]


def oracle_frame(path: str, case: Case) -> pd.DataFrame:
    """xarray's table with the position of each row along each dimension (`_i_<dim>`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_zarr(path)
    da = ds[case.variable].transpose(*case.dims)
    df = da.to_dataframe().reset_index()
    positions = np.indices(da.shape).reshape(len(case.dims), -1)
    for k, d in enumerate(case.dims):
        df[f"_i_{d}"] = positions[k]
    if "time" in case.dims:
        df["time"] = df["time"].astype("datetime64[us]")
    return df[[*case.dims, case.variable, *[f"_i_{d}" for d in case.dims]]]


def literal(value: object) -> str:
    if isinstance(value, (np.datetime64, pd.Timestamp)):
        return f"TIMESTAMP '{pd.Timestamp(value).isoformat(sep=' ')}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return str(int(value))


def atom(rng: random.Random, dim: str, values: np.ndarray) -> str:
    pick = lambda: values[rng.randrange(len(values))]  # noqa: E731
    kind = rng.choice(["cmp", "cmp", "between", "in", "mid"])
    if kind == "between":
        lo, hi = sorted([pick(), pick()])
        return f"{dim} BETWEEN {literal(lo)} AND {literal(hi)}"
    if kind == "in":
        return f"{dim} IN ({', '.join(literal(pick()) for _ in range(rng.randint(1, 4)))})"
    op = rng.choice(["=", "!=", "<", "<=", ">", ">="])
    v = pick()
    if kind == "mid" and values.dtype.kind == "f":
        v = float(v) + 0.1  # a value between the grid points
    return f"{dim} {op} {literal(v)}"


def predicate(rng: random.Random, dims: tuple[str, ...], coords: dict[str, np.ndarray], depth: int = 0) -> str:
    roll = rng.random()
    if depth >= 2 or roll < 0.45:
        d = rng.choice(dims)
        return atom(rng, d, coords[d])
    if roll < 0.75:
        return f"({predicate(rng, dims, coords, depth + 1)} AND {predicate(rng, dims, coords, depth + 1)})"
    if roll < 0.92:
        return f"({predicate(rng, dims, coords, depth + 1)} OR {predicate(rng, dims, coords, depth + 1)})"
    return f"(NOT {predicate(rng, dims, coords, depth + 1)})"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.store}:{c.table}" for c in CASES])
def test_random_predicates_match_duckdb_and_read_exact_units(case: Case, fixture_path: Callable[[str], str]) -> None:
    path = fixture_path(case.store)
    frame = oracle_frame(path, case)
    coords = {d: np.unique(frame[d].to_numpy()) for d in case.dims}
    ref = duckdb.connect()
    ref.register("oracle", frame)
    unit = " , ".join(f"_i_{d} // {g}" for d, g in zip(case.dims, case.grid))
    cols = ", ".join([*case.dims, case.variable])
    rng = random.Random(f"{case.store}/{case.table}")
    pruned = 0
    with zarrsql.connect() as con:
        for _ in range(40):
            where = predicate(rng, case.dims, coords)
            expected = ref.sql(f"SELECT {cols} FROM oracle WHERE {where} ORDER BY ALL").fetchall()
            units = ref.sql(f"SELECT count(*) FROM (SELECT DISTINCT {unit} FROM oracle WHERE {where})").fetchall()[0][0]
            with zarrsql.trace() as t:
                got = con.sql(
                    f"SELECT {cols} FROM read_zarr('{path}', table_name := '{case.table}') WHERE {where} ORDER BY ALL"
                ).fetchall()
            assert got == expected, where
            if HAS_SOURCES:
                # exactly the units holding a matching row, and no row outside the predicate
                assert t.work_units_read == units, where
                assert t.rows == len(expected), where
                pruned += t.work_units_read < t.work_units_planned
            else:  # DuckDB 1.5: Arrow prunes by each unit's coordinate ranges (conservative)
                assert units <= t.work_units_read <= t.work_units_planned, where
                assert t.rows >= len(expected)
    if HAS_SOURCES and case.grid != tuple(len(coords[d]) for d in case.dims):
        assert pruned > 0
