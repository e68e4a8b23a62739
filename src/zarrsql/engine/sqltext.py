"""SQL text helpers: literals for Python values, and reading a statement with DuckDB's tokenizer
(`.zarr` strings, zarrsql calls and their arguments, COPY targets)."""

from __future__ import annotations

import functools
import os
import re
import string
from dataclasses import dataclass
from typing import Any

from zarrsql.catalog import quote_ident, quote_text
from zarrsql.store import is_url

__all__ = [
    "AGGREGATE_CALL",
    "Argument",
    "Call",
    "claimable",
    "copy_to_zarr",
    "literal",
    "literal_stores",
    "named_equals",
    "quote_ident",
    "quote_text",
    "show_tables",
    "string_constants",
    "table_info_names",
    "zarrsql_calls",
]

#: A call of an aggregate the scan may compute (`engine/grouped.py`): a statement without one
#: never loads that module.
AGGREGATE_CALL = re.compile(r"\b(?:count|sum|avg|mean|min|max)\s*\(", re.IGNORECASE)


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
    tokens = _character_positions(sql, duckdb.tokenize(sql))
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


def _character_positions(sql: str, raw: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """DuckDB's tokens with their positions as indices into the str `sql`.

    `duckdb.tokenize` reports where each token starts in the statement's UTF-8 bytes; after
    a non-ASCII character (`'é'`, a table named `Ünï`) that is past the token's character
    index, so the offsets are converted once per statement.
    """
    if sql.isascii():
        return raw
    char_at = [k for k, char in enumerate(sql) for _ in range(len(char.encode("utf-8", "surrogatepass")))]
    char_at.append(len(sql))
    return [(char_at[pos] if pos < len(char_at) else len(sql), kind) for pos, kind in raw]


def claimable(text: str) -> bool:
    """Whether `FROM 'text'` names a Zarr store: a `.zarr` suffix, and for a local path a
    `zarr.json` or `.zgroup` there (so a folder merely named .zarr falls through); or a local
    folder laid out as an Icechunk repository, whatever its name."""
    from zarrsql.store.icechunk import looks_like_repository  # asyncio: not on every statement's path

    bare = text.rstrip("/")
    if looks_like_repository(bare):
        return True
    if not bare.lower().endswith(".zarr"):
        return False
    if is_url(bare):
        return True
    path = os.path.expanduser(bare[len("file://") :] if bare.lower().startswith("file://") else bare)
    return os.path.isfile(os.path.join(path, "zarr.json")) or os.path.isfile(os.path.join(path, ".zgroup"))


# -- zarrsql calls in a statement ------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    """One token of DuckDB's tokenizer: where it starts, its kind's name, its text."""

    pos: int
    kind: str
    text: str


@dataclass(frozen=True)
class Argument:
    """One top-level argument of a call: `name := value`, `name = value`, or a bare value.

    `assign` is the position of the `:=` or `=` (None for a positional argument); `keyword`
    says the name was written as a bare SQL keyword (`group`, not `"group"`).
    """

    name: str | None
    keyword: bool
    assign: int | None
    operator: str
    value: tuple[Token, ...]
    text: str  # the value as written


@dataclass(frozen=True)
class Call:
    """A call of one of zarrsql's SQL functions, with its top-level arguments."""

    function: str
    pos: int
    arguments: tuple[Argument, ...]


def tokens(sql: str) -> list[Token]:
    """DuckDB's tokens of `sql` (empty when the tokenizer refuses the text)."""
    return list(_tokens(sql))


@functools.lru_cache(maxsize=16)
def _tokens(sql: str) -> tuple[Token, ...]:
    """`tokens`, kept for the last few texts: a statement is read several times on its way
    to DuckDB (a COPY to Zarr? `name = value` arguments? a store to claim?)."""
    import duckdb

    try:
        raw = _character_positions(sql, duckdb.tokenize(sql))
    except Exception:  # an unterminated string or the like: DuckDB reports it when it runs
        return ()
    out = []
    for k, (pos, kind) in enumerate(raw):
        end = raw[k + 1][0] if k + 1 < len(raw) else len(sql)
        out.append(Token(pos, kind.name, sql[pos:end].strip()))
    return tuple(t for t in out if t.kind != "comment")


def _name_of(token: Token) -> str:
    text = token.text
    if text.startswith('"') and text.endswith('"') and len(text) > 1:
        return text[1:-1].replace('""', '"')
    return text.lower()


def _argument(sql: str, parts: list[Token]) -> Argument:
    named = len(parts) >= 2 and parts[0].kind in ("identifier", "keyword") and parts[1].text in (":=", "=")
    value = parts[2:] if named else parts
    text = sql[value[0].pos : value[-1].pos + len(value[-1].text)] if value else ""
    if named:
        keyword = parts[0].kind == "keyword"
        return Argument(_name_of(parts[0]), keyword, parts[1].pos, parts[1].text, tuple(value), text)
    return Argument(None, False, None, "", tuple(value), text)


def _arguments(sql: str, toks: list[Token], open_at: int) -> tuple[list[Argument], int]:
    """The top-level arguments of the call whose `(` is `toks[open_at]`, and the index after `)`."""
    depth = 0
    parts: list[Token] = []
    args: list[Argument] = []
    k = open_at + 1
    while k < len(toks):
        t = toks[k]
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            if depth == 0:
                if parts or args:
                    args.append(_argument(sql, parts))
                return args, k + 1
            depth -= 1
        elif t.text == "," and depth == 0:
            args.append(_argument(sql, parts))
            parts = []
            k += 1
            continue
        parts.append(t)
        k += 1
    return args, k


def zarrsql_calls(sql: str, functions: frozenset[str]) -> list[Call]:
    """Every call of a function named in `functions` (lower case) in `sql`, nested ones too."""
    toks = tokens(sql)
    calls = []
    for k, t in enumerate(toks[:-1]):
        if t.kind in ("identifier", "keyword") and toks[k + 1].text == "(" and _name_of(t).lower() in functions:
            if k and toks[k - 1].text == "." and k > 1 and _name_of(toks[k - 2]).lower() not in ("main", "temp"):
                continue  # some other schema's function of the same name
            args, _ = _arguments(sql, toks, k + 1)
            calls.append(Call(_name_of(t).lower(), t.pos, tuple(args)))
    return calls


def literal_stores(sql: str) -> list[str]:
    """The stores of `sql`'s `read_zarr('<store>')` calls that have that one argument, a
    string constant, and nothing else: their scans can be opened from the text alone."""
    out = []
    for call in zarrsql_calls(sql, frozenset({"read_zarr"})):
        if len(call.arguments) != 1 or call.arguments[0].name is not None:
            continue
        value = call.arguments[0].value
        if len(value) == 1 and value[0].kind == "string_const" and value[0].text.startswith("'"):
            out.append(_quoted(sql, value[0].pos))
    return out


#: DuckDB's table functions and PRAGMAs that take a table's name as their argument and bind
#: that table (a view's query) only when their result is read (`table_info_names`).
TABLE_INFO_FUNCTIONS = frozenset({"pragma_table_info", "table_info", "pragma_show"})


def table_info_names(sql: str) -> list[tuple[str, ...]]:
    """The qualified names (catalog, schema, table: one to three parts, unquoted) that
    `sql`'s `pragma_table_info('<name>')`, `pragma_show('<name>')` and `PRAGMA
    table_info(<name>)` calls give, as a string or as a bare name; an argument of any other
    form (an expression, a parameter) is left out."""
    out = []
    for call in zarrsql_calls(sql, TABLE_INFO_FUNCTIONS):
        if len(call.arguments) != 1 or call.arguments[0].name is not None:
            continue
        value = call.arguments[0].value
        if len(value) == 1 and value[0].kind == "string_const" and value[0].text.startswith("'"):
            name = _qualified_name(_quoted(sql, value[0].pos))
        elif len(value) in (1, 3, 5) and all(
            t.text == "." if k % 2 else t.kind in ("identifier", "keyword") for k, t in enumerate(value)
        ):
            name = tuple(_name_of(t) for t in value[::2])
        else:
            continue
        if name is not None:
            out.append(name)
    return out


def _qualified_name(text: str) -> tuple[str, ...] | None:
    """`text` split as DuckDB splits a qualified name: at dots outside double quotes, a
    quote doubled inside quotes standing for itself; None for an empty part or more than three."""
    parts, current, quoted, k = [], [], False, 0
    while k < len(text):
        char = text[k]
        if char == '"' and quoted and text[k + 1 : k + 2] == '"':
            current.append('"')
            k += 1
        elif char == '"':
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        k += 1
    parts.append("".join(current))
    if quoted or len(parts) > 3 or not all(p.strip() for p in parts):
        return None
    return tuple(parts)


def named_equals(sql: str, functions: frozenset[str]) -> str:
    """`sql` with `name = value` written `name := value` at the top level of zarrsql calls.

    DuckDB reads `table_name = 't'` inside a table macro's arguments as a comparison; only a
    top-level argument that starts `identifier =` is changed, never an `=` inside an
    expression or subquery.
    """
    spots = sorted(
        (
            a.assign
            for c in zarrsql_calls(sql, functions)
            for a in c.arguments
            if a.assign is not None and a.operator == "="
        ),
        reverse=True,
    )
    for pos in spots:
        sql = sql[:pos] + ":=" + sql[pos + 1 :]
    return sql


def copy_to_zarr(sql: str) -> str | None:
    """The target of a `COPY ... TO` in `sql` that would write Zarr (a `.zarr` path or
    `FORMAT zarr`), else None: DuckDB would write CSV there instead."""
    toks = tokens(sql)
    for k, t in enumerate(toks):
        if t.kind != "keyword" or t.text.upper() != "COPY":
            continue
        depth, target = 0, None
        for j in range(k + 1, len(toks)):
            u = toks[j]
            if u.text == ";":
                break
            if u.text == "(":
                depth += 1
            elif u.text == ")":
                depth -= 1
            elif depth == 0 and u.text.upper() == "TO" and j + 1 < len(toks):
                nxt = toks[j + 1]
                target = _quoted(sql, nxt.pos) if nxt.kind == "string_const" else nxt.text
                if target.rstrip("/").lower().endswith(".zarr"):
                    return target
            elif target is not None and u.text.upper() == "FORMAT" and j + 1 < len(toks):
                fmt = toks[j + 1]
                name = _quoted(sql, fmt.pos) if fmt.kind == "string_const" else _name_of(fmt)
                if name.lower() == "zarr":
                    return target
    return None


def show_tables(sql: str) -> bool:
    """Whether `sql` is just `SHOW TABLES` or `SHOW ALL TABLES` (optionally `FROM db`)."""
    words = [t.text.upper() for t in tokens(sql)]
    while words and words[-1] == ";":
        words.pop()
    if ";" in words:  # several statements: left as they are
        return False
    return words[:2] == ["SHOW", "TABLES"] or words[:3] == ["SHOW", "ALL", "TABLES"]


_VIEW_HEAD = re.compile(
    r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?VIEW\s+"
    r'(?:(?:"(?:[^"]|"")*"|[A-Za-z_][\w$]*)\.){0,2}(?:"(?:[^"]|"")*"|[A-Za-z_][\w$]*)\s+AS\s+',
    re.IGNORECASE | re.DOTALL,
)


def view_body(sql: str) -> str:
    """The query of a view's `CREATE VIEW ... AS <query>;` text, as `duckdb_views()` holds it."""
    return _VIEW_HEAD.sub("", sql, count=1).rstrip().rstrip(";")


def catalog_match(table: dict[str, Any], column: str) -> tuple[str, list[str]]:
    """The WHERE (with its parameters) picking the rows of `duckdb_tables()` or
    `duckdb_views()` (`column`: `table_name` or `view_name`) that the parse tree's table
    reference `table` may name: its name in any letter case, in the schema or database it
    gives, in any schema when unqualified."""
    name, schema, catalog = table["table_name"], table.get("schema_name") or "", table.get("catalog_name") or ""
    n, s, d = folded_sql(column), folded_sql("schema_name"), folded_sql("database_name")
    p = folded_sql("?")
    where = f"{n} = {p} AND (? = '' OR {s} = {p} OR {d} = {p}) AND (? = '' OR {d} = {p})"
    return where, [name, schema, schema, schema, catalog, catalog]


#: DuckDB finds a database, schema or view by its name ignoring the case of ASCII letters only
#: (Python's `lower()` and DuckDB's SQL `lower()` fold 'Ü' too, which the catalog does not).
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def folded(name: str) -> str:
    """`name` as DuckDB's catalog compares it: ASCII letters in lower case, the rest as given."""
    return name.translate(_ASCII_LOWER)


def folded_sql(expr: str) -> str:
    """SQL computing `folded` of the SQL expression `expr` (a view `"Ü"` is not the table `ü`)."""
    return f"translate({expr}, '{string.ascii_uppercase}', '{string.ascii_lowercase}')"
