"""`zarrsql.describe(store)`: a store at a glance, as a notebook shows it and as data.

A user meeting a store wants its shape before writing SQL: which groups (schemas) it has,
which tables each holds (dimensions, shape, chunking), what their columns are (types, units,
long names), which convention read each group, and which arrays no table reads, with the
reason. `describe` gathers exactly that from the same listings `read_zarr_tables` and
`read_zarr_metadata` give (no chunk is read), and the column types from DuckDB's own
`DESCRIBE` of each table's `read_zarr`, so what it shows is what a query gets.
"""

from __future__ import annotations

import html
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from zarrsql.catalog import schema_name
from zarrsql.conventions import CONVENTIONS
from zarrsql.conventions.model import display_path
from zarrsql.engine.api import default_connection, read_zarr_metadata, read_zarr_tables, store_location
from zarrsql.engine.connection import Connection, register
from zarrsql.engine.sqltext import literal
from zarrsql.errors import ParameterError, ZarrSQLError
from zarrsql.metadata.tree import NodeTree, cached_tree
from zarrsql.store import open_store
from zarrsql.tables.analyze import analyze_group
from zarrsql.tables.model import TableInfo as TableRecord

#: Names a convention has in what `describe` shows.
CONVENTION_NAMES = {
    "table": "Zarr table convention",
    "ome": "OME-Zarr",
    "anndata": "AnnData",
    "cf": "xarray / CF",
}
#: Why an array of a given role is in no table (when no table problem says more).
ROLE_REASONS = {
    "scalar": "a 0-dimensional (scalar) array: no dimension to make rows of; its value is in read_zarr_metadata",
    "bounds": "cell bounds of a coordinate (CF `bounds`): not a column of its table",
    "aux_coord": "an auxiliary coordinate (CF `coordinates`) on dimensions no table has",
    "coord": "a coordinate of a dimension no data variable uses",
    "data": "a variable no table reads",
}
_PARAMS = ("group_path", "storage_options")
#: The problem of an unnamed table its convention's analysis does not list (the listing is that analysis).
_NO_NAME = "this table cannot be read by name"


@dataclass(frozen=True)
class ColumnInfo:
    """A column of a table: its SQL type, and the units and long name of its array."""

    name: str
    type: str
    units: str | None = None
    long_name: str | None = None


@dataclass(frozen=True)
class TableInfo:
    """A table: `name` is None (and `problem` says why) when it cannot be read by name."""

    group_path: str
    name: str | None
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    columns: tuple[ColumnInfo, ...]
    problem: str | None = None


@dataclass(frozen=True)
class ArrayInfo:
    """An array that no named table reads, and why."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class GroupInfo:
    """A group (a schema in SQL), the convention that reads it, and its tables."""

    path: str
    schema: str
    convention: str
    tables: tuple[TableInfo, ...]


@dataclass(frozen=True)
class StoreDescription:
    """What `describe` returns: the store's groups, tables and left-out arrays.

    `.tables` and `.arrays` are the listings as DuckDB relations (`read_zarr_tables`,
    `read_zarr_metadata`), `.groups` and `.unread` the same as plain records; the HTML
    (`_repr_html_`) and text (`__repr__`) views show them together.
    """

    store: str
    groups: tuple[GroupInfo, ...]
    unread: tuple[ArrayInfo, ...]
    connection: Connection
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def tables(self) -> Any:
        return read_zarr_tables(self.store, connection=self.connection, **dict(self.params))

    @property
    def arrays(self) -> Any:
        return read_zarr_metadata(self.store, connection=self.connection, **dict(self.params))

    def table_list(self) -> list[TableInfo]:
        return [t for g in self.groups for t in g.tables]

    def __repr__(self) -> str:
        return "\n".join(_text_lines(self))

    def _repr_html_(self) -> str:
        return _html(self)


def describe(store: Any, *positional: Any, connection: Any = None, **params: Any) -> StoreDescription:
    """Describe a store: groups, tables, columns, conventions and the arrays left out.

    `params` are `group_path` (describe that group and below) and `storage_options`, as the
    listing functions take them, by keyword only (a second positional argument is refused
    with a ParameterError, not taken as a group). Reads metadata only.
    """
    if positional:
        example = f"group_path={positional[0]!r}" if isinstance(positional[0], str) else "group_path='...'"
        raise ParameterError(
            f"describe() takes the store as its only positional argument and got {1 + len(positional)}; "
            f"pass group_path and storage_options by keyword, as in describe(store, {example})"
        )
    unknown = sorted(set(params) - set(_PARAMS))
    if unknown:
        raise ParameterError(
            f"describe() got unknown parameter(s) {unknown}; it takes {', '.join(_PARAMS)} (and connection=)"
        )
    con = default_connection() if connection is None else register(connection)
    path, group = store_location(store)
    kept = {k: v for k, v in params.items() if v is not None}
    if group is not None:
        kept.setdefault("group_path", group)
    table_rows = _rows(read_zarr_tables(path, connection=con, **kept))
    array_rows = _rows(read_zarr_metadata(path, connection=con, **kept))
    tree = cached_tree(open_store(path, dict(kept.get("storage_options") or {})))
    attrs = {r["name"]: json.loads(r["attrs"] or "{}") for r in array_rows}
    records = _records(tree, table_rows)
    problems = _problems(table_rows, records)
    groups = _groups(con, path, tree, table_rows, records, problems, attrs, kept)
    unread = _unread(tree, table_rows, records, problems, array_rows)
    return StoreDescription(path, groups, unread, con, tuple(sorted(kept.items())))


def _rows(relation: Any) -> list[dict[str, Any]]:
    names = relation.columns
    return [dict(zip(names, row, strict=True)) for row in relation.fetchall()]


def _convention(tree: NodeTree, path: str) -> str:
    for name, claim in CONVENTIONS:
        if claim(tree, path) is not None:
            return CONVENTION_NAMES.get(name, name)
    return "xarray / CF"


def _records(tree: NodeTree, table_rows: list[dict[str, Any]]) -> list[TableRecord | None]:
    """The convention's record of each table of the listing (None for a row it does not
    have). A row is matched to its record by its group, dimensions, shape and arrays, never by
    its default name: the levels of an image pyramid share dimensions and name, and each has
    its own advice (`level := 0`, `level := 1`, ...)."""
    pending: dict[tuple[Any, ...], list[TableRecord]] = {}
    for group in sorted({r["group_path"] for r in table_rows}):
        for t in analyze_group(tree, group.strip("/")).tables:
            arrays = ([v.path for v in t.data_vars], [c.path for c in t.coords if c is not None])
            pending.setdefault(_table_key(group, t.dims, t.shape, *arrays), []).append(t)
    out: list[TableRecord | None] = []
    for r in table_rows:
        found = pending.get(_table_key(r["group_path"], r["dims"], r["shape"], r["data_vars"], r["coord_vars"]))
        out.append(found.pop(0) if found else None)
    return out


def _problems(table_rows: list[dict[str, Any]], records: list[TableRecord | None]) -> list[str | None]:
    """Why each table of the listing cannot be read by name (None for a named one), as its
    convention's analysis says."""
    return [
        None if r["table_name"] else (t.problem if t is not None else None) or _NO_NAME
        for r, t in zip(table_rows, records, strict=True)
    ]


def _arrays_read(row: dict[str, Any], record: TableRecord | None) -> dict[str, str]:
    """The arrays a table reads, by the column each gives: its data and coordinate arrays
    (the listing's `data_vars` and `coord_vars`) and the auxiliary coordinates its record
    adds (CF `coordinates`, scalars among them), which the listing does not name."""
    listed = {p: p.rsplit("/", 1)[-1] for p in [*row["data_vars"], *row["coord_vars"]]}
    return listed | {a.array.path: a.name for a in (record.aux if record is not None else ())}


def _table_key(
    group: str, dims: Sequence[str], shape: Sequence[int], data_vars: Sequence[str], coord_vars: Sequence[str]
) -> tuple[Any, ...]:
    return (group, tuple(dims), tuple(shape), tuple(data_vars), tuple(coord_vars))


def _groups(
    con: Connection,
    store: str,
    tree: NodeTree,
    table_rows: list[dict[str, Any]],
    records: list[TableRecord | None],
    problems: list[str | None],
    attrs: dict[str, dict[str, Any]],
    params: dict[str, Any],
) -> tuple[GroupInfo, ...]:
    out = []
    for path in _shown_groups(tree, table_rows, params.get("group_path")):
        inner = path.strip("/")
        tables = []
        for r, record, problem in zip(table_rows, records, problems, strict=True):
            if r["group_path"] != path:
                continue
            read = _arrays_read(r, record)
            columns, unreadable = _columns(con, store, inner, r, read, attrs, params) if r["table_name"] else ((), None)
            dims, shape, chunks = tuple(r["dims"]), tuple(r["shape"]), tuple(r["chunk_shape"])
            tables.append(TableInfo(path, r["table_name"], dims, shape, chunks, columns, problem or unreadable))
        out.append(GroupInfo(path, schema_name(tree, inner), _convention(tree, inner), tuple(tables)))
    return tuple(out)


def _shown_groups(tree: NodeTree, table_rows: list[dict[str, Any]], group_path: str | None) -> list[str]:
    """The groups shown, as `read_zarr_tables` and `mount` see them: each group with a table,
    the groups above those (the tree that holds them) in scope, and the scope's own group.
    Groups that hold no table and none below (an AnnData store's element groups such as
    `/obs` or `/layers`, which its root's tables read, or an empty group) are no schema of
    a mount, so they are not shown; their arrays are listed with the reason no table reads them."""
    scope = (group_path or "").strip("/")
    with_tables = {r["group_path"] for r in table_rows}
    above = {p for p in _groups_in(tree, scope) if any(t.startswith(p.rstrip("/") + "/") for t in with_tables)}
    return sorted(with_tables | above | ({display_path(scope)} if scope else set()))


def _groups_in(tree: NodeTree, scope: str) -> set[str]:
    return {display_path(g) for g in tree.groups if not scope or g == scope or g.startswith(scope + "/")}


def _columns(
    con: Connection,
    store: str,
    group: str,
    row: dict[str, Any],
    read: dict[str, str],
    attrs: dict[str, dict[str, Any]],
    params: dict[str, Any],
) -> tuple[tuple[ColumnInfo, ...], str | None]:
    """The table's columns as DuckDB types them, with the units and long name of the array
    each reads (`read`: array path to column), or none and the reason it cannot be read."""
    args = [literal(store), f"table_name := {literal(row['table_name'])}"]
    if group:
        args.append(f"group_path := {literal(group)}")
    if params.get("storage_options"):
        args.append(f"storage_options := {literal(params['storage_options'])}")
    try:
        described = con.sql(f"DESCRIBE SELECT * FROM read_zarr({', '.join(args)})").fetchall()
    except ZarrSQLError as err:
        return (), str(err)
    by_name = {column: attrs.get(p, {}) for p, column in read.items()}
    out = []
    for name, sql_type, *_ in described:
        a = by_name.get(name, {})
        units = _text(a.get("units"))
        if units and " since " in units and str(sql_type).startswith(("TIMESTAMP", "DATE")):
            units = None  # the encoding's units: the column already holds decoded times
        out.append(ColumnInfo(name, str(sql_type), units, _text(a.get("long_name"))))
    return tuple(out), None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _unread(
    tree: NodeTree,
    table_rows: list[dict[str, Any]],
    records: list[TableRecord | None],
    problems: list[str | None],
    array_rows: list[dict[str, Any]],
) -> tuple[ArrayInfo, ...]:
    """Arrays that no named table reads, with the reason (their table's problem, or their role)."""
    named = {p for r, t in zip(table_rows, records, strict=True) if r["table_name"] for p in _arrays_read(r, t)}
    unnamed = {
        p: problem
        for r, t, problem in zip(table_rows, records, problems, strict=True)
        if not r["table_name"]
        for p in _arrays_read(r, t)
    }
    out = []
    for r in array_rows:
        path = r["name"]
        if _variable_of(tree, path, named) is not None:
            continue
        owner = _variable_of(tree, path, unnamed)
        error = json.loads(r["attrs"] or "{}").get("error") if r["role"] == "unsupported" else None
        problem = unnamed[owner] if owner is not None else None
        reason = error or problem or ROLE_REASONS.get(r["role"], "no table reads it")
        out.append(ArrayInfo(path, r["dtype"], tuple(r["shape"]), str(reason)))
    return tuple(out)


def _variable_of(tree: NodeTree, array_path: str, variables: Collection[str]) -> str | None:
    """The variable among `variables` that reads `array_path`: the array itself, or the encoded
    group it is a part of (an AnnData categorical's codes and categories, a sparse matrix's
    data, indices and indptr), which `read_zarr_tables` lists by the group's path."""
    if array_path in variables:
        return array_path
    parts = array_path.split("/")
    for end in range(len(parts) - 1, 0, -1):
        group = "/".join(parts[:end])
        if group in variables and group in tree.groups:
            return group
    return None


# -- text ----------------------------------------------------------------------------------
def _shape(shape: Sequence[int], dims: Sequence[str] = ()) -> str:
    if dims:
        return "(" + ", ".join(f"{d}: {n}" for d, n in zip(dims, shape, strict=False)) + ")"
    return "(" + ", ".join(str(n) for n in shape) + ")"


def _column_text(c: ColumnInfo) -> str:
    extra = "; ".join(x for x in (c.long_name, f"[{c.units}]" if c.units else None) if x)
    return f"{c.name} {c.type}" + (f"  {extra}" if extra else "")


def _count(tables: Sequence[TableInfo]) -> str:
    """`5 table(s), 5 not readable by name`: the same count in the text and the HTML views."""
    unnamed = sum(1 for t in tables if not t.name)
    return f"{len(tables)} table(s)" + (f", {unnamed} not readable by name" if unnamed else "")


def _text_lines(d: StoreDescription) -> list[str]:
    lines = [f"<zarrsql.describe {d.store!r}: {len(d.groups)} group(s), {_count(d.table_list())}>"]
    for g in d.groups:
        lines.append(f"group {g.path} (schema {g.schema}, {g.convention})")
        for t in g.tables:
            label = t.name or "(unnamed)"
            lines.append(f"  table {label} {_shape(t.shape, t.dims)} chunks {_shape(t.chunk_shape)}")
            if t.problem:
                lines.append(f"    cannot be read: {t.problem}")
            lines.extend(f"    {_column_text(c)}" for c in t.columns)
    if d.unread:
        lines.append("arrays in no table:")
        lines.extend(f"  {a.path} {a.dtype} {_shape(a.shape)}: {a.reason}" for a in d.unread)
    return lines


# -- HTML ----------------------------------------------------------------------------------
_STYLE = (
    "<style>.zarrsql-describe details{margin-left:1em}.zarrsql-describe summary{cursor:pointer}"
    ".zarrsql-describe table{border-collapse:collapse;margin:0.2em 0 0.5em 1em}"
    ".zarrsql-describe td,.zarrsql-describe th{padding:0 0.6em;text-align:left}"
    ".zarrsql-describe .muted{color:#777}</style>"
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _tr(*cells: Any, tag: str = "td") -> str:
    return "<tr>" + "".join(f"<{tag}>{_e(c)}</{tag}>" for c in cells) + "</tr>"


def _muted(text: str) -> str:
    return f"<span class='muted'>{_e(text)}</span>"


def _html_table(t: TableInfo) -> str:
    head = (
        f"<b>{_e(t.name or '(unnamed)')}</b> {_e(_shape(t.shape, t.dims))} {_muted('chunks ' + _shape(t.chunk_shape))}"
    )
    body = []
    if t.problem:
        body.append(f"<p class='muted'>cannot be read: {_e(t.problem)}</p>")
    if t.columns:
        rows = "".join(_tr(c.name, c.type, c.units or "", c.long_name or "") for c in t.columns)
        body.append(f"<table>{_tr('column', 'type', 'units', 'long name', tag='th')}{rows}</table>")
    return f"<details open><summary>{head}</summary>{''.join(body)}</details>"


def _html(d: StoreDescription) -> str:
    totals = _muted(f"{len(d.groups)} group(s), {_count(d.table_list())}")
    parts = [_STYLE, "<div class='zarrsql-describe'>", f"<div><b>zarrsql store</b> {_e(d.store)} {totals}</div>"]
    for g in d.groups:
        summary = f"group <b>{_e(g.path)}</b> {_muted(f'schema {g.schema}, {g.convention}, {_count(g.tables)}')}"
        parts.append(f"<details open><summary>{summary}</summary>{''.join(_html_table(t) for t in g.tables)}</details>")
    if d.unread:
        rows = "".join(_tr(a.path, a.dtype, _shape(a.shape), a.reason) for a in d.unread)
        parts.append(
            f"<details><summary>arrays in no table ({len(d.unread)})</summary><table>"
            f"{_tr('array', 'dtype', 'shape', 'why', tag='th')}{rows}</table></details>"
        )
    parts.append("</div>")
    return "".join(parts)
