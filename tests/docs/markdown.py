"""Run the fenced Python and SQL examples of a Markdown file, the way a reader would.

The convention (docs/contributing.md says the same for writers of docs):

- A block runs when its info string starts with ``python`` or ``sql`` and does not contain
  ``no-run``. Every other block (``sh``, ``console``, ``text``, ``json``, ...) is prose.
- The blocks of one file run in order, in one namespace, in a working folder where the docs'
  example stores exist (``tests/fixtures/...``, ``anndata_stores/...``; see
  tests/docs/conftest.py). The namespace starts with ``zarrsql`` imported and
  ``con = zarrsql.connect()``, as the guides assume.
- An SQL block runs on the namespace's ``con`` (so a Python block that mounts a store or
  opens another connection is seen by the SQL after it); its result, if any, is fetched.
- A block followed directly by a ```` ```text ```` block whose first line is
  ``SomeError: message`` must raise an exception of that class (or a subclass), with that
  message. Otherwise the ```` ```text ```` block is what the example prints: for Python, its
  standard output; for SQL, DuckDB's rendering of the result (compared on DuckDB 2.x, whose
  output the docs show). In both, ``[...]`` stands for any text (a temporary path, rows cut
  from a long listing).
- A warning the example's own code triggers fails it, as in the rest of the suite; a
  deprecation raised inside a library the example calls does not (Python shows those to
  no reader either).
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<info>[^`]*)$")
ERROR_LINE = re.compile(r"^(?P<name>[A-Z][A-Za-z0-9_]*(?:Error|Exception)): (?P<message>.*)$", re.DOTALL)
WILDCARD = "[...]"
RUNNABLE = ("python", "sql")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its info string and text, and the output shown after it."""

    path: Path
    line: int
    info: str
    code: str
    output: str | None

    @property
    def language(self) -> str:
        return self.info.split()[0].lower() if self.info.split() else ""

    @property
    def runnable(self) -> bool:
        return self.language in RUNNABLE and "no-run" not in self.info

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


@dataclass(frozen=True)
class _Fenced:
    line: int
    info: str
    code: str
    end: int  # index of the closing fence's line


def _fenced(lines: list[str]) -> list[_Fenced]:
    """Every fenced block, with its indent (a block inside a list item) removed."""
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence = len(match["indent"]), match["fence"]
        body, j = [], i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        found.append(_Fenced(i + 1, match["info"].strip(), "\n".join(body), j))
        i = j + 1
    return found


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of `path`, each with the ```text block that directly follows it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fenced = _fenced(lines)
    out = []
    for k, block in enumerate(fenced):
        output = None
        nxt = fenced[k + 1] if k + 1 < len(fenced) else None
        between = lines[block.end + 1 : nxt.line - 1] if nxt is not None else []
        if nxt is not None and nxt.info == "text" and all(not s.strip() for s in between):
            output = nxt.code
        out.append(Block(path, block.line, block.info, block.code, output))
    return out


def matches(expected: str, actual: str) -> bool:
    """`actual` equals `expected` where `[...]` may stand for any text; trailing blanks ignored."""
    expected, actual = _tidy(expected), _tidy(actual)
    pattern = ".*?".join(re.escape(part) for part in expected.split(WILDCARD))
    return re.fullmatch(pattern, actual, re.DOTALL) is not None


def outputs_checked() -> bool:
    """Printed outputs are compared on DuckDB 2.x only: the docs show 2.x's (pushdown counts
    in `zarrsql.trace()` differ on 1.5). Errors are checked on every version."""
    import duckdb

    return int(duckdb.__version__.split(".")[0]) >= 2


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


class ExampleFailure(AssertionError):
    """An example that raised, raised the wrong error, or printed something else."""


def run_block(block: Block, namespace: dict[str, Any]) -> None:
    """Run one block in `namespace`; raise `ExampleFailure` saying how it disagrees with the doc."""
    expected_error = ERROR_LINE.match(block.output) if block.output is not None else None
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), _reader_warnings(namespace):
            shown = _run_sql(block.code, namespace) if block.language == "sql" else _run_python(block, namespace)
    except Exception as err:
        if expected_error is None:
            raise ExampleFailure(f"{block.where}: raised {type(err).__name__}: {err}") from err
        _check_error(block, err, expected_error["name"], expected_error["message"])
        return
    if expected_error is not None:
        raise ExampleFailure(f"{block.where}: the doc shows {expected_error['name']}, but the example raised nothing")
    printed = stdout.getvalue() if block.language == "python" else shown
    if block.output is not None and outputs_checked() and not matches(block.output, printed or ""):
        raise ExampleFailure(f"{block.where}: the doc shows\n{block.output}\nbut the example printed\n{printed}")


@contextlib.contextmanager
def _reader_warnings(namespace: dict[str, Any]) -> Iterator[None]:
    """Warnings as a reader running the example would meet them: a deprecation inside a library
    (pandas calling matplotlib, say) is not the doc's fault and Python hides it outside
    `__main__`; any warning the doc's own code triggers is an error, so that the doc is fixed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
        warnings.filterwarnings("error", module=re.escape(namespace.get("__name__", "__main__")))
        yield


def _check_error(block: Block, err: Exception, name: str, message: str) -> None:
    names = [cls.__name__ for cls in type(err).__mro__]
    if name not in names:
        raise ExampleFailure(f"{block.where}: the doc shows {name}, the example raised {type(err).__name__}: {err}")
    if not matches(message, str(err)):
        raise ExampleFailure(f"{block.where}: the doc shows the message\n{message}\nthe example's is\n{err}")


def _run_python(block: Block, namespace: dict[str, Any]) -> None:
    exec(compile(block.code, f"{block.path}:{block.line}", "exec"), namespace)  # noqa: S102 - the doc's own code


def _run_sql(code: str, namespace: dict[str, Any]) -> str | None:
    """Run the SQL on the namespace's connection; DuckDB's rendering of the last result."""
    import duckdb

    con = namespace["con"]
    relation = con.sql(code)
    if relation is None:
        return None
    try:
        return str(relation)
    except duckdb.Error as err:
        original = con.take_scan_error() if hasattr(con, "take_scan_error") else None
        if original is not None:
            raise original.with_traceback(None) from err
        raise
