"""Each array's role in its group, by the xarray/CF rules.

Roles: `coord` (1-D, its only dimension named after itself), `data`, `aux_coord` (named by a
`coordinates` attribute and not a dimension coordinate; a 0-D one too, as xarray's scalar
coordinates are: a column holding its one value), `bounds` (named by a `bounds` attribute),
`scalar` (0-D and named by no `coordinates` attribute), `unsupported` (unreadable metadata or
data type). Arrays without dimension names are `data` with no declared dimensions: they never
join a table (decision 7 of the field guide: guessing names could silently join unrelated
arrays).
"""

from __future__ import annotations

from dataclasses import dataclass

from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import ArrayProblem

Role = str  # one of "coord", "data", "aux_coord", "bounds", "scalar", "unsupported"


@dataclass(frozen=True, slots=True)
class Member:
    """An array of a group with its role and the dimension names tables use.

    `dims` is None for arrays that declare no dimension names; a null entry in a partial
    declaration becomes `dim_<position>`. A convention may name the axes itself (OME-Zarr's
    `multiscales` axes, AnnData's obs/var), add `derived` coordinate columns and choose the
    `column` name an `array_path` read gives the array (an image level's is `value`).
    """

    array: ArrayMeta | ArrayProblem
    role: Role
    dims: tuple[str, ...] | None
    derived: tuple = ()
    column: str | None = None

    @property
    def name(self) -> str:
        return self.array.name


def effective_dims(array: ArrayMeta) -> tuple[str, ...] | None:
    """Declared dimension names with `dim_<i>` for null entries; None when none are declared,
    except for a 0-d array, whose dimensions are known: none (Zarr v3 writers such as xarray
    leave `dimension_names` out there, where v2 has `_ARRAY_DIMENSIONS: []`)."""
    if array.dimension_names is None:
        return () if array.ndim == 0 else None
    return tuple(n if n else f"dim_{i}" for i, n in enumerate(array.dimension_names))


def _attr_names(value: object) -> set[str]:
    if isinstance(value, str):
        return set(value.split())
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    return set()


def _referenced(arrays: list[ArrayMeta | ArrayProblem], group_attrs: dict, key: str) -> set[str]:
    names = _attr_names(group_attrs.get(key)) if key == "coordinates" else set()
    for a in arrays:
        if isinstance(a, ArrayMeta):
            names |= _attr_names(a.attrs.get(key))
    return names


def assign_roles(arrays: list[ArrayMeta | ArrayProblem], group_attrs: dict) -> list[Member]:
    """Give every array of one group its role (see the module docstring)."""
    bounds = _referenced(arrays, group_attrs, "bounds")
    aux = _referenced(arrays, group_attrs, "coordinates")
    members = []
    for a in arrays:
        if isinstance(a, ArrayProblem) or not a.dtype.supported:
            members.append(Member(a, "unsupported", effective_dims(a) if isinstance(a, ArrayMeta) else None))
            continue
        dims = effective_dims(a)
        if a.ndim == 0:
            # named by a `coordinates` attribute (xarray's scalar coordinate): a column of the
            # tables of the variables naming it, so an auxiliary coordinate like any other
            role = "aux_coord" if a.name in aux else "scalar"
        elif a.name in bounds:
            role = "bounds"
        elif dims is not None and a.ndim == 1 and dims[0] == a.name:
            role = "coord"
        elif a.name in aux:
            role = "aux_coord"
        else:
            role = "data"
        members.append(Member(a, role, dims))
    return members
