"""The exception tree of zarrsql: every error a user can see derives from `ZarrSQLError`.

    ZarrSQLError
    ├── StoreNotFoundError        (also FileNotFoundError)  no store, or no Zarr metadata, at a path
    ├── StoreReadError            (also OSError)            a key could not be read (I/O, network)
    ├── MetadataError             (also ValueError)         zarr.json / .zarray / .zmetadata unreadable or invalid
    ├── SelectionError            (also LookupError)        table_name / dims / group_path / array_path pick nothing,
    │                                                       or more than one table without a selection
    ├── ParameterError            (also ValueError)         a parameter of the wrong shape or value (bounds, dims, ...)
    │   └── StoreArgumentError    (also TypeError)          a store given as an object zarrsql cannot read (pass a path)
    ├── UnsupportedError          (also NotImplementedError) a dtype or codec this reader cannot decode
    ├── DecodeError               (also ValueError)         chunk bytes that do not decode to the declared shape
    ├── AccessDeniedError         (also PermissionError)    a location the engine's file-access settings forbid
    │                                                       (DuckDB's enable_external_access = false)
    ├── QueryInterrupted                                    Ctrl-C (or a notebook's interrupt) met while a scan
                                                            read; the connection re-raises it as KeyboardInterrupt
    └── WriteError                                          writing a store failed or was refused; nothing half-written
        ├── StoreExistsError      (also FileExistsError)    mode="w-" and something is already at the target
        ├── StoreLockedError      (also BlockingIOError)    another live writer holds the store's writer lock
        ├── AppendSchemaError     (also ValueError)         appended columns differ from the store's columns
        └── UnwritableColumnError (also TypeError)          a column type the chosen layout cannot hold

    ZarrSQLWarning                (a UserWarning)           something left out rather than refused (a table-
                                                            convention column of an unknown encoding-type)

Each message names the problem, where it is (store, group, array, parameter) and what to do about it.
Inside SQL the same text reaches the user as a DuckDB error.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "AppendSchemaError",
    "DecodeError",
    "MetadataError",
    "ParameterError",
    "QueryInterrupted",
    "SelectionError",
    "StoreArgumentError",
    "StoreExistsError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadError",
    "UnsupportedError",
    "UnwritableColumnError",
    "WriteError",
    "ZarrSQLError",
    "ZarrSQLWarning",
]


class ZarrSQLError(Exception):
    """The root of every error zarrsql raises on purpose."""


class StoreNotFoundError(ZarrSQLError, FileNotFoundError):
    """The path or URL holds no Zarr store (or no node at the requested path)."""


class StoreReadError(ZarrSQLError, OSError):
    """Reading a key failed for a reason other than the key not existing."""


class MetadataError(ZarrSQLError, ValueError):
    """A metadata document is missing, not JSON, or not valid Zarr metadata."""


class SelectionError(ZarrSQLError, LookupError):
    """A table, group or array selection matches nothing, or is ambiguous."""


class ParameterError(ZarrSQLError, ValueError):
    """A parameter has the wrong type, shape or value."""


class StoreArgumentError(ParameterError, TypeError):
    """The store was given as an object of a type zarrsql cannot take (not a path or URL)."""


class UnsupportedError(ZarrSQLError, NotImplementedError):
    """A data type, codec or layout that zarrsql cannot read (yet)."""


class DecodeError(ZarrSQLError, ValueError):
    """Chunk bytes that cannot be decoded into the array's declared chunk."""


class AccessDeniedError(ZarrSQLError, PermissionError):
    """The engine forbids reading or writing this location (DuckDB's `enable_external_access
    = false`, with the location in none of `allowed_directories` / `allowed_paths`)."""


class QueryInterrupted(ZarrSQLError):
    """Ctrl-C arrived while a scan was reading: the scan stopped and dropped its queued work.

    It travels through DuckDB as the scan's error (so the query ends at once, whichever thread
    met the signal); `zarrsql.Connection` turns it back into `KeyboardInterrupt`.
    """


class WriteError(ZarrSQLError):
    """Writing a store failed or was refused; the message says what is left at the target
    (nothing for a new store, the old store unchanged for a replacement or an append)."""


class StoreExistsError(WriteError, FileExistsError):
    """mode="w-" and the target already holds something (pass mode="w" to replace it)."""


class StoreLockedError(WriteError, BlockingIOError):
    """Another live process holds the store's writer lock (one writer at a time)."""


class AppendSchemaError(WriteError, ValueError):
    """The rows to append do not have the store's columns and types."""


class UnwritableColumnError(WriteError, TypeError):
    """A column whose type the chosen layout cannot store (e.g. a STRUCT in a grid)."""


class ZarrSQLWarning(UserWarning):
    """Something zarrsql leaves out instead of refusing (e.g. a column it cannot interpret).

    Silence it with `warnings.filterwarnings("ignore", category=zarrsql.ZarrSQLWarning)`.
    """
