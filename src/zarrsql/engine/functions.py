"""The SQL surface installed on a connection: table macros over two Python UDFs.

DuckDB's Python client has no table functions, so each SQL function is a temporary table
macro. `read_zarr(...)` folds its arguments to JSON and calls the connection's scan UDF, which opens
the table and returns the name of a registered scan for it (`query_table` then reads that
name); a name not registered yet is recorded, and the connection wrapper registers it and
runs the statement again. The listings work the same way: their
UDF computes the rows while the statement is bound (so errors arrive before any row) and
names a registered Arrow table holding them, keyed by their content.
"""

from __future__ import annotations

from zarrsql.store.choice import STORE_ARGUMENT_NAMES

#: The store's format and, for versioned stores, the version and virtual chunk containers.
STORE_PARAMS = list(STORE_ARGUMENT_NAMES)
READ_PARAMS = [
    "table_name",
    '"table"',
    "dims",
    "group_path",
    '"group"',
    "array_path",
    '"array"',
    "level",
    "bounds",
    "decode_times",
    "nan_as_null",
    "geometry",
    "longitude",
    "cell_bounds",
    "storage_options",
    *STORE_PARAMS,
]
SAMPLE_PARAMS = ["method", "tolerance", *READ_PARAMS]
LIST_PARAMS = ["group_path", '"group"', "array_path", '"array"', "storage_options", *STORE_PARAMS]

VIEWS_PARAMS = ["view_names", "storage_options", *STORE_PARAMS]
MOUNT_PARAMS = ["view_names", "existing", '"replace"', "storage_options", *STORE_PARAMS]


def _bare(params: list[str]) -> tuple[str, ...]:
    return tuple(p.strip('"') for p in params)


#: Each SQL function's positional arguments and named parameters (names unquoted), for the
#: checks the connection makes on a statement's text (`=` for `:=`, unknown names).
SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "read_zarr": (("store",), _bare(READ_PARAMS)),
    "read_zarr_metadata": (("store",), _bare(LIST_PARAMS)),
    "read_zarr_tables": (("store",), _bare(LIST_PARAMS)),
    "read_zarr_groups": (("store",), _bare(LIST_PARAMS)),
    "read_zarr_views": (("store", "database"), _bare(VIEWS_PARAMS)),
    "zarr_mount": (("store", "database"), _bare(MOUNT_PARAMS)),
    "zarr_sample": (("store", "points"), _bare(SAMPLE_PARAMS)),
    "zarr_unmount": (("database",), ()),
    "zarr_mounts": ((), ("database",)),
}
FUNCTIONS = frozenset(SIGNATURES)

METADATA_COLUMNS = {
    "name": "VARCHAR",
    "dims": "VARCHAR[]",
    "dtype": "VARCHAR",
    "shape": "UBIGINT[]",
    "chunk_shape": "UBIGINT[]",
    "attrs": "VARCHAR",
    "role": "VARCHAR",
    "array_path_dims": "VARCHAR[]",
}
TABLES_COLUMNS = {
    "group_path": "VARCHAR",
    "schema_name": "VARCHAR",
    "table_name": "VARCHAR",
    "dims": "VARCHAR[]",
    "shape": "UBIGINT[]",
    "chunk_shape": "UBIGINT[]",
    "data_vars": "VARCHAR[]",
    "coord_vars": "VARCHAR[]",
}
VIEWS_COLUMNS = {"schema_name": "VARCHAR", "view_name": "VARCHAR", "sql": "VARCHAR"}


#: The arguments that carry DuckDB's file-access settings to the UDFs, evaluated by DuckDB
#: when it binds the call (engine/access.py): a statement's reads obey the rules of the
#: moment without a query of their own, and a relation bound again after a change of them
#: hands over the new ones. Flat beside the parameters, so the call nests no deeper
#: (`max_expression_depth`).
ACCESS_ARGUMENTS = {
    "__zarrsql_external": "current_setting('enable_external_access')",
    "__zarrsql_directories": "current_setting('allowed_directories')",
    "__zarrsql_paths": "current_setting('allowed_paths')",
}


def _struct(params: list[str], extra: dict[str, str]) -> str:
    fields = [f"'{k}': {v}" for k, v in extra.items()]
    fields += [f"'{p.strip(chr(34))}': {p}" for p in params]
    return "{" + ", ".join(fields or ["'_': NULL"]) + "}"


def _signature(params: list[str]) -> str:
    return ", ".join(f"{p} := NULL" for p in params)


def _listing_macro(udf: str, name: str, kind: str, leading: list[str], params: list[str]) -> str:
    args = _struct(params, {**{p: p for p in leading}, **ACCESS_ARGUMENTS})
    sig = ", ".join([*leading, _signature(params)])
    return (
        f"CREATE OR REPLACE TEMP MACRO {name}({sig}) AS TABLE "
        f"SELECT * FROM query_table({udf}('{kind}', to_json({args})::VARCHAR))"
    )


def _action_macro(udf: str, name: str, kind: str, leading: list[str], params: list[str]) -> str:
    args = _struct(params, {p: p for p in leading})
    sig = ", ".join([*leading, _signature(params)]) if params else ", ".join(leading)
    return (
        f"CREATE OR REPLACE TEMP MACRO {name}({sig}) AS TABLE "
        f"SELECT * FROM query_table({udf}('{kind}', to_json({args})::VARCHAR))"
    )


def macro_statements(scan_udf: str, list_udf: str, action_udf: str) -> dict[str, str]:
    """The CREATE MACRO statement of every zarrsql SQL function, by name, calling the given
    UDFs (a connection creates the ones a statement names, `Connection._install`)."""
    args = _struct(READ_PARAMS, {"store": "store", **ACCESS_ARGUMENTS})
    read = (
        f"CREATE OR REPLACE TEMP MACRO read_zarr(store, {_signature(READ_PARAMS)}) AS TABLE "
        f"SELECT * FROM query_table({scan_udf}(to_json({args})::VARCHAR))"
    )
    return {
        "read_zarr": read,
        "read_zarr_metadata": _listing_macro(list_udf, "read_zarr_metadata", "metadata", ["store"], LIST_PARAMS),
        "read_zarr_tables": _listing_macro(list_udf, "read_zarr_tables", "tables", ["store"], LIST_PARAMS),
        "read_zarr_groups": _listing_macro(list_udf, "read_zarr_groups", "tables", ["store"], LIST_PARAMS),
        "read_zarr_views": _listing_macro(list_udf, "read_zarr_views", "views", ["store", "database"], VIEWS_PARAMS),
        "zarr_mount": _action_macro(action_udf, "zarr_mount", "mount", ["store", "database"], MOUNT_PARAMS),
        "zarr_sample": _action_macro(action_udf, "zarr_sample", "sample", ["store", "points"], SAMPLE_PARAMS),
        "zarr_unmount": _action_macro(action_udf, "zarr_unmount", "unmount", ["database"], []),
        "zarr_mounts": _action_macro(action_udf, "zarr_mounts", "mounts", [], ["database"]),
    }
