"""The methods `@dataclass` writes for zarrsql's classes, compiled once per machine.

Why: for every class, the standard `dataclasses` module writes the source text of
`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`, ... and compiles it with
`exec` while the module is imported. Python keeps the bytecode of modules in `__pycache__`,
but not of these strings, so every process compiled them again: the ~85 classes a first
query imports cost 165 ms of zarrsql's 240 ms of import time on the 2-core machine
(docs/benchmarks.md, "Import time"). Here the compiled code objects are kept in a file of the
user's cache folder (`cache_file`), keyed by their exact source text, so later processes run
the same code without compiling it. Same text, same interpreter (the file records the bytecode
magic number), same code object: nothing about the classes can differ.

`install()` (called by `zarrsql/__init__.py`) points the name `exec` inside the `dataclasses`
module at `_exec`, which serves only source text whose globals are a zarrsql module's and
passes every other call, unchanged, to the `exec` that was there before. Where the file
cannot be read or written (no home folder, a read-only one, `PYTHONDONTWRITEBYTECODE`),
classes are compiled as before.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
import threading
from types import CodeType
from typing import Any

_FORMAT = 1  # bumped when the file's layout changes
_LIMIT = 5000  # entries; above it, a save keeps only what its process used (edits leave old texts)
_lock = threading.Lock()
_codes: dict[str, CodeType] | None = None  # source text -> code, loaded on first use
_added = False  # compiled something the file does not hold yet
_used: set[str] = set()  # the texts this process ran
_previous: Any = None  # the `exec` the dataclasses module used before install()


def cache_file() -> str | None:
    """Where the code objects live: under `sys.pycache_prefix` when it is set (Python's own
    bytecode goes there then), else in the user's cache folder (`$XDG_CACHE_HOME/zarrsql` or
    `~/.cache/zarrsql`), one file per interpreter (its cache tag). Never inside the package:
    pip's uninstall removes only the files it installed and their bytecode, so a file there
    would leave `site-packages/zarrsql` behind, and an empty folder of that name imports as a
    namespace package. One file serves every installation: its keys are the methods' text."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    name = f"dataclass-methods.{tag}.marshal"
    if sys.pycache_prefix:
        return os.path.join(sys.pycache_prefix, "zarrsql", name)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    # os.path, not pathlib: `import zarrsql` loads this module, and pathlib costs it 5-10 ms
    return os.path.join(base, "zarrsql", name) if os.path.isabs(base) else None  # no home: no file


def _load() -> dict[str, CodeType]:
    global _codes
    if _codes is None:
        _codes = {}
        path = cache_file()
        try:
            if path is not None:
                with open(path, "rb") as fh:
                    kept = marshal.loads(fh.read())
                if (
                    isinstance(kept, tuple)
                    and len(kept) == 3
                    and kept[:2] == (_FORMAT, importlib.util.MAGIC_NUMBER)
                    and isinstance(kept[2], dict)
                ):
                    _codes = {k: v for k, v in kept[2].items() if isinstance(k, str) and isinstance(v, CodeType)}
        except (OSError, ValueError, EOFError, TypeError):
            pass  # no file yet, or a damaged one: compile, and write a new one at exit
    return _codes


def _exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:  # noqa: A002 - exec's own names
    name = globals.get("__name__", "") if isinstance(globals, dict) else ""
    if not isinstance(source, str) or not (name == "zarrsql" or name.startswith("zarrsql.")):
        _previous(source, globals, locals)
        return
    global _added
    with _lock:
        codes = _load()
        code = codes.get(source)
        if code is None:
            code = codes[source] = compile(source, "<string>", "exec")
            _added = True
        _used.add(source)
    _previous(code, globals, locals)


def _save() -> None:
    """At exit, when this process compiled new methods: write the file whole (a temporary
    file renamed over it, so a reader never sees half of one)."""
    path = cache_file()
    if not _added or _codes is None or path is None or sys.dont_write_bytecode:
        return
    keep = dict(_codes) if len(_codes) <= _LIMIT else {k: v for k, v in _codes.items() if k in _used}
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temp, "wb") as fh:
            fh.write(marshal.dumps((_FORMAT, importlib.util.MAGIC_NUMBER, keep)))
        os.replace(temp, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temp)


def install() -> None:
    """Route the dataclasses module's `exec` through `_exec` (once per process)."""
    global _previous
    with _lock:
        if _previous is not None:
            return
        _previous = vars(dataclasses).get("exec", builtins.exec)
        setattr(dataclasses, "exec", _exec)  # noqa: B010 - a module attribute mypy does not know
    atexit.register(_save)
