"""A relation fetched again after its store changed: as the store is now, or a clear error.

DuckDB re-runs a relation each time it is fetched. A zarrsql relation reads the chunks anew
each time; when the store's metadata changed since the relation was made (an append grew an
axis), its scan no longer matches the store, and registering the new one needs a statement
on the wrapper, which a fetch is not. So the fetch fails and says to run the statement again,
never showing the old shape over the new chunks; once the statement ran again, the old
relation reads the store as it is. The oracle is xarray's reading of the store.
"""

from __future__ import annotations

import gc

import duckdb
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import zarrsql

pytestmark = pytest.mark.timeout(120)


def _write(path: str, start: int, n: int, mode: str = "w") -> None:
    time = pd.date_range("2022-01-01", periods=n, freq="D") + pd.Timedelta(days=start)
    values = np.arange(start, start + n, dtype="float64") * 1.5
    ds = xr.Dataset({"v": (("time",), values)}, coords={"time": time})
    if mode == "w":
        ds.to_zarr(path, mode="w", encoding={"v": {"chunks": (4,)}, "time": {"units": "days since 2022-01-01"}})
    else:
        ds.to_zarr(path, append_dim="time")


def _oracle(path: str) -> list[tuple[float]]:
    with xr.open_zarr(path) as ds:
        return [(float(x),) for x in ds["v"].values if x > 3]


SQL = "SELECT v FROM read_zarr('{p}') WHERE v > 3 ORDER BY v"


def test_new_values_in_the_same_chunks_are_read(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, 0, 10)
    with zarrsql.connect() as con:
        rel = con.sql(SQL.format(p=path))
        assert rel.fetchall() == _oracle(path)
        array = zarr.open_array(path + "/v", mode="r+")
        array[:] = array[:] * 10  # data only: the metadata is unchanged
        assert rel.fetchall() == _oracle(path)
        assert len(_oracle(path)) == 9


def test_an_append_makes_the_fetch_say_to_run_the_statement_again(tmp_path):
    path = str(tmp_path / "s.zarr")
    _write(path, 0, 10)
    with zarrsql.connect() as con:
        rel = con.sql(SQL.format(p=path))
        before = rel.fetchall()
        assert before == _oracle(path)
        _write(path, 10, 5, mode="a")
        # until another statement runs, the relation reads the table it was bound to (the
        # rows an append leaves as they were), as a writer appending to its source does
        assert rel.fetchall() == before
        con.sql("SELECT 42").fetchall()
        with pytest.raises(duckdb.Error, match="changed since this relation was made") as err:
            rel.fetchall()
        assert r"con.sql(" in str(err.value)
        assert "__zarrsql_" not in str(err.value)
        again = con.sql(SQL.format(p=path)).fetchall()
        assert again == _oracle(path)
        assert len(again) == len(before) + 5
        assert rel.fetchall() == again  # the old relation reads the store as it is now


def test_a_relation_joining_tables_of_one_store_fetches_after_other_statements(tmp_path):
    """Reading a table's coordinates must not rename another table's scan of the same store
    (each joins the store's cached validators): the relation stays valid."""
    path = str(tmp_path / "two.zarr")
    ds = xr.Dataset(
        {"a": (("x",), np.arange(6.0)), "b": (("y",), np.arange(4.0) * 2)},
        coords={"x": np.arange(6) * 10, "y": np.arange(4) * 100},
    )
    ds.to_zarr(path, mode="w")
    sql = f"SELECT p.x, q.y, p.a + q.b AS s FROM read_zarr('{path}', dims := ['x']) p, " + (
        f"read_zarr('{path}', dims := ['y']) q WHERE p.x < 30 ORDER BY 1, 2"
    )
    expected = [(int(x), int(y), float(a + b)) for x, a in zip(ds.x.values, ds.a.values, strict=True) if x < 30
                for y, b in zip(ds.y.values, ds.b.values, strict=True)]  # fmt: skip
    with zarrsql.connect() as con:
        rel = con.sql(sql)
        assert rel.fetchall() == expected
        con.sql("SELECT 1").fetchall()
        assert rel.fetchall() == expected
        assert len({k for k, _, _ in con._state.order}) == 2  # one scan per table, not renamed


def test_a_relation_over_an_unchanged_store_fetches_after_other_statements(tmp_path):
    path = str(tmp_path / "s.zarr")
    other = str(tmp_path / "o.zarr")
    _write(path, 0, 10)
    _write(other, 0, 6)
    with zarrsql.connect() as con:
        rel = con.sql(SQL.format(p=path))
        for _ in range(3):
            con.sql(SQL.format(p=other)).fetchall()
        assert rel.fetchall() == _oracle(path)
        assert rel.fetchall() == _oracle(path)


def test_relations_keep_their_scans_registered_while_they_live(tmp_path, monkeypatch):
    """Past `MAX_REGISTERED` reads the oldest scans are let go, never one a live relation
    reads (on DuckDB 2 a relation made from another keeps it alive; on 1.5 one made from a
    relation no longer referenced says to run the statement again)."""
    from zarrsql.engine import state

    monkeypatch.setattr(state, "MAX_REGISTERED", 2)
    paths = [str(tmp_path / f"s{i}.zarr") for i in range(5)]
    for i, path in enumerate(paths):
        _write(path, i, 8)
    with zarrsql.connect() as con:
        rels = [con.sql(SQL.format(p=path)) for path in paths[:4]]
        derived = con.sql(SQL.format(p=paths[4])).limit(3)  # its parent relation is gone at once
        gc.collect()
        for _ in range(2):
            for path in paths[:4]:
                con.sql(f"SELECT v FROM read_zarr('{path}', decode_times := false)").fetchall()
        for rel, path in zip(rels, paths[:4], strict=True):
            assert rel.fetchall() == _oracle(path)
        if int(duckdb.__version__.split(".")[0]) >= 2:  # a relation made from one keeps it alive
            assert derived.fetchall() == _oracle(paths[4])[:3]
        else:
            with pytest.raises(duckdb.Error, match="let go after 2 later reads") as err:
                derived.fetchall()
            assert "run the statement again" in str(err.value)
            assert "__zarrsql_" not in str(err.value)
        assert len(con._state.order) > 2  # held by the relations
        del rels, rel, derived
        gc.collect()
        con.sql(f"SELECT v FROM read_zarr('{paths[4]}', decode_times := false)").fetchall()
        assert len(con._state.order) == 2
