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
    """The text of the quoted token starting at `pos` (its quote doubled inside; unclosed, to
    the end of `sql`)."""
    quote = sql[pos]
    close = _closing_quote(sql, pos, backslash=False)
    return sql[pos + 1 : close].replace(quote * 2, quote)


def string_constants(sql: str, *, table_position: bool = False) -> list[str]:
    """The text of every single-quoted string constant in `sql`, found by DuckDB's tokenizer.

    With `table_position`, only those standing where DuckDB reads a string as a table (see
    `_table_positions`: after FROM or JOIN, a comma of a FROM list, DESCRIBE and the other
    statements that take a table; so `read_zarr('x.zarr')`'s argument is not one), and
    double-quoted names there too: DuckDB stores `FROM 'x.zarr'` in a view's SQL as
    `FROM "x.zarr"`. Comments between the tokens do not count.
    """
    if table_position:
        toks = tokens(sql)
        return [_quoted(sql, toks[k].pos) for k in _table_positions(toks) if toks[k].text[:1] in ("'", '"')]
    import duckdb

    out = []
    for pos, kind in _character_positions(sql, duckdb.tokenize(sql)):
        if kind == duckdb.token_type.string_const and sql[pos : pos + 1] == "'":
            out.append(_quoted(sql, pos))
    return out


#: Keywords right after which a string is read as a table: FROM and JOIN, and the statements
#: that take a table first, as plain DuckDB reads `DESCRIBE 'x.parquet'` or `PIVOT 'x.parquet' ON ...`
#: (and `SHOW 'x.parquet'` on DuckDB 1.5 only: `_show_reads_a_string`).
_TABLE_AFTER = frozenset({"FROM", "JOIN", "DESCRIBE", "SUMMARIZE", "PIVOT", "PIVOT_WIDER", "UNPIVOT", "PIVOT_LONGER"})
#: Keywords before `TABLE` that make `TABLE <name>` a query (`DESCRIBE TABLE 'x'`, `UNION ALL
#: TABLE 'x'`, `CREATE VIEW v AS TABLE 'x'`); after the other keywords (CREATE, TEMP, DROP,
#: ALTER, ON, ...) it names a table to define or change. After any other token ("", as
#: `_keyword` gives it: a name in `INSERT INTO t TABLE 'x'`, a parenthesis) it is a query too.
_QUERY_BEFORE_TABLE = frozenset(
    {
        "",
        "DESCRIBE",
        "SUMMARIZE",
        "SHOW",
        "EXPLAIN",
        "ANALYZE",
        "AS",
        "UNION",
        "EXCEPT",
        "INTERSECT",
        "ALL",
        "DISTINCT",
        "NAME",
    }
)
#: Keywords that end a FROM list at their depth of parentheses: a comma after them is not one
#: between tables (ON and USING do not: `FROM a JOIN b USING (k), c` goes on listing tables).
_FROM_LIST_ENDS = frozenset(
    {
        "SELECT",
        "WHERE",
        "GROUP",
        "HAVING",
        "WINDOW",
        "QUALIFY",
        "ORDER",
        "LIMIT",
        "OFFSET",
        "UNION",
        "EXCEPT",
        "INTERSECT",
        "VALUES",
        "SET",
        "RETURNING",
    }
)


def _table_positions(toks: list[Token]) -> list[int]:
    """The indices of the tokens of `toks` (comments left out) that stand where a table does:
    right after a keyword of `_TABLE_AFTER`; after a comma of a FROM list (at a depth of
    parentheses whose last clause keyword is FROM); after a `TABLE` that starts a query; and
    in `COPY <table> TO` (the target after TO is not a table: `copy_to_zarr` reads it)."""
    out = []
    in_from = [False]  # per depth of parentheses: inside a FROM list
    for k, t in enumerate(toks):
        if t.text == "(":
            in_from.append(False)
        elif t.text == ")" and len(in_from) > 1:
            in_from.pop()
        elif t.text == ";":
            in_from = [False]
        elif _keyword(t) == "FROM":
            in_from[-1] = True
        elif _keyword(t) in _FROM_LIST_ENDS:
            in_from[-1] = False
        previous = _keyword(toks[k - 1]) if k else None
        if (
            previous in _TABLE_AFTER
            or (k and toks[k - 1].text == "," and in_from[-1])
            or (previous == "SHOW" and _show_reads_a_string())
            or (previous == "TABLE" and (k < 2 or _keyword(toks[k - 2]) in _QUERY_BEFORE_TABLE))
            or (previous == "COPY" and k + 1 < len(toks) and toks[k + 1].text.upper() == "TO")
        ):
            out.append(k)
    return out


def _keyword(token: Token) -> str:
    """The keyword `token` is, in upper case; "" for any other token."""
    return token.text.upper() if token.kind == "keyword" else ""


@functools.cache
def _show_reads_a_string() -> bool:
    """Whether `SHOW 'x.parquet'` describes the file, as on DuckDB 1.5. DuckDB 2 reads that
    string as a dotted name (schema `x`, table `parquet`), so a store there is not claimed: a
    view named after it would not be found either."""
    from zarrsql.engine.duckdb_version import MAJOR

    return MAJOR < 2


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
        out.append(Token(pos, kind.name, _token_text(sql[pos:end].strip())))
    return tuple(t for t in out if t.kind != "comment")


#: Where an unquoted token's text ends: whitespace or the start of a comment.
_BARE_TOKEN_END = re.compile(r"\s|--|/\*")
#: The opening of a dollar-quoted string: `$$` or `$tag$`.
_DOLLAR_TAG = re.compile(r"\$[A-Za-z_0-9]*\$")


def _token_text(text: str) -> str:
    """The token at the start of `text`, the text up to the next token. DuckDB 2's tokenizer
    reports a comment as a token of its own; DuckDB 1.5's leaves comments out, so what lies
    between two tokens can end in one (`FROM /* c */`, `; -- done`), cut off here."""
    if "--" not in text and "/*" not in text:
        return text
    opening = 1 if text[:2].upper() in ("E'", "X'", "B'") else 0
    if text[opening : opening + 1] in ("'", '"'):
        close = _closing_quote(text, opening, backslash=opening == 1 and text[0] in "eE")
        return text if close is None else text[: close + 1]
    tag = _DOLLAR_TAG.match(text)
    if tag is not None:
        close = text.find(tag.group(), tag.end())
        return text if close < 0 else text[: close + len(tag.group())]
    bare_end = _BARE_TOKEN_END.search(text, 1)
    return text if bare_end is None else text[: bare_end.start()]


def _closing_quote(text: str, opening: int, *, backslash: bool) -> int | None:
    """The index of the quote closing the one at `opening` (a doubled quote stands for itself;
    with `backslash`, as in `E'...'`, a backslash escapes the next character)."""
    quote, k = text[opening], opening + 1
    while k < len(text):
        if backslash and text[k] == "\\":
            k += 2
            continue
        if text[k] == quote:
            if text[k + 1 : k + 2] != quote:
                return k
            k += 1
        k += 1
    return None


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


def show_tables(sql: str) -> str | None:
    """`sql` if it is just `SHOW TABLES` or `SHOW ALL TABLES` (optionally `FROM db`), or `SHOW`
    or `DESCRIBE` alone (every table, with its columns), from its first token to its last,
    without trailing semicolons and the comments around it, so that it can stand inside a
    subquery (`SHOW TABLES -- note` would swallow what follows it); None for any other
    statement. Each lists tables in a column `name`."""
    toks = tokens(sql)
    while toks and toks[-1].text == ";":
        toks.pop()
    if any(t.text == ";" for t in toks):  # several statements: left as they are
        return None
    words = [t.text.upper() for t in toks[:3]]
    alone = len(toks) == 1 and words[0] in ("SHOW", "DESCRIBE")
    if words[:2] != ["SHOW", "TABLES"] and words != ["SHOW", "ALL", "TABLES"] and not alone:
        return None
    return sql[toks[0].pos : toks[-1].pos + len(toks[-1].text)]


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
