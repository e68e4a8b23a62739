"""Every failure of the `zarrsql` command is one `zarrsql: ...` message on standard error and
a non-zero status, never a traceback: bad paths, bad SQL, bad options, a chunk that fails to
decode in the middle of a stream, and Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr

from cli_runner import assert_one_error, cli_env, command, run_cli


@pytest.fixture(scope="module")
def era5(fixture_path: Callable[[str], str]) -> str:
    return fixture_path("era5_like.zarr")


@pytest.fixture(scope="module")
def late_corruption(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Eight chunks of 50,000 values; the last chunk's bytes are garbage, so a full read
    fails after streaming most of the rows."""
    path = tmp_path_factory.mktemp("corrupt") / "late.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    v = root.create_array("v", shape=(400_000,), chunks=(50_000,), dtype="float64", dimension_names=["i"])
    v[:] = np.arange(400_000.0)
    (path / "v" / "c" / "7").write_bytes(b"not a zstd frame")
    return str(path)


def test_missing_store(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.zarr")
    for args in (["tables", missing], ["metadata", missing], ["query", missing, "SELECT 1"]):
        out = run_cli(*args)
        assert out.returncode == 1
        assert_one_error(out, "no Zarr store at", "missing.zarr")


def test_output_into_a_missing_folder(era5: str, tmp_path: Path) -> None:
    target = tmp_path / "nowhere" / "x.csv"
    out = run_cli("query", era5, "SELECT 1", "--output", str(target))
    assert_one_error(out, "--output", "does not exist")
    assert not target.parent.exists()


def test_output_onto_a_folder(era5: str, tmp_path: Path) -> None:
    out = run_cli("query", era5, "SELECT 1", "--output", str(tmp_path), "--format", "csv")
    assert_one_error(out, "is a folder")


def test_unknown_output_extension_names_the_choices(era5: str, tmp_path: Path) -> None:
    out = run_cli("query", era5, "SELECT 1", "--output", str(tmp_path / "x.xlsx"))
    assert_one_error(out, "x.xlsx", ".csv", ".json", ".parquet", "--format")
    assert not (tmp_path / "x.xlsx").exists()


def test_parquet_needs_a_file(era5: str) -> None:
    assert_one_error(run_cli("query", era5, "SELECT 1", "--format", "parquet"), "--output")


def test_bad_sql(era5: str) -> None:
    out = run_cli("query", era5, "SELEC level FROM time_level_latitude_longitude")
    assert out.returncode == 1
    assert_one_error(out, "Parser Error", "SELEC")


def test_unknown_table(era5: str) -> None:
    assert_one_error(run_cli("query", era5, "SELECT * FROM no_such_table"), "no_such_table")


def test_empty_sql_on_standard_input(era5: str) -> None:
    assert_one_error(run_cli("query", era5, "-", stdin="  \n"), "no SQL given", "standard input")


def test_only_comments(era5: str) -> None:
    assert_one_error(run_cli("query", era5, "-- nothing here"), "no statement")


def test_demo_onto_a_file(tmp_path: Path) -> None:
    target = tmp_path / "existing_file"
    target.write_text("keep me\n")
    assert_one_error(run_cli("demo", "--path", str(target)), "is a file")
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_a_chunk_failing_mid_stream_is_reported_as_itself(late_corruption: str, fmt: str) -> None:
    out = run_cli("query", late_corruption, "SELECT * FROM i", "--format", fmt)
    assert out.returncode == 1
    assert_one_error(out, "could not be decoded", "'v'")
    assert "__zarrsql_" not in out.stderr  # the scan's own message, not DuckDB's wrapping


def test_bad_max_rows_is_a_usage_error(era5: str) -> None:
    out = run_cli("query", era5, "SELECT 1", "--max-rows", "0")
    assert out.returncode == 2
    assert "--max-rows" in out.stderr
    assert "Traceback" not in out.stderr


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the query start")
def test_interrupt_exits_130_without_traceback(era5: str) -> None:
    # 32832 ** 3 rows: never ends in the test's time
    sql = "SELECT count(*) FROM time_latitude_longitude a, time_latitude_longitude b, time_latitude_longitude c"
    proc = subprocess.Popen(
        [*command(), "query", era5, sql], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env()
    )
    deadline = time.monotonic() + 60
    # the command's thread, then DuckDB's: the query is under way
    while proc.poll() is None and _threads(proc.pid) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)  # DuckDB is asked to stop; no waiting for the join
    assert proc.returncode == 130
    assert stdout == ""
    assert stderr == "zarrsql: interrupted\n"
