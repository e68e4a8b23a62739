"""`COPY (SELECT ...) TO 'out.zarr' (FORMAT zarr, ...)` on a zarrsql connection.

DuckDB cannot be given a COPY format from Python, so the zarrsql connection recognises the
statement itself (a `.zarr` target or `FORMAT zarr`) and hands it here. The options are
`to_zarr`'s keywords: `DIMS (time, lat)`, `LAYOUT grid|table`, `CHUNKS (10, 20)` (or one
number), `MODE create|overwrite|append` (or `'w-'`, `'w'`, `'a'`), `APPEND_DIM time`,
`ZARR_FORMAT 2|3`, `CONSOLIDATED true|false`. Option names and the words FORMAT, LAYOUT, MODE
and CONSOLIDATED take are case-insensitive, as DuckDB's own COPY options are; column names
(DIMS, APPEND_DIM) are kept as written. The result is DuckDB's for a COPY: one row,
`Count`, the rows written. As in DuckDB, a table may be given with a column list
(`COPY t(a, b) TO ...`). Prepared parameters (`?`, `$1`) are refused: the statement is run by
the writers, not prepared by DuckDB, so the values would never reach it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zarrsql.engine.sqltext import Token, tokens
from zarrsql.errors import ParameterError

__all__ = ["CopyToZarr", "parse_copy", "run_copy"]

_MODES = {"create": "w-", "w-": "w-", "overwrite": "w", "w": "w", "replace": "w", "append": "a", "a": "a"}
_OPTIONS = ("format", "dims", "layout", "chunks", "mode", "append_dim", "zarr_format", "consolidated")


@dataclass(frozen=True)
class CopyToZarr:
    """A parsed COPY to Zarr: the query whose rows are written, the target, to_zarr keywords."""

    query: str
    store: str
    options: dict[str, Any] = field(default_factory=dict)


def _text(token: Token) -> str:
    """A token's value: a string constant unquoted, a quoted identifier as written, a bare
    word as is."""
    t = token.text
    if len(t) > 1 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1].replace(t[0] * 2, t[0])
    return t


def _closing(toks: list[Token], k: int) -> int:
    """The index of the `)` matching the `(` at `k`."""
    depth = 0
    for j in range(k, len(toks)):
        if toks[j].text == "(":
            depth += 1
        elif toks[j].text == ")":
            depth -= 1
            if depth == 0:
                return j
    raise ParameterError("the COPY statement has an unclosed parenthesis")


def parse_copy(sql: str) -> CopyToZarr:
    """The parts of `COPY <query or table> TO '<store>' (<options>)`."""
    toks = tokens(sql)
    while toks and toks[-1].text == ";":
        toks.pop()
    if any(t.text == ";" for t in toks):
        raise ParameterError(
            "a COPY ... (FORMAT zarr) must be run as a statement of its own; split the SQL and run it alone"
        )
    if not toks or toks[0].text.upper() != "COPY" or len(toks) < 4:
        raise ParameterError("a COPY to Zarr is written COPY (SELECT ...) TO 'out.zarr' (FORMAT zarr, DIMS (...))")
    if toks[1].text == "(":
        end = _closing(toks, 1)
        query = sql[toks[1].pos + 1 : toks[end].pos]
        k = end + 1
    else:
        k = next((j for j in range(1, len(toks)) if toks[j].text.upper() == "TO"), len(toks))
        query = _table_query(sql, toks[1:k])
    if k + 1 >= len(toks) or toks[k].text.upper() != "TO" or toks[k + 1].kind != "string_const":
        raise ParameterError("a COPY to Zarr needs TO '<store path or URL>' after the query")
    store = _text(toks[k + 1])
    _refuse_parameters(toks[:k], store)
    options: dict[str, Any] = {}
    rest = toks[k + 2 :]
    if rest:
        if rest[0].text != "(" or _closing(rest, 0) != len(rest) - 1:
            raise ParameterError(f"after TO '{store}' a COPY takes its options in parentheses: (FORMAT zarr, ...)")
        options = _options(rest[1:-1])
    return CopyToZarr(query, store, options)


def _table_query(sql: str, table: list[Token]) -> str:
    """The query of `COPY <table> TO` or, with a column list, `COPY <table>(a, b) TO`."""
    opening = next((j for j, t in enumerate(table) if t.text == "("), None)
    if opening is not None and opening > 0 and _closing(table, opening) == len(table) - 1:
        name = sql[table[0].pos : table[opening - 1].pos + len(table[opening - 1].text)]
        return f"SELECT {sql[table[opening].pos + 1 : table[-1].pos]} FROM {name}"
    return "SELECT * FROM " + sql[table[0].pos : table[-1].pos + len(table[-1].text)]


def _refuse_parameters(toks: list[Token], store: str) -> None:
    """A prepared parameter in the query would never get its value: the writers run the query
    themselves, after DuckDB was given the COPY's values (which it has nowhere to put)."""
    for t, after in zip(toks, [*toks[1:], None], strict=True):
        numbered = t.text == "$" and after is not None and after.pos == t.pos + 1
        if t.text == "?" or numbered:
            raise ParameterError(
                f"a COPY to Zarr ('{store}') cannot take prepared parameters (? or $1): zarrsql runs its query "
                "itself, so the values would not reach it; write the values into the SQL, or call "
                f"zarrsql.to_zarr(con.sql(query, params=[...]), '{store}', ...) with the same options as keywords"
            )


def _options(toks: list[Token]) -> dict[str, Any]:
    """The options as to_zarr keywords, each checked by name."""
    groups: list[list[Token]] = [[]]
    depth = 0
    for t in toks:
        depth += t.text == "("
        depth -= t.text == ")"
        if t.text == "," and depth == 0:
            groups.append([])
        else:
            groups[-1].append(t)
    out: dict[str, Any] = {}
    for group in groups:
        if not group:
            continue
        name = _text(group[0]).lower()
        if name not in _OPTIONS:
            raise ParameterError(
                f"COPY to Zarr has no option {group[0].text}; its options are {', '.join(o.upper() for o in _OPTIONS)}"
            )
        out[name] = _value(name, group[1:])
    return _keywords(out)


def _value(name: str, toks: list[Token]) -> Any:
    if not toks:
        raise ParameterError(f"the COPY option {name.upper()} needs a value")
    if toks[0].text == "(":
        items = [t for t in toks[1:-1] if t.text != ","]
        return [_scalar(t) for t in items]
    if len(toks) != 1:
        raise ParameterError(f"the COPY option {name.upper()} takes one value or a list in parentheses")
    return _scalar(toks[0])


def _scalar(token: Token) -> Any:
    if token.kind == "numeric_const":
        return int(token.text) if token.text.isdigit() else float(token.text)
    if token.kind == "keyword" and token.text.lower() in ("true", "false"):
        return token.text.lower() == "true"
    return _text(token)


def _keywords(raw: dict[str, Any]) -> dict[str, Any]:
    """Options to to_zarr's keywords: FORMAT must be zarr, MODE words mapped, lists kept."""
    fmt = raw.pop("format", "zarr")
    if str(fmt).lower() != "zarr":
        raise ParameterError(f"a COPY to a .zarr target writes FORMAT zarr, got FORMAT {fmt}; drop FORMAT or use zarr")
    if "mode" in raw:
        mode = str(raw["mode"]).lower()
        if mode not in _MODES:
            raise ParameterError(f"COPY option MODE is create, overwrite or append, got {raw['mode']}")
        raw["mode"] = _MODES[mode]
    if "dims" in raw and not isinstance(raw["dims"], list):
        raw["dims"] = [raw["dims"]]
    if "layout" in raw:  # a word, as DuckDB's own option values: LAYOUT TABLE is LAYOUT table
        raw["layout"] = str(raw["layout"]).lower()
    if "append_dim" in raw:  # a column's name: as written
        raw["append_dim"] = str(raw["append_dim"])
    if isinstance(raw.get("consolidated"), str | int):
        raw["consolidated"] = _boolean(raw["consolidated"])
    if isinstance(raw.get("zarr_format"), str) and raw["zarr_format"].strip().isdigit():
        raw["zarr_format"] = int(raw["zarr_format"])  # '3' as DuckDB would cast it
    return raw


def _boolean(value: str | int) -> Any:
    """A COPY boolean as DuckDB casts one (true/false in any case, 't'/'f', 1/0); anything
    else is left for to_zarr to refuse, naming it."""
    words = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}
    return words.get(str(value).strip().lower(), value) if not isinstance(value, bool) else value


def run_copy(connection: Any, sql: str) -> int | None:
    """Run a COPY to Zarr on the zarrsql `connection`: the rows written (None if unknown)."""
    from zarrsql.write.api import write_zarr

    statement = parse_copy(sql)
    return write_zarr(statement.query, statement.store, connection=connection, **statement.options)
