"""What the DuckDB adapter adds to the core's request parsing (`zarrsql.scan.request`):
SQL arguments arrive as JSON from `to_json`, and a `bounds :=` list DuckDB failed to build
gets an error that says why."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from zarrsql.engine.access import policy_from
from zarrsql.engine.functions import ACCESS_ARGUMENTS
from zarrsql.errors import ParameterError
from zarrsql.scan.request import read_request, selection_of, storage_options_of, store_choice_of, store_of

if TYPE_CHECKING:
    from zarrsql.store.access import AccessPolicy

__all__ = [
    "access_of",
    "bounds_list_error",
    "bounds_text",
    "parse_args",
    "read_request",
    "selection_of",
    "storage_options_of",
    "store_choice_of",
    "store_of",
]


_BOUNDS_ARG = re.compile(r"\bbounds\s*:=", re.IGNORECASE)
_NOT_CONVERTED = re.compile(r"Could not convert string [\"'](.*?)[\"'] to ([A-Z0-9_(), ]+)")


def bounds_text(value: Any) -> Any:
    """`bounds` from the Python API with numeric ends written as strings.

    A SQL list holds values of one type, so `[['lat', 10, 20]]` cannot be written in SQL;
    the ends' text is what `bounds :=` reads in any case.
    """
    if not isinstance(value, (list, tuple)):
        return value
    return [
        [e if isinstance(e, (str, bool)) or e is None else repr(e) for e in b] if isinstance(b, (list, tuple)) else b
        for b in value
    ]


def bounds_list_error(message: str, statement: str | None) -> ParameterError | None:
    """A clear error for DuckDB's failure to build a `bounds :=` list mixing names and numbers.

    DuckDB builds the list before zarrsql sees it and fails on the first name it cannot
    convert to the numbers' type; None when `message` is not that failure of this statement.
    """
    found = _NOT_CONVERTED.search(message)
    where = _BOUNDS_ARG.search(statement or "")
    if found is None or where is None or f"'{found.group(1)}'" not in (statement or "")[where.end() :]:
        return None
    return ParameterError(
        f"bounds := could not be built: DuckDB could not convert the string '{found.group(1)}' to "
        f"{found.group(2).strip()}, because a SQL list holds one type and the dimension name stands beside "
        "numbers; write the ends as strings, e.g. bounds := [['lat', '10', '20']]"
    )


def parse_args(text: str) -> dict[str, Any]:
    """A call's arguments, without the file-access settings the macro adds (`access_of`)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ParameterError("internal: arguments are not an object")
    for name in ACCESS_ARGUMENTS:
        value.pop(name, None)
    return value


def access_of(text: str) -> AccessPolicy | None:
    """The file-access settings DuckDB handed a call with its arguments (engine/functions.py),
    None for a call that carries none."""
    value = json.loads(text)
    if not isinstance(value, dict) or "__zarrsql_external" not in value:
        return None
    return policy_from(*(value.get(name) for name in ACCESS_ARGUMENTS))
