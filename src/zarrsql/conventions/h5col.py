"""H5Col column tables: an HDF5 group with `CLASS = "COLUMN_TABLE"` is one SQL table.

The layout (H5Col's data model) read through a store over the HDF5 file (store/hdf5.py) or a
kerchunk reference set of it:
- recognition: `CLASS` is `COLUMN_TABLE`; a kerchunk set drops `CLASS` (kerchunk hides it
  as a netCDF attribute), so a group with no `CLASS` but both `NROWS` and `column-order` is a
  table too;
- rows: only the first `NROWS` (the committed row count); the datasets may be longer, the
  rows past `NROWS` are reserved storage and never appear. Every column must have the same
  extent (a list column's OFFSETS one more), and NROWS must not exceed it;
- columns: `column-order` (names in the group when absent, sorted); a rank-1 dataset is a
  scalar column, a child group holding `OFFSETS` and `VALUES` a list column (row i holds
  VALUES[OFFSETS[i]:OFFSETS[i+1]]). The reserved groups `CATEGORIES` and `SEARCH_INDEXES`
  are no columns;
- categories: a column whose `CATEGORIES` attribute names its labels dataset (an object
  reference, which store/hdf5.py turns into a path), or, in a kerchunk set where the
  reference is lost, that has `CATEGORIES/<column>__CATEGORIES`, reads its codes as labels;
- missing values: a value equal to the dataset's fill value is NULL (NaN for NaN fills);
  boolean columns have no fill value. A fixed-length string column's fill is compared
  after decoding (kerchunk writes an empty string fill as a blank). The fill value is the
  array's: store/hdf5.py gives every numeric column its HDF5 fill value, while a saved
  kerchunk set has none for a column whose `units` look like a CF time (kerchunk drops it,
  and nothing in the set recovers it), so such a column has no missing values there;
- metadata: each dataset's `units`, `valid_min`, `valid_max`, `description` are array
  attributes, so `read_zarr_metadata` lists them with the column;
- search indexes: a `SEARCH_INDEXES/<column>__sorted_rows` dataset of KIND `SORTED_ROWS`
  whose `GENERATION` validity token equals the table's `GENERATION` (and, when given, whose
  `NROWS` equals the table's) makes its column a `RowIndex`: a WHERE on it prunes work
  units (scan/indexes.py). A stale index is ignored: no pruning, every unit is read.

The table is named after the group's last path segment. A broken rule makes the table
unreadable with a problem naming the column and the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from zarrsql.conventions.model import (
    GroupInfo,
    RowIndex,
    TableInfo,
    group_members,
    resolve_names,
    unreadable_row_table,
)
from zarrsql.conventions.records import Categorical, EncodedVariable, OffsetList, StringSentinel, Variable
from zarrsql.discovery.roles import Member
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import ArrayProblem, NodeTree

RESERVED_GROUPS = ("CATEGORIES", "SEARCH_INDEXES")
_STRINGS = ("string", "fixed_bytes", "fixed_unicode")


class _Invalid(Exception):
    """A rule of the H5Col layout is broken; the message is the table's problem."""


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value if isinstance(value, str) else None


def is_table(attrs: Mapping[str, Any]) -> bool:
    """Whether a group's attributes make it an H5Col table (see the module docstring)."""
    cls = _text(attrs.get("CLASS"))
    if cls is not None:
        return cls == "COLUMN_TABLE"
    return "NROWS" in attrs and "column-order" in attrs


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _nrows(attrs: Mapping[str, Any]) -> int:
    n = attrs.get("NROWS")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise _Invalid(f"NROWS is {n!r}; an H5Col table needs a non-negative integer NROWS")
    return n


def name_list(value: Any) -> list[str] | None:
    """An attribute that lists names (an H5Col table's or an AnnData frame's `column-order`)
    as a list of non-empty strings, or None when it holds something else.

    kerchunk writes an HDF5 attribute array of one element as that element, so a one-column
    `['ct']` arrives as `'ct'`, whether the file is read in place (store/hdf5.py) or through a
    saved reference set: a lone string is one name, never a sequence of letters. Names stored
    as bytes are decoded. An empty list stays empty (a frame with no columns)."""
    items = [value] if isinstance(value, str | bytes) else value
    if not isinstance(items, list | tuple):
        return None
    names = [_text(v) for v in items]
    return [n for n in names if n] if all(names) else None


def _order(tree: NodeTree, path: str, attrs: Mapping[str, Any]) -> list[str]:
    order = attrs.get("column-order")
    if order is None:
        groups, arrays = tree.children(path)
        names = {p.rsplit("/", 1)[-1] for p in [*groups, *arrays]}
        return sorted(n for n in names if n not in RESERVED_GROUPS)
    listed = name_list(order)
    if listed is None:
        raise _Invalid(f"column-order is {order!r}; it must be a list of column names")
    return listed


@dataclass(frozen=True, slots=True)
class _Col:
    name: str
    var: Variable
    extent: int
    chunk: int


def _labels(tree: NodeTree, table: str, name: str, array: ArrayMeta) -> ArrayMeta | None:
    ref = _text(array.attrs.get("CATEGORIES"))
    candidates = [ref] if ref and not ref.startswith("<") else []
    candidates.append(_join(table, "CATEGORIES", f"{name}__CATEGORIES"))
    for c in candidates:
        node = tree.arrays.get(c)
        if isinstance(node, ArrayMeta):
            return node
    if candidates[0] != candidates[-1]:
        raise _Invalid(f"column '{name}': its CATEGORIES attribute points at '{ref}', which is not a dataset")
    return None


def _with_fill(array: ArrayMeta) -> Variable:
    """The column with its fill value as the missing-value sentinel (none for booleans, nor
    for a fill the writer never set: store/hdf5.py's `UNSET_FILL`)."""
    fill = array.fill_value
    if array.dtype.kind == "bool" or fill is None or array.attrs.get("zarrsql:fill_unset") is True:
        return array
    if array.dtype.kind in _STRINGS:
        text = fill.decode("utf-8", "replace") if isinstance(fill, bytes) else str(fill)
        return EncodedVariable(array.path, array.shape, array.chunks, StringSentinel(array, text.strip()), array.attrs)
    return replace(array, attrs={**array.attrs, "_FillValue": _json_number(fill)})


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "NaN"
    return value.item() if hasattr(value, "item") else value


def _scalar(tree: NodeTree, table: str, name: str, array: ArrayMeta) -> _Col:
    if array.ndim != 1:
        raise _Invalid(
            f"column '{name}' (dataset '/{array.path}') has shape {list(array.shape)}; H5Col columns are "
            "rank-1 datasets"
        )
    labels = _labels(tree, table, name, array)
    if labels is not None:
        if array.dtype.kind not in ("int", "uint"):
            raise _Invalid(f"categorical column '{name}' has {array.dtype.name} codes; codes must be integers")
        var: Variable = EncodedVariable(
            array.path, array.shape, array.chunks, Categorical(array.path, array, labels), array.attrs
        )
    else:
        var = _with_fill(array)
    return _Col(name, var, array.shape[0], array.chunks[0])


def _list(tree: NodeTree, name: str, path: str) -> _Col:
    offsets, values = tree.arrays.get(_join(path, "OFFSETS")), tree.arrays.get(_join(path, "VALUES"))
    if not isinstance(offsets, ArrayMeta) or not isinstance(values, ArrayMeta):
        raise _Invalid(
            f"column '{name}': group '/{path}' is not a list column; H5Col stores one as a group with "
            "OFFSETS and VALUES datasets"
        )
    if offsets.ndim != 1 or values.ndim != 1 or offsets.dtype.kind not in ("int", "uint") or not offsets.shape[0]:
        raise _Invalid(f"list column '{name}': OFFSETS must be a non-empty rank-1 integer dataset, VALUES rank-1")
    extent = offsets.shape[0] - 1
    record = OffsetList(name, path, offsets, values)
    var = EncodedVariable(path, (extent,), offsets.chunks, record, {}, None, (offsets.path, values.path))
    return _Col(name, var, extent, offsets.chunks[0])


def _column(tree: NodeTree, table: str, name: str) -> _Col:
    path = _join(table, name)
    node = tree.arrays.get(path)
    if isinstance(node, ArrayProblem):
        raise _Invalid(f"column '{name}': dataset '/{path}' cannot be read: {node.error}")
    if isinstance(node, ArrayMeta):
        return _scalar(tree, table, name, node)
    if path in tree.groups:
        return _list(tree, name, path)
    raise _Invalid(f"column '{name}' of column-order is not a dataset or group of '/{table}'")


def _problem(var: Variable) -> str | None:
    arrays = [var] if isinstance(var, ArrayMeta) else []
    enc = var.encoding if isinstance(var, EncodedVariable) else None
    if isinstance(enc, OffsetList):
        arrays = [enc.offsets, enc.values]
    elif isinstance(enc, (Categorical, StringSentinel)):
        arrays = [enc.codes, enc.categories] if isinstance(enc, Categorical) else [enc.array]
    for a in arrays:
        if not a.dtype.supported:
            return f"dataset '/{a.path}' has a data type zarrsql cannot read: {a.dtype.reason}"
    return None


def _fit(var: Variable, n: int, chunk: int) -> Variable:
    """The column cut to the table's n rows: an encoded column says its shape itself."""
    if isinstance(var, EncodedVariable):
        return replace(var, shape=(n,), chunks=(chunk,), problem=var.problem or _problem(var))
    return var


def _make(tree: NodeTree, path: str, attrs: Mapping[str, Any], label: str) -> TableInfo:
    n = _nrows(attrs)
    cols = [_column(tree, path, name) for name in _order(tree, path, attrs)]
    if not cols:
        raise _Invalid("the table has no columns")
    extent = cols[0].extent
    for c in cols:
        if c.extent != extent:
            raise _Invalid(
                f"column '{c.name}' has {c.extent} rows of storage but column '{cols[0].name}' {extent}; H5Col "
                "requires every column to share one extent"
            )
    if n > extent:
        raise _Invalid(f"NROWS is {n} but the columns hold only {extent} rows")
    chunk = max(c.chunk for c in cols)
    grid = (max(1, min(chunk, n)) if n else max(chunk, 1),)
    indexes = tuple(i for c in cols if (i := sorted_index(tree, path, c.name)) is not None)
    return TableInfo(
        path,
        None,
        ("row",),
        (n,),
        grid,
        tuple(_fit(c.var, n, chunk) for c in cols),
        (None,),
        hidden=(0,),
        name_hint=label,
        column_names=tuple(c.name for c in cols),
        column_order=tuple(c.name for c in cols),
        indexes=indexes,
    )


def _table(tree: NodeTree, path: str, attrs: Mapping[str, Any]) -> TableInfo:
    label = path.rsplit("/", 1)[-1] if path else "table"
    try:
        return _make(tree, path, attrs, label)
    except _Invalid as err:
        return unreadable_row_table(path, label, f"H5Col table '/{path}': {err}")


def _members(tree: NodeTree, path: str) -> tuple[Member, ...]:
    """A group's arrays, each listed as the H5Col column it belongs to."""
    out = []
    for m in group_members(tree, path):
        if isinstance(m.array, ArrayMeta) and m.role in ("data", "coord"):
            m = Member(m.array, "data", ("row",), column=m.array.name)
        out.append(m)
    return tuple(out)


def _owner(tree: NodeTree, path: str) -> str | None:
    """The H5Col table a side group (categories, indexes, a list column) belongs to."""
    parent = path.rpartition("/")[0] if "/" in path else ""
    group = tree.groups.get(parent) if path else None
    return parent if group is not None and is_table(group.attrs) else None


def analyze(tree: NodeTree, path: str) -> GroupInfo | None:
    """The H5Col reading of the group at `path`: a table group (one table), a group inside
    one (its arrays, no table of their own), or None."""
    group = tree.groups.get(path)
    if group is None:
        return None
    if is_table(group.attrs):
        return GroupInfo(path, _members(tree, path), tuple(resolve_names([_table(tree, path, group.attrs)])), None)
    if _owner(tree, path) is not None:
        return GroupInfo(path, tuple(group_members(tree, path)), (), None)
    return None


def sorted_index(tree: NodeTree, path: str, column: str) -> RowIndex | None:
    """The column's SORTED_ROWS index when its validity tokens match the table's, else None."""
    group = tree.groups.get(path)
    node = tree.arrays.get(_join(path, "SEARCH_INDEXES", f"{column}__sorted_rows"))
    if group is None or not isinstance(node, ArrayMeta) or _text(node.attrs.get("KIND")) != "SORTED_ROWS":
        return None
    generation = group.attrs.get("GENERATION")
    if generation is None or node.attrs.get("GENERATION") != generation:
        return None
    if "NROWS" in node.attrs and node.attrs["NROWS"] != group.attrs.get("NROWS"):
        return None
    return RowIndex(column, node)
