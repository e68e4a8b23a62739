"""Edges of what `zarrsql` writes and how it stops: a table shows each value as DuckDB's own
CAST to VARCHAR (types Arrow would change included) with control characters escaped; `.txt`
output compresses as its extension says and `.parquet.gz` is refused; a table that cannot be
read is left out of the mount with a note; Ctrl-C leaves no half-written demo store and, while
the SQL is read from standard input, prints one message; STORE arguments the command cannot
read get messages that say why.

Each run is a real subprocess of the command. Expected values come from a plain DuckDB
connection's CAST, xarray, and gzip / zstandard decompression.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr
import zstandard

from cli_runner import assert_one_error, cli_env, command, run_cli


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`v(x)` = 0.5 * x for x in 0..999, one table named `x`."""
    path = tmp_path_factory.mktemp("edges") / "s.zarr"
    xr.Dataset({"v": (("x",), np.arange(1000) * 0.5)}, coords={"x": np.arange(1000)}).to_zarr(path, mode="w")
    return str(path)


def _body_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("├")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return [[c.strip() for c in line.strip("│").split("│")] for line in lines[start:end]]


def _duckdb_texts(select: str) -> list[tuple[str | None, ...]]:
    """The oracle: DuckDB's own CAST(... AS VARCHAR) of every column, on a plain connection."""
    con = duckdb.connect()
    columns = con.sql(select).columns
    casts = ", ".join(f"CAST(#{i} AS VARCHAR)" for i in range(1, len(columns) + 1))
    return con.sql(f"SELECT {casts} FROM ({select})").fetchall()


#: Types Arrow changes (UHUGEINT wraps, BIT becomes bytes, TIMETZ loses its offset, HUGEINT
#: and nested values), and types it carries exactly, side by side.
TYPED = (
    "340282366920938463463374607431768211455::UHUGEINT AS uh_max, "
    "170141183460469231731687303715884105728::UHUGEINT AS uh_2_127, "
    "-170141183460469231731687303715884105727::HUGEINT AS hi, "
    "'101'::BIT AS bits, TIMETZ '12:00:00+03' AS ttz, "
    "[340282366920938463463374607431768211455::UHUGEINT] AS uh_list, "
    "{'t': TIMETZ '01:02:03-05:30'} AS st, INTERVAL 40 HOURS AS iv, "
    "'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::UUID AS u, "
    "true AS b, -7::TINYINT AS i8, -300::SMALLINT AS i16, -70000::INTEGER AS i32, -2::BIGINT AS i64, "
    "255::UTINYINT AS u8, 65535::USMALLINT AS u16, 4294967295::UINTEGER AS u32, "
    "18446744073709551615::UBIGINT AS u64, 'text' AS s, TIMESTAMPTZ '2024-01-01 12:00:00+02' AS tz, "
    "1.25::FLOAT AS f, 123.456::DECIMAL(9,3) AS d, DATE '2024-02-29' AS dt, TIME '23:59:59.5' AS tm, "
    "TIMESTAMP '2024-01-01 12:00:00.123456' AS ts, TIMESTAMP_NS '2024-01-01 00:00:00.000000001' AS tsn, "
    "'\\xAA\\x00'::BLOB AS bl"
)


def test_each_value_shows_as_duckdbs_cast_to_text(store: str) -> None:
    out = run_cli("query", store, f"SELECT {TYPED}, v FROM x WHERE x = 3")
    assert out.returncode == 0, out.stderr
    [expected] = _duckdb_texts(f"SELECT {TYPED}, 1.5::DOUBLE AS v")  # v at x = 3 is 0.5 * 3
    assert _body_rows(out.stdout) == [list(expected)]


def test_first_and_last_rows_and_the_count_with_a_column_cast_by_duckdb(store: str) -> None:
    big = "340282366920938463463374607431768211455::UHUGEINT - x::UHUGEINT"
    out = run_cli("query", store, f"SELECT x, v, {big} AS big FROM x ORDER BY x", "--max-rows", "6")
    assert out.returncode == 0, out.stderr
    values = xr.open_zarr(store)["v"].values
    shown = [0, 1, 2, values.size - 3, values.size - 2, values.size - 1]
    select = " UNION ALL ".join(
        f"SELECT {i} AS x, {float(values[i])!r}::DOUBLE AS v, {big} AS big FROM (SELECT {i} AS x)" for i in shown
    )
    expected = [list(r) for r in _duckdb_texts(f"SELECT * FROM ({select}) ORDER BY x")]
    assert _body_rows(out.stdout) == expected[:3] + [["·"] * 3] * 3 + expected[3:]
    assert out.stdout.rstrip().endswith(f"{values.size} rows (6 shown)")


def test_control_characters_in_values_are_escaped(store: str) -> None:
    # chr(27) starts ANSI sequences, chr(13) returns to the line's start, chr(7) rings the bell
    sql = (
        "SELECT chr(27) || '[31mred' || chr(27) || '[0m' AS ansi, 'over' || chr(13) || 'written' AS cr, "
        "'a' || chr(9) || 'b' || chr(10) || 'c' || chr(7) AS mixed, chr(8238) || 'txet' AS bidi"
    )
    out = run_cli("query", store, sql)
    assert out.returncode == 0, out.stderr
    for raw in ("\x1b", "\r", "\t", "\x07", "\u202e"):
        assert raw not in out.stdout
    assert _body_rows(out.stdout) == [[r"\x1b[31mred\x1b[0m", r"over\rwritten", r"a\tb\nc\x07", r"\u202etxet"]]


@pytest.mark.parametrize(("suffix", "decompress"), [(".gz", gzip.decompress), (".zst", zstandard.decompress)])
def test_a_txt_table_is_compressed_as_its_name_says(
    store: str, tmp_path: Path, suffix: str, decompress: object
) -> None:
    sql = "SELECT x, v FROM x WHERE x < 3 ORDER BY x"
    plain, packed = tmp_path / "t.txt", tmp_path / f"t.txt{suffix}"
    for target in (plain, packed):
        out = run_cli("query", store, sql, "--output", str(target))
        assert out.returncode == 0, out.stderr
    assert callable(decompress)
    text = decompress(packed.read_bytes()).decode("utf-8")
    assert text == plain.read_text(encoding="utf-8")
    values = xr.open_zarr(store)["v"].values[:3]
    assert [float(r[1]) for r in _body_rows(text)] == values.tolist()


@pytest.mark.parametrize("name", ["r.parquet.gz", "r.parquet.zst", "r.PARQUET.GZ"])
def test_a_compressed_parquet_name_is_refused(store: str, tmp_path: Path, name: str) -> None:
    target = tmp_path / name
    out = run_cli("query", store, "SELECT * FROM x", "--output", str(target))
    assert_one_error(out, name, "parquet compresses inside the file", "COMPRESSION zstd")
    assert not target.exists()
    out = run_cli("query", store, "SELECT * FROM x", "--output", str(target), "--format", "parquet")
    assert_one_error(out, "parquet compresses inside the file")


@pytest.fixture(scope="module")
def complex_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Table `x` holds a complex array (unreadable) beside `t`; table `y` is readable."""
    path = tmp_path_factory.mktemp("complex") / "cplx.zarr"
    xr.Dataset(
        {
            "t": (("x",), np.array([1.5, 2.5, 3.5])),
            "z": (("x",), np.array([1 + 2j, 3 + 4j, 5 + 6j])),
            "w": (("y",), np.array([10.0, 20.0])),
        },
        coords={"x": [10, 20, 30], "y": [0, 1]},
    ).to_zarr(path, mode="w")
    return str(path)


def test_a_table_that_cannot_be_read_is_left_out_with_a_note(complex_store: str) -> None:
    out = run_cli("query", complex_store, "SELECT 1 AS one", "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["one", "1"]
    assert out.stderr.startswith("zarrsql: note: table x is not mounted")
    assert "complex128" in out.stderr
    assert "array_path :=" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_rest_of_the_store_still_reads(complex_store: str) -> None:
    ds = xr.open_zarr(complex_store)
    read_t = f"SELECT t FROM read_zarr('{complex_store}', array_path := 't') ORDER BY x"
    out = run_cli("query", complex_store, read_t, "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert [float(v) for v in out.stdout.split()[1:]] == ds["t"].values.tolist()
    out = run_cli("query", complex_store, "SELECT sum(w) AS s FROM y", "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[1]) == float(ds["w"].values.sum())


def test_an_unsupported_url_scheme_says_so(tmp_path: Path) -> None:
    for args in (["tables", "ftp://host/y.zarr"], ["query", "ftp://host/y.zarr", "SELECT 1"]):
        out = run_cli(*args)
        assert_one_error(out, "ftp://", "not supported", "s3://", "https://")
        assert "does not exist" not in out.stderr


def test_an_empty_store_argument_says_so() -> None:
    for args in (["tables", ""], ["metadata", " "], ["query", "", "SELECT 1"]):
        out = run_cli(*args)
        assert_one_error(out, "STORE is empty")


#: Commands interrupted at once: the input closing right after Ctrl-C (as when the shell
#: feeding it stops too) used to race the interrupt, giving a second message in about half
#: the runs; with this many, a race shows.
RUNS = 8


def test_ctrl_c_while_reading_sql_from_stdin_prints_one_message(store: str) -> None:
    procs = [
        subprocess.Popen(
            [*command(), "query", store, "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        for _ in range(RUNS)
    ]
    time.sleep(5.0)  # started, and waiting for SQL that has not come
    for proc in procs:
        assert proc.poll() is None
        assert proc.stdin is not None
        proc.send_signal(signal.SIGINT)
        proc.stdin.close()
    results = []
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stderr is not None
        results.append((proc.wait(timeout=30), proc.stdout.read(), proc.stderr.read()))
        proc.stdout.close()
        proc.stderr.close()
    assert results == [(130, "", "zarrsql: interrupted\n")] * RUNS


def _interrupt_when_staging(target: Path, after: float) -> tuple[int, str]:
    """Run `demo`, send SIGINT `after` seconds once its staging folder appears."""
    proc = subprocess.Popen(
        [*command("script"), "demo", "--path", str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if any(n.startswith(".zarrsql-demo-") for n in os.listdir(target.parent)):
            break
        time.sleep(0.002)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


@pytest.mark.parametrize("after", [0.0, 0.05, 0.15])
def test_an_interrupted_demo_leaves_no_staging_folder(tmp_path: Path, after: float) -> None:
    target = tmp_path / "demo.zarr"
    status, stderr = _interrupt_when_staging(target, after)
    assert status == 130, stderr
    assert stderr == "zarrsql: interrupted\n"
    left = sorted(os.listdir(tmp_path))
    assert left in ([], ["demo.zarr"]), left
    if left:  # the store was complete before the interrupt: it is the demo's, whole
        ds = xr.open_zarr(target)
        assert ds.attrs.get("zarrsql_demo") == 1
        assert set(ds.data_vars) == {"t2m", "precip"}
