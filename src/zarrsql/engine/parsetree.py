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

Printing a tree differs too: 2.x prints each literal as written, 1.5 prints a constant's value,
which for a DOUBLE or some DECIMALs reads back as another type (`printable`).

A rewrite that meets a tree it does not understand raises `Decline`; the statement then runs
as the user wrote it.
"""

from __future__ import annotations

import copy
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
    """A (changed) parse document as SQL text again, of the same meaning (`printable`)."""
    text = json.dumps(printable(con, doc))
    return str(con.execute("SELECT json_deserialize_sql(?)", [text]).fetchall()[0][0])


def printable(con: duckdb.DuckDBPyConnection, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc`, a statement's parse, as `json_deserialize_sql` must see it to print a statement
    that means the same.

    DuckDB 2.x keeps each literal as written and prints it so. DuckDB 1.5 keeps a typed value
    and prints the value: the DOUBLE `1e-1` comes back as `0.1`, which reads as a DECIMAL, and
    a DECIMAL compared with a FLOAT column is compared in FLOAT (`lat > 0.1e0` would lose the
    float32 0.1, `lat = 1e-1` find it); the DECIMAL `1.` comes back as the INTEGER `1`. Each
    such constant is printed as a cast of its text to its type instead (`retyped`), and a
    select item holding one keeps the name DuckDB gave it, which names a column of the result
    (`_named`)."""
    return retyped(con, _named(con, doc))  # type: ignore[no-any-return]


def retyped(con: duckdb.DuckDBPyConnection, tree: Any) -> Any:
    """A copy of `tree` in which each constant that DuckDB 1.5 would print as text of another
    type is `CAST('<value>' AS <its type>)`, placed and aliased as the constant was."""
    if isinstance(tree, list):
        return [retyped(con, t) for t in tree]
    if not isinstance(tree, dict):
        return tree
    text = _retyped_text(tree)
    if text is None:
        return {key: retyped(con, value) for key, value in tree.items()}
    cast = select_node(con, "SELECT CAST('' AS DOUBLE)")["select_list"][0]
    cast.update(alias=tree.get("alias", ""), query_location=tree.get("query_location", cast.get("query_location")))
    cast["cast_type"] = copy.deepcopy(tree["value"]["type"])
    cast["child"]["value"]["value"] = text
    return cast


def _retyped_text(node: dict[str, Any]) -> str | None:
    """The text of a DuckDB 1.5 constant that DuckDB prints as text of another type (a DOUBLE,
    a DECIMAL `_printed_alike` declines), read back exactly by a cast to its type; else None."""
    value = node.get("value")
    if node.get("class") != "CONSTANT" or not isinstance(value, dict) or value.get("is_null"):
        return None
    type_ = value.get("type") or {}
    if type_.get("id") == "DOUBLE":
        return repr(float(value["value"]))  # `inf`, `nan`, `-0.0` and 17 digits read back exactly
    if type_.get("id") == "DECIMAL":
        info = type_.get("type_info") or {}
        unscaled, width, scale = _whole(value["value"]), int(info.get("width") or 0), int(info.get("scale") or 0)
        if not isinstance(unscaled, int) or _printed_alike(unscaled, width, scale):
            return None
        return _text_15(unscaled, "DECIMAL", info)
    return None


def _printed_alike(unscaled: int, width: int, scale: int) -> bool:
    """Whether DuckDB 1.5's text of a DECIMAL(width, scale) constant reads back as that type.
    It prints the integer part (a 0 only when the width leaves room for it: `.5` is DECIMAL(1,1))
    and `scale` decimals, none and no point when the scale is 0; a literal read back has as
    many digits for its width and as many after its point for its scale (`00.10` is
    DECIMAL(4,2), printed `0.10`, DECIMAL(3,2); `1.` is DECIMAL(1,0), printed `1`, an INTEGER)."""
    whole = abs(unscaled) // 10**scale
    digits = len(str(whole)) if whole else int(width > scale)
    return scale > 0 and digits + scale == width


def _named(con: duckdb.DuckDBPyConnection, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc`, or a copy in which each select item without an alias that holds a constant
    `retyped` changes is aliased with its own text as DuckDB prints it, the name DuckDB gives
    its column (all printed in one round trip)."""
    if not any(_unnamed(item) for item in _select_items(doc)):
        return doc
    doc = copy.deepcopy(doc)
    unnamed = [item for item in _select_items(doc) if _unnamed(item)]
    frame = parsed_text(con, "SELECT 1")
    calls = ", ".join(["json_deserialize_sql(?)"] * len(unnamed))
    try:
        (texts,) = con.execute(f"SELECT {calls}", [item_tree(frame, item) for item in unnamed]).fetchall()
    except duckdb.Error as err:
        raise Decline(f"DuckDB does not print a select item: {err}") from None
    for item, text in zip(unnamed, texts, strict=True):
        item["alias"] = item_text(str(text))
    return doc


def _select_items(tree: Any) -> list[dict[str, Any]]:
    """The items of every select list in `tree` (subqueries, CTEs and set operations too)."""
    if isinstance(tree, list):
        return [item for t in tree for item in _select_items(t)]
    if not isinstance(tree, dict):
        return []
    items = list(tree["select_list"]) if isinstance(tree.get("select_list"), list) else []
    return items + [item for key, value in tree.items() if key != "select_list" for item in _select_items(value)]


def _unnamed(item: dict[str, Any]) -> bool:
    """Whether a select item is named by its text (no alias, not a star) and holds a constant
    `retyped` changes."""
    return not item.get("alias") and item.get("class") != "STAR" and _holds_retyped(item)


def _holds_retyped(tree: Any) -> bool:
    """Whether `tree` holds a constant `retyped` changes."""
    if isinstance(tree, list):
        return any(_holds_retyped(t) for t in tree)
    if not isinstance(tree, dict):
        return False
    return _retyped_text(tree) is not None or any(_holds_retyped(v) for v in tree.values())


def item_tree(frame: str, node: dict[str, Any]) -> str:
    """`SELECT <node>` as a statement tree (JSON), from `frame`, the tree of `SELECT 1`."""
    doc = json.loads(frame)
    doc["statements"][0]["node"]["select_list"] = [{**node, "alias": ""}]
    return json.dumps(doc)


def item_text(text: str) -> str:
    """The item of a printed `SELECT <item>`."""
    if not text.upper().startswith("SELECT "):
        raise Decline("DuckDB printed a select item unexpectedly")
    return text[len("SELECT ") :]


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


def _whole(raw: Any) -> Any:
    """A 1.5 value, a 128-bit integer (a HUGEINT, a wide DECIMAL's digits) joined from its halves."""
    if isinstance(raw, dict) and "upper" in raw:
        return int(raw["upper"]) * 2**64 + int(raw.get("lower", 0))
    return raw


def _text_15(raw: Any, type_id: str, info: dict[str, Any]) -> str:
    """A 1.5 value written out: a HUGEINT from its halves, a DECIMAL with its scale applied."""
    raw = _whole(raw)
    if type_id == "DECIMAL" and isinstance(raw, int) and not isinstance(raw, bool):
        scale = int(info.get("scale") or 0)
        digits = str(abs(raw)).rjust(scale + 1, "0")
        whole, fraction = (digits[:-scale], digits[-scale:]) if scale else (digits, "")
        return ("-" if raw < 0 else "") + whole + ("." + fraction if fraction else "")
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw)
