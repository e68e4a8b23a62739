"""`zarrsql serve --safe`: clients reach the mounted stores and nothing else of the server's
files. Without it a query can read any file the server's user can (`read_csv('/etc/...')`,
`read_zarr('/other/store')`, docs/server.md); with it the server turns DuckDB's external
access off after mounting, keeping the stores' folders (and `--allow-directory`) open, and
zarrsql's own readers and writers obey that as DuckDB's do. Checked with a real ADBC client
against a real `zarrsql serve` process, with `--allow-writes` so that the refusals are the
file rules' and not the read-only policy's.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import xarray as xr

from tests.cli_runner import cli_env, run_cli
from tests.server.helpers import Stores, adbc_connect


def _store(path: Path, values: np.ndarray) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.Dataset({"v": (("x",), values)}, coords={"x": np.arange(len(values))}).to_zarr(path)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> SimpleNamespace:
    """A CSV file, a store outside every allowed folder, and one in a folder --allow-directory opens."""
    (tmp_path / "private").mkdir()
    csv = tmp_path / "private" / "secret.csv"
    csv.write_text("a,b\n1,2\n")
    (tmp_path / "extra").mkdir()
    return SimpleNamespace(
        root=tmp_path,
        csv=csv,
        store=_store(tmp_path / "private" / "other.zarr", np.arange(4.0)),
        extra=_store(tmp_path / "extra" / "more.zarr", np.arange(5.0) * 2),
    )


@pytest.fixture
def safe_server(stores: Stores, outside: SimpleNamespace) -> Iterator[Any]:
    command = [
        sys.executable, "-m", "zarrsql", "serve", "--safe", "--allow-writes", "--no-auth", "--port", "0",
        "--mount", f"cells={stores.cells}", "--allow-directory", str(outside.root / "extra"),
    ]  # fmt: skip
    with open(outside.root / "err", "w") as err:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, env=cli_env())
        try:
            assert process.stdout is not None
            listening = process.stdout.readline()
            assert "read-write; safe; cells" in listening, (outside.root / "err").read_text()
            port = int(listening.split("127.0.0.1:")[1].split()[0])
            handle = SimpleNamespace(port=port, location=f"grpc://127.0.0.1:{port}", token=None)
            with adbc_connect(handle, token=None) as con:
                yield con
        finally:
            process.terminate()
            process.wait(10)
            process.stdout.close()


def _refusal(con: Any, sql: str) -> str:
    with con.cursor() as cur:
        try:
            cur.execute(sql)
            cur.fetchall()
        except Exception as err:  # the ADBC error carrying the server's message
            return str(err)
    return ""


def _rows(con: Any, sql: str) -> list[tuple[Any, ...]]:
    with con.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_clients_reach_the_mounted_stores_and_nothing_else(
    safe_server: Any, stores: Stores, outside: SimpleNamespace
) -> None:
    assert _rows(safe_server, "SELECT count(*) FROM cells.obs") == [(len(stores.cell_types),)]
    assert "Permission Error" in _refusal(safe_server, f"SELECT * FROM read_csv('{outside.csv}')")
    assert "enable_external_access = false" in _refusal(safe_server, f"SELECT * FROM read_zarr('{outside.store}')")
    assert "enable_external_access = false" in _refusal(
        safe_server, f"SELECT * FROM read_zarr_tables('{outside.store}')"
    )
    target = outside.root / "private" / "written.zarr"
    message = _refusal(safe_server, f"COPY (SELECT 1 AS x, 2.0 AS v) TO '{target}' (FORMAT zarr, DIMS (x))")
    assert "cannot write" in message
    assert not target.exists()
    assert "Cannot enable external access" in _refusal(safe_server, "SET enable_external_access = true")
    assert _refusal(safe_server, f"SET allowed_directories = ['{outside.root}']") != ""
    got = _rows(safe_server, f"SELECT sum(v) FROM read_zarr('{outside.extra}')")  # --allow-directory
    assert got == [(float(np.sum(np.arange(5.0) * 2)),)]


def test_allow_directory_needs_safe(tmp_path: Path) -> None:
    result = run_cli("serve", "--port", "0", "--no-auth", "--allow-directory", str(tmp_path), timeout=60)
    assert result.returncode == 1
    assert "add --safe" in result.stderr
    assert "Traceback" not in result.stderr
