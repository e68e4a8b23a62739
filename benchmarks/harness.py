"""What every benchmark script needs around its measurements: the children's environment, a
warm page cache, and a record of the machine and the package versions. Standard library only
at import, so a child that times its own imports can load it first."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYCACHE = HERE / "data" / "pycache"


def child_env() -> dict:
    """The children's environment: bytecode caching on, in a cache of our own.

    Some environments set PYTHONDONTWRITEBYTECODE=1; an editable install (zarrsql from
    src/) would then recompile its sources in every process and count that as import
    time. The cache goes to benchmarks/data/pycache, never into src/.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def warm(paths) -> None:
    """Read every file below `paths` once, so that all engines start from the same warm page cache."""
    for root in paths:
        root = Path(root)
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for f in files:
            with open(f, "rb") as fh:
                while fh.read(1 << 23):
                    pass


def versions(names) -> dict:
    """Installed version of each distribution in `names` (None when absent)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "cpu_count": os.cpu_count(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
        info["cpu_count_physical"] = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001
        pass
    try:
        info["zarrsql_git"] = subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001
        info["zarrsql_git"] = None
    return info
