"""Clearer errors for DuckDB's own refusals of a zarrsql call.

DuckDB answers an unknown parameter name with the macro's whole signature, a bare keyword
(`group := ...`) with a syntax error, an unquoted value with a binder error about columns
or operators, and a subquery as an argument (zarr_sample's points written as
`(SELECT ...)`, not as a string) with "Table function cannot contain subqueries". When the
statement's text shows which of zarrsql's arguments caused it, the error is replaced by one
naming that argument and the fix; otherwise DuckDB's error stands.
"""

from __future__ import annotations

import duckdb

from zarrsql.engine.functions import FUNCTIONS, SIGNATURES
from zarrsql.engine.sqltext import Argument, Call, zarrsql_calls
from zarrsql.errors import ParameterError

#: Parameter names that are SQL keywords, so they must be written in double quotes.
KEYWORD_NAMES = {"table": "table_name", "group": "group_path", "array": "array_path"}

#: Names other tools give a parameter (Icechunk's, xarray's): the one zarrsql calls it.
ALIASES = {
    "snapshot_id": "snapshot",
    "ref": "branch",
    "version": "tag",
    "at": "as_of",
    "asof": "as_of",
    "timestamp": "as_of",
    "authorize_virtual_chunk_access": "virtual_chunks",
    "virtual_chunk_containers": "virtual_chunks",
    "engine": "format",
}


def unknown_parameter(function: str, name: str, *, python: bool = False) -> ParameterError | None:
    """The error for `name` if `function` has no such parameter, else None; with `python`,
    worded for `zarrsql.<function>(name=...)`."""
    named = SIGNATURES[function][1]
    if name.lower() in {n.lower() for n in named}:
        return None
    mark = "=" if python else " :="
    from zarrsql.tables.suggest import closest

    near = closest(name, named)
    close = [near] if near is not None else []
    alias = ALIASES.get(name.lower())
    if alias in named:
        close = [alias]
    hint = f"; did you mean {close[0]}{mark}?" if close else ""
    listed = ", ".join(named) if named else "none"
    if python:
        return ParameterError(
            f"zarrsql.{function}() got an unknown keyword argument '{name}'{hint} (its keywords: {listed})"
        )
    return ParameterError(f"{function}() has no parameter named '{name}'{hint} (its named parameters: {listed})")


def _unknown(calls: list[Call]) -> ParameterError | None:
    for call in calls:
        for a in call.arguments:
            err = unknown_parameter(call.function, a.name) if a.name is not None else None
            if err is not None:
                return err
    return None


def _keyword(calls: list[Call]) -> ParameterError | None:
    for call in calls:
        for a in call.arguments:
            if a.keyword and a.name in KEYWORD_NAMES:
                value = _shown(a) or "'...'"
                return ParameterError(
                    f"{a.name} is an SQL keyword, so {call.function}()'s parameter must be written in double "
                    f'quotes: "{a.name}" := {value}, or use {KEYWORD_NAMES[a.name]} := {value}'
                )
    return None


def _shown(a: Argument) -> str:
    """The value as a string literal: quoted as the user most likely meant it."""
    text = a.text
    if not text:
        return ""
    if len(a.value) == 1 and a.value[0].kind == "string_const":
        return text
    return "'" + text.strip("'\"").replace("'", "''") + "'"


def _bare_words(a: Argument) -> bool:
    """Whether the value has a bare name in it (not a function call, not after `::`, not
    in a subquery)."""
    toks = a.value
    if any(t.kind == "keyword" and t.text.upper() == "SELECT" for t in toks):
        return False
    for k, t in enumerate(toks):
        after = toks[k + 1].text if k + 1 < len(toks) else ""
        before = toks[k - 1].text if k else ""
        if t.kind == "identifier" and after != "(" and before != "::":
            return True
    return False


def _unquoted(calls: list[Call]) -> ParameterError | None:
    for call in calls:
        positional = SIGNATURES[call.function][0]
        for k, a in enumerate(call.arguments):
            if not _bare_words(a):
                continue
            name = a.name or (positional[k] if k < len(positional) else f"argument {k + 1}")
            return ParameterError(
                f"the value of {call.function}()'s {name} is not quoted, so DuckDB reads it as SQL (a column or an "
                f"expression); strings take single quotes: {name} := {_shown(a)}"
                if a.name
                else f"the {name} of {call.function}() is not quoted, so DuckDB reads it as SQL; strings take "
                f"single quotes: {call.function}({_shown(a)}, ...)"
            )
    return None


#: Words that open a query: a `(` followed by one of them, in an argument, is a subquery.
_QUERY_WORDS = frozenset({"SELECT", "FROM", "VALUES", "WITH", "TABLE", "PIVOT", "UNPIVOT"})


def _has_subquery(a: Argument) -> bool:
    toks = a.value
    return any(
        t.text == "(" and k + 1 < len(toks) and toks[k + 1].text.upper() in _QUERY_WORDS for k, t in enumerate(toks)
    )


def _as_string(a: Argument) -> str:
    """The argument as a string literal, without the parentheses around a whole subquery."""
    text = a.text.strip()
    depth, closes_first = 0, None
    for k, ch in enumerate(text):  # where the first `(` closes (quotes aside: only a hint's text)
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            closes_first = k
            break
    if text.startswith("(") and closes_first == len(text) - 1:
        text = text[1:-1].strip()
    return "'" + text.replace("'", "''") + "'"


def _subquery(calls: list[Call]) -> ParameterError | None:
    """DuckDB refuses a subquery among a table function's arguments, and zarrsql's functions
    are table functions: zarr_sample's points take the query as a string instead; any other
    value is computed first."""
    for call in calls:
        positional = SIGNATURES[call.function][0]
        for k, a in enumerate(call.arguments):
            if not _has_subquery(a):
                continue
            name = a.name or (positional[k] if k < len(positional) else f"argument {k + 1}")
            if call.function == "zarr_sample" and name == "points":
                first = call.arguments[0]
                literal = first.name is None and len(first.value) == 1 and first.value[0].kind == "string_const"
                store = first.text if literal else "'store.zarr'"
                return ParameterError(
                    "zarr_sample's points are a query as a string (or a table name): DuckDB takes no subquery "
                    f"in a table function's arguments; pass the query as a string: zarr_sample({store}, "
                    f"{_as_string(a)})"
                )
            return ParameterError(
                f"the {name} of {call.function}() is a subquery, which DuckDB does not take in a table function's "
                'arguments: compute the value first and pass it as a literal or a parameter (con.sql("... := ?", '
                "params=[value]))"
            )
    return None


def explain(err: duckdb.Error, text: str | None) -> ParameterError | None:
    """A clearer error for DuckDB's `err` on the statement `text`, or None to keep DuckDB's."""
    if not text:
        return None
    message = str(err)
    calls = zarrsql_calls(text, FUNCTIONS)
    if not calls:
        return None
    if isinstance(err, duckdb.BinderException) and "does not support the supplied arguments" in message:
        return _unknown(calls)
    if isinstance(err, duckdb.ParserException) and "syntax error" in message:
        return _keyword(calls)
    if isinstance(err, duckdb.BinderException) and "cannot contain subquer" in message:
        return _subquery(calls)
    if isinstance(err, duckdb.BinderException) and "lateral join column" in message:
        return None  # `read_zarr(t.p)`: DuckDB's own error already says only literals are taken
    if isinstance(err, duckdb.BinderException) and "subquer" not in message:
        return _unquoted(calls)
    return None
