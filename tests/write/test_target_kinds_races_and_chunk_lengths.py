"""Three writer refusals users met (a hunt of session 27):

- two `mode="w-"` writers of one path: the one that finishes second must get the
  `StoreExistsError` of the first check, not a `WriteError` saying "the query failed" (the
  error is a FileExistsError, and the staging step wrapped every OSError);
- a `memory://` target (fsspec knows it, zarr-python cannot write through it): a
  `ParameterError` up front rather than zarr's bare TypeError;
- numpy integers as chunk lengths (`ds.sizes`, `arr.shape` give them), which xarray and zarr
  take: accepted, giving the same chunks as Python ints.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrsql


@pytest.mark.parametrize("layout", ["table", "grid"])
def test_the_second_of_two_creators_is_told_the_store_exists(tmp_path: Path, layout: str) -> None:
    """The other writer's store appears while this one streams its rows (a UDF makes it then,
    on one thread, so the order is fixed); its store is left as it put it."""
    target = tmp_path / "out.zarr"
    document = {"zarr_format": 3, "node_type": "group", "attributes": {"by": "the other writer"}}

    def other_writer(i: int) -> int:
        if i == 5_000 and not target.exists():
            target.mkdir()
            (target / "zarr.json").write_text(json.dumps(document))
        return i

    con = zarrsql.connect()
    con.duckdb.create_function("other_writer", other_writer, ["BIGINT"], "BIGINT", side_effects=True)
    con.execute("SET threads = 1")
    relation = con.sql("SELECT other_writer(range) AS id, range * 0.5 AS v FROM range(20000)")
    with pytest.raises(zarrsql.StoreExistsError, match="already exists") as caught:
        zarrsql.to_zarr(relation, str(target), layout=layout, dims=["id"] if layout == "grid" else None, connection=con)
    assert "query failed" not in str(caught.value)
    assert json.loads((target / "zarr.json").read_text()) == document
    assert sorted(p.name for p in target.iterdir()) == ["zarr.json"]


def test_a_memory_url_is_refused_before_writing() -> None:
    with pytest.raises(zarrsql.ParameterError, match="memory:// URL"):
        zarrsql.to_zarr("SELECT 1 AS a", "memory://m.zarr", layout="table")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (np.int64(2), (2, 2)),
        ([np.int32(2), np.int64(3)], (2, 3)),
        ({"a": np.int64(2), "b": np.uint8(3)}, (2, 3)),
        ((np.int16(2), 3), (2, 3)),
    ],
)
def test_numpy_integers_as_chunk_lengths(tmp_path: Path, given: object, expected: tuple[int, int]) -> None:
    query = "SELECT a, b, a * 10 + b AS v FROM range(5) t(a), range(6) u(b)"
    zarrsql.to_zarr(query, str(tmp_path / "np.zarr"), dims=["a", "b"], chunks=given)
    assert zarr.open_array(tmp_path / "np.zarr" / "v", mode="r").chunks == expected


def test_numpy_rows_per_chunk_for_a_table(tmp_path: Path) -> None:
    zarrsql.to_zarr("SELECT range AS i FROM range(10)", str(tmp_path / "t.zarr"), layout="table", chunks=np.int64(4))
    assert zarr.open_array(tmp_path / "t.zarr" / "i", mode="r").chunks == (4,)
