"""The xarray/CF reading of a group, the convention that claims every group no other claims.

A group's named data variables are grouped by (dimension names, shape); each group of them is
a table named by joining the dimension names with '_'. Coordinates come from the group or its
nearest ancestor. A table gets no name (and a `problem`) when its group is misaligned with an
ancestor (that problem wins over any other), when another table of the group has the same
dimension names with another shape, when its name equals another's ignoring ASCII case, when
a dimension repeats, or when a coordinate has the wrong length or an unsupported type. Every
variable is a plain array, except a CF character array (`_character_arrays`): its last
dimension is joined into one string per cell of the others and leaves the table's
dimensions, as xarray decodes it.
"""

from __future__ import annotations

from dataclasses import replace

from zarrsql.conventions.model import (
    AuxCoord,
    GroupInfo,
    ProblemKind,
    TableInfo,
    chunk_grid,
    display_path,
    find_coord,
    group_members,
    resolve_names,
)
from zarrsql.conventions.records import CharacterArray, EncodedVariable, Variable, known_encoding
from zarrsql.discovery.roles import Member
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree, ancestors


def _is_characters(m: Member) -> bool:
    """Whether `m` is an `S1` array with at least one dimension (a character array if its
    last dimension is one, see `_character_arrays`)."""
    a = m.array
    if not isinstance(a, ArrayMeta) or not m.dims or a.dtype.kind != "fixed_bytes":
        return False
    return a.dtype.numpy is not None and a.dtype.numpy.itemsize == 1


def _character_arrays(members: list[Member]) -> set[str]:
    """The members xarray joins along their last dimension (its `CharacterArrayCoder`, as
    `decode_cf` applies it): `S1` arrays with at least one dimension whose last dimension is
    no variable of the group and is used only by fixed-width bytes arrays, as their last
    dimension. A member declaring no dimension names is no variable here: xarray lists none
    such, and a NetCDF dimension without a coordinate variable may be listed as one."""
    variables = {m.name for m in members if m.dims is not None}
    users: dict[str, list[Member]] = {}
    for m in members:
        for d in set(m.dims or ()):
            users.setdefault(d, []).append(m)

    def stackable(dim: str) -> bool:
        return dim not in variables and all(
            isinstance(u.array, ArrayMeta) and u.array.dtype.kind == "fixed_bytes" and u.dims and u.dims[-1] == dim
            for u in users[dim]
        )

    return {m.name for m in members if _is_characters(m) and m.dims and stackable(m.dims[-1])}


def _cf_members(tree: NodeTree, path: str) -> list[Member]:
    """The group's members as the CF reading sees them: a character array without its last
    dimension (a 1-d one is a scalar, unless a `coordinates` attribute names it)."""
    members = group_members(tree, path)
    joined = _character_arrays(members)
    out = []
    for m in members:
        if m.name in joined and m.dims:
            role = "scalar" if len(m.dims) == 1 and m.role == "data" else m.role
            m = replace(m, role=role, dims=m.dims[:-1])
        out.append(m)
    return out


def _joined(m: Member) -> bool:
    """Whether `m` is a character array of `_cf_members` (its dimensions one fewer)."""
    return isinstance(m.array, ArrayMeta) and m.dims is not None and len(m.dims) < m.array.ndim


def _text_encoding(a: ArrayMeta) -> str:
    """A character array's `_Encoding` (UTF-8 without one; a non-text value as its repr, which
    `decode.characters` then refuses by name)."""
    encoding = a.attrs.get("_Encoding", "utf-8")
    return encoding if isinstance(encoding, str) else repr(encoding)


def _variable(m: Member) -> Variable:
    """The table variable of a data member: a character array as a `CharacterArray`."""
    a = m.array
    assert isinstance(a, ArrayMeta)
    if not _joined(m):
        return a
    return EncodedVariable(
        a.path,
        a.shape[:-1],
        a.chunks[:-1],
        CharacterArray(a, _text_encoding(a)),
        attrs=a.attrs,
        parts=(a.path,),
    )


def _dim_sizes(members: list[Member]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for m in members:
        if m.dims is not None and isinstance(m.array, ArrayMeta) and m.role != "unsupported":
            for d, n in zip(m.dims, m.array.shape[: len(m.dims)], strict=True):
                sizes.setdefault(d, n)
    return sizes


def _misalignment(tree: NodeTree, path: str, sizes: dict[str, int]) -> str | None:
    for anc in ancestors(path):
        for d, n in _dim_sizes(_cf_members(tree, anc)).items():
            if d in sizes and sizes[d] != n:
                return (
                    f"group '{display_path(path)}' is misaligned: dimension '{d}' has length "
                    f"{sizes[d]} here and {n} in '{display_path(anc)}'; read single arrays with array_path :="
                )
    return None


def _coord_problem(coord: ArrayMeta | None, dim: str, n: int) -> str | None:
    if coord is None:
        return None
    if coord.shape[0] != n:
        return f"coordinate '{coord.path}' has length {coord.shape[0]} but dimension '{dim}' has {n}"
    return None


def _aux_coords(tree: NodeTree, path: str, dims: tuple[str, ...], arrays: list[Variable]) -> tuple[AuxCoord, ...]:
    """The auxiliary coordinates the table's variables name in CF `coordinates` (as xarray
    writes its non-index coordinates), those over a subset of the table's dimensions, in the
    order first named; dimension coordinates and names of data variables are left out. A
    character array (`station_name(station, name_strlen)`) is one, over its other dimensions."""
    members: dict[str, Member] = {}
    for p in [path, *ancestors(path)]:
        for member in _cf_members(tree, p):
            members.setdefault(member.name, member)
    data = {a.name for a in arrays}
    out: dict[str, AuxCoord] = {}
    for a in arrays:
        named = a.attrs.get("coordinates")
        for name in named.split() if isinstance(named, str) else []:
            m = members.get(name)
            if name in out or name in dims or name in data or m is None or m.role not in ("aux_coord", "scalar"):
                continue
            if not isinstance(m.array, ArrayMeta) or m.dims is None or not set(m.dims) <= set(dims):
                continue
            if len(set(m.dims)) != len(m.dims):
                continue
            axes = tuple(dims.index(d) for d in m.dims)
            if any(m.array.shape[i] != arrays[0].shape[k] for i, k in enumerate(axes)):
                continue
            encoding = _text_encoding(m.array) if _joined(m) else None
            if encoding is not None and not known_encoding(encoding):
                continue  # text no one can read: left out, where a data variable is refused by name
            out[name] = AuxCoord(name, m.array, axes, encoding)
    return tuple(out.values())


def _make_table(tree: NodeTree, path: str, dims: tuple[str, ...], arrays: list[Variable]) -> TableInfo:
    shape = arrays[0].shape
    coords = tuple(find_coord(tree, path, d) for d in dims)
    problem, kind = None, None
    if len(set(dims)) != len(dims):
        problem = f"dimension names {list(dims)} repeat; read the arrays with array_path :="
        kind = ProblemKind.REPEATED_DIMENSION
    for d, n, c in zip(dims, shape, coords, strict=True):
        if problem is None:
            problem = _coord_problem(c, d, n)
            kind = ProblemKind.COORDINATE_LENGTH if problem else None
    # A coordinate of another length (an ancestor's, in a misaligned group) cannot label this
    # table's axis: it is reported in the problem, not listed among the table's coordinates.
    coords = tuple(c if c is not None and c.shape[0] == n else None for c, n in zip(coords, shape, strict=True))
    grid = chunk_grid(arrays)
    aux = _aux_coords(tree, path, dims, arrays)
    return TableInfo(
        path, "_".join(dims), dims, shape, grid, tuple(arrays), coords, problem, problem_kind=kind, aux=aux
    )


def analyze(tree: NodeTree, path: str) -> GroupInfo:
    """Roles, tables and alignment of one group by the xarray/CF rules."""
    members = _cf_members(tree, path)
    misaligned = _misalignment(tree, path, _dim_sizes(members))
    buckets: dict[tuple, list[Variable]] = {}
    for m in members:
        if m.role in ("data", "unsupported") and m.dims is not None and isinstance(m.array, ArrayMeta):
            buckets.setdefault((m.dims, m.array.shape[: len(m.dims)]), []).append(_variable(m))
    tables = [_make_table(tree, path, dims, arrays) for (dims, _), arrays in buckets.items()]
    if misaligned:
        # xarray refuses a misaligned group whole, before it looks at any variable, and the
        # misalignment is the first thing to mend: it is every table's problem, in place of
        # one `_make_table` found (an ancestor's coordinate of another length is the
        # misalignment itself, not a coordinate of the wrong length). The tables cannot be
        # read, so they bind no coordinate: none is listed.
        tables = [
            replace(t, problem=misaligned, problem_kind=ProblemKind.MISALIGNED, coords=(None,) * len(t.dims))
            for t in tables
        ]
    tables = resolve_names(tables)
    # listed as stored: `read_zarr_metadata` shows a character array's own dimensions
    return GroupInfo(path, tuple(group_members(tree, path)), tuple(tables), misaligned)
