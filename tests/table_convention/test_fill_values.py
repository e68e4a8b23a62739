"""The table convention declares its missing values (`missing_value`, a `nullable` mask,
categorical code -1), so a Zarr `fill_value` is a real value there, never a NULL; and a
categorical group without categories reads as NULL text. The oracle is zarr-python's
arrays and the convention's rules applied to them by hand."""

from __future__ import annotations

import pytest
import zarr

import zarrsql
from tests.table_convention.stores import REGISTRATION


def _table(path: str, fmt: int, columns: list[str]) -> zarr.Group:
    root = zarr.open_group(path, mode="w", zarr_format=fmt)
    root.attrs.update(
        {"zarr_conventions": [REGISTRATION], "table:columns": [{"name": c, "node": c} for c in columns]}
    )
    return root


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_fill_value_is_a_real_value(tmp_path, fmt: int) -> None:
    path = str(tmp_path / "t.zarr")
    root = _table(path, fmt, ["count", "depth", "level"])
    root.create_array("count", shape=(5,), chunks=(2,), dtype="int32", fill_value=7)[:] = [0, 7, 3, 7, 1]
    depth = root.create_group("depth")
    depth.attrs["encoding-type"] = "nullable"
    depth.create_array("values", shape=(5,), chunks=(2,), dtype="float64", fill_value=-1.0)[:] = [-1, 2, 0, -1, 5]
    depth.create_array("mask", shape=(5,), chunks=(2,), dtype="bool")[:] = [False, False, True, False, False]
    level = root.create_array(
        "level", shape=(5,), chunks=(2,), dtype="int16", fill_value=9, attributes={"missing_value": -99}
    )
    level[:] = [9, -99, 4, 9, 2]
    back = zarr.open_group(path, mode="r")
    mask = back["depth/mask"][:]
    want = [
        (
            int(c),
            None if m else float(d),
            None if lv == -99 else int(lv),
        )
        for c, d, m, lv in zip(back["count"][:], back["depth/values"][:], mask, back["level"][:], strict=True)
    ]
    got = zarrsql.connect().sql(f"SELECT count, depth, level FROM read_zarr('{path}')").fetchall()
    assert got == want
    assert sum(1 for row in want if row[0] == 7) == 2  # the fill value itself is among the data


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_categorical_without_categories_is_null_text(tmp_path, fmt: int) -> None:
    path = str(tmp_path / "t.zarr")
    root = _table(path, fmt, ["species"])
    species = root.create_group("species")
    species.attrs.update({"encoding-type": "categorical", "ordered": False})
    species.create_array("codes", shape=(3,), dtype="int8")[:] = [-1, -1, -1]
    species.create_array("categories", shape=(0,), dtype=str)
    assert zarr.open_group(path, mode="r")["species/categories"].shape == (0,)
    rel = zarrsql.connect().sql(f"SELECT species FROM read_zarr('{path}')")
    assert str(rel.types[0]) == "VARCHAR"
    assert rel.fetchall() == [(None,)] * 3
