"""A session's low `max_expression_depth` and zarrsql's rewrites.

A rewrite (a count answered from the plan, GROUP BY computed by the scan, join keys as IN
lists, the hottest cells bounded) nests a few levels deeper than the statement as written.
At the lowest depth where `read_zarr` itself still binds, and a little above, those statements
failed with DuckDB's binder error; now the statement runs as written. The oracle is plain
DuckDB under the same setting over an Arrow table of zarr-python's arrays.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr
import zarr

import zarrsql

QUERIES = [
    "SELECT count(*) FROM {t} WHERE t > 3",
    "SELECT min(t), max(x) FROM {t}",
    "SELECT * FROM {t} ORDER BY v DESC, t, x LIMIT 3",
    "SELECT * FROM {t} WHERE t > 10 ORDER BY v DESC, t, x LIMIT 3",
    "SELECT t, avg(v) FROM {t} GROUP BY t ORDER BY t LIMIT 3",
    "SELECT * FROM {t} ORDER BY x, t LIMIT 3",
    "SELECT a.t, a.x, a.v FROM {t} a JOIN (SELECT 3 AS t) b USING (t) ORDER BY a.v LIMIT 2",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("depth") / "d.zarr"
    values = np.random.default_rng(3).random((50, 40))
    ds = xr.Dataset({"v": (("t", "x"), values)}, coords={"t": np.arange(50), "x": np.arange(40.0)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, encoding={"v": {"chunks": (10, 8)}})
    return path


def _arrow(path: Path) -> pa.Table:
    group = zarr.open_group(path, mode="r")
    t, x, v = (np.asarray(group[n][...]) for n in ("t", "x", "v"))
    tt, xx = np.meshgrid(t, x, indexing="ij")
    return pa.table({"t": tt.ravel(), "x": xx.ravel(), "v": v.ravel()})


@pytest.fixture(scope="module")
def shallowest(store: Path) -> int:
    """The lowest depth at which `read_zarr` as written binds (12 on DuckDB 2, 14 on 1.5)."""
    for depth in range(8, 40):
        con = zarrsql.connect()
        con.execute(f"SET max_expression_depth = {depth}")
        try:
            con.sql(f"SELECT count(v) FROM read_zarr('{store}')").fetchall()
        except (duckdb.BinderException, duckdb.ParserException) as err:  # 1.5 meets it while parsing too
            assert "Max expression depth" in str(err)
            continue
        return depth
    raise AssertionError("read_zarr binds at no depth below 40")


def _rounded(rows: list[tuple]) -> list[tuple]:
    """Sums in another order differ in the last bit: compared to 12 significant digits."""
    return [tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in row) for row in rows]


@pytest.mark.parametrize("more", [0, 4])
@pytest.mark.parametrize("query", QUERIES)
def test_rewritten_statements_run_as_written_when_too_deep(store: Path, shallowest: int, more: int, query: str) -> None:
    depth = shallowest + more
    plain = duckdb.connect()
    plain.register("z", _arrow(store))
    con = zarrsql.connect()
    for c in (plain, con):
        c.execute(f"SET max_expression_depth = {depth}")
    expected = _rounded(plain.sql(query.format(t="z")).fetchall())
    got = _rounded(con.sql(query.format(t=f"read_zarr('{store}')")).fetchall())
    assert got == expected
    con.execute(f"CREATE TABLE answer AS {query.format(t=f'read_zarr({chr(39)}{store}{chr(39)})')}")
    assert _rounded(con.sql("SELECT * FROM answer").fetchall()) == expected  # execute() takes the same way
