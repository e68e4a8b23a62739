"""SQL function arguments (as JSON from `to_json`) checked into core requests.

A parameter of the wrong shape is refused with its name and the expected form; a string is
never accepted where a list of names is meant.
"""

from __future__ import annotations

import json
import re
from typing import Any

from zarrsql.decode.columns import DecodeOptions
from zarrsql.errors import ParameterError
from zarrsql.scan import ReadRequest, storage_options_tuple
from zarrsql.tables.select import Selection


def _text(args: dict[str, Any], *names: str) -> str | None:
    given = [(n, args.get(n)) for n in names if args.get(n) is not None]
    if len(given) > 1:
        raise ParameterError(f"pass only one of {' or '.join(names)}")
    if not given:
        return None
    name, value = given[0]
    if not isinstance(value, str):
        raise ParameterError(f"{name} := must be a string, got {json.dumps(value)}")
    return value


def _names(args: dict[str, Any], name: str) -> tuple[str, ...] | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ParameterError(
            f"{name} := must be a list of non-empty names, e.g. ['time', 'lat'], got {json.dumps(value)}"
        )
    return tuple(value)


def _flag(args: dict[str, Any], name: str, default: bool) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ParameterError(f"{name} := must be true or false, got {json.dumps(value)}")
    return value


GEOMETRY_FORMATS = ("native", "wkb")


def _geometry(args: dict[str, Any]) -> str:
    value = _text(args, "geometry")
    if value is None:
        return "native"
    if value.lower() not in GEOMETRY_FORMATS:
        raise ParameterError(f"geometry := must be 'native' or 'wkb', got {json.dumps(value)}")
    return value.lower()


def storage_options_of(args: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    value = args.get("storage_options")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ParameterError("storage_options := must be a MAP of VARCHAR to VARCHAR, e.g. MAP {'anon': 'true'}")
    return storage_options_tuple(value)


def store_of(args: dict[str, Any]) -> str:
    store = args.get("store")
    if not isinstance(store, str) or not store:
        raise ParameterError("the first argument must be the store's path or URL as a string")
    return store


def _level(args: dict[str, Any]) -> int | None:
    value = args.get("level")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ParameterError(f"level := must be an integer (0 = full resolution), got {json.dumps(value)}")
    return value


def selection_of(args: dict[str, Any]) -> Selection:
    return Selection(
        table_name=_text(args, "table_name", "table"),
        dims=_names(args, "dims"),
        group_path=_text(args, "group_path", "group"),
        array_path=_text(args, "array_path", "array"),
        level=_level(args),
    )


def read_request(args: dict[str, Any]) -> ReadRequest:
    """A `ReadRequest` from `read_zarr`'s arguments."""
    sel = selection_of(args)
    if sel.dims is not None and sel.table_name is not None:
        raise ParameterError("pass table_name := or dims :=, not both")
    return ReadRequest(
        store=store_of(args),
        selection=sel,
        bounds=args.get("bounds"),
        options=DecodeOptions(
            decode_times=_flag(args, "decode_times", True),
            nan_as_null=_flag(args, "nan_as_null", True),
            geometry=_geometry(args),
        ),
        storage_options=storage_options_of(args),
    )


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
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ParameterError("internal: arguments are not an object")
    return value
