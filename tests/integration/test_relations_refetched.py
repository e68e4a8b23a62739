"""A relation fetched again after its store changed, with no other statement in between, and a
result streamed while its store is rewritten: the store's rows as they are now, or an error;
never the coordinates kept from one version beside the chunks of another (mixed rows), nor
rows that no longer exist read as fill (NULL).

The oracle is a fresh xarray (or zarr) reading of the store as it is on disk.
"""

from __future__ import annotations

import math
import shutil

import duckdb
import numpy as np
import pytest
import xarray as xr
import zarr

import zarrsql
from zarrsql.scan import open_scan

pytestmark = pytest.mark.timeout(120)

#: The error a fetch raises when it cannot read the store as it is now.
CHANGED = "changed since this relation was made"


def _write(path: str, t: list[int], v: list[float], dtype: str = "float32", chunk: int = 2) -> None:
    """Replace the store at `path` (as another writer does: remove, then write anew)."""
    shutil.rmtree(path, ignore_errors=True)
    ds = xr.Dataset({"v": (("t",), np.asarray(v, dtype))}, coords={"t": np.asarray(t, "int64")})
    ds.chunk({"t": chunk}).to_zarr(path, mode="w", consolidated=False)


def _oracle(path: str) -> list[tuple[int, float]]:
    with xr.open_zarr(path, consolidated=False) as ds:
        return sorted(zip(ds["t"].values.tolist(), ds["v"].values.astype("float64").tolist(), strict=True))


def _rows(rel: duckdb.DuckDBPyRelation) -> list[tuple[int, float]]:
    return sorted((int(t), float(v)) for t, v in rel.fetchall())


def test_a_store_replaced_with_the_same_shape_pairs_new_coordinates_with_new_values(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, [0, 1, 2, 3], [0, 1, 2, 3])
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT t, v FROM read_zarr('{path}') ORDER BY v")
        assert _rows(rel) == _oracle(path)
        _write(path, [7, 8, 9, 10], [70, 80, 90, 100])
        assert _rows(rel) == _oracle(path) == [(7, 70.0), (8, 80.0), (9, 90.0), (10, 100.0)]


def test_a_store_replaced_by_a_shorter_one_returns_no_rows_that_no_longer_exist(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, list(range(6)), list(range(6)))
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT t, v FROM read_zarr('{path}') ORDER BY t")
        assert _rows(rel) == _oracle(path)
        _write(path, [0, 1], [10, 11])
        rows = rel.fetchall()
        assert all(v is not None for _, v in rows)
        assert sorted(rows) == _oracle(path)


def test_a_relation_over_a_deleted_variable_fails_instead_of_null_values(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, [0, 1, 2, 3], [0, 1, 2, 3])
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT t, v FROM read_zarr('{path}') ORDER BY t")
        assert _rows(rel) == _oracle(path)
        shutil.rmtree(path + "/v")
        with xr.open_zarr(path, consolidated=False) as ds:
            assert "v" not in ds.data_vars  # the oracle: the variable is gone
        with pytest.raises(duckdb.Error, match=CHANGED) as err:
            rel.fetchall()
        assert "con.sql(" in str(err.value)


def test_coordinates_and_values_rewritten_in_place_are_read_together(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, [0, 1, 2, 3], [0, 1, 2, 3], chunk=4)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT t, v FROM read_zarr('{path}') ORDER BY v")
        assert _rows(rel) == _oracle(path)
        group = zarr.open_group(path, mode="r+")
        group["t"][:] = np.arange(100, 104)  # a coordinate rewritten in place
        group["v"][:] = np.arange(10, 14, dtype="float32")  # and the data
        assert _rows(rel) == _oracle(path) == [(100, 10.0), (101, 11.0), (102, 12.0), (103, 13.0)]


def test_a_changed_type_says_the_store_changed_not_that_a_chunk_is_corrupt(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, [0, 1, 2, 3], [0, 1, 2, 3])
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT t, v FROM read_zarr('{path}') ORDER BY t")
        assert _rows(rel) == _oracle(path)
        _write(path, [0, 1, 2, 3, 4], [5, 6, 7, 8, 9], dtype="int16", chunk=3)
        with pytest.raises(duckdb.Error, match=CHANGED) as err:
            rel.fetchall()
        assert "could not be decoded" not in str(err.value)
        # running the statement again reads the store as it is now
        assert _rows(con.sql(f"SELECT t, v FROM read_zarr('{path}') ORDER BY t")) == _oracle(path)


def test_an_unchanged_store_is_read_by_the_same_relation_every_time(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, list(range(10)), list(range(10)))
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT t, v FROM read_zarr('{path}') WHERE t > 2")
        expected = [r for r in _oracle(path) if r[0] > 2]
        assert _rows(rel) == expected
        assert _rows(rel) == expected


# -- answers from the coordinates (count, min, max) ------------------------------------------


def _t_range(path: str) -> list[tuple[int, int]]:
    with xr.open_zarr(path, consolidated=False) as ds:
        return [(int(ds["t"].values.min()), int(ds["t"].values.max()))]


@pytest.mark.parametrize("statement_between", [False, True])
def test_a_coordinate_answer_is_not_repeated_after_the_coordinate_changed(tmp_path, statement_between):
    path = str(tmp_path / "s.zarr")
    _write(path, list(range(6)), [0.0] * 6, chunk=6)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT min(t), max(t) FROM read_zarr('{path}')")
        assert rel.fetchall() == _t_range(path)
        zarr.open_group(path, mode="r+")["t"][:] = np.arange(100, 106)  # rewritten in place
        if statement_between:
            con.sql(f"SELECT count(*) FROM read_zarr('{path}')").fetchall()
        with pytest.raises(duckdb.Error, match=CHANGED):
            rel.fetchall()
        assert con.sql(f"SELECT min(t), max(t) FROM read_zarr('{path}')").fetchall() == _t_range(path)


def test_a_coordinate_answer_fetched_after_its_store_was_replaced_fails(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, list(range(6)), [0.0] * 6, chunk=6)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT count(*), max(t) FROM read_zarr('{path}')")
        _write(path, list(range(3)), [0.0] * 3, chunk=3)
        with pytest.raises(duckdb.Error, match=CHANGED):
            rel.fetchall()
        with xr.open_zarr(path, consolidated=False) as ds:
            expected = [(ds.sizes["t"], int(ds["t"].values.max()))]
        assert con.execute(f"SELECT count(*), max(t) FROM read_zarr('{path}')").fetchall() == expected


def test_an_unchanged_coordinate_answer_fetches_again_without_reading_a_chunk(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, list(range(6)), [0.0] * 6)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT count(*), min(t), max(t) FROM read_zarr('{path}')")
        with xr.open_zarr(path, consolidated=False) as ds:
            expected = [(ds.sizes["t"], int(ds["t"].values.min()), int(ds["t"].values.max()))]
        with zarrsql.trace() as work:
            assert rel.fetchall() == expected
            con.sql("SELECT 1").fetchall()
            assert rel.fetchall() == expected
        assert work.chunks_decoded == 0
        assert work.bytes_read == 0


# -- a result streamed while its store is rewritten -------------------------------------------


def _long(path: str, n: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    ds = xr.Dataset({"v": (("t", "x"), np.ones((n, 10), "float32"))}, coords={"t": np.arange(n), "x": np.arange(10)})
    ds.chunk({"t": 10}).to_zarr(path, mode="w", consolidated=False)


def _shrink(path: str, n: int) -> None:
    """Another writer shrinks the store in place (zarr removes the chunks past the end)."""
    group = zarr.open_group(path, mode="r+")
    group["t"].resize((n,))
    group["v"].resize((n, 10))


def test_a_scan_of_a_store_shrunk_under_it_fails_instead_of_reading_fill(tmp_path):
    path = str(tmp_path / "s.zarr")
    _long(path, 2000)
    batches = open_scan({"store": path}, columns=["t", "v"]).batches()
    first = next(batches)
    assert first.num_rows > 0
    _shrink(path, 20)
    with xr.open_zarr(path, consolidated=False) as ds:
        assert ds.sizes["t"] == 20  # the oracle: 20 steps left
    with pytest.raises(zarrsql.StoreReadError, match="changed during the query"):
        list(batches)  # before: the rest of the 2000 steps, v read as fill (NULL)


def test_a_streamed_result_of_a_store_replaced_under_it_fails_instead_of_null_rows(tmp_path):
    path = str(tmp_path / "s.zarr")
    _long(path, 4000)
    with zarrsql.connect() as con:
        reader = con.sql(f"SELECT t, x, v FROM read_zarr('{path}')").to_arrow_reader(100)
        first = reader.read_next_batch()
        _shrink(path, 20)
        try:
            rest, failure = reader.read_all(), ""
        except (duckdb.Error, OSError) as err:
            rest, failure = None, str(err)
    if rest is None:
        assert "changed during the query" in failure
    else:  # DuckDB had taken every batch before the rewrite: the rows of the old store, whole
        assert first.num_rows + rest.num_rows == 40_000
        assert rest.column("v").null_count == 0


def test_a_chunk_missing_from_an_unchanged_store_still_reads_as_fill(tmp_path):
    path = str(tmp_path / "s.zarr")
    _long(path, 40)
    (tmp_path / "s.zarr" / "v" / "c" / "1" / "0").unlink()  # never written: Zarr's fill value
    with xr.open_zarr(path, consolidated=False) as ds:
        expected = int(np.isnan(ds["v"].values).sum())
    assert expected == 100
    with zarrsql.connect() as con:
        nulls = con.sql(f"SELECT count(*) FILTER (WHERE v IS NULL OR isnan(v)) FROM read_zarr('{path}')")
        assert nulls.fetchall() == [(expected,)]
        rows = con.sql(f"SELECT t, x, v FROM read_zarr('{path}')").fetchall()
        assert sum(1 for _, _, v in rows if v is None or math.isnan(v)) == expected
