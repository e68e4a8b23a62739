"""Bad input found by trying the library as users do: each is a clear ZarrSQLError (or a
one-line command-line message), never a crash, a traceback or a table missing a column."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from cli_runner import assert_one_error, cli_env, run_cli


def _write(path: Path, **variables: np.ndarray) -> Path:
    ds = xr.Dataset({k: (("x",), v) for k, v in variables.items()}, coords={"x": np.arange(len(next(iter(variables.values()))))})
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    return path


def test_codecs_without_an_array_to_bytes_codec_are_a_metadata_error(tmp_path: Path) -> None:
    store = _write(tmp_path / "s.zarr", a=np.arange(4.0))
    doc = store / "a" / "zarr.json"
    meta = json.loads(doc.read_text())
    meta["codecs"] = [{"name": "zstd", "configuration": {"level": 0, "checksum": False}}]
    doc.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="ArrayBytesCodec"):  # the oracle: zarr-python refuses it too
        zarr.open_array(str(store / "a"))[:]
    with pytest.raises(zarrsql.MetadataError, match="array-to-bytes"):
        zarrsql.connect().execute(f"SELECT sum(a) FROM read_zarr('{store}')").fetchall()
    out = run_cli("query", str(store), "SELECT sum(a) FROM x")
    assert_one_error(out, "cannot be read", "(a)")


def test_a_damaged_variable_refuses_its_group_instead_of_vanishing(tmp_path: Path) -> None:
    store = _write(tmp_path / "s.zarr", a=np.arange(5.0), b=np.arange(5.0) * 2)
    (store / "b" / "zarr.json").write_text('{"shape": [5')
    with pytest.raises(json.JSONDecodeError):  # the oracle: xarray cannot open the dataset
        xr.open_zarr(store, consolidated=False)
    con = zarrsql.connect()
    with pytest.raises(zarrsql.MetadataError, match="'/b'"):
        con.execute(f"SELECT * FROM read_zarr('{store}')").fetchall()
    # the readable array still reads by its path
    got = con.execute(f"SELECT a FROM read_zarr('{store}', array_path := 'a') ORDER BY x").fetchall()
    assert [r[0] for r in got] == zarr.open_array(str(store / "a"))[:].tolist()


def test_the_command_line_says_when_arrays_give_no_table(tmp_path: Path) -> None:
    store = _write(tmp_path / "s.zarr", air=np.arange(3.0))
    (store / "air" / "zarr.json").write_text('{"shape": [3')
    listed = run_cli("tables", str(store))
    assert listed.returncode == 0
    assert "cannot be read" in listed.stderr and "air" in listed.stderr and "Traceback" not in listed.stderr
    out = run_cli("query", str(store), "SELECT * FROM x")
    assert_one_error(out, "cannot be read", "air")


@pytest.mark.parametrize("name", ["information_schema", "pg_catalog"])
def test_a_store_named_like_a_duckdb_schema_is_queried_unqualified(tmp_path: Path, name: str) -> None:
    store = _write(tmp_path / f"{name}.zarr", a=np.arange(3.0))
    out = run_cli("query", str(store), "SELECT count(*) AS n, sum(a) AS s FROM x", "--format", "csv")
    assert out.returncode == 0, out.stderr
    values = zarr.open_array(str(store / "a"))[:]
    header, row = out.stdout.split()
    assert header == "n,s"
    assert [float(v) for v in row.split(",")] == [values.size, float(values.sum())]


def test_progress_off_draws_no_bar_on_a_terminal(tmp_path: Path) -> None:
    """DuckDB draws its bar only on a terminal: run the command under a pseudo-terminal."""
    pty = pytest.importorskip("pty")
    store = _write(tmp_path / "s.zarr", a=np.arange(3.0))
    env = {**cli_env(), "ZARRSQL_PROGRESS": "0"}
    # a query long enough for DuckDB's bar (it waits 2 s), on a terminal as stdout
    sql = "SELECT count(*) FROM range(300000000) r, x WHERE r.range % 7 = x.x"
    import subprocess
    import sys

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zarrsql", "query", str(store), sql], stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(leader)
    text = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, text
    assert "%" not in text and "▕" not in text, text


def test_python_api_mistakes_are_parameter_errors(tmp_path: Path) -> None:
    store = _write(tmp_path / "s.zarr", a=np.arange(3.0))
    con = zarrsql.connect()
    with pytest.raises(zarrsql.ZarrSQLError, match="reserved"):
        zarrsql.mount(con, str(store), "main")
    with pytest.raises(zarrsql.ZarrSQLError, match="view_names"):
        zarrsql.mount(con, str(store), "m", view_names=["x"])
    with pytest.raises(zarrsql.ZarrSQLError, match="connection object"):
        zarrsql.read_zarr(str(store), connection="con")
    with pytest.raises(zarrsql.ZarrSQLError, match="connection object"):
        zarrsql.mount("con", str(store), "m2")
    # the connection's own database is still a mount target with existing=True
    zarrsql.mount(con, str(store), "memory", existing=True)
    assert con.sql("SELECT count(*) FROM memory.x").fetchall() == [(3,)]


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused(tmp_path: Path, value: str) -> None:
    store = _write(tmp_path / "s.zarr", a=np.arange(3.0))
    with pytest.raises(zarrsql.ZarrSQLError, match="finite number"):
        zarrsql.connect().execute(
            f"SELECT count(*) FROM read_zarr('http://127.0.0.1:9/{store.name}', storage_options := MAP {{'timeout': '{value}'}})"
        ).fetchall()
