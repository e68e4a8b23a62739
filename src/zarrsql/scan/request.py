"""A read request: every `read_zarr` parameter checked in the core, for any engine.

The DuckDB adapter hands over its SQL arguments as a dict (from `to_json`), a Spark reader
its options; both get the same checks and the same errors here. A parameter of the wrong
shape is refused with its name and the expected form; a string is never accepted where a
list of names is meant.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zarrsql.decode.columns import DecodeOptions
from zarrsql.errors import ParameterError
from zarrsql.store import Store, open_store
from zarrsql.store.choice import FORMATS, StoreChoice
from zarrsql.tables.select import Selection
from zarrsql.tables.suggest import closest


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """Everything a `read_zarr` call says, validated (see `read_request`)."""

    store: str
    selection: Selection = field(default_factory=Selection)
    bounds: Any = None
    options: DecodeOptions = field(default_factory=DecodeOptions)
    storage_options: tuple[tuple[str, str], ...] = ()
    choice: StoreChoice = field(default_factory=StoreChoice)


def open_store_for(request: ReadRequest) -> Store:
    return open_store(request.store, dict(request.storage_options), request.choice)


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


def _as_of(args: Mapping[str, Any]) -> datetime.datetime | None:
    """`as_of :=` as an aware time: a TIMESTAMP (read as UTC), a TIMESTAMPTZ, or ISO text."""
    value = args.get("as_of")
    if value is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None:
        raise ParameterError(
            f"as_of := must be a time, e.g. as_of := TIMESTAMPTZ '2026-01-31 12:00:00+00' (a TIMESTAMP "
            f"without a zone is read as UTC), got {json.dumps(value)}"
        )
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def _virtual_chunks(args: Mapping[str, Any]) -> tuple[tuple[str, str | None], ...]:
    value = args.get("virtual_chunks")
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(v, str) or v is None for v in value.values()):
        raise ParameterError(
            "virtual_chunks := must be a MAP from URL prefixes to credentials (NULL for none or the "
            f"environment's), e.g. MAP {{'file:///data/': NULL}}, got {json.dumps(value)}"
        )
    return tuple(sorted((str(k), v) for k, v in value.items()))


def store_choice_of(args: Mapping[str, Any]) -> StoreChoice:
    """The format, version and virtual chunk containers a call names (see store/choice.py)."""
    fmt = _text(args, "format")
    if fmt is not None and fmt.lower() not in FORMATS:
        raise ParameterError(f"format := must be one of {', '.join(repr(f) for f in FORMATS)}, got {json.dumps(fmt)}")
    return StoreChoice(
        format=None if fmt is None else fmt.lower(),
        branch=_text(args, "branch"),
        tag=_text(args, "tag"),
        snapshot=_text(args, "snapshot"),
        as_of=_as_of(args),
        virtual_chunks=_virtual_chunks(args),
    )


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


#: The names `read_request` reads: `store` and `read_zarr`'s named parameters (with the
#: spellings `selection_of` also takes). `engine/functions.READ_PARAMS` lists the same names
#: for the SQL macros, apart: importing this module loads the whole core, which the engine
#: defers past `import zarrsql` (tests/unit/test_scan_api_checks.py keeps the two equal).
PARAMETERS = (
    "store",
    "table_name",
    "table",
    "dims",
    "group_path",
    "group",
    "array_path",
    "array",
    "level",
    "bounds",
    "decode_times",
    "nan_as_null",
    "geometry",
    "longitude",
    "cell_bounds",
    "storage_options",
    "format",
    "branch",
    "tag",
    "snapshot",
    "as_of",
    "virtual_chunks",
)


def only_parameters(args: Mapping[str, Any]) -> None:
    """Refuse a name `read_request` would not read, and a mapping without `store`: for a caller
    that builds the mapping itself (a script's `open_scan({...})`), where a misspelt name
    (`bound` for `bounds`) would otherwise be ignored and every row read. (An engine adapter
    passes its own arguments, some for itself, and checks their names as its language does.)"""
    for name in args:
        if name not in PARAMETERS:
            guess = closest(str(name), PARAMETERS)
            hint = f"; did you mean {guess}?" if guess else ""
            raise ParameterError(
                f"{name!r} is not a read_zarr parameter{hint} (the parameters: {', '.join(PARAMETERS)})"
            )
    if "store" not in args:
        raise ParameterError(
            "the parameters have no 'store': pass the store's path or URL, e.g. {'store': 'data.zarr'}"
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
        choice=store_choice_of(args),
    )
