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
from typing import TYPE_CHECKING, Any

from zarrsql import compiled_once

compiled_once.install()  # before the first class is defined: see compiled_once's docstring

from zarrsql.counters import Trace, trace  # noqa: E402 - after install()
from zarrsql.errors import (  # noqa: E402
    AccessDeniedError,
    AppendSchemaError,
    DecodeError,
    MetadataError,
    ParameterError,
    SelectionError,
    StoreArgumentError,
    StoreExistsError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadError,
    UnsupportedError,
    UnwritableColumnError,
    WriteError,
    ZarrSQLError,
    ZarrSQLWarning,
)
from zarrsql.settings import get_option, set_option  # noqa: E402

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from zarrsql.engine.api import (
        mount,
        read_zarr,
        read_zarr_groups,
        read_zarr_metadata,
        read_zarr_tables,
        read_zarr_views,
        sample,
        sql,
        unmount,
    )
    from zarrsql.engine.connection import Connection, connect, register
    from zarrsql.notebook.describe import describe
    from zarrsql.server.serving import serve
    from zarrsql.write.api import to_zarr
    from zarrsql.write.xarray_out import to_xarray

__version__ = "0.1.0"

#: Public name → the module that defines it; imported on first access.
_LAZY = {
    "Connection": "zarrsql.engine.connection",
    "connect": "zarrsql.engine.connection",
    "register": "zarrsql.engine.connection",
    "read_zarr": "zarrsql.engine.api",
    "read_zarr_groups": "zarrsql.engine.api",
    "read_zarr_metadata": "zarrsql.engine.api",
    "read_zarr_tables": "zarrsql.engine.api",
    "read_zarr_views": "zarrsql.engine.api",
    "sample": "zarrsql.engine.api",
    "sql": "zarrsql.engine.api",
    "mount": "zarrsql.engine.api",
    "unmount": "zarrsql.engine.api",
    "describe": "zarrsql.notebook.describe",
    "to_xarray": "zarrsql.write.xarray_out",
    "to_zarr": "zarrsql.write.api",
    "serve": "zarrsql.server.serving",
}

__all__ = [
    "AccessDeniedError",
    "AppendSchemaError",
    "Connection",
    "DecodeError",
    "MetadataError",
    "ParameterError",
    "SelectionError",
    "StoreArgumentError",
    "StoreExistsError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadError",
    "Trace",
    "UnsupportedError",
    "UnwritableColumnError",
    "WriteError",
    "ZarrSQLError",
    "ZarrSQLWarning",
    "__version__",
    "connect",
    "describe",
    "get_option",
    "mount",
    "read_zarr",
    "read_zarr_groups",
    "read_zarr_metadata",
    "read_zarr_tables",
    "read_zarr_views",
    "register",
    "sample",
    "set_option",
    "serve",
    "sql",
    "to_xarray",
    "to_zarr",
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
    importlib.import_module("zarrsql.notebook.progress").install()  # scans are about to run
    return value


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext zarrsql`: the `%zarrsql` / `%%zarrsql` magics (see docs/notebooks.md)."""
    from zarrsql.notebook.magics import load

    load(ipython)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
