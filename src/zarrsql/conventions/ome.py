"""OME-Zarr images: axis names from `multiscales`, physical coordinates from transforms.

A group whose attributes hold `multiscales` (NGFF 0.4, Zarr v2) or `ome.multiscales` (0.5,
Zarr v3) is an image. Each resolution level (`datasets[i].path`) gets the axis names of its
multiscale, so an image reads with `c, z, y, x` columns; the levels share names but not
shapes, so several levels are listed without a table name and read one at a time with
`level :=` (an index into the first multiscale's `datasets`, 0 = full resolution) or
`array_path :=` (a single level is an ordinary named table). A level's lone data column is
named `value`. Every space or time axis also gets a physical coordinate column,
`position * scale + translation` from the level's (then the multiscale's)
`coordinateTransformations`, named `<axis>_<unit>` (`x_um` for micrometer) or
`<axis>_physical` without a unit; WHERE on it prunes like any coordinate. The channel axis
(type `channel`, else the axis named `c`) gets `<axis>_label`, a VARCHAR column of
`omero.channels[].label` (NULL for a channel without one) when `omero.channels` lists one
entry per channel; WHERE on it prunes too. Labels
(`labels/<name>`) and HCS plate fields are images of their own and are found the same way.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from zarrsql.conventions.model import Derived, GroupInfo, ProblemKind, TableInfo, chunk_grid, resolve_names
from zarrsql.discovery.roles import Member, assign_roles
from zarrsql.errors import MetadataError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree

_UNITS = {
    "micrometer": "um",
    "nanometer": "nm",
    "millimeter": "mm",
    "centimeter": "cm",
    "meter": "m",
    "picometer": "pm",
    "angstrom": "angstrom",
    "second": "s",
    "millisecond": "ms",
    "microsecond": "us",
    "nanosecond": "ns",
    "minute": "min",
    "hour": "h",
}


def _multiscales(attrs: Any) -> list[dict]:
    ms = attrs.get("multiscales")
    if ms is None and isinstance(attrs.get("ome"), dict):
        ms = attrs["ome"].get("multiscales")
    return [m for m in ms if isinstance(m, dict)] if isinstance(ms, list) else []


class _Invalid(ValueError):
    """A multiscales field of the wrong JSON type (re-raised as a MetadataError naming the group)."""


def _list(value: Any, what: str) -> list[Any]:
    if value is not None and not isinstance(value, list):
        raise _Invalid(f"{what} must be a JSON array, got {value!r}"[:200])
    return value or []


def _numbers(values: list[Any], what: str) -> list[float]:
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise _Invalid(f"{what} must hold finite numbers, got {values!r}"[:200])
    return [float(v) for v in values]


#: The axes NGFF 0.1 and 0.2 fix for every image, which their `multiscales` do not list.
_EARLY_AXES = [
    {"name": "t", "type": "time"},
    {"name": "c", "type": "channel"},
    {"name": "z", "type": "space"},
    {"name": "y", "type": "space"},
    {"name": "x", "type": "space"},
]


def _axes(ms: dict) -> list[dict]:
    if ms.get("axes") is None and str(ms.get("version")) in ("0.1", "0.2"):
        return [dict(a) for a in _EARLY_AXES]  # 5-D `t, c, z, y, x` by the specification
    axes = [a if isinstance(a, dict) else {"name": str(a)} for a in _list(ms.get("axes"), "axes")]
    if not all(isinstance(a.get("name"), str) for a in axes):
        raise _Invalid(f"every axis needs a string name, got {axes!r}"[:200])
    return axes


def _affine(transforms: Any, ndim: int) -> tuple[list[float], list[float]]:
    """The composed (scale, translation) of a list of scale/translation transforms."""
    scale, shift = [1.0] * ndim, [0.0] * ndim
    for t in _list(transforms, "coordinateTransformations"):
        if not isinstance(t, dict):
            continue
        if t.get("type") == "scale" and isinstance(t.get("scale"), list) and len(t["scale"]) == ndim:
            factors = _numbers(t["scale"], "a scale")
            scale = [s * f for s, f in zip(scale, factors, strict=True)]
            shift = [o * f for o, f in zip(shift, factors, strict=True)]
        elif (
            t.get("type") == "translation" and isinstance(t.get("translation"), list) and len(t["translation"]) == ndim
        ):
            shift = [o + d for o, d in zip(shift, _numbers(t["translation"], "a translation"), strict=True)]
    return scale, shift


def _derived(ms: dict, dataset: dict, axes: list[dict]) -> tuple[Derived, ...]:
    ndim = len(axes)
    scale, shift = _affine(dataset.get("coordinateTransformations"), ndim)
    outer_scale, outer_shift = _affine(ms.get("coordinateTransformations"), ndim)
    out = []
    for k, a in enumerate(axes):
        if a.get("type") not in ("space", "time"):
            continue
        if not math.isfinite(scale[k] * outer_scale[k]) or not math.isfinite(
            shift[k] * outer_scale[k] + outer_shift[k]
        ):
            raise _Invalid(f"the transforms of axis '{a['name']}' overflow")
        unit = a.get("unit")
        suffix = _UNITS.get(unit, unit) if isinstance(unit, str) and unit else "physical"
        out.append(
            Derived(f"{a['name']}_{suffix}", k, scale[k] * outer_scale[k], shift[k] * outer_scale[k] + outer_shift[k])
        )
    return tuple(out)


def _omero_channels(attrs: Any) -> list | None:
    omero = attrs.get("omero")
    if omero is None and isinstance(attrs.get("ome"), dict):
        omero = attrs["ome"].get("omero")
    channels = omero.get("channels") if isinstance(omero, dict) else None
    return channels if isinstance(channels, list) else None


def _channel_label(attrs: Any, axes: list[dict], shape: tuple[int, ...], taken: set[str]) -> tuple[Derived, ...]:
    """`<c>_label`, the channel axis's `omero.channels[].label` (a missing label is NULL);
    nothing when the image has no channel axis, or its channel list does not match the axis."""
    channels = _omero_channels(attrs)
    kinds = [a.get("type") for a in axes]
    k = (
        kinds.index("channel")
        if "channel" in kinds
        else next((i for i, a in enumerate(axes) if a.get("name") == "c"), None)
    )
    if channels is None or k is None or k >= len(shape) or len(channels) != shape[k]:
        return ()
    name = f"{axes[k].get('name')}_label"
    if name.lower() in taken:
        return ()
    labels = tuple(c["label"] if isinstance(c, dict) and isinstance(c.get("label"), str) else None for c in channels)
    return (Derived(name, k, labels=labels),)


_Level = tuple[tuple[str, ...], tuple[Derived, ...], list[dict]]


def _levels(path: str, scales: list[dict]) -> dict[str, _Level]:
    """Axis names, derived coordinates and axes of each level, by array path."""
    levels: dict[str, _Level] = {}
    for ms in scales:
        axes = _axes(ms)
        names = tuple(a["name"] for a in axes)
        for ds in _list(ms.get("datasets"), "datasets"):
            if isinstance(ds, dict) and isinstance(ds.get("path"), str):
                full = f"{path}/{ds['path']}" if path else ds["path"]
                levels[full] = (names, _derived(ms, ds, axes), axes)
    return levels


def analyze(tree: NodeTree, path: str) -> GroupInfo | None:
    """The OME-Zarr reading of an image group, or of a group holding an image's levels below it
    (`datasets[].path` may be nested, 'res/0'), or None for any other group."""
    group = tree.groups.get(path)
    scales = _multiscales(group.attrs) if group is not None else []
    if not scales:
        return _levels_below_an_image(tree, path)
    levels = _checked_levels(path, scales)
    _, arrays = tree.children(path)
    nested = [p for p in levels if p in tree.arrays and p.rpartition("/")[0] != path]
    members, tables = _level_members(tree, path, [*arrays, *nested], dict(group.attrs), levels)  # type: ignore[union-attr]
    members = [m for m in members if m.array.path in arrays]  # a nested level is its own group's member
    order = _level_paths(path, scales[0])
    tables = _level_problems(tables, order)
    return GroupInfo(path, tuple(members), tuple(resolve_names(tables)), None, levels=order)


def _checked_levels(path: str, scales: list[dict]) -> dict[str, _Level]:
    try:
        return _levels(path, scales)
    except _Invalid as err:
        raise MetadataError(
            f"group '/{path}' has invalid OME-Zarr multiscales attributes: {err}; fix the group's attributes"
        ) from err


def _levels_below_an_image(tree: NodeTree, path: str) -> GroupInfo | None:
    """A group inside an image that holds some of its levels (`datasets[].path` 'res/0'): its
    arrays are those levels, with the image's axes, listed as tables by the image (and read
    here by `array_path :=` or `level :=`); None when no image above names an array of it."""
    from zarrsql.metadata.tree import ancestors

    _, arrays = tree.children(path)
    for owner in ancestors(path) if path else []:
        group = tree.groups.get(owner)
        scales = _multiscales(group.attrs) if group is not None else []
        if not scales:
            continue
        levels = _checked_levels(owner, scales)
        if not any(a in levels for a in arrays):
            return None
        members, _ = _level_members(tree, owner, arrays, dict(group.attrs), levels)  # type: ignore[union-attr]
        return GroupInfo(path, tuple(members), (), None)
    return None


def _level_members(
    tree: NodeTree, image: str, arrays: list[str], attrs: dict[str, Any], levels: dict[str, _Level]
) -> tuple[list[Member], list[TableInfo]]:
    """The members of `arrays` (a level gets its image's axes, derived columns and `value`),
    and a table per level, listed by the image group `image`."""
    members, tables = [], []
    for m in assign_roles([tree.arrays[a] for a in arrays], attrs):
        level = levels.get(m.array.path)
        if level is None or not isinstance(m.array, ArrayMeta) or m.array.ndim != len(level[0]):
            members.append(m)
            continue
        dims, derived, axes = level
        taken = {n.lower() for n in dims} | {d.name.lower() for d in derived} | {"value"}
        derived = derived + _channel_label(attrs, axes, m.array.shape, taken)
        role = "unsupported" if not m.array.dtype.supported else "data"
        members.append(Member(m.array, role, dims, derived, column="value"))
        grid = chunk_grid([m.array])
        tables.append(
            TableInfo(
                image,
                None,
                dims,
                m.array.shape,
                grid,
                (m.array,),
                (None,) * len(dims),
                problem=None if len(set(dims)) == len(dims) else f"its axis names {list(dims)} repeat",
                problem_kind=None if len(set(dims)) == len(dims) else ProblemKind.REPEATED_DIMENSION,
                derived=derived,
                column_names=("value",),
            )
        )
    return members, tables


def _level_paths(path: str, ms: dict) -> tuple[str, ...]:
    """The array paths of a multiscale's levels, in `datasets` order (full resolution first)."""
    rel = [ds["path"] for ds in ms.get("datasets") or [] if isinstance(ds, dict) and isinstance(ds.get("path"), str)]
    return tuple(f"{path}/{p}" if path else p for p in rel)


def _level_problems(tables: list[TableInfo], levels: tuple[str, ...]) -> list[TableInfo]:
    """Levels that share their axis names with another level get no table name; their
    problem says how to read each one (by `level :=` when it is a level of the first
    multiscale, which `level :=` indexes)."""
    out = []
    for t in tables:
        if t.problem is None and any(o is not t and o.dims == t.dims for o in tables):
            path = t.data_vars[0].path
            how = f"level := {levels.index(path)} or " if path in levels else ""
            t = replace(
                t,
                problem=f"it is one resolution level of a multiscale image; read it with {how}array_path := '{path}'",
                problem_kind=ProblemKind.LEVEL,
            )
        out.append(t)
    return out
