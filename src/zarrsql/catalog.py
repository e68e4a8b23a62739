"""Listings of a store without reading chunk data: arrays, tables, and the views that name them.

These are plain rows (dicts) for `read_zarr_metadata`, `read_zarr_tables` and
`read_zarr_views`; the engine adapter only types and returns them.

The Zarr core is imported by the functions that list, not with the module: the engine's
statement text helpers use `quote_ident` / `quote_text` on every statement, and a
connection that reads no store should not load the core for them.

A group's schema is its path (the root's is `main`), unless DuckDB could not keep that name
apart: its schema names ignore case, and an attached database keeps `information_schema` and
`pg_catalog` for itself. Then `schema_names` gives the group a numbered suffix (`grp_1`), so
that no view replaces another's and no schema reads another group; `read_zarr_tables`,
`read_zarr_views` and the mount use the same names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zarrsql.errors import ParameterError, SelectionError, StoreReadError

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


#: Schema names (lowered) an attached DuckDB database keeps for itself: no view can be made in
#: them, so a group of that name always gets another.
_KEPT_BY_DUCKDB = frozenset({"information_schema", "pg_catalog"})

#: The `tree.derived` key of `schema_names`' answer.
_SCHEMA_NAMES = ("catalog", "schema_names")


def schema_name(tree: NodeTree, group_path: str) -> str:
    """The schema a mount puts the views of the group at `group_path` in (see `schema_names`)."""
    if group_path == "":
        return "main"
    return schema_names(tree).get(group_path, group_path)


def schema_names(tree: NodeTree) -> dict[str, str]:
    """The groups whose schema is not their path, each with the schema it gets instead.

    DuckDB compares schema names ignoring case, so groups `/grp` and `/GRP` would share one
    schema and the second view `x` would replace the first. When groups with named tables
    (those a mount makes views for) would get schemas equal ignoring case (paths such as `grp`
    and `GRP`, or a group `main` in any case beside a root with named tables), each of them
    but the root, which stays `main`, is renamed: in code-point order of paths, it gets its
    path with the first of `_1`, `_2`, ... that is, ignoring case, neither a group's path nor
    a name given before (`GRP_1`, then `grp_2`). None keeps its path, since `"grp".x` would
    then read /GRP's rows. A group named `information_schema` or `pg_catalog` (DuckDB keeps
    them) is renamed so too. A store that cannot be listed cannot be mounted: its groups
    keep their paths.
    """
    cached = tree.derived.get(_SCHEMA_NAMES)
    if isinstance(cached, dict):
        return cached
    try:
        paths = sorted(tree.groups)
    except StoreReadError:
        return {}
    used = {p.lower() for p in paths} | _KEPT_BY_DUCKDB | {"main"}
    renamed: dict[str, str] = {}
    for name, named in _clashing_groups(tree, paths):
        if len(named) < 2 and name not in _KEPT_BY_DUCKDB:
            continue
        for path in (p for p in named if p):  # the root stays `main`
            base, n, schema = path, 0, path
            while schema.lower() in used:
                n += 1
                schema = f"{base}_{n}"
            used.add(schema.lower())
            renamed[path] = schema
    tree.derived[_SCHEMA_NAMES] = renamed
    return renamed


def _clashing_groups(tree: NodeTree, paths: list[str]) -> list[tuple[str, list[str]]]:
    """(lowered schema, the groups with named tables that would get it) for each schema two
    groups share ignoring case, or DuckDB keeps. Only these groups are analyzed: a listing
    of one group need not analyze the whole store."""
    from zarrsql.tables.analyze import analyze_group

    by_schema: dict[str, list[str]] = {}
    for path in paths:
        by_schema.setdefault((path or "main").lower(), []).append(path)
    return [
        (schema, [p for p in same if any(t.name for t in analyze_group(tree, p).tables)])
        for schema, same in by_schema.items()
        if len(same) > 1 or schema in _KEPT_BY_DUCKDB
    ]


def _in_scope(path: str, group: str) -> bool:
    return group == "" or path == group or path.startswith(group + "/")


def _scope(tree: NodeTree, group_path: str | None, array_path: str | None) -> tuple[str, str | None]:
    from zarrsql.tables.select import group_path_error, normalize_path

    group = normalize_path(group_path or "")
    array = normalize_path(array_path) if array_path is not None else None
    if array is not None and array not in tree.arrays:
        raise SelectionError(f"array_path '{array}' is not an array of store '{tree.store.url}'")
    if array is None and group not in tree.groups:
        raise group_path_error(tree, group)
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


def _table_row(tree: NodeTree, t: TableInfo) -> dict[str, Any]:
    from zarrsql.conventions.model import display_path

    return {
        "group_path": display_path(t.group_path),
        "schema_name": schema_name(tree, t.group_path),
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
        return [_table_row(tree, info)]
    rows: list[dict[str, Any]] = []
    for g in sorted(tree.groups):
        if _in_scope(g, group):
            rows.extend(_table_row(tree, t) for t in analyze_group(tree, g).tables)
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


def _chosen_view_names(keys: list[str], view_names: Mapping[str, str] | None) -> dict[str, Any]:
    """Table key → the view name `view_names` gives it. A key names its table as spelled or,
    when no table is spelled so, ignoring case; then it must name one table only: `grp/x` and
    `GRP/x` are two tables (in two schemas), and renaming both by one key would be a guess."""
    given = dict(view_names or {})
    chosen = {k: v for k, v in given.items() if k in keys}
    by_lowered: dict[str, list[str]] = {}
    for key in keys:
        by_lowered.setdefault(key.lower(), []).append(key)
    unknown = []
    for key, view in given.items():
        if key in keys:
            continue
        matches = by_lowered.get(str(key).lower(), [])
        if len(matches) > 1:
            raise ParameterError(
                f"view_names key '{key}' names the tables {matches} ignoring case; spell the key as one of them"
            )
        if not matches:
            unknown.append(key)
        elif matches[0] not in chosen:
            chosen[matches[0]] = view
    if unknown:
        raise ParameterError(
            f"view_names key(s) {sorted(unknown)} name no table of the store; its tables: {sorted(keys)}"
        )
    return chosen


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
    names = _chosen_view_names([_view_key(t) for t in tables], view_names)
    rows: list[dict[str, Any]] = [
        {"schema_name": None, "view_name": None, "sql": f"ATTACH ':memory:' AS {quote_ident(database)}"}
    ]
    seen: dict[tuple[str, str], str] = {}  # DuckDB compares schema and view names ignoring case
    made_schemas: set[str] = set()
    for t in tables:
        schema = t["schema_name"]
        view = names.get(_view_key(t), t["table_name"])
        if not isinstance(view, str) or not view:
            raise ParameterError(f"view_names value for '{_view_key(t)}' must be a non-empty name")
        clash = seen.get((schema.lower(), view.lower()))
        if clash:
            raise ParameterError(
                f"view_names gives two views of schema '{schema}' the name '{view}' ({clash} and {_view_key(t)})"
            )
        seen[(schema.lower(), view.lower())] = _view_key(t)
        if schema.lower() != "main" and schema.lower() not in made_schemas:
            made_schemas.add(schema.lower())
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
