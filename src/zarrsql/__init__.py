"""zarrsql: SQL over Zarr stores with DuckDB.

An N-dimensional array becomes a table with one row per cell: a column per dimension (its
coordinate values) and a column per data variable. See `API.md`-level docs in `docs/`.
"""

from __future__ import annotations

from zarrsql.api import (
    read_zarr,
    read_zarr_groups,
    read_zarr_metadata,
    read_zarr_tables,
    read_zarr_views,
    sql,
)
from zarrsql.counters import Trace, trace
from zarrsql.engine.connection import Connection, connect, register
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
from zarrsql.mount import mount, unmount

__version__ = "0.1.0"

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
    "sql",
    "trace",
    "unmount",
]
