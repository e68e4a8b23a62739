"""zarrsql: SQL over Zarr stores with DuckDB.

An N-dimensional array becomes a table with one row per cell: a column per dimension (its
coordinate values) and a column per data variable. See the guides in `docs/`.

`import zarrsql` is cheap: the error classes and `trace()` load at once, everything that needs
DuckDB or pyarrow (`connect`, `read_zarr`, `mount`, ...) loads on first use through the
module's `__getattr__`. So the command line answers `--help` without starting DuckDB, and a
program that only catches `zarrsql.ZarrSQLError` pays nothing for it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from zarrsql.counters import Trace, trace
from zarrsql.errors import (
    DecodeError,
    MetadataError,
    ParameterError,
    SelectionError,
    StoreArgumentError,
    StoreNotFoundError,
    StoreReadError,
    UnsupportedError,
    ZarrSQLError,
    ZarrSQLWarning,
)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from zarrsql.api import read_zarr, read_zarr_groups, read_zarr_metadata, read_zarr_tables, read_zarr_views, sql
    from zarrsql.engine.connection import Connection, connect, register
    from zarrsql.mount import mount, unmount
    from zarrsql.server.serving import serve

__version__ = "0.1.0"

#: Public name → the module that defines it; imported on first access.
_LAZY = {
    "Connection": "zarrsql.engine.connection",
    "connect": "zarrsql.engine.connection",
    "register": "zarrsql.engine.connection",
    "read_zarr": "zarrsql.api",
    "read_zarr_groups": "zarrsql.api",
    "read_zarr_metadata": "zarrsql.api",
    "read_zarr_tables": "zarrsql.api",
    "read_zarr_views": "zarrsql.api",
    "sql": "zarrsql.api",
    "mount": "zarrsql.mount",
    "unmount": "zarrsql.mount",
    "serve": "zarrsql.server.serving",
}

__all__ = [
    "Connection",
    "DecodeError",
    "MetadataError",
    "ParameterError",
    "SelectionError",
    "StoreArgumentError",
    "StoreNotFoundError",
    "StoreReadError",
    "Trace",
    "UnsupportedError",
    "ZarrSQLError",
    "ZarrSQLWarning",
    "__version__",
    "connect",
    "mount",
    "read_zarr",
    "read_zarr_groups",
    "read_zarr_metadata",
    "read_zarr_tables",
    "read_zarr_views",
    "register",
    "serve",
    "sql",
    "trace",
    "unmount",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (PEP 562) and keep the name bound."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zarrsql' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(ModuleType):
    """The package's module type: keeps `zarrsql.mount` the function.

    Importing the submodule `zarrsql.mount` makes Python set the package attribute `mount` to
    that module. With lazy imports this can happen after `zarrsql.mount` was first read (or
    before, from `from zarrsql.mount import ...`), so the function is put back in its place.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and _LAZY.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
