"""DuckDB's parse of a statement (`json_serialize_sql`), read alike on DuckDB 2.x and 1.5.

The statement rewrites (`answers`, `grouped`, `joins`, `topn`, `widened`) each walk this
tree, and the Flight SQL server reads it to see what a statement does. What they share is
here: asking DuckDB for the tree (kept by statement text: a statement repeated in a loop
should not pay a round trip for its parse each time), turning a tree back into SQL, and
reading the nodes the two DuckDB versions spell differently:

* a constant: 2.x keeps the literal as written, `{"literal": {"kind": "INTEGER", "text":
  "10"}}`; 1.5 keeps a typed value, `{"value": {"type": {"id": "INTEGER"}, "value": 10}}`,
  with a DECIMAL as its unscaled digits and a HUGEINT as two 64-bit halves (`constant`);
* a function's argument: 2.x wraps each with its name, 1.5 lists the expressions (`argument`).

A rewrite that meets a tree it does not understand raises `Decline`; the statement then runs
as the user wrote it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb

#: Statements parsed (and, in `answers`, atoms rendered) kept by text, the oldest let go first.
CACHE_SIZE = 256
_PARSED: dict[str, str] = {}
_CACHE_LOCK = threading.Lock()


class Decline(Exception):
    """The statement is not one a rewrite handles: it runs unchanged."""


def remembered(cache: dict[str, str], key: str, make: Callable[[], str]) -> str:
    """`make()`, kept in `cache` under `key` (the oldest entry goes beyond `CACHE_SIZE`)."""
    with _CACHE_LOCK:
        hit = cache.get(key)
    return hit if hit is not None else kept(cache, key, make())


def kept(cache: dict[str, str], key: str, value: str) -> str:
    """`value`, kept in `cache` under `key` (the oldest entry goes beyond `CACHE_SIZE`)."""
    with _CACHE_LOCK:
        cache[key] = value
        while len(cache) > CACHE_SIZE:
            del cache[next(iter(cache))]
    return value


def cached(cache: dict[str, str], keys: list[str]) -> dict[str, str | None]:
    """What `cache` holds for each of `keys` (None where it holds nothing), read at once."""
    with _CACHE_LOCK:
        return {key: cache.get(key) for key in keys}


def parsed_text(con: duckdb.DuckDBPyConnection, sql: str, *, keep: bool = True) -> str:
    """DuckDB's parse of `sql` as JSON text, kept by statement text unless `keep` is false
    (a text made for one statement only, which would push reusable parses out)."""

    def parse() -> str:
        return str(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])

    return remembered(_PARSED, sql, parse) if keep else parse()


def parsed(con: duckdb.DuckDBPyConnection, sql: str, *, keep: bool = True) -> dict[str, Any]:
    """DuckDB's parse of `sql` as a fresh document (callers may change it)."""
    return json.loads(parsed_text(con, sql, keep=keep))  # type: ignore[no-any-return]


def serialize(
    con: duckdb.DuckDBPyConnection, sql: str, *, parameters: bool = False, keep: bool = True
) -> dict[str, Any]:
    """The parse of `sql`, which must be one statement DuckDB serializes, with parameters only
    if `parameters` (a rewrite that moves values about must not move a `?` from its argument)."""
    doc = parsed(con, sql, keep=keep)
    if doc.get("error") or len(doc.get("statements") or []) != 1:
        raise Decline("not one statement DuckDB serializes")
    if not parameters and doc["statements"][0].get("named_param_map"):
        raise Decline("parameters")
    return doc


def select_node(con: duckdb.DuckDBPyConnection, sql: str, *, keep: bool = True) -> dict[str, Any]:
    """The single statement's node of `sql` (without parameters), or decline."""
    return serialize(con, sql, keep=keep)["statements"][0]["node"]  # type: ignore[no-any-return]


def deserialize(con: duckdb.DuckDBPyConnection, doc: dict[str, Any]) -> str:
    """A (changed) parse document as SQL text again."""
    return str(con.execute("SELECT json_deserialize_sql(?)", [json.dumps(doc)]).fetchall()[0][0])


def argument(arg: dict[str, Any]) -> dict[str, Any]:
    """A function argument's expression (DuckDB 2.x wraps it with its name; 1.5 does not)."""
    if "expression" in arg:
        if arg.get("name"):
            raise Decline("named argument")
        return arg["expression"]  # type: ignore[no-any-return]
    return arg


def ref(node: dict[str, Any]) -> str:
    """A COLUMN_REF as `qualifier\\0name` (lowercase qualifier) or `name`."""
    parts = node["column_names"]
    if len(parts) == 1:
        return str(parts[0])
    if len(parts) == 2:
        return f"{parts[0].lower()}\0{parts[1]}"
    raise Decline("column reference with a schema")


def alias(table: dict[str, Any]) -> str:
    """The name a FROM item's columns are qualified with: its alias, or a base table's name."""
    return str(table.get("alias") or (table.get("table_name") if table.get("type") == "BASE_TABLE" else "")).lower()


def conjuncts(expr: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The terms of a condition's top-level AND (the condition itself when it is no AND)."""
    if expr is None:
        return []
    if expr.get("class") == "CONJUNCTION" and expr.get("type") == "CONJUNCTION_AND":
        return [c for child in expr["children"] for c in conjuncts(child)]
    return [expr]


#: What a constant is, by DuckDB 2.x's literal kind and by 1.5's value type.
_KINDS_2X = {
    "STRING": "string",
    "INTEGER": "integer",
    "NUMERIC": "number",
    "NULL_LITERAL": "null",
    "BOOLEAN": "boolean",
}
_KINDS_15 = {
    "VARCHAR": "string",
    **dict.fromkeys(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UBIGINT", "UHUGEINT"), "integer"),
    **dict.fromkeys(("DECIMAL", "DOUBLE", "FLOAT"), "number"),
    "NULL": "null",
    "BOOLEAN": "boolean",
}


@dataclass(frozen=True)
class Constant:
    """A constant of the statement: its `kind` ("string", "integer", "number", "null",
    "boolean" or "other"), its `text` (as written on 2.x; on 1.5 the value written out, a
    DECIMAL with its point), and whether it is a DOUBLE literal (`1e3`: written with an
    exponent on 2.x, typed DOUBLE on 1.5)."""

    kind: str
    text: str
    double: bool = False


def constant(node: Any) -> Constant | None:
    """`node` as a `Constant`, or None when it is not a CONSTANT node."""
    if not isinstance(node, dict) or node.get("class") != "CONSTANT":
        return None
    literal = node.get("literal")
    if isinstance(literal, dict):  # DuckDB 2.x
        kind = _KINDS_2X.get(str(literal.get("kind")), "other")
        text = str(literal.get("text", ""))
        return Constant(kind, text, kind == "number" and "e" in text.lower())
    value = node.get("value")  # DuckDB 1.5
    if not isinstance(value, dict):
        return None
    type_ = value.get("type") or {}
    type_id = str(type_.get("id"))
    if value.get("is_null"):
        return Constant("null", "")
    kind = _KINDS_15.get(type_id, "other")
    return Constant(kind, _text_15(value.get("value"), type_id, type_.get("type_info") or {}), type_id == "DOUBLE")


def _text_15(raw: Any, type_id: str, info: dict[str, Any]) -> str:
    """A 1.5 value written out: a HUGEINT from its halves, a DECIMAL with its scale applied."""
    if type_id in ("HUGEINT", "UHUGEINT") and isinstance(raw, dict):
        upper, lower = int(raw.get("upper", 0)), int(raw.get("lower", 0))
        return str(upper * 2**64 + lower)
    if type_id == "DECIMAL" and isinstance(raw, int) and not isinstance(raw, bool):
        scale = int(info.get("scale") or 0)
        digits = str(abs(raw)).rjust(scale + 1, "0")
        whole, fraction = (digits[:-scale], digits[-scale:]) if scale else (digits, "")
        return ("-" if raw < 0 else "") + whole + ("." + fraction if fraction else "")
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)
