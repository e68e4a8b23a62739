"""The Zarr table convention: a group registered as `table` is one SQL table.

Recognition: the group's `zarr_conventions` holds the convention (by its uuid, or by the
name "table"); without a valid `table:columns` its table is unreadable and says why. The
table is named after the group's last path segment (a root group after the store, without
`.zarr`).

The table: one row per entry of the row axis (axis 0 of every row-aligned node); its
columns are `table:columns` in their order under their `name`, read from their `node`.
With `table:index` naming a plain one-value-per-row column, that column is the row
dimension's coordinate, so `=`/`IN`/ranges on it prune work units (chunks); otherwise the
row dimension is positional and gives no column, and the index (if any) is an ordinary column.
Encodings: plain arrays (sentinel nullable through `missing_value`, inline `categories`,
fixed multi-valued (N, K, ...) columns, `point`), and the sub-group encodings `categorical`,
`nullable`, `linestring` and `polygon`. A column of any other `encoding-type` is opaque: its
arrays are listed, the table leaves it out, and a `ZarrSQLWarning` says so.

Listing: `read_zarr_metadata` rows of a column's arrays carry, beside the array's own
attributes, `table:column` (the column's name) and, on the index and primary-geometry
columns' arrays, `table:index` / `table:primary_geometry` (that column's name). The index
array's role is `coord`, an opaque column's arrays are `unsupported`.

Refusals: a broken structural rule (columns of unequal length, unequal row-axis chunking, a
listed node that does not exist, a compound column missing a child, geom_offsets of the wrong
length, bad axes) makes the table unreadable, its problem naming the column and the rule;
offsets that decrease or overrun are refused when read (see `decode.geometry`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from zarrsql.conventions.model import (
    GroupInfo,
    TableInfo,
    group_members,
    resolve_names,
    unreadable_row_table,
)
from zarrsql.conventions.records import (
    GEOMETRY_AXES,
    Categorical,
    EncodedVariable,
    Encoding,
    FixedListArray,
    InlineCategorical,
    Nullable,
    PointArray,
    RaggedGeometry,
    StringSentinel,
    Variable,
)
from zarrsql.discovery.roles import Member, effective_dims
from zarrsql.errors import ZarrSQLWarning
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import ArrayProblem, NodeTree

UUID = "d517ea5f-92bb-4df1-8bbf-db736286a307"
#: Children of each sub-group encoding, in the order the rules name them.
CHILDREN = {
    "categorical": ("codes", "categories"),
    "nullable": ("values", "mask"),
    "linestring": ("coords", "geom_offsets"),
    "polygon": ("coords", "ring_offsets", "geom_offsets"),
}
KNOWN = ("array", "point", *CHILDREN)
_STRINGS = ("string", "fixed_bytes", "fixed_unicode")
_INTEGERS = ("int", "uint")
_SCALARS = (str, int, float, bool, type(None))


class _Invalid(Exception):
    """A structural rule of the convention is broken; the message is the table's problem."""


def registered(attrs: Mapping[str, Any]) -> bool:
    """Whether a group's attributes register the table convention."""
    entries = attrs.get("zarr_conventions")
    if not isinstance(entries, list):
        return False
    return any(isinstance(e, dict) and (e.get("uuid") == UUID or e.get("name") == "table") for e in entries)


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _listed(attrs: Mapping[str, Any]) -> dict[str, str]:
    """node → column name of every well-formed `table:columns` entry (for listings)."""
    out: dict[str, str] = {}
    columns = attrs.get("table:columns")
    for c in columns if isinstance(columns, list) else []:
        if isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("node"), str):
            out.setdefault(c["node"], c["name"])
    return out


# ----------------------------------------------------------------------------- columns
@dataclass(frozen=True, slots=True)
class _Column:
    """A recognised column: its arrays by role ("" for a plain array), its row count and
    the arrays that must share the table's row chunking."""

    name: str
    path: str
    encoding: str
    attrs: Mapping[str, Any]
    arrays: dict[str, ArrayMeta]
    rows: int
    aligned: tuple[ArrayMeta, ...]
    axes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Opaque:
    name: str
    path: str
    encoding: str


def _entries(attrs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, node) of every column, validated."""
    columns = attrs.get("table:columns")
    if not isinstance(columns, list) or not columns:
        raise _Invalid(f'table:columns must be a non-empty list of {{"name", "node"}} objects; got {columns!r}')
    out: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for i, c in enumerate(columns):
        name, node = (c.get("name"), c.get("node")) if isinstance(c, dict) else (None, None)
        if not (isinstance(name, str) and name and isinstance(node, str) and node):
            raise _Invalid(
                f"table:columns entry {i} ({c!r}) must be an object with a non-empty string 'name' and 'node'"
            )
        if "/" in node or node in (".", ".."):
            raise _Invalid(
                f"column '{name}': node '{node}' is not a child's name; the table convention "
                "requires each node to be a child array or group of the table group"
            )
        if name.lower() in seen:
            raise _Invalid(
                f"table:columns names two columns '{seen[name.lower()]}' and '{name}' (names must "
                "be distinct, ignoring case, to be SQL columns)"
            )
        seen[name.lower()] = name
        out.append((name, node))
    return out


def _axes(name: str, encoding: str, attrs: Mapping[str, Any], width: int) -> tuple[str, ...]:
    axes: Any = attrs.get("axes")  # JSON; `ok` below checks it is a list of axis names
    ok = (
        isinstance(axes, list)
        and 2 <= len(axes) <= 4
        and all(a in GEOMETRY_AXES for a in axes)
        and len(set(axes)) == len(axes)
        and "x" in axes
        and "y" in axes
    )
    if not ok:
        raise _Invalid(
            f"{encoding} column '{name}': axes must list 2 to 4 distinct names from "
            f"{list(GEOMETRY_AXES)}, x and y among them; got {axes!r}"
        )
    if width != len(axes):
        raise _Invalid(
            f"{encoding} column '{name}': axes {axes} name {len(axes)} coordinates but its "
            f"coordinate axis has {width}; the table convention requires one axes entry per coordinate"
        )
    return tuple(axes)


def _plain(name: str, array: ArrayMeta, encoding: str) -> _Column:
    if array.ndim == 0:
        raise _Invalid(
            f"column '{name}' (array '/{array.path}') is 0-dimensional; the table convention "
            "requires axis 0 of every column to be the row axis"
        )
    axes: tuple[str, ...] = ()
    if encoding == "point":
        if array.ndim != 2:
            raise _Invalid(
                f"point column '{name}' (array '/{array.path}') has shape {list(array.shape)}; "
                "a point column must have shape (N, D)"
            )
        axes = _axes(name, encoding, array.attrs, array.shape[1])
    return _Column(name, array.path, encoding, array.attrs, {"": array}, array.shape[0], (array,), axes)


def _compound(tree: NodeTree, name: str, path: str, encoding: str, attrs: Mapping[str, Any]) -> _Column:
    kids = {c: tree.arrays.get(_join(path, c)) for c in CHILDREN[encoding]}
    for child, a in kids.items():
        if not isinstance(a, ArrayMeta):
            what = "no" if a is None else "an unreadable"
            raise _Invalid(
                f"{encoding} column '{name}' has {what} '{child}' array in group '/{path}'; the "
                f"table convention requires the children {list(CHILDREN[encoding])}"
            )
    arrays: dict[str, ArrayMeta] = kids  # type: ignore[assignment]

    def need(child: str, ndim: int, integer: bool = False) -> ArrayMeta:
        a = arrays[child]
        if a.ndim != ndim or (integer and a.dtype.kind not in _INTEGERS):
            kind = "an integer" if integer else "a"
            raise _Invalid(
                f"{encoding} column '{name}': '{child}' (shape {list(a.shape)}, {a.dtype.name}) "
                f"must be {kind} {ndim}-dimensional array"
            )
        return a

    if encoding == "categorical":
        codes = need("codes", 1, integer=True)
        need("categories", 1)
        return _Column(name, path, encoding, attrs, arrays, codes.shape[0], (codes,))
    if encoding == "nullable":
        values, mask = need("values", 1), need("mask", 1)
        if mask.shape != values.shape:
            raise _Invalid(
                f"nullable column '{name}': mask has shape {list(mask.shape)} but values "
                f"{list(values.shape)}; the table convention requires both to be row-aligned"
            )
        return _Column(name, path, encoding, attrs, arrays, values.shape[0], (values, mask))
    coords, geom = need("coords", 2), need("geom_offsets", 1, integer=True)
    if encoding == "polygon":
        need("ring_offsets", 1, integer=True)
    if geom.shape[0] == 0:
        raise _Invalid(f"{encoding} column '{name}': geom_offsets is empty; it must hold N+1 offsets")
    axes = _axes(name, encoding, attrs, coords.shape[1])
    return _Column(name, path, encoding, attrs, arrays, geom.shape[0] - 1, (), axes)


def _describe(tree: NodeTree, table: str, name: str, node: str) -> _Column | _Opaque:
    path = _join(table, node)
    array, group = tree.arrays.get(path), tree.groups.get(path)
    if isinstance(array, ArrayProblem):
        raise _Invalid(f"column '{name}': array '/{path}' cannot be read: {array.error}")
    if array is None and group is None:
        raise _Invalid(
            f"column '{name}': its node '{node}' does not exist in group '/{table}'; the table "
            "convention requires every table:columns node to be an existing child of the group"
        )
    attrs = (array or group).attrs  # type: ignore[union-attr]
    encoding = attrs.get("encoding-type", "array")
    if not isinstance(encoding, str) or encoding not in KNOWN:
        return _Opaque(name, path, str(encoding))
    if array is not None:
        if encoding in CHILDREN:
            raise _Invalid(
                f"column '{name}' has encoding-type '{encoding}', stored by the table convention as "
                f"a group with {list(CHILDREN[encoding])}, but '/{path}' is an array"
            )
        return _plain(name, array, encoding)
    if encoding not in CHILDREN:
        raise _Invalid(
            f"column '{name}': '/{path}' is a group but its encoding-type '{encoding}' is stored as a single array"
        )
    return _compound(tree, name, path, encoding, attrs)


# ----------------------------------------------------------------------------- variables
def _unsupported(arrays: dict[str, ArrayMeta]) -> str | None:
    for a in arrays.values():
        if not a.dtype.supported:
            return f"array '/{a.path}' has a data type zarrsql cannot read: {a.dtype.reason}"
    return None


def _encoded(c: _Column, n: int, chunk: int, encoding: Encoding, problem: str | None = None) -> EncodedVariable:
    parts = tuple(a.path for a in c.arrays.values())
    return EncodedVariable(c.path, (n,), (chunk,), encoding, dict(c.attrs), problem or _unsupported(c.arrays), parts)


def _plain_variable(c: _Column, n: int, chunk: int) -> Variable:
    array = c.arrays[""]
    if c.encoding == "point":
        return _encoded(c, n, chunk, PointArray(array, c.axes))
    categories = c.attrs.get("categories")
    if categories is not None:
        if not isinstance(categories, list) or not all(isinstance(v, _SCALARS) for v in categories):
            raise _Invalid(f"column '{c.name}': categories must be a list of JSON scalars, got {categories!r}")
        ordered = bool(c.attrs.get("ordered", False))
        problem = None if array.ndim == 1 else "inline categories are read on one-value-per-row columns only"
        return _encoded(c, n, chunk, InlineCategorical(c.name, array, tuple(categories), ordered), problem)
    if array.ndim > 1:
        return _encoded(c, n, chunk, FixedListArray(array))
    missing = c.attrs.get("missing_value")
    if isinstance(missing, str) and array.dtype.kind in _STRINGS:
        return _encoded(c, n, chunk, StringSentinel(array, missing))
    return array


def _variable(c: _Column, n: int, chunk: int) -> Variable:
    a = c.arrays
    if c.encoding in ("array", "point"):
        return _plain_variable(c, n, chunk)
    if c.encoding == "categorical":
        ordered = bool(c.attrs.get("ordered", False))
        return _encoded(c, n, chunk, Categorical(c.path, a["codes"], a["categories"], ordered))
    if c.encoding == "nullable":
        return _encoded(c, n, chunk, Nullable(c.path, a["values"], a["mask"]))
    geometry = RaggedGeometry(c.name, c.path, a["coords"], a["geom_offsets"], a.get("ring_offsets"), c.axes)
    return _encoded(c, n, chunk, geometry)


# ----------------------------------------------------------------------------- the table
def _rows(cols: list[_Column], index: str | None) -> tuple[int, _Column]:
    """The row count N (from the index column, else the first row-aligned column)."""
    first = next((c for c in cols if c.name == index), None) or next((c for c in cols if c.aligned), cols[0])
    n = first.rows
    for c in cols:
        if c.rows == n:
            continue
        if not c.aligned:
            raise _Invalid(
                f"{c.encoding} column '{c.name}': geom_offsets has {c.rows + 1} entries but the "
                f"table has {n} rows; the table convention requires N+1 = {n + 1} offsets"
            )
        raise _Invalid(
            f"columns of unequal length: column '{c.name}' (array '/{c.aligned[0].path}') has "
            f"{c.rows} rows but column '{first.name}' has {n}; the table convention requires "
            "axis 0 of every row-aligned column to hold the same N rows"
        )
    return n, first


def _row_chunk(cols: list[_Column]) -> int:
    """The common axis-0 chunk length of every row-aligned array (the work-unit size)."""
    aligned = [(c, a) for c in cols for a in c.aligned]
    if not aligned:
        return cols[0].arrays["geom_offsets"].chunks[0]
    c0, a0 = aligned[0]
    for c, a in aligned[1:]:
        if a.chunks[0] != a0.chunks[0]:
            raise _Invalid(
                f"unequal row-axis chunking: column '{c.name}' (array '/{a.path}') is chunked by "
                f"{a.chunks[0]} rows along axis 0 but column '{c0.name}' (array '/{a0.path}') by "
                f"{a0.chunks[0]}; the table convention requires every row-aligned array to have "
                "the same axis-0 chunk size"
            )
    return a0.chunks[0]


def _coordinate_like(array: ArrayMeta) -> bool:
    """Whether a plain array can be the row coordinate: one supported value per row, no
    categories and no string sentinel (a coordinate is decoded by the plain rules alone)."""
    attrs = array.attrs
    if attrs.get("encoding-type", "array") != "array" or "categories" in attrs:
        return False
    if isinstance(attrs.get("missing_value"), str) and array.dtype.kind in _STRINGS:
        return False
    return array.ndim == 1 and array.dtype.supported


def _index_coord(c: _Column | None) -> ArrayMeta | None:
    """The index column's array when it can be the row coordinate."""
    if c is None or "" not in c.arrays or not _coordinate_like(c.arrays[""]):
        return None
    return c.arrays[""]


def _row_dim(cols: list[_Column]) -> str:
    for c in cols:
        for a in c.aligned:
            if a.dimension_names and a.dimension_names[0]:
                return a.dimension_names[0]
    return "row"


def _check_refs(attrs: Mapping[str, Any], names: list[str]) -> None:
    for key in ("table:index", "table:primary_geometry"):
        value = attrs.get(key)
        if value is not None and value not in names:
            raise _Invalid(f"{key} is {value!r}, which is not a column of table:columns {names}")


def _make(tree: NodeTree, path: str, attrs: Mapping[str, Any], label: str) -> TableInfo:
    entries = _entries(attrs)
    _check_refs(attrs, [name for name, _ in entries])
    described = [_describe(tree, path, name, node) for name, node in entries]
    for o in described:
        if isinstance(o, _Opaque):
            warnings.warn(
                f"table '/{path}': column '{o.name}' has encoding-type '{o.encoding}', which zarrsql "
                "does not know; the table leaves it out (its arrays are listed by "
                "read_zarr_metadata)",
                ZarrSQLWarning,
                stacklevel=2,
            )
    cols = [c for c in described if isinstance(c, _Column)]
    if not cols:
        raise _Invalid("none of its columns has an encoding-type zarrsql can read")
    index: str | None = attrs.get("table:index")  # _check_refs: None or a column's name
    n, _ = _rows(cols, index)
    chunk = _row_chunk(cols)
    coord = _index_coord(next((c for c in cols if c.name == index), None))
    data = [c for c in cols if not (coord is not None and c.name == index)]
    grid = (max(1, min(chunk, n)) if n else max(chunk, 1),)
    return TableInfo(
        path,
        None,
        (index,) if coord is not None and index is not None else (_row_dim(cols),),  # coord: index names it
        (n,),
        grid,
        tuple(_variable(c, n, chunk) for c in data),
        (coord,),
        hidden=() if coord is not None else (0,),
        name_hint=label,
        column_names=tuple(c.name for c in data),
        column_order=tuple(c.name for c in cols),
        fill_is_value=True,  # missing values are declared: missing_value, a mask, code -1
    )


def _label(tree: NodeTree, path: str) -> str:
    if path:
        return path.rsplit("/", 1)[-1]
    base = str(tree.store.url).rstrip("/").rsplit("/", 1)[-1]
    base = base[:-5] if base.lower().endswith(".zarr") else base
    return base or "table"


def _table(tree: NodeTree, path: str, attrs: Mapping[str, Any]) -> TableInfo:
    label = _label(tree, path)
    try:
        return _make(tree, path, attrs, label)
    except _Invalid as err:
        return unreadable_row_table(path, label, str(err))


# ----------------------------------------------------------------------------- members
def _marked(array: ArrayMeta, name: str, table_attrs: Mapping[str, Any]) -> ArrayMeta:
    extra: dict[str, Any] = {"table:column": name}
    for key in ("table:index", "table:primary_geometry"):
        if table_attrs.get(key) == name:
            extra[key] = name
    return replace(array, attrs={**array.attrs, **extra})


def _member(
    node: ArrayMeta | ArrayProblem, name: str, table_attrs: Mapping[str, Any], encoding: Any, *, plain: bool
) -> Member:
    if isinstance(node, ArrayProblem):
        return Member(node, "unsupported", None)
    if not node.dtype.supported or encoding not in KNOWN:
        role = "unsupported"
    elif node.ndim == 0:
        role = "scalar"
    elif plain and table_attrs.get("table:index") == name and _coordinate_like(node):
        role = "coord"
    else:
        role = "data"
    return Member(_marked(node, name, table_attrs), role, effective_dims(node), column=name if plain else None)


def _table_members(tree: NodeTree, path: str, attrs: Mapping[str, Any]) -> tuple[Member, ...]:
    listed = _listed(attrs)
    cf = {m.array.path: m for m in group_members(tree, path)}
    out = []
    for p in tree.children(path)[1]:
        node, name = tree.arrays[p], listed.get(p.rsplit("/", 1)[-1])
        if name is None:
            out.append(cf[p])
            continue
        encoding = node.attrs.get("encoding-type", "array") if isinstance(node, ArrayMeta) else None
        out.append(_member(node, name, attrs, encoding, plain=True))
    return tuple(out)


def _column_group(tree: NodeTree, path: str) -> GroupInfo | None:
    """A compound column's sub-group: its arrays listed as the column's, no table of its own."""
    parent, _, node = path.rpartition("/")
    table = tree.groups.get(parent) if path else None
    if table is None or not registered(table.attrs):
        return None
    name = _listed(table.attrs).get(node)
    if name is None:
        return None
    encoding = tree.groups[path].attrs.get("encoding-type")
    members = tuple(_member(tree.arrays[p], name, table.attrs, encoding, plain=False) for p in tree.children(path)[1])
    return GroupInfo(path, members, (), None)


def analyze(tree: NodeTree, path: str) -> GroupInfo | None:
    """The table-convention reading of the group at `path`: a registered table group (one
    table), a compound column's sub-group (its arrays), or None."""
    group = tree.groups.get(path)
    if group is None:
        return None
    if registered(group.attrs):
        tables = resolve_names([_table(tree, path, group.attrs)])
        return GroupInfo(path, _table_members(tree, path, group.attrs), tuple(tables), None)
    return _column_group(tree, path)
