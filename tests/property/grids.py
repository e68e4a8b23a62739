"""Random small grids shared by the property tests: coordinates of four kinds (float with
NaN, which reads as NULL; int; positional; string), written with zarr-python, and every cell
of a grid as Arrow columns for an oracle DuckDB."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import zarr

KINDS = ("float", "int", "positional", "string")


def coordinate(rng: random.Random, kind: str, n: int) -> np.ndarray | None:
    if kind == "positional":
        return None
    if kind == "float":  # NaN reads as NULL (nan_as_null)
        return np.array([rng.choice([-1.0, 0.0, 1.5, 2.0, 3.0, np.nan]) for _ in range(n)])
    if kind == "int":
        return np.array([rng.choice([-2, 0, 1, 3, 4]) for _ in range(n)], dtype="int32")
    return np.array([rng.choice(["a", "b", "ab", "c"]) for _ in range(n)], dtype=object)


def write_coordinates(
    root: zarr.Group, path: str, rng: random.Random, names: list[str], kinds: list[str], shape: tuple[int, ...]
) -> list[np.ndarray]:
    """Each dimension's coordinate array (none for a positional one, randomly chunked), and
    the values zarr-python reads back per dimension (positions where there is none)."""
    for name, kind, n in zip(names, kinds, shape, strict=True):
        values = coordinate(rng, kind, n)
        if values is not None:
            dtype = str if kind == "string" else values.dtype
            root.create_array(name, shape=(n,), chunks=(rng.randint(1, n),), dtype=dtype, dimension_names=[name])
            root[name][:] = values
    group = zarr.open_group(path, mode="r")
    return [
        np.asarray(group[n][:]) if n in group else np.arange(s, dtype="int64")
        for n, s in zip(names, shape, strict=True)
    ]


def cell_columns(names: list[str], axes: list[np.ndarray]) -> dict[str, pa.Array]:
    """Every cell's coordinates, row-major; a NaN coordinate is NULL as zarrsql reads it."""
    grids = np.meshgrid(*axes, indexing="ij") if axes else []
    cols = {}
    for name, grid in zip(names, grids, strict=True):
        flat = grid.reshape(-1)
        mask = np.isnan(flat) if flat.dtype.kind == "f" else None
        cols[name] = pa.array(flat.tolist() if flat.dtype == object else flat, mask=mask)
    return cols
