"""SQL text helpers: literals for Python values, and finding `.zarr` strings in a statement."""

from __future__ import annotations

import os
from typing import Any

from zarrsql.catalog import quote_ident, quote_text
from zarrsql.store import is_url

__all__ = ["claimable", "literal", "quote_ident", "quote_text", "string_constants"]


def literal(value: Any) -> str:
    """A SQL literal for a Python value (str, bool, int, float, None, list, dict)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return quote_text(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "MAP {" + ", ".join(f"{literal(str(k))}: {literal(str(v))}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as a SQL literal")


def _quoted(sql: str, pos: int) -> str:
    """The text of the quoted token starting at `pos` (its quote doubled inside)."""
    quote, i, chars = sql[pos], pos + 1, []
    while i < len(sql):
        if sql[i] == quote:
            if sql[i + 1 : i + 2] == quote:
                chars.append(quote)
                i += 2
                continue
            break
        chars.append(sql[i])
        i += 1
    return "".join(chars)


def string_constants(sql: str, *, table_position: bool = False) -> list[str]:
    """The text of every single-quoted string constant in `sql`, found by DuckDB's tokenizer.

    With `table_position`, only those standing where a table does (right after FROM, JOIN or
    a comma, so `read_zarr('x.zarr')`'s argument is not one), and double-quoted names there
    too: DuckDB stores `FROM 'x.zarr'` in a view's SQL as `FROM "x.zarr"`.
    """
    import duckdb

    out = []
    tokens = duckdb.tokenize(sql)
    for k, (pos, kind) in enumerate(tokens):
        first = sql[pos : pos + 1]
        if table_position:
            before = sql[tokens[k - 1][0] : pos].strip().upper() if k else ""
            if before not in ("FROM", "JOIN", ",") or first not in ("'", '"'):
                continue
        elif kind != duckdb.token_type.string_const or first != "'":
            continue
        out.append(_quoted(sql, pos))
    return out


def claimable(text: str) -> bool:
    """Whether `FROM 'text'` names a Zarr store: a `.zarr` suffix, and for a local path a
    `zarr.json` or `.zgroup` there (so a folder merely named .zarr falls through)."""
    bare = text.rstrip("/")
    if not bare.lower().endswith(".zarr"):
        return False
    if is_url(bare):
        return True
    path = os.path.expanduser(bare[len("file://") :] if bare.lower().startswith("file://") else bare)
    return os.path.isfile(os.path.join(path, "zarr.json")) or os.path.isfile(os.path.join(path, ".zgroup"))
