"""The plain records a convention returns for a group, and the helpers every convention shares.

A convention's `analyze(tree, path)` gives a `GroupInfo`: the group's members with their
roles and its `TableInfo`s. These live here, below both the conventions and `tables/`, so
that conventions read nothing above them (`tables/` selects among what they return).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

from zarrsql.conventions.records import Variable
from zarrsql.discovery.roles import Member, assign_roles
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree, ancestors


class ProblemKind(enum.Enum):
    """Why a table has no name: code branches on this, the `problem` text is for people."""

    MISALIGNED = "misaligned"  # a dimension's length differs from an ancestor's
    SHAPE_CLASH = "shape_clash"  # another table has the same dimensions, another shape
    NAME_CLASH = "name_clash"  # its name equals another's; `dims :=` still reads it
    REPEATED_DIMENSION = "repeated_dimension"
    COORDINATE_LENGTH = "coordinate_length"
    CONVENTION = "convention"  # a rule of the group's convention is broken
    LEVEL = "level"  # one resolution level of a multiscale image
    CORRUPT = "corrupt"  # an element's parts disagree (a matrix's shape with its axes'): a DecodeError


@dataclass(frozen=True, slots=True)
class Derived:
    """A column computed from a dimension's positions: `position * scale + offset`, or, when
    `labels` is given, the label at that position (a VARCHAR column; None is NULL).

    OME-Zarr's coordinate transformations give each image axis a physical coordinate this way,
    and its `omero.channels` give the channel axis its channel names.
    """

    name: str
    axis: int
    scale: float = 1.0
    offset: float = 0.0
    labels: tuple[str | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class AuxCoord:
    """An auxiliary coordinate of a table (CF `coordinates`): an array over some of the
    table's dimensions (`axes`, their positions in the table, in the array's own order),
    such as the 2-D `lat(y, x)` of a curvilinear grid or the 1-D labels of stations."""

    name: str
    array: ArrayMeta
    axes: tuple[int, ...]
    #: A CF character array's text encoding: its last dimension (not among `axes`) holds the
    #: characters of one string per cell of the others, as xarray joins them. None otherwise.
    characters: str | None = None


@dataclass(frozen=True, slots=True)
class RowIndex:
    """A data column a valid search index covers (H5Col's SORTED_ROWS whose validity token
    matches): a WHERE on `column` may prune work units by the column's values. `rows` is the
    index dataset (row numbers in ascending order of the values), for listings."""

    column: str
    rows: ArrayMeta


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A table of a group as `read_zarr_tables` lists it.

    `name` is None when the table cannot be read by name; `problem` then says why and
    `problem_kind` which rule it broke. `hidden` lists dimensions that give no column (a
    table-convention table without an index has only positional rows); `derived` adds
    computed coordinate columns; `name_hint` replaces the dimension-joined name (a
    table-convention group's own name). `column_names`, when given, names the data columns
    (an image level's is `value`); `column_order`, when given, orders all the table's
    columns by name (a table-convention table keeps its `table:columns` order even when its
    index, a dimension, is not first). `layout` is "dense" (one row per cell) or "csr"/"csc"
    (one row per stored entry of sparse matrices, compressed along the first or the second
    dimension). `coords` holds, per dimension, the coordinate array (from the group or an
    ancestor) or None for a positional dimension. `chunk_grid` is the largest chunk length
    per dimension over the data arrays: the work-unit grid. `indexes` names data columns a
    WHERE may prune by (`RowIndex`). `fill_is_value`: the arrays' Zarr `fill_value` is a
    real value, not a missing one (the table convention declares its missing values).
    """

    group_path: str
    name: str | None
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    chunk_grid: tuple[int, ...]
    data_vars: tuple[Variable, ...]
    coords: tuple[ArrayMeta | None, ...]
    problem: str | None = None
    derived: tuple[Derived, ...] = ()
    hidden: tuple[int, ...] = ()
    name_hint: str | None = None
    layout: str = "dense"
    column_names: tuple[str, ...] = ()
    column_order: tuple[str, ...] = ()
    problem_kind: ProblemKind | None = None
    aux: tuple[AuxCoord, ...] = ()
    indexes: tuple[RowIndex, ...] = ()
    fill_is_value: bool = False

    @property
    def default_name(self) -> str:
        return self.name_hint or "_".join(self.dims)

    @property
    def name_clash(self) -> bool:
        """Whether the table's only problem is a name equal to another's (`dims :=` reads it)."""
        return self.problem_kind is ProblemKind.NAME_CLASH


def unreadable_row_table(path: str, label: str, problem: str) -> TableInfo:
    """A row table a convention claims but cannot read: listed by its label with the
    problem (a broken rule of the convention), and no columns."""
    return TableInfo(
        path,
        None,
        ("row",),
        (0,),
        (1,),
        (),
        (None,),
        problem=problem,
        hidden=(0,),
        name_hint=label,
        problem_kind=ProblemKind.CONVENTION,
    )


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


def resolve_names(tables: list[TableInfo]) -> list[TableInfo]:
    """Give each table its name, or none (with the reason) when names clash.

    Only the same dimension names with another shape is a clash `dims :=` cannot settle;
    names equal ignoring case, or equal because two dimension lists join to one name
    (`['a_b', 'c']` and `['a', 'b_c']`), leave the table readable by `dims :=`.
    """
    out = []
    for t in tables:
        same = [o for o in tables if o is not t and o.default_name.lower() == t.default_name.lower()]
        problem, kind = t.problem, t.problem_kind
        if any(o.dims == t.dims for o in same):
            if problem is None:
                problem, kind = (
                    f"another table of group '{display_path(t.group_path)}' has the dimensions "
                    f"{list(t.dims)} with another shape; read its arrays with array_path :=",
                    ProblemKind.SHAPE_CLASH,
                )
        elif same and problem is None:
            other = next(o for o in same)
            how = "" if other.default_name == t.default_name else " ignoring case"
            problem = (
                f"its name '{t.default_name}' equals{how} that of the table with dimensions "
                f"{list(other.dims)}; select it with dims := {list(t.dims)}"
            )
            kind = ProblemKind.NAME_CLASH
        out.append(replace(t, name=None if problem else t.default_name, problem=problem, problem_kind=kind))
    return out
