"""A small runner for SQL logic test files in the style of DuckDB's sqllogictest.

A file is a sequence of blocks separated by blank lines:

    statement ok | statement error
    <SQL, one or more lines>
    [----
    <for errors: a substring the message must contain>]

    query <column types, e.g. ITR> [rowsort|nosort]
    <SQL>
    ----
    <expected rows, columns separated by a tab>

`${FIXTURES}` in SQL is replaced by the fixture folder. Values print as DuckDB's shell does
for these tests: NULL, true/false, integers, floats with repr() (so 1.5 and 0.1), strings
as they are, lists as [a, b].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Block:
    kind: str  # "statement ok", "statement error", "query"
    options: list[str]
    sql: str
    expected: list[str]
    line: int


def parse(text: str) -> list[Block]:
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("#"):
            i += 1
            continue
        head, start = line.split(), i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() and lines[i].strip() != "----":
            body.append(lines[i])
            i += 1
        expected: list[str] = []
        if i < len(lines) and lines[i].strip() == "----":
            i += 1
            while i < len(lines) and lines[i].strip():
                expected.append(lines[i].rstrip("\n"))
                i += 1
        kind = " ".join(head[:2]) if head[0] == "statement" else head[0]
        options = head[2:] if head[0] == "statement" else head[1:]
        blocks.append(Block(kind, options, "\n".join(body), expected, start))
    return blocks


def render(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render(v) for v in value) + "]"
    return str(value)


def run_file(path: Path, con: Any, fixtures: Path) -> None:
    for block in parse(path.read_text()):
        sql = block.sql.replace("${FIXTURES}", str(fixtures))
        where = f"{path.name}:{block.line}"
        if block.kind == "statement ok":
            con.execute(sql)
        elif block.kind == "statement error":
            try:
                con.execute(sql)
            except Exception as err:  # the point of the block: any error, checked by its text
                want = " ".join(block.expected)
                assert re.sub(r"\s+", " ", want) in re.sub(r"\s+", " ", str(err)), f"{where}: error {err!s} lacks {want!r}"
            else:
                raise AssertionError(f"{where}: statement succeeded but an error was expected")
        elif block.kind == "query":
            rows = con.sql(sql).fetchall()
            got = ["\t".join(render(v) for v in row) for row in rows]
            want = [line.replace("${FIXTURES}", str(fixtures)) for line in block.expected]
            if "rowsort" in block.options:
                got, want = sorted(got), sorted(want)
            assert got == want, f"{where}: got\n" + "\n".join(got) + "\nexpected\n" + "\n".join(want)
        else:
            raise AssertionError(f"{where}: unknown block {block.kind!r}")
