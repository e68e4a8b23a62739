"""The command line, run as a user runs it: a subprocess of the installed entry point."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr

from cli_runner import console_script, run_cli


@pytest.fixture(params=["module", "script"])
def launcher(request: pytest.FixtureRequest) -> str:
    """`python -m zarrsql`, and the installed `zarrsql` script when there is one."""
    if request.param == "script" and console_script() is None:
        pytest.skip("the zarrsql console script is not installed in this environment")
    return str(request.param)


def zarrsql(*args: str, cwd: Path | None = None, launcher: str = "module") -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, launcher=launcher)


def test_demo_writes_a_store_and_queries_it(tmp_path: Path, launcher: str) -> None:
    out = zarrsql("demo", cwd=tmp_path, launcher=launcher)
    assert out.returncode == 0, out.stderr
    store = tmp_path / "zarrsql-demo.zarr"
    t2m = zarr.open_array(str(store / "t2m"), mode="r")[...]
    # the one-day box query reads only the work units it needs (on DuckDB 1.5 too, where Arrow
    # decides which units its filter may match)
    assert "work units read: 4 of 28" in out.stdout
    assert "time_lat_lon" in out.stdout
    assert f"{int(np.isfinite(t2m[:, 0, :]).sum())}" in out.stdout  # count(t2m) of the first latitude


def test_tables_metadata_and_query_formats(fixture_path: Callable[[str], str], tmp_path: Path, launcher: str) -> None:
    store = fixture_path("era5_like.zarr")
    tables = zarrsql("tables", store, "--format", "json", launcher=launcher)
    assert tables.returncode == 0, tables.stderr
    names = sorted(json.loads(line)["table_name"] for line in tables.stdout.splitlines())
    assert names == ["time_latitude_longitude", "time_level_latitude_longitude"]
    meta = zarrsql("metadata", store, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(meta.stdout)))
    assert {r["name"]: r["role"] for r in rows}["level"] == "coord"
    levels = zarr.open_array(f"{store}/level", mode="r")[...]
    q = zarrsql(
        "query", store, "SELECT DISTINCT level FROM time_level_latitude_longitude ORDER BY level", "--format", "csv"
    )
    assert q.returncode == 0, q.stderr
    assert [int(r["level"]) for r in csv.DictReader(io.StringIO(q.stdout))] == sorted(levels.tolist())
    out = tmp_path / "t.parquet"
    p = zarrsql("query", store, "SELECT * FROM time_latitude_longitude", "--format", "parquet", "--output", str(out))
    assert p.returncode == 0, p.stderr
    shape = zarr.open_array(f"{store}/2m_temperature", mode="r").shape
    assert pq.read_table(out).num_rows == int(np.prod(shape))


def test_errors_are_one_line_and_exit_1(tmp_path: Path, launcher: str) -> None:
    out = zarrsql("tables", str(tmp_path / "missing.zarr"), launcher=launcher)
    assert out.returncode == 1
    assert out.stderr.startswith("zarrsql: no Zarr store at")
    assert "Traceback" not in out.stderr
