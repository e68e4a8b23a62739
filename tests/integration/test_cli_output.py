"""What `zarrsql` writes: bounded tables with the true count, formats taken from file names,
files as DuckDB's own COPY writes them, SQL from standard input, SHOW TABLES, --version,
and stores without named tables. Each run is a real subprocess; expected values come from
zarr-python, ome-zarr-py's arrays and a plain DuckDB connection."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import zarr

import zarrsql
from cli_runner import cli_env, command, run_cli

SURFACE = "time_latitude_longitude"  # the fixture's 3-D table (named by its dimensions)


@pytest.fixture(scope="module")
def era5(fixture_path: Callable[[str], str]) -> str:
    return fixture_path("era5_like.zarr")


def _body_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("├")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return [[c.strip() for c in line.strip("│").split("│")] for line in lines[start:end]]


def _footer(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1].strip()


def test_a_large_table_shows_first_and_last_rows_with_the_true_count(era5: str) -> None:
    shape = zarr.open_array(f"{era5}/2m_temperature", mode="r").shape
    lon = zarr.open_array(f"{era5}/longitude", mode="r")[...]
    out = run_cli("query", era5, f"SELECT * FROM {SURFACE}")
    assert out.returncode == 0, out.stderr
    assert _footer(out.stdout) == f"{int(np.prod(shape))} rows (40 shown)"
    rows = _body_rows(out.stdout)
    assert len(rows) == 40 + 3  # 20 first, three rows of dots, 20 last
    assert rows[20] == rows[21] == rows[22] == ["·"] * 6
    # rows run time, latitude, longitude (C order): the first 20 and last 20 longitudes
    assert [float(r[2]) for r in rows[:20]] == [float(v) for v in np.resize(lon, 20)]
    assert [float(r[2]) for r in rows[23:]] == [float(v) for v in np.resize(lon, shape[0] * shape[1] * shape[2])[-20:]]


def test_max_rows_bounds_the_table(era5: str) -> None:
    levels = zarr.open_array(f"{era5}/level", mode="r")[...]
    out = run_cli(
        "query", era5, "SELECT DISTINCT level FROM time_level_latitude_longitude ORDER BY level", "--max-rows", "3"
    )
    assert out.returncode == 0, out.stderr
    rows = _body_rows(out.stdout)
    expected = sorted(levels.tolist())
    assert [int(r[0]) for r in rows[:2]] == expected[:2]  # ceil(3 / 2) first rows
    assert [int(r[0]) for r in rows[5:]] == expected[-1:]
    assert _footer(out.stdout) == f"{len(expected)} rows (3 shown)"
    small = run_cli("query", era5, "SELECT DISTINCT level FROM time_level_latitude_longitude", "--max-rows", "10")
    assert _footer(small.stdout) == f"{len(expected)} rows"


#: Runs the command's main() and reports its own peak memory (VmHWM: this process's, unlike
#: a child's ru_maxrss, which on Linux starts from the parent's size at fork).
_PEAK = (
    "import sys\n"
    "from zarrsql.cli import main\n"
    "status = main(sys.argv[1:])\n"
    "print(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')), file=sys.stderr)\n"
    "sys.exit(status)\n"
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads peak memory from /proc")
def test_a_huge_result_is_counted_while_streaming(era5: str) -> None:
    """100 million rows: holding them would take over 800 MB; streaming holds a few batches."""
    n = 100_000_000
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, "query", era5, f"SELECT range AS i FROM range({n})"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert _footer(out.stdout) == f"{n} rows (40 shown)"
    assert _body_rows(out.stdout)[-1] == [str(n - 1)]
    peak_kb = int(out.stderr.split("VmHWM:")[1].split()[0])
    assert peak_kb < 600 * 1024, f"peak memory {peak_kb} KB"


@pytest.mark.parametrize(
    ("name", "fmt"), [("out.csv", "csv"), ("out.json", "json"), ("out.parquet", "parquet"), ("out.csv.gz", "csv")]
)
def test_output_format_follows_the_extension(era5: str, tmp_path: Path, name: str, fmt: str) -> None:
    levels = sorted(zarr.open_array(f"{era5}/level", mode="r")[...].tolist())
    target = tmp_path / name
    sql = "SELECT DISTINCT level FROM time_level_latitude_longitude ORDER BY level"
    out = run_cli("query", era5, sql, "--output", str(target))
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    got = duckdb.sql(f"SELECT * FROM '{target}'").fetchall()  # DuckDB reads each format back
    assert [r[0] for r in got] == levels
    head = target.read_bytes()[:4]
    assert (head == b"PAR1") == (fmt == "parquet")
    assert (head[:2] == b"\x1f\x8b") == name.endswith(".gz")
    if fmt == "json":
        assert [json.loads(line)["level"] for line in target.read_text().splitlines()] == levels


def test_explicit_format_wins_over_the_extension(era5: str, tmp_path: Path) -> None:
    target = tmp_path / "result.txt"
    out = run_cli("query", era5, "SELECT 1 AS one", "--output", str(target), "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert target.read_text() == "one\n1\n"
    table = tmp_path / "table.txt"
    assert run_cli("query", era5, "SELECT 1 AS one", "--output", str(table)).returncode == 0
    assert _body_rows(table.read_text()) == [["1"]]


def test_files_are_written_as_duckdb_copy_writes_them(era5: str, tmp_path: Path) -> None:
    """Lists, quoted text and times in csv and json are DuckDB's, not Python's repr."""
    levels = np.sort(zarr.open_array(f"{era5}/level", mode="r")[...])
    dims = list(zarr.open_array(f"{era5}/temperature", mode="r").metadata.dimension_names)
    sql = (
        "SELECT level, [level, level * 2] AS pair, 'a, \"b\"' AS text, TIMESTAMP '2020-01-01 06:00:00' AS t "
        "FROM (SELECT DISTINCT level FROM time_level_latitude_longitude) ORDER BY level"
    )
    oracle = duckdb.connect()
    oracle.register("levels", pa.table({"level": pa.array(levels)}))
    for fmt in ("csv", "json"):
        got = run_cli("query", era5, sql, "--format", fmt)
        assert got.returncode == 0, got.stderr
        expected = tmp_path / f"expected.{fmt}"
        header = ", HEADER" if fmt == "csv" else ""
        oracle.execute(
            f"COPY ({sql.replace('(SELECT DISTINCT level FROM time_level_latitude_longitude)', 'levels')}) "
            f"TO '{expected}' (FORMAT {fmt}{header})"
        )
        assert got.stdout == expected.read_text()
    tables = run_cli("tables", era5, "--format", "csv")
    row = next(
        r for r in csv.DictReader(io.StringIO(tables.stdout)) if r["table_name"] == "time_level_latitude_longitude"
    )
    assert row["dims"] == oracle.sql("SELECT CAST(? AS VARCHAR[])::VARCHAR", params=[dims]).fetchall()[0][0]


def test_standard_output_appends_to_a_redirected_file(era5: str, tmp_path: Path) -> None:
    """`>> log.csv` keeps what the file held (COPY to /dev/stdout would truncate it)."""
    target = tmp_path / "log.csv"
    target.write_text("earlier line\n")
    with open(target, "a") as stdout:
        proc = subprocess.run(
            [*command(), "query", era5, "SELECT 7 AS n", "--format", "csv"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == "earlier line\nn\n7\n"


def test_sql_from_standard_input(era5: str) -> None:
    shape = zarr.open_array(f"{era5}/2m_temperature", mode="r").shape
    out = run_cli("query", era5, "-", "--format", "json", stdin=f"SELECT count(*) AS n FROM {SURFACE};\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"n": int(np.prod(shape))}


def test_show_tables_lists_no_internal_names(era5: str) -> None:
    sql = f"SELECT count(*) FROM {SURFACE}; SELECT count(*) FROM read_zarr('{era5}', table_name := '{SURFACE}'); "
    show = run_cli("query", era5, sql + "SHOW TABLES")
    assert show.returncode == 0, show.stderr
    assert sorted(r[0] for r in _body_rows(show.stdout)) == [SURFACE, "time_level_latitude_longitude"]
    every = run_cli("query", era5, sql + "SHOW ALL TABLES", "--format", "csv")
    assert every.returncode == 0, every.stderr
    names = [r["name"] for r in csv.DictReader(io.StringIO(every.stdout))]
    assert sorted(names) == [SURFACE, "time_level_latitude_longitude"]
    assert "__zarrsql_" not in show.stdout + every.stdout


def test_version() -> None:
    out = run_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"zarrsql {zarrsql.__version__} (DuckDB {version('duckdb')})"


def test_statements_without_a_result_print_nothing(era5: str) -> None:
    out = run_cli("query", era5, "CREATE TABLE t AS SELECT 1 AS a; INSERT INTO t VALUES (2)")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


@pytest.fixture(scope="module")
def pyramid(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str], list[np.ndarray]]:
    """A two-level OME-Zarr image written by ome-zarr-py: its levels have no table names."""
    from ome_zarr import writer as ome_writer

    path = str(tmp_path_factory.mktemp("ome") / "cells.ome.zarr")
    data = np.random.default_rng(5).integers(0, 4000, (2, 3, 16, 12), dtype="uint16")
    levels = [data, np.ascontiguousarray(data[:, :, ::2, ::2])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(path, mode="w", zarr_format=3)
        ome_writer.write_multiscale(levels, root, axes="czyx")
    attrs = dict(zarr.open_group(path, mode="r").attrs)
    paths = [d["path"] for d in (attrs.get("multiscales") or attrs["ome"]["multiscales"])[0]["datasets"]]
    return path, paths, levels


def test_query_runs_on_a_store_without_named_tables(pyramid: tuple[str, list[str], list[np.ndarray]]) -> None:
    path, paths, levels = pyramid
    sql = f"SELECT count(*) AS n, sum(value) AS total FROM read_zarr('{path}', array_path := '{paths[1]}')"
    out = run_cli("query", path, sql, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"n": levels[1].size, "total": int(levels[1].sum())}


def test_a_table_name_on_such_a_store_explains_why_it_is_missing(
    pyramid: tuple[str, list[str], list[np.ndarray]],
) -> None:
    path, _, _ = pyramid
    out = run_cli("query", path, "SELECT * FROM c_z_y_x")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "has no named tables, so nothing was mounted" in out.stderr
    assert "array_path :=" in out.stderr


def test_explain_prints_the_plan_as_drawn(era5: str) -> None:
    out = run_cli("query", era5, f'EXPLAIN SELECT avg("2m_temperature") FROM {SURFACE} WHERE latitude > 50')
    assert out.returncode == 0, out.stderr
    assert "explain_value" not in out.stdout  # not a table of (key, value) cells
    assert "Projection" in out.stdout
    assert len(out.stdout.splitlines()) > 5
