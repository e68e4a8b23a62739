"""Spark's string options to `read_zarr`'s parameters, checked by the core.

Spark hands a data source its options as strings with lower-cased keys. Each parameter is
converted to the shape `zarrsql.scan.request.read_request` expects (a list of names, a
bool, JSON bounds, a map of storage options); a value that does not convert is passed on
as the string it is, so the core refuses it with the same message SQL users see.
`virtual_chunks` is a JSON object (`{"file:///data/": null}`), since Spark has no map
options; `as_of` is ISO text, as the core takes it. Three options exist only here: since
Spark's Python data sources have no column pruning and no split size of their own,
`columns` (the columns to decode) and `partition_bytes`; and `pushdown`, which opts in to
filter pushdown (off by default: see `spark/source.py` for the Spark behaviour that makes it
unsafe when a DataFrame is reused).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zarrsql.errors import ParameterError
from zarrsql.store.choice import STORE_ARGUMENT_NAMES

#: Spark's default input split size (spark.sql.files.maxPartitionBytes).
DEFAULT_PARTITION_BYTES = 128 * 1024 * 1024
STORAGE_PREFIX = "storage_options."
#: The store choice (format, version) is text, but `virtual_chunks`, a map, is JSON.
_TEXT = (
    "table_name",
    "table",
    "group_path",
    "group",
    "array_path",
    "array",
    "geometry",
    *(n for n in STORE_ARGUMENT_NAMES if n != "virtual_chunks"),
)
_FLAGS = ("decode_times", "nan_as_null", "cell_bounds")
_INTEGERS = ("level", "longitude")
_JSON = ("bounds", "virtual_chunks")
_OWN = ("columns", "partition_bytes", "pushdown")
#: Keys Spark itself adds for `CREATE TABLE ... USING zarr OPTIONS (...)`: not parameters.
SPARK_KEYS = frozenset({"path", "paths", "owner", "location", "provider", "is_managed_location", "comment"})
KNOWN = frozenset({*_TEXT, *_FLAGS, *_INTEGERS, *_JSON, *_OWN, "dims"})
#: Storage option names that may hold a secret: never written into a table's schema.
_SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas", "session", "signature", "connection")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}


@dataclass(frozen=True, slots=True)
class SparkRead:
    """A Spark read: the core's `read_zarr` arguments plus this source's own three options."""

    args: dict[str, Any]
    columns: tuple[str, ...] | None = None
    partition_bytes: int = DEFAULT_PARTITION_BYTES
    pushdown: bool = False


def _store(options: Mapping[str, str]) -> str:
    """`path` as zarrsql opens it: Spark's catalog rewrites a local path to `file:/...`.

    Spark gives no `path` for `.load()`, a `paths` JSON list for `.load([a, b])`, and no
    options at all to the reader of a catalog table declared with a column list; each is
    refused here, since the core's own message ("the first argument must be ...") speaks of
    SQL's `read_zarr`, not of Spark."""
    path = options.get("path")
    if "paths" in options and path is None:
        raise ParameterError(
            f"path: the zarr source reads one store, got the list {options['paths']}; give one path: .load(path)"
        )
    if not isinstance(path, str) or not path:
        raise ParameterError(
            "path: no store path reached the zarr source; give one path: .load(path). A catalog table "
            "declared with a column list (CREATE TABLE t (x BIGINT, ...) USING zarr OPTIONS (path ...)) "
            "reaches the source without its options: drop the column list (the store gives the columns), "
            "or name the columns with the `columns` option"
        )
    if isinstance(path, str) and path.startswith("file:") and not path.startswith("file://"):
        return path[len("file:") :]
    return path


def _names(value: str) -> Any:
    """A list of names, as JSON (`["a","b"]`) or comma separated (`a, b`)."""
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError:
            return value
    return [part.strip() for part in text.split(",")]


def _flag(value: str) -> Any:
    lowered = value.strip().lower()
    return {"true": True, "false": False}.get(lowered, value)


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _integer(value: str) -> Any:
    try:
        return int(value.strip())
    except ValueError:
        return value


def _pushdown(value: str) -> bool:
    """Strict, unlike the core's flags: a misspelt value must not silently change which rows
    a reused DataFrame returns."""
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ParameterError(f"pushdown: must be 'true' or 'false' (default 'false'), got {value!r}")
    return lowered == "true"


def _size(value: str) -> int:
    text = value.strip().lower().replace(" ", "")
    digits = text.rstrip("kmgb")
    unit = text[len(digits) :]
    if not digits.isdigit() or unit not in _UNITS or int(digits) <= 0:
        raise ParameterError(
            f"partition_bytes: must be a positive size in bytes such as 134217728, '64MB' or '1GB', got {value!r}"
        )
    return int(digits) * _UNITS[unit]


def _parameter_name(key: str) -> str:
    """Spark SQL's OPTIONS also reach a source as `option.<name>`: the name itself."""
    return key[len("option.") :] if key.startswith("option.") else key


def spark_read(options: Mapping[str, str]) -> SparkRead:
    """The `SparkRead` of a data source's options; unknown option names are refused."""
    args: dict[str, Any] = {"store": _store(options)}
    storage: dict[str, str] = {}
    columns = None
    size = DEFAULT_PARTITION_BYTES
    pushdown = False
    for raw_key, value in options.items():
        key = raw_key.lower()
        name = _parameter_name(key)
        if name in SPARK_KEYS or (name != key and name in options):
            continue  # Spark's bookkeeping, or a duplicate `option.x` of an option `x`
        if name.startswith(STORAGE_PREFIX):
            storage[name[len(STORAGE_PREFIX) :]] = value
            continue
        if name not in KNOWN:
            raise ParameterError(
                f"unknown option {raw_key!r} for the zarr data source; the options are "
                f"{', '.join(sorted(KNOWN))} and storage_options.<name>"
            )
        if name in _TEXT:
            args[name] = value
        elif name in _FLAGS:
            args[name] = _flag(value)
        elif name == "dims":
            args[name] = _names(value)
        elif name in _JSON:
            args[name] = _json(value)
        elif name in _INTEGERS:
            args[name] = _integer(value)
        elif name == "columns":
            columns = tuple(_checked_columns(_names(value)))
        elif name == "pushdown":
            pushdown = _pushdown(value)
        else:
            size = _size(value)
    if storage:
        args["storage_options"] = storage
    return SparkRead(args, columns, size, pushdown)


def _checked_columns(value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ParameterError(f"columns: must be a list of column names, e.g. 'time,lat,air', got {json.dumps(value)}")
    refuse_repeated(value, "columns", "name each column once")
    return value


def refuse_repeated(names: Sequence[str], parameter: str, fix: str) -> None:
    """Refuse a column named twice: Spark would otherwise fail deep in its Arrow reader with
    a Java `IllegalArgumentException` that names neither the column nor the option."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ParameterError(f"{parameter}: column {name!r} is named twice; {fix}")
        seen.add(name)


def is_secret(name: str) -> bool:
    """Whether a storage option's name suggests a credential (kept out of table schemas)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def shareable(options: Mapping[str, str]) -> dict[str, str]:
    """The options safe to store in a table's schema: every one but secret storage options,
    whether given as `storage_options.<name>` or as Spark SQL's `option.storage_options.<name>`
    copy of a `CREATE TABLE ... OPTIONS` entry."""
    return {k: v for k, v in options.items() if not _secret_storage_option(k)}


def _secret_storage_option(key: str) -> bool:
    name = _parameter_name(key.lower())
    return name.startswith(STORAGE_PREFIX) and is_secret(name[len(STORAGE_PREFIX) :])
