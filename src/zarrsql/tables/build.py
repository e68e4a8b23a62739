"""Split each group's data variables into tables, following xarray's DataTree rules.

A group's named data variables are grouped by (dimension names, shape); each group of them is
a table named by joining the dimension names with '_'. Coordinates come from the group or its
nearest ancestor. A table gets no name (and a `problem`) when its group is misaligned with an
ancestor, when another table of the group has the same dimension names with another shape,
when its name equals another's ignoring ASCII case, when a dimension repeats, or when a
coordinate has the wrong length or an unsupported type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from zarrsql.decode.variables import Variable
from zarrsql.discovery.roles import Member, assign_roles
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree, ancestors
from zarrsql.tables.model import TableInfo


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One group: its members with roles, tables, and why it is misaligned (if it is).

    `levels` are the array paths of a multiscale image's resolution levels, full resolution
    first (OME-Zarr's first multiscale), which `level :=` indexes; empty for other groups.
    """

    path: str
    members: tuple[Member, ...]
    tables: tuple[TableInfo, ...]
    misaligned: str | None
    levels: tuple[str, ...] = ()


def display_path(path: str) -> str:
    return "/" + path


def group_members(tree: NodeTree, path: str) -> list[Member]:
    """The arrays of a group with their CF roles (cached with the tree)."""
    key = ("members", path)
    hit = tree.derived.get(key)
    if hit is None:
        _, arrays = tree.children(path)
        group = tree.groups.get(path)
        hit = assign_roles([tree.arrays[a] for a in arrays], dict(group.attrs) if group else {})
        tree.derived[key] = hit
    return list(hit)  # type: ignore[call-overload]


def _dim_sizes(members: list[Member]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for m in members:
        if m.dims is not None and isinstance(m.array, ArrayMeta) and m.role != "unsupported":
            for d, n in zip(m.dims, m.array.shape, strict=True):
                sizes.setdefault(d, n)
    return sizes


def _misalignment(tree: NodeTree, path: str, sizes: dict[str, int]) -> str | None:
    for anc in ancestors(path):
        for d, n in _dim_sizes(group_members(tree, anc)).items():
            if d in sizes and sizes[d] != n:
                return (
                    f"group '{display_path(path)}' is misaligned: dimension '{d}' has length "
                    f"{sizes[d]} here and {n} in '{display_path(anc)}'; read single arrays with array_path :="
                )
    return None


def find_coord(tree: NodeTree, path: str, dim: str) -> ArrayMeta | None:
    """The coordinate array of `dim` in the group or its nearest ancestor that has one."""
    for p in [path, *ancestors(path)]:
        for m in group_members(tree, p):
            if m.role == "coord" and m.name == dim and isinstance(m.array, ArrayMeta):
                return m.array
    return None


def chunk_grid(arrays: Sequence[Variable], ndim: int | None = None) -> tuple[int, ...]:
    """The work-unit grid: the largest chunk length per table dimension over `arrays`."""
    ndim = arrays[0].ndim if ndim is None else ndim
    shape = arrays[0].shape[:ndim]
    grid = [max(a.chunks[k] for a in arrays) for k in range(ndim)]
    return tuple(max(1, min(g, n)) if n else max(g, 1) for g, n in zip(grid, shape, strict=True))


def _coord_problem(coord: ArrayMeta | None, dim: str, n: int) -> str | None:
    if coord is None:
        return None
    if coord.shape[0] != n:
        return f"coordinate '{coord.path}' has length {coord.shape[0]} but dimension '{dim}' has {n}"
    return None


def _make_table(tree: NodeTree, path: str, dims: tuple[str, ...], arrays: list[ArrayMeta]) -> TableInfo:
    shape = arrays[0].shape
    coords = tuple(find_coord(tree, path, d) for d in dims)
    problem = None
    if len(set(dims)) != len(dims):
        problem = f"dimension names {list(dims)} repeat; read the arrays with array_path :="
    for d, n, c in zip(dims, shape, coords, strict=True):
        problem = problem or _coord_problem(c, d, n)
    # A coordinate of another length (an ancestor's, in a misaligned group) cannot label this
    # table's axis: it is reported in the problem, not listed among the table's coordinates.
    coords = tuple(c if c is not None and c.shape[0] == n else None for c, n in zip(coords, shape, strict=True))
    return TableInfo(path, "_".join(dims), dims, shape, chunk_grid(arrays), tuple(arrays), coords, problem)


def resolve_names(tables: list[TableInfo]) -> list[TableInfo]:
    """Give each table its name, or none (with the reason) when names clash.

    Only the same dimension names with another shape is a clash `dims :=` cannot settle;
    names equal ignoring case, or equal because two dimension lists join to one name
    (`['a_b', 'c']` and `['a', 'b_c']`), leave the table readable by `dims :=`.
    """
    out = []
    for t in tables:
        same = [o for o in tables if o is not t and o.default_name.lower() == t.default_name.lower()]
        problem, clash = t.problem, False
        if any(o.dims == t.dims for o in same):
            problem = problem or (
                f"another table of group '{display_path(t.group_path)}' has the dimensions "
                f"{list(t.dims)} with another shape; read its arrays with array_path :="
            )
        elif same and problem is None:
            other = next(o for o in same)
            how = "" if other.default_name == t.default_name else " ignoring case"
            problem = (
                f"its name '{t.default_name}' equals{how} that of the table with dimensions "
                f"{list(other.dims)}; select it with dims := {list(t.dims)}"
            )
            clash = True
        out.append(replace(t, name=None if problem else t.default_name, problem=problem, name_clash=clash))
    return out


def analyze_cf_group(tree: NodeTree, path: str) -> GroupInfo:
    """Roles, tables and alignment of one group by the xarray/CF rules."""
    members = group_members(tree, path)
    misaligned = _misalignment(tree, path, _dim_sizes(members))
    buckets: dict[tuple, list[ArrayMeta]] = {}
    for m in members:
        if m.role in ("data", "unsupported") and m.dims is not None and isinstance(m.array, ArrayMeta):
            buckets.setdefault((m.dims, m.array.shape), []).append(m.array)
    tables = [_make_table(tree, path, dims, arrays) for (dims, _), arrays in buckets.items()]
    if misaligned:
        # A misaligned group's tables cannot be read, so they bind no coordinate: none is listed.
        tables = [replace(t, problem=t.problem or misaligned, coords=(None,) * len(t.dims)) for t in tables]
    tables = resolve_names(tables)
    return GroupInfo(path, tuple(members), tuple(tables), misaligned)


def all_groups(tree: NodeTree) -> list[str]:
    return sorted(tree.groups)
