"""`zarrsql serve` as users run it: it prints where it listens and a generated token once,
serves mounted stores to an ADBC client with that token, and refuses bad options in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runner import cli_env, run_cli
from tests.server.helpers import Stores


def test_serve_prints_a_generated_token_that_clients_use(stores: Stores, tmp_path: Path) -> None:
    import adbc_driver_flightsql.dbapi as flightsql
    from adbc_driver_flightsql import DatabaseOptions

    command = [sys.executable, "-m", "zarrsql", "serve", "--mount", f"cells={stores.cells}", "--port", "0"]
    with open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True, env=cli_env())
        try:
            assert process.stdout is not None
            listening, token_line, hint = (process.stdout.readline() for _ in range(3))
            assert "read-only; cells" in listening
            assert "Bearer <token>" in hint
            token = token_line.split("token (shown once): ")[1].strip()
            port = int(listening.split("127.0.0.1:")[1].split()[0])
            kwargs = {DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}"}
            url = f"grpc://127.0.0.1:{port}"
            with flightsql.connect(url, db_kwargs=kwargs, autocommit=True) as con, con.cursor() as cur:
                cur.execute("SELECT count(*) FROM cells.obs")
                assert cur.fetchone() == (len(stores.cell_types),)
        finally:
            process.terminate()
            process.wait(10)
            process.stdout.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--token-file", "/nonexistent/token"], "cannot read the token file '/nonexistent/token'"),
        (["--tls-cert", "cert.pem"], "TLS needs both --tls-cert FILE and --tls-key FILE"),
        (["--mount", "cells=/nonexistent/cells.zarr"], "/nonexistent/cells.zarr"),
    ],
)
def test_serve_refuses_bad_options_in_one_line(args: list[str], message: str) -> None:
    result = run_cli("serve", "--port", "0", *args, timeout=60)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_usage_errors(tmp_path: Path) -> None:
    result = run_cli("serve", "--mount", "no-equals-sign", timeout=60)
    assert result.returncode == 2
    assert "expected NAME=STORE" in result.stderr
    result = run_cli("serve", "--no-auth", "--token-file", str(tmp_path / "t"), timeout=60)
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr


def test_a_port_in_use_is_a_clear_error(server: object) -> None:
    result = run_cli("serve", "--no-auth", "--port", str(server.port), timeout=60)  # type: ignore[attr-defined]
    assert result.returncode == 1
    assert "cannot listen on 127.0.0.1:" in result.stderr
    assert "Traceback" not in result.stderr
