"""Listings of a store without reading chunk data: arrays, tables, and the views that name them.

These are plain rows (dicts) for `read_zarr_metadata`, `read_zarr_tables` and
`read_zarr_views`; the engine adapter only types and returns them.

The Zarr core is imported by the functions that list, not with the module: the engine's
statement text helpers use `quote_ident` / `quote_text` on every statement, and a
connection that reads no store should not load the core for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zarrsql.errors import ParameterError, SelectionError

if TYPE_CHECKING:
    from zarrsql.discovery.roles import Member
    from zarrsql.metadata.arrays import ArrayMeta
    from zarrsql.metadata.tree import NodeTree
    from zarrsql.store.choice import StoreChoice
    from zarrsql.tables.model import TableInfo


def dtype_text(array: ArrayMeta) -> str:
    d = array.dtype
    if not d.supported:
        return "unsupported"
    if d.kind in ("bool", "int", "uint", "float", "datetime", "timedelta"):
        return str(d.numpy)
    return d.name if array.zarr_format == 3 else {"string": "string"}.get(d.kind, str(d.numpy))


def schema_name(group_path: str) -> str:
    return "main" if group_path == "" else group_path


def _in_scope(path: str, group: str) -> bool:
    return group == "" or path == group or path.startswith(group + "/")


def _scope(tree: NodeTree, group_path: str | None, array_path: str | None) -> tuple[str, str | None]:
    from zarrsql.conventions.model import display_path
    from zarrsql.tables.select import normalize_path

    group = normalize_path(group_path or "")
    array = normalize_path(array_path) if array_path is not None else None
    if array is not None and array not in tree.arrays:
        raise SelectionError(f"array_path '{array}' is not an array of store '{tree.store.url}'")
    if array is None and group not in tree.groups:
        raise SelectionError(f"group_path '{display_path(group)}' is not a group of store '{tree.store.url}'")
    return group, array


def _metadata_row(m: Member) -> dict[str, Any]:
    from zarrsql.discovery.roles import effective_dims
    from zarrsql.metadata.arrays import ArrayMeta
    from zarrsql.tables.select import array_path_dims

    a = m.array
    if not isinstance(a, ArrayMeta):
        return {
            "name": a.path,
            "dims": [],
            "dtype": "unsupported",
            "shape": [],
            "chunk_shape": [],
            "attrs": json.dumps({"error": a.error}),
            "role": "unsupported",
            "array_path_dims": [],
        }
    attrs = dict(a.attrs)
    if not a.dtype.supported:
        attrs = {**attrs, "error": a.dtype.reason}
    declared = effective_dims(a)  # stored names only: a convention's names are array_path_dims
    return {
        "name": a.path,
        "dims": list(declared) if declared is not None else [],
        "dtype": dtype_text(a),
        "shape": list(a.shape),
        "chunk_shape": list(a.chunks),
        "attrs": json.dumps(attrs, default=str),
        "role": m.role,
        "array_path_dims": array_path_dims(m),
    }


def list_metadata(tree: NodeTree, group_path: str | None = None, array_path: str | None = None) -> list[dict[str, Any]]:
    """One row per array (in or below `group_path`, or just `array_path`)."""
    from zarrsql.tables.analyze import analyze_group

    group, array = _scope(tree, group_path, array_path)
    rows: list[dict[str, Any]] = []
    for g in sorted(tree.groups):
        if not _in_scope(g, group):
            continue
        rows.extend(_metadata_row(m) for m in analyze_group(tree, g).members if array is None or m.array.path == array)
    return rows


def _table_row(t: TableInfo) -> dict[str, Any]:
    from zarrsql.conventions.model import display_path

    return {
        "group_path": display_path(t.group_path),
        "schema_name": schema_name(t.group_path),
        "table_name": t.name,
        "dims": list(t.dims),
        "shape": list(t.shape),
        "chunk_shape": list(t.chunk_grid),
        "data_vars": [a.path for a in t.data_vars],
        "coord_vars": [c.path for c in t.coords if c is not None],
    }


def list_tables(tree: NodeTree, group_path: str | None = None, array_path: str | None = None) -> list[dict[str, Any]]:
    """One row per table of every group (in or below `group_path`), or the one `array_path` reads."""
    from zarrsql.tables.analyze import analyze_group
    from zarrsql.tables.model import TableInfo
    from zarrsql.tables.select import Selection, select_table

    group, array = _scope(tree, group_path, array_path)
    if array is not None:
        rt = select_table(tree, Selection(array_path=array))
        info = TableInfo(
            rt.group_path,
            None,
            rt.dims,
            rt.shape,
            rt.chunk_grid,
            tuple(d.array for d in rt.data),
            rt.coords,
            derived=rt.derived,
            hidden=rt.hidden,
        )
        return [_table_row(info)]
    rows: list[dict[str, Any]] = []
    for g in sorted(tree.groups):
        if _in_scope(g, group):
            rows.extend(_table_row(t) for t in analyze_group(tree, g).tables)
    return rows


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def store_arguments(choice: StoreChoice | None) -> list[str]:
    """The `read_zarr` arguments that repeat a store choice (format, version, containers), so
    that a view reads the version it was made for."""
    if choice is None:
        return []
    out = [
        f"{n} := {quote_text(getattr(choice, n))}"
        for n in ("format", "branch", "tag", "snapshot")
        if getattr(choice, n)
    ]
    if choice.as_of is not None:
        out.append(f"as_of := TIMESTAMPTZ {quote_text(choice.as_of.isoformat())}")
    if choice.virtual_chunks:
        pairs = ", ".join(
            f"{quote_text(p)}: {'NULL' if v is None else quote_text(v)}" for p, v in choice.virtual_chunks
        )
        out.append(f"virtual_chunks := MAP {{{pairs}}}")
    return out


def _view_key(t: dict[str, Any]) -> str:
    g = t["group_path"].strip("/")
    return t["table_name"] if not g else f"{g}/{t['table_name']}"


def view_statements(
    tree: NodeTree,
    store: str,
    database: str,
    view_names: Mapping[str, str] | None = None,
    choice: StoreChoice | None = None,
    *,
    options_name: str | None = None,
) -> list[dict[str, Any]]:
    """The statements that mount a store as `database`: ATTACH, CREATE SCHEMA, CREATE VIEW.

    `view_names` renames views; keys are `table` for the root group and `group/path/table`
    for others. A key that names no table, or two views of one schema with one name, is an
    error. Tables without a name get no view. The views never hold storage options: they may
    be credentials, and a view's SQL is shown to anyone (`duckdb_views()`, a database file).
    `options_name` is the opaque name under which the engine keeps the options of this mount
    (engine/secrets.py); each view passes it as `storage_options := MAP {'zarrsql_mount_options':
    name}` and the connection that holds it resolves it when the view is read.
    """
    from zarrsql.store.opening import MOUNT_OPTIONS_KEY

    if not isinstance(database, str) or not database:
        raise ParameterError("the database name must be a non-empty string")
    tables = [t for t in list_tables(tree) if t["table_name"]]
    names = dict(view_names or {})
    keys = {_view_key(t) for t in tables}
    unknown = sorted(k for k in names if k not in keys and k.lower() not in {x.lower() for x in keys})
    if unknown:
        raise ParameterError(f"view_names key(s) {unknown} name no table of the store; its tables: {sorted(keys)}")
    lowered = {k.lower(): v for k, v in names.items()}
    rows: list[dict[str, Any]] = [
        {"schema_name": None, "view_name": None, "sql": f"ATTACH ':memory:' AS {quote_ident(database)}"}
    ]
    seen: dict[tuple[str, str], str] = {}
    made_schemas: set[str] = set()
    for t in tables:
        schema = t["schema_name"]
        view = names.get(_view_key(t), lowered.get(_view_key(t).lower(), t["table_name"]))
        if not isinstance(view, str) or not view:
            raise ParameterError(f"view_names value for '{_view_key(t)}' must be a non-empty name")
        clash = seen.get((schema, view.lower()))
        if clash:
            raise ParameterError(
                f"view_names gives two views of schema '{schema}' the name '{view}' ({clash} and {_view_key(t)})"
            )
        seen[(schema, view.lower())] = _view_key(t)
        if schema != "main" and schema not in made_schemas:
            made_schemas.add(schema)
            rows.append(
                {
                    "schema_name": schema,
                    "view_name": None,
                    "sql": f"CREATE SCHEMA IF NOT EXISTS {quote_ident(database)}.{quote_ident(schema)}",
                }
            )
        args = [quote_text(store)]
        if t["group_path"] != "/":
            args.append(f"group_path := {quote_text(t['group_path'].strip('/'))}")
        args.append(f"table_name := {quote_text(t['table_name'])}")
        if options_name is not None:
            args.append(f"storage_options := MAP {{{quote_text(MOUNT_OPTIONS_KEY)}: {quote_text(options_name)}}}")
        args += store_arguments(choice)
        rows.append(
            {
                "schema_name": schema,
                "view_name": view,
                "sql": f"CREATE OR REPLACE VIEW {quote_ident(database)}.{quote_ident(schema)}.{quote_ident(view)} AS "
                f"SELECT * FROM read_zarr({', '.join(args)})",
            }
        )
    return rows
