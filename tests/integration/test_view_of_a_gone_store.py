"""A stored view over `FROM 'x.zarr'` whose store was removed says so (StoreNotFoundError),
as a view over `read_zarr('x.zarr')` and the statement itself do, not DuckDB's "Table with
name x.zarr does not exist! Did you mean ...?"."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
import xarray as xr

import zarrsql


def test_a_view_of_a_removed_store_names_it(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.Dataset({"v": (("x",), np.arange(3.0))}, coords={"x": np.arange(3)}).to_zarr("gone.zarr")
    con = zarrsql.connect("v.duckdb")
    con.execute("CREATE VIEW lit AS SELECT * FROM 'gone.zarr'")
    con.execute("CREATE VIEW fn AS SELECT * FROM read_zarr('gone.zarr')")
    assert con.sql("SELECT count(*) FROM lit").fetchall() == [(3,)]
    con.close()
    shutil.rmtree("gone.zarr")
    con = zarrsql.connect("v.duckdb")
    for statement in ("SELECT count(*) FROM lit", "SELECT count(*) FROM fn", "SELECT * FROM 'gone.zarr'"):
        with pytest.raises(zarrsql.StoreNotFoundError, match="gone.zarr"):
            con.sql(statement).fetchall()
    con.close()
