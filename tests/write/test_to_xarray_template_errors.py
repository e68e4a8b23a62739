"""`to_xarray(..., template=<path>)` with a path that holds no Zarr store is a zarrsql
`StoreNotFoundError` naming the template's path and the fix, raised before the relation is
read; it was xarray's bare FileNotFoundError (or zarr's GroupNotFoundError), naming neither
the parameter nor what to pass instead."""

from __future__ import annotations

from pathlib import Path

import pytest

import zarrsql
from zarrsql.errors import StoreNotFoundError


def _relation(con: zarrsql.Connection):
    return con.sql("SELECT 1 AS x, 2.0 AS v")


def test_missing_template_path_is_store_not_found(tmp_path: Path) -> None:
    con = zarrsql.connect()
    missing = tmp_path / "no" / "such" / "template.zarr"
    with pytest.raises(StoreNotFoundError) as caught:
        zarrsql.to_xarray(_relation(con), ["x"], template=str(missing))
    message = str(caught.value)
    assert f"template '{missing}'" in message
    assert "xarray Dataset" in message


def test_template_directory_without_a_store_is_store_not_found(tmp_path: Path) -> None:
    con = zarrsql.connect()
    (tmp_path / "notes.txt").write_text("not a store")
    with pytest.raises(StoreNotFoundError, match=rf"template '{tmp_path}'.*existing Zarr store"):
        zarrsql.to_xarray(_relation(con), ["x"], template=tmp_path)  # a PathLike, as the docs allow


def test_template_is_checked_before_the_relation_is_read(tmp_path: Path) -> None:
    con = zarrsql.connect()
    failing = con.sql("SELECT 1 AS x, error('the relation was read') AS v")
    with pytest.raises(StoreNotFoundError):
        zarrsql.to_xarray(failing, ["x"], template=str(tmp_path / "missing.zarr"))
