"""The cache of compiled dataclass methods (`zarrsql/compiled_once.py`): a second process
compiles none of zarrsql's methods, the cached code is exactly what Python compiles from the
same text, other code's dataclasses never touch it, and a damaged, unwritable or forbidden
file changes nothing but speed. Each case runs in fresh interpreters whose bytecode (and so
this file) lives under a temporary `PYTHONPYCACHEPREFIX`."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

#: a process that imports what a first query imports, defines a dataclass of its own, and
#: prints what the cache did
_CHILD = """
import json, dataclasses, sys
import zarrsql, zarrsql.engine.api, zarrsql.scan.reader, zarrsql.engine.source
from zarrsql import compiled_once
from zarrsql.plan.predicate import Cmp

@dataclasses.dataclass(frozen=True)
class Mine:
    a: int
    b: str = "x"

m = Mine(1)
c = Cmp("x", "<", 1)
try:
    c.op = ">"
    frozen = False
except dataclasses.FrozenInstanceError:
    frozen = True
print(json.dumps({
    "added": compiled_once._added,
    "cached": len(compiled_once._codes or {}),
    "file": str(compiled_once.cache_file()),
    "mine_ok": m == Mine(1, "x") and hash(m) == hash(Mine(1)) and repr(m) == "Mine(a=1, b='x')",
    "mine_cached": any("Mine" in k or "'x'" in k for k in (compiled_once._codes or {})),
    "cmp_fields": [f.name for f in dataclasses.fields(Cmp)],
    "cmp_ok": frozen and c == Cmp("x", "<", 1) != Cmp("x", "<", 2) and hash(c) == hash(Cmp("x", "<", 1))
    and repr(c) == "Cmp(column='x', op='<', value=1)" and not hasattr(c, "__dict__"),
}))
"""


def _run(prefix: Path | None, *, write: bool = True, cache_home: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if prefix is not None:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    if cache_home is not None:
        env["XDG_CACHE_HOME"] = str(cache_home)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path: Path) -> None:
    first = _run(tmp_path)
    assert first["added"] is True and first["cached"] > 100
    path = Path(first["file"])
    assert path.is_file() and str(path).startswith(str(tmp_path))
    second = _run(tmp_path)
    assert second["added"] is False  # every method of every class came from the file
    assert second["cached"] == first["cached"]
    assert second["mine_ok"] and not second["mine_cached"]  # a user's class: untouched
    assert second["cmp_fields"] == first["cmp_fields"] == ["column", "op", "value"]
    assert first["cmp_ok"] and second["cmp_ok"]  # compiled, then from the file: the same class


def test_without_a_prefix_the_file_is_in_the_cache_folder_not_the_package(tmp_path: Path) -> None:
    """pip's uninstall removes what it installed and its bytecode: a file of ours inside the
    package would leave `site-packages/zarrsql` behind, importable as a namespace package."""
    import zarrsql

    first = _run(None, cache_home=tmp_path)
    assert Path(first["file"]) == tmp_path / "zarrsql" / f"dataclass-methods.{sys.implementation.cache_tag}.marshal"
    assert Path(first["file"]).is_file()
    assert _run(None, cache_home=tmp_path)["added"] is False
    package = Path(zarrsql.__file__).parent
    assert not list(package.rglob("dataclass-methods*"))


def test_cached_code_is_what_python_compiles(tmp_path: Path) -> None:
    path = Path(_run(tmp_path)["file"])
    fmt, magic, codes = marshal.loads(path.read_bytes())
    assert fmt == 1 and magic == __import__("importlib.util").util.MAGIC_NUMBER
    assert len(codes) > 100
    for text, code in codes.items():
        assert marshal.dumps(compile(text, "<string>", "exec")) == marshal.dumps(code), text[:200]


def test_damaged_file_is_replaced(tmp_path: Path) -> None:
    path = Path(_run(tmp_path)["file"])
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # cut in the middle
    again = _run(tmp_path)
    assert again["added"] is True and again["mine_ok"]  # compiled as before, classes work
    assert marshal.loads(path.read_bytes())[2].keys() == marshal.loads(good)[2].keys()
    path.write_bytes(b"not marshal at all")
    assert _run(tmp_path)["added"] is True


def test_no_file_when_bytecode_writing_is_off(tmp_path: Path) -> None:
    first = _run(tmp_path, write=False)
    assert first["added"] is True and first["mine_ok"]
    assert not Path(first["file"]).exists()


def test_unwritable_place_is_no_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"  # the cache folder would have to be made inside a file
    blocker.write_text("")
    again = _run(blocker)
    assert again["added"] is True and again["mine_ok"]
    assert blocker.read_text() == "" and not Path(again["file"]).exists()


def test_over_the_limit_a_save_keeps_what_its_process_used(tmp_path: Path) -> None:
    path = Path(_run(tmp_path)["file"])
    everything = marshal.loads(path.read_bytes())[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path)
    code = (
        "import zarrsql, zarrsql.errors\n"
        "from zarrsql import compiled_once\n"
        "assert not compiled_once._added and compiled_once._used\n"
        "compiled_once._LIMIT, compiled_once._added = 1, True\n"  # as if texts of old sources piled up
        "print(len(compiled_once._used))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    kept = marshal.loads(path.read_bytes())[2]
    assert len(kept) == int(out.stdout) and 0 < len(kept) < len(everything)
    assert set(kept) <= set(everything)
