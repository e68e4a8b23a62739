"""Running the `zarrsql` command as a user runs it: a subprocess, on this checkout's code.

`PYTHONPATH` points at this checkout's `src`, so both `python -m zarrsql` and the installed
console script (whose interpreter finds `zarrsql` on that path first) run the code under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    env.pop("ZARRSQL_TRACEBACK", None)
    return env


def console_script() -> str | None:
    """The installed `zarrsql` script beside this interpreter (or on PATH), if there is one."""
    beside = Path(sys.executable).with_name("zarrsql")
    return str(beside) if beside.exists() else shutil.which("zarrsql")


def command(launcher: str = "module") -> list[str]:
    if launcher == "module":
        return [sys.executable, "-m", "zarrsql"]
    script = console_script()
    assert script is not None, "the zarrsql console script is not installed"
    return [script]


def run_cli(
    *args: str, cwd: Path | str | None = None, stdin: str | None = None, launcher: str = "module", timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command(launcher), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        input=stdin,
        env=cli_env(),
        timeout=timeout,
    )


def assert_one_error(out: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """A failed run as the command line promises it: status != 0, nothing on stdout, and one
    `zarrsql: ...` message on stderr naming `fragments`, without a traceback."""
    assert out.returncode != 0, out.stdout
    assert out.stdout == ""
    assert out.stderr.startswith("zarrsql: "), out.stderr
    assert out.stderr.count("zarrsql: ") == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    for fragment in fragments:
        assert fragment in out.stderr, out.stderr
