"""A result as a box-drawn text table, the way DuckDB's command line shows one.

Pure text: callers hand over the column names, DuckDB type names and cell texts (None for
NULL) of the rows to show, plus the true row count. When some rows are left out, the rows
before `gap` are the first of the result and the rest its last, with a row of dots between
and a footer such as `2008800 rows (40 shown)`. A control character in a name or value
(an ANSI escape, a carriage return, a newline) is shown as an escape such as `\\x1b` or
`\\r`, never sent to the terminal. Cells are padded and clipped by display width, as
DuckDB's own renderer does: an East Asian wide or full-width character takes two columns and
a combining mark none, so rows with `東京` line up with rows with `Zurich`. This module
imports nothing heavy.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

#: Widest text of one cell, in terminal columns; wider values end in an ellipsis. Bounds the
#: table's width for long strings and lists; a user who needs every character writes csv or json.
MAX_CELL = 60

_SHORT_TYPES = {
    "TINYINT": "int8",
    "SMALLINT": "int16",
    "INTEGER": "int32",
    "BIGINT": "int64",
    "HUGEINT": "int128",
    "UTINYINT": "uint8",
    "USMALLINT": "uint16",
    "UINTEGER": "uint32",
    "UBIGINT": "uint64",
    "UHUGEINT": "uint128",
}
_NUMERIC = re.compile(r"^(u?int\d+|float|double|decimal\(.*\))$")
#: Characters a terminal acts on instead of showing: C0 and C1 controls (ESC starts the
#: ANSI sequences that recolour or move the cursor, CR rewrites the line), DEL, the Unicode
#: line and paragraph separators and the bidirectional overrides that reorder what follows.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: Unicode categories that take no column: non-spacing and enclosing marks, format characters
#: (zero-width space, joiners). The soft hyphen is a format character terminals show as `-`.
_ZERO_WIDTH_CATEGORIES = frozenset({"Mn", "Me", "Cf"})
_SOFT_HYPHEN = "\u00ad"
#: How the commonest controls show; any other shows as its code, `\x1b` or `\u202e`.
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


@dataclass(frozen=True, slots=True)
class Shown:
    """The part of a result a table shows: `rows[:gap]` come first, `rows[gap:]` last."""

    columns: Sequence[str]
    types: Sequence[str]
    rows: Sequence[Sequence[str | None]]
    total: int
    gap: int | None = None


def type_label(duckdb_type: str) -> str:
    """`BIGINT[]` → `int64[]`: DuckDB's type name in the short lower-case form of its CLI."""
    text = re.sub(r"\b[A-Z]+\b", lambda m: _SHORT_TYPES.get(m.group(0), m.group(0)), duckdb_type)
    return text.strip('"').lower()  # the NULL type prints as "NULL"


def _visible(match: re.Match[str]) -> str:
    char = match.group(0)
    code = ord(char)
    return _ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def _display_width(text: str) -> int:
    """Terminal columns `text` takes: East Asian wide and full-width characters two, combining
    marks and format characters (zero-width space, joiners) none, every other character one."""
    return sum(_char_width(char) for char in text)


def _char_width(char: str) -> int:
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return 2
    if char != _SOFT_HYPHEN and unicodedata.category(char) in _ZERO_WIDTH_CATEGORIES:
        return 0
    return 1


def _clip(text: str) -> str:
    """`text` on one line, each control character written as an escape (a value must not
    recolour, move or clear the terminal), and at most MAX_CELL columns wide: a wider text
    keeps the characters that fit in MAX_CELL - 1 columns (never half a wide character) and
    ends in `…`."""
    text = _CONTROL.sub(_visible, text)
    if _display_width(text) <= MAX_CELL:
        return text
    kept: list[str] = []
    used = 0
    for char in text:
        used += _char_width(char)
        if used > MAX_CELL - 1:
            break
        kept.append(char)
    return "".join(kept) + "…"


def _cell(text: str, width: int, *, right: bool, center: bool = False) -> str:
    """`text` padded with spaces to `width` display columns: right-aligned, left-aligned, or
    centred (the odd space placed as `str.center` places it)."""
    pad = max(0, width - _display_width(text))
    if center:
        left = pad // 2 + (pad & width & 1)
        return " " * left + text + " " * (pad - left)
    return " " * pad + text if right else text + " " * pad


def render(shown: Shown) -> str:
    """The table as lines of text ending in a newline (see the module docstring)."""
    labels = [_clip(type_label(t)) for t in shown.types]
    names = [_clip(c) for c in shown.columns]
    body = [["NULL" if v is None else _clip(v) for v in row] for row in shown.rows]
    widths = [
        max([_display_width(n), _display_width(t), *(_display_width(r[i]) for r in body)])
        for i, (n, t) in enumerate(zip(names, labels, strict=True))
    ]
    right = [bool(_NUMERIC.match(t)) for t in labels]

    def line(left: str, mid: str, end: str) -> str:
        return left + mid.join("─" * (w + 2) for w in widths) + end

    def row(cells: Sequence[str], *, center: bool = False) -> str:
        parts = [_cell(c, w, right=r, center=center) for c, w, r in zip(cells, widths, right, strict=True)]
        return "│ " + " │ ".join(parts) + " │"

    out = [line("┌", "┬", "┐"), row(names, center=True), row(labels, center=True), line("├", "┼", "┤")]
    dots = [row(["·"] * len(widths), center=True)] * 3
    for i, cells in enumerate(body):
        out += dots if i == shown.gap else []
        out.append(row(cells))
    out += dots if shown.gap == len(body) else []
    out.append(line("└", "┴", "┘"))
    out.append("  " + footer(shown.total, len(body)))
    return "\n".join(out) + "\n"


def footer(total: int, shown: int) -> str:
    """`1 row`, `12 rows`, or `2008800 rows (40 shown)` when rows were left out."""
    text = f"{total} row" + ("" if total == 1 else "s")
    return text if shown >= total else f"{text} ({shown} shown)"
