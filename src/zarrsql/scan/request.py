"""A read request: every `read_zarr` parameter checked in the core, for any engine.

The DuckDB adapter hands over its SQL arguments as a dict (from `to_json`), a Spark reader
its options; both get the same checks and the same errors here. A parameter of the wrong
shape is refused with its name and the expected form; a string is never accepted where a
list of names is meant.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zarrsql.decode.columns import DecodeOptions
from zarrsql.errors import ParameterError
from zarrsql.store import Store, open_store
from zarrsql.tables.select import Selection


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Everything a `read_zarr` call says, validated (see `read_request`)."""

    store: str
    selection: Selection = field(default_factory=Selection)
    bounds: Any = None
    options: DecodeOptions = field(default_factory=DecodeOptions)
    storage_options: tuple[tuple[str, str], ...] = ()


def open_store_for(request: ReadRequest) -> Store:
    return open_store(request.store, dict(request.storage_options))


def storage_options_tuple(options: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in (options or {}).items()))


def _text(args: Mapping[str, Any], *names: str) -> str | None:
    given = [(n, args.get(n)) for n in names if args.get(n) is not None]
    if len(given) > 1:
        raise ParameterError(f"pass only one of {' or '.join(names)}")
    if not given:
        return None
    name, value = given[0]
    if not isinstance(value, str):
        raise ParameterError(f"{name} := must be a string, got {json.dumps(value)}")
    return value


def _names(args: Mapping[str, Any], name: str) -> tuple[str, ...] | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ParameterError(
            f"{name} := must be a list of non-empty names, e.g. ['time', 'lat'], got {json.dumps(value)}"
        )
    return tuple(value)


def _flag(args: Mapping[str, Any], name: str, default: bool) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ParameterError(f"{name} := must be true or false, got {json.dumps(value)}")
    return value


GEOMETRY_FORMATS = ("native", "wkb")


def _geometry(args: Mapping[str, Any]) -> str:
    value = _text(args, "geometry")
    if value is None:
        return "native"
    if value.lower() not in GEOMETRY_FORMATS:
        raise ParameterError(f"geometry := must be 'native' or 'wkb', got {json.dumps(value)}")
    return value.lower()


def storage_options_of(args: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    value = args.get("storage_options")
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ParameterError("storage_options := must be a MAP of VARCHAR to VARCHAR, e.g. MAP {'anon': 'true'}")
    return storage_options_tuple(value)


def store_of(args: Mapping[str, Any]) -> str:
    store = args.get("store")
    if not isinstance(store, str) or not store:
        raise ParameterError("the first argument must be the store's path or URL as a string")
    return store


def _level(args: Mapping[str, Any]) -> int | None:
    value = args.get("level")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ParameterError(f"level := must be an integer (0 = full resolution), got {json.dumps(value)}")
    return value


LONGITUDE_SETTINGS = (180, 360)


def _longitude(args: Mapping[str, Any]) -> int | None:
    value = args.get("longitude")
    if value is None:
        return None
    if isinstance(value, bool) or value not in LONGITUDE_SETTINGS:
        raise ParameterError(
            f"longitude := must be 180 (longitudes in [-180, 180)) or 360 (in [0, 360)), got {json.dumps(value)}"
        )
    return int(value)


def selection_of(args: Mapping[str, Any]) -> Selection:
    return Selection(
        table_name=_text(args, "table_name", "table"),
        dims=_names(args, "dims"),
        group_path=_text(args, "group_path", "group"),
        array_path=_text(args, "array_path", "array"),
        level=_level(args),
    )


def read_request(args: Mapping[str, Any]) -> ReadRequest:
    """A `ReadRequest` from `read_zarr`'s arguments: `store` plus the named parameters."""
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
            longitude=_longitude(args),
            cell_bounds=_flag(args, "cell_bounds", False),
        ),
        storage_options=storage_options_of(args),
    )
