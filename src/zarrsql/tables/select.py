"""Choose the one table a `read_zarr` call reads, from table_name, dims, group_path or array_path.

Every way of choosing nothing, or more than one table, raises `SelectionError` with the
tables that exist and the parameter that picks one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from zarrsql.conventions.model import GroupInfo, ProblemKind, chunk_grid, display_path, find_coord
from zarrsql.conventions.records import EncodedVariable, SparseMatrix, unreadable
from zarrsql.discovery.roles import Member, effective_dims
from zarrsql.errors import DecodeError, ParameterError, SelectionError, StoreReadError, UnsupportedError
from zarrsql.metadata.arrays import ArrayMeta, attribute_dims_problem
from zarrsql.metadata.tree import ArrayProblem, NodeTree, ancestors, problems_in, unreadable_error
from zarrsql.store import Refusing, check_key
from zarrsql.tables.analyze import analyze_group
from zarrsql.tables.model import DataColumn, ReadTable, TableInfo
from zarrsql.tables.suggest import closest


@dataclass(frozen=True, slots=True)
class Selection:
    """The selection parameters of one read, already type-checked."""

    table_name: str | None = None
    dims: tuple[str, ...] | None = None
    group_path: str | None = None
    array_path: str | None = None
    level: int | None = None


def normalize_path(path: str) -> str:
    return check_key(path.strip("/"))


def _describe(tables: tuple[TableInfo, ...]) -> str:
    """The tables by name and dimensions; the reasons of unnamed ones once each."""
    rows = "; ".join(f"{t.name or '(no name)'} {list(t.dims)}" for t in tables)
    reasons = list(dict.fromkeys(t.problem for t in tables if t.name is None and t.problem))
    return rows + (f" (unnamed because: {'; '.join(reasons)})" if reasons else "")


def _levels_hint(info: GroupInfo) -> str:
    """How to read one level of a multiscale image with several, for selection errors."""
    names = [p.rsplit("/", 1)[-1] for p in info.levels]
    return (
        f"it is a multiscale image with {len(names)} resolution levels {names}: read one with "
        f"level := 0 (full resolution) to {len(names) - 1}, or array_path := '{info.levels[0]}'"
    )


def _read_table(t: TableInfo) -> ReadTable:
    if t.problem:
        # An element whose parts disagree is a fault of the store (DecodeError), not of the selection.
        error = DecodeError if t.problem_kind is ProblemKind.CORRUPT else SelectionError
        raise error(f"table {list(t.dims)} of group '{display_path(t.group_path)}' cannot be read: {t.problem}")
    bad = [a for a in t.data_vars if unreadable(a)]
    if bad:
        a = bad[0]
        others = [v.path for v in t.data_vars if not unreadable(v)]
        hint = f"; read another array with array_path := '{others[0]}'" if others else ""
        raise UnsupportedError(f"array '{a.path}' of table '{t.name}' cannot be read: {unreadable(a)}{hint}")
    names = list(t.column_names) or [a.name for a in t.data_vars]
    if len(names) == 1 and _NUMBER.match(names[0]):  # an image level '0': name it value
        names = [_value_column(names[0], t.dims)]
    given, names = names, _distinct(names, _coordinate_names(t))
    data = tuple(DataColumn(a, n) for a, n in zip(t.data_vars, names, strict=True))
    order = t.column_order
    if order and given != names:  # a declared order names the columns as stored
        renamed: dict[str, list[str]] = {}
        for old, new in zip(given, names, strict=True):
            renamed.setdefault(old, []).append(new)
        order = tuple(renamed[n].pop(0) if renamed.get(n) else n for n in order)
    return ReadTable(
        t.group_path,
        t.name or t.default_name,
        t.dims,
        t.shape,
        t.chunk_grid,
        t.coords,
        data,
        t.derived,
        t.hidden,
        t.layout,
        order,
        t.aux,
        t.indexes,
        t.fill_is_value,
    )


def _no_tables_error(tree: NodeTree, group: str) -> SelectionError:
    info = analyze_group(tree, group)
    unnamed = [m.array.path for m in info.members if m.dims is None and m.role == "data"]
    where = f"group '{display_path(group)}' of store '{tree.store.url}'"
    if unnamed:
        reasons = [f"; '{p}' is unnamed because {r}" for p, r in _ignored_attribute_dims(tree, unnamed)]
        return SelectionError(
            f"{where} has no tables: its arrays {unnamed} declare no dimension names"
            f"{''.join(reasons)}; read one with array_path := '{unnamed[0]}' (and dims := [...] to name its axes)"
        )
    subgroups = [display_path(g) for g in tree.children(group)[0]]
    hint = f"; it has the groups {subgroups}: pass group_path :=" if subgroups else ""
    return SelectionError(f"{where} has no tables (no data variables with dimension names){hint}")


def _ignored_attribute_dims(tree: NodeTree, paths: list[str]) -> list[tuple[str, str]]:
    """(path, reason) of the v3 arrays among `paths` whose `_ARRAY_DIMENSIONS` was ignored."""
    out = []
    for p in paths:
        a = tree.arrays.get(p)
        if isinstance(a, ArrayMeta) and a.zarr_format == 3 and "_ARRAY_DIMENSIONS" in a.attrs:
            reason = attribute_dims_problem(a.attrs["_ARRAY_DIMENSIONS"], a.ndim)
            if reason:
                out.append((p, reason))
    return out


def _none_found(tree: NodeTree, group: str, err: SelectionError) -> Exception:
    """`err`, unless the group holds nodes of unreadable metadata: the wanted table may be theirs."""
    broken = problems_in(tree, group)
    return unreadable_error(tree, broken, f"group '{display_path(group)}'") if broken else err


def _pick(tree: NodeTree, group: str, sel: Selection) -> ReadTable:
    info = analyze_group(tree, group)
    tables = info.tables
    where = f"group '{display_path(group)}'"
    if sel.table_name is not None and sel.dims is not None:
        raise ParameterError("pass table_name := or dims :=, not both")
    if not tables and not (sel.table_name is not None and len(info.levels) > 1):
        # A group of no tables, whatever was asked of it: name what it holds (its subgroups,
        # its unnamed arrays) and the parameter that reaches them, not an empty list of tables.
        raise _none_found(tree, group, _no_tables_error(tree, group))
    if sel.table_name is not None:
        hits = [t for t in tables if t.name and t.name.lower() == sel.table_name.lower()]
        refused = [t for t in tables if t.problem and not t.name_clash and t.default_name == sel.table_name]
        if not hits and len(refused) == 1:  # the table asked for, refused by its convention: say why
            return _read_table(refused[0])
        if not hits and len(info.levels) > 1:
            raise SelectionError(f"{where} has no table named '{sel.table_name}': {_levels_hint(info)}")
        if not hits:
            guess = closest(sel.table_name, [t.name for t in tables if t.name])
            hint = f"; did you mean table_name := '{guess}'?" if guess else ""
            raise _none_found(
                tree,
                group,
                SelectionError(f"{where} has no table named '{sel.table_name}'; its tables: {_describe(tables)}{hint}"),
            )
        return _read_table(hits[0])
    if sel.dims is not None:
        hits = [t for t in tables if t.dims == sel.dims]
        if not hits:
            raise _none_found(
                tree,
                group,
                SelectionError(f"{where} has no table with dims {list(sel.dims)}; its tables: {_describe(tables)}"),
            )
        if len(hits) > 1 and len(info.levels) > 1:
            raise SelectionError(f"{where} has several tables with dims {list(sel.dims)}: {_levels_hint(info)}")
        if len(hits) > 1:
            raise SelectionError(
                f"{where} has several tables with dims {list(sel.dims)} (different shapes); "
                "read one array with array_path :="
            )
        return _read_table(_unblock_case(hits[0]))
    if len(tables) > 1 and len(info.levels) > 1 and all(t.name is None for t in tables):
        raise SelectionError(f"{where} of store '{tree.store.url}' has no single table: {_levels_hint(info)}")
    if len(tables) > 1:
        raise SelectionError(
            f"{where} has {len(tables)} tables [{_describe(tables)}]; use table_name := or "
            "dims := to select one, or array_path := to read one array"
        )
    return _read_table(tables[0])


def _unblock_case(t: TableInfo) -> TableInfo:
    """dims := may read a table whose only problem is a name clash."""
    if t.name_clash:
        return replace(t, name=t.default_name, problem=None, problem_kind=None)
    return t


_NUMBER = re.compile(r"^\d+$")


def _coordinate_names(t: TableInfo) -> list[str]:
    """The columns a table shows before its data columns: dimensions (unless hidden),
    derived and auxiliary coordinates."""
    dims = [d for k, d in enumerate(t.dims) if k not in t.hidden]
    return dims + [d.name for d in t.derived] + [a.name for a in t.aux]


def _distinct(names: list[str], taken: list[str]) -> list[str]:
    """Data column names no two of which, nor any coordinate column's, are equal ignoring
    case (DuckDB's column names are): a clash gets `_1`, `_2`, ... as DuckDB would give it.

    Conventions other than xarray's allow them: an AnnData obs column named `obs` beside the
    `obs` index, a layer named `X` beside `X`. Left equal, one would read the other's values.
    """
    used = {n.lower() for n in taken}
    out = []
    for name in names:
        base, n = name, 0
        while name.lower() in used:
            n += 1
            name = f"{base}_{n}"
        used.add(name.lower())
        out.append(name)
    return out


def _value_column(path: str, dims: tuple[str, ...]) -> str:
    """The column of a single array's values: its name, `value` for a path or an image level."""
    name = "value" if ("/" in path or _NUMBER.match(path)) else path
    return _distinct([name], list(dims))[0]


def _check_dims(dims: tuple[str, ...], ndim: int, where: str) -> None:
    if len(dims) != ndim:
        raise ParameterError(f"dims := gives {len(dims)} names but {where} has {ndim} axes")
    if any(not d for d in dims) or len({d.lower() for d in dims}) != len(dims):
        raise ParameterError(f"dims := {list(dims)} must be non-empty names, distinct ignoring case")


def _read_names(member: Member | None, array: ArrayMeta) -> tuple[str, ...] | None:
    """The axis names an `array_path` read of `array` uses before placeholders: those its
    convention gives it (OME-Zarr axes, AnnData's obs/var), else those it declares; None
    when it has neither (the read then names its axes dim_0, dim_1, ...)."""
    if member is not None and member.dims is not None:
        return member.dims
    return effective_dims(array)


def array_path_dims(member: Member) -> list[str]:
    """What `read_zarr_metadata` lists as `array_path_dims`: the names an `array_path` read
    of the member's array uses, placeholders included."""
    a = member.array
    if not isinstance(a, ArrayMeta):
        return []
    names = _read_names(member, a)
    return _distinct(list(names), []) if names is not None else [f"dim_{i}" for i in range(a.ndim)]


def _array_read(tree: NodeTree, path: str, dims_override: tuple[str, ...] | None) -> ReadTable:
    node = tree.arrays.get(path)
    if node is None:
        encoded = _encoded_read(tree, path)
        if encoded is not None:
            return encoded
        reason = tree.store.refusal(path) if isinstance(tree.store, Refusing) else None  # a link out, unlisted
        if reason:
            raise StoreReadError(f"array '{path}' cannot be read: {reason}")
        kind = "a group of store" if path in tree.groups else "not in store"
        raise SelectionError(f"array_path '{path}' is {kind} '{tree.store.url}'; list arrays with read_zarr_metadata")
    if isinstance(node, ArrayProblem) and node.refused:
        raise StoreReadError(f"array '{path}' cannot be read: {node.error}")
    if isinstance(node, ArrayProblem):
        raise unreadable_error(tree, [node], f"array_path '{path}'")
    if not node.dtype.supported:
        raise UnsupportedError(f"array '{path}' cannot be read: {node.dtype.reason}")
    where = f"array '{path}'"
    group = path.rpartition("/")[0]
    member = next((m for m in analyze_group(tree, group).members if m.array.path == path), None)
    declared = _read_names(member, node)
    derived = member.derived if member is not None else ()
    if declared is not None:
        # Declared names (a null entry reads dim_<i>) bind the coordinates they name.
        dims = _axis_columns(declared, dims_override, where)
        named = node.dimension_names or (True,) * node.ndim
        held = _table_coords(tree, group, declared)
        coords = tuple(
            (find_coord(tree, group, d) or held.get(d)) if named[k] else None for k, d in enumerate(declared)
        )
        coords = tuple(
            c if c is not None and c.shape[0] == n else None for c, n in zip(coords, node.shape, strict=True)
        )
    else:
        dims = tuple(f"dim_{i}" for i in range(node.ndim))
        if dims_override is not None:
            _check_dims(dims_override, node.ndim, where)
            dims = dims_override
        coords = (None,) * node.ndim
    if node.ndim == 0:
        raise UnsupportedError(
            f"{where} is a 0-dimensional scalar; array_path := reads arrays with at least one dimension. A scalar "
            "named in a variable's coordinates attribute is a column of that variable's table; read any other "
            "with zarr-python or xarray"
        )
    grid = tuple(max(1, min(c, n)) if n else max(c, 1) for c, n in zip(node.chunks, node.shape, strict=True))
    if node.ndim == 1 and coords[0] is not None and coords[0].path == path:
        # A coordinate read alone is its dimension column: one column, not `lat` and `lat_1`.
        return ReadTable(group, path, dims, node.shape, grid, coords, (), derived)
    column = DataColumn(node, _value_column(member.column if member is not None and member.column else path, dims))
    return ReadTable(group, path, dims, node.shape, grid, coords, (column,), derived)


def _axis_columns(declared: tuple[str, ...], dims_override: tuple[str, ...] | None, where: str) -> tuple[str, ...]:
    """The dimension columns of an `array_path` read of an array that declares `declared`.

    Declared names that are distinct are the columns, and `dims :=` may only repeat them (a
    name binds its coordinate). An array may repeat a name (`['x', 'x']`: a square matrix
    over one dimension, as xarray and zarr-python read it): its columns are then made
    distinct as data columns are (`x`, `x_1`), each axis still bound to the coordinate of its
    declared name, and `dims :=` may name them otherwise."""
    columns = tuple(_distinct(list(declared), []))
    if columns == declared:
        if dims_override is not None and dims_override != declared:
            raise ParameterError(
                f"dims := {list(dims_override)} must equal the names {list(declared)} that {where} declares"
            )
        return declared
    if dims_override is None:
        return columns
    _check_dims(dims_override, len(declared), where)
    return dims_override


def _table_coords(tree: NodeTree, group: str, dims: tuple[str, ...]) -> dict[str, ArrayMeta]:
    """Coordinates of `dims` that the tables of the group (or its nearest ancestor with one)
    bind where no array is named like the dimension: an AnnData axis's names are its frame's
    index (`obs/_index`), so a dense matrix read alone is labelled by name, as a sparse one is."""
    out: dict[str, ArrayMeta] = {}
    for owner in [group, *ancestors(group)]:
        if len(out) == len(set(dims)):
            break
        for t in analyze_group(tree, owner).tables:
            for d, c in zip(t.dims, t.coords, strict=False):
                if d in dims and c is not None:
                    out.setdefault(d, c)
    return out


def _encoded_read(tree: NodeTree, path: str) -> ReadTable | None:
    """A variable stored as a group (an AnnData sparse matrix) read alone, with the axes and
    coordinates of the table it belongs to; None when `path` is no such variable."""
    group = path.rpartition("/")[0]
    for owner in [group, *ancestors(group)] if path else []:
        for t in analyze_group(tree, owner).tables:
            for v in t.data_vars:
                if v.path == path and isinstance(v, EncodedVariable):
                    layout = v.encoding.format if isinstance(v.encoding, SparseMatrix) else "dense"
                    return ReadTable(
                        t.group_path,
                        path,
                        t.dims,
                        t.shape,
                        chunk_grid([v], len(t.dims)),
                        t.coords,
                        (DataColumn(v, _value_column(path, t.dims)),),
                        t.derived,
                        t.hidden,
                        layout,
                    )
    return None


def _level_read(tree: NodeTree, sel: Selection, group: str, level: int) -> ReadTable:
    """`level := N`: level N (0 = full resolution) of the multiscale image at the group."""
    if sel.table_name is not None or sel.dims is not None:
        raise ParameterError(
            "level := chooses one array of an image; it cannot be combined with table_name := or dims :="
        )
    levels = analyze_group(tree, group).levels
    where = f"group '{display_path(group)}' of store '{tree.store.url}'"
    if not levels:
        raise ParameterError(
            f"level := reads a resolution level of an OME-Zarr image, but {where} has no multiscales "
            "attribute; pass group_path := to the image's group, or read it without level :="
        )
    if not 0 <= level < len(levels):
        names = [p.rsplit("/", 1)[-1] for p in levels]
        raise ParameterError(
            f"level := {level} is out of range: the image at {where} has {len(levels)} levels "
            f"{names}; pass 0 (full resolution) to {len(levels) - 1}"
        )
    return _array_read(tree, levels[level], None)


def _check_coordinates(tree: NodeTree, rt: ReadTable, one_array: bool) -> ReadTable:
    """Refuse a read when a node of its group, or a node of an ancestor that may be one of its
    coordinates, has unreadable metadata: its dimensions are unknown, so it may be a column of
    this table (read without it, the table would be shown whole without one of its columns),
    and reading positions in place of a coordinate's values would give wrong rows. A read of
    `one_array` (`array_path :=`) has no other column: only its coordinates are checked."""
    for g in [rt.group_path, *ancestors(rt.group_path)]:
        broken = problems_in(tree, g, None if g == rt.group_path and not one_array else rt.dims)
        if broken:
            raise unreadable_error(tree, broken, f"table '{rt.label}' of group '{display_path(rt.group_path)}'")
    return rt


def select_table(tree: NodeTree, sel: Selection) -> ReadTable:
    """Resolve a selection to the one table it reads."""
    return _check_coordinates(tree, _select(tree, sel), one_array=sel.array_path is not None)


def _select(tree: NodeTree, sel: Selection) -> ReadTable:
    if sel.level is not None and sel.array_path is not None:
        raise ParameterError("pass level := or array_path :=, not both: each chooses one array of an image")
    if sel.array_path is not None:
        if sel.group_path is not None or sel.table_name is not None:
            raise ParameterError("array_path := cannot be combined with group_path := or table_name :=")
        return _array_read(tree, normalize_path(sel.array_path), sel.dims)
    group = normalize_path(sel.group_path or "")
    if group not in tree.groups:
        reason = tree.store.refusal(group) if isinstance(tree.store, Refusing) else None
        if reason:  # a link out of the store (or a loop) on the way: refused as its arrays are
            raise StoreReadError(f"group '{display_path(group)}' cannot be read: {reason}")
        broken = tree.arrays.get(group)
        if isinstance(broken, ArrayProblem):
            raise unreadable_error(tree, [broken], f"group_path '{display_path(group)}'")
        raise group_path_error(tree, group)
    if sel.level is not None:
        return _level_read(tree, sel, group, sel.level)
    return _pick(tree, group, sel)


#: How many groups a group_path error lists; the rest are counted.
_LISTED_GROUPS = 10


def group_path_error(tree: NodeTree, group: str) -> SelectionError:
    """The error for a `group_path` that names no group of the store: an array is read with
    `array_path :=`; otherwise it lists the groups where the path was looked for (those in
    its nearest existing ancestor) and offers the nearest group path. Group paths are
    case-sensitive, as Zarr keys are, so a group differing only in letter case is named."""
    shown, store = display_path(group), tree.store.url
    if group in tree.arrays:
        return SelectionError(
            f"group_path '{shown}' is an array of store '{store}', not a group; "
            f"read it with array_path := '{group}' in place of group_path :="
        )
    parent = next(a for a in ancestors(group) if a in tree.groups)
    subgroups = [display_path(g) for g in sorted(tree.children(parent)[0])]
    listed = subgroups[:_LISTED_GROUPS]
    more = f" and {len(subgroups) - len(listed)} more" if len(subgroups) > len(listed) else ""
    where = (
        f"the groups in '{display_path(parent)}': {listed}{more}"
        if listed
        else f"'{display_path(parent)}' has no groups"
    )
    guess = closest(group, _group_paths(tree))
    if guess is None:
        fix = "one of them to group_path :=" if listed else f"group_path := '{display_path(parent)}'"
        return SelectionError(
            f"group_path '{shown}' is not a group of store '{store}' ({where}); "
            f"pass {fix}, or list the groups that hold tables with read_zarr_tables"
        )
    case = "group paths are case-sensitive: " if guess.lower() == group.lower() else ""
    return SelectionError(
        f"group_path '{shown}' is not a group of store '{store}' ({where}); "
        f"{case}did you mean group_path := '{display_path(guess)}'?"
    )


def _group_paths(tree: NodeTree) -> list[str]:
    """Every group below the root, found through `children` (which a store that cannot be
    listed answers with the groups it has loaded)."""
    out: list[str] = []
    level = [""]
    while level:
        level = [g for parent in level for g in tree.children(parent)[0]]
        out.extend(level)
    return out
