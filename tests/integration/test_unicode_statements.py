"""zarrsql's own reading of a statement's text, with non-ASCII characters in it, and two
errors that must name the real problem.

`duckdb.tokenize` reports UTF-8 byte offsets; zarrsql finds `FROM 'x.zarr'` strings,
`name = value` arguments, `bounds` lists and a mount's view names in the text, so a `'é'`
earlier in the statement must change nothing. The oracle is xarray's reading of the store;
the same statement with an ASCII tag must give the same rows.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql

pytestmark = pytest.mark.timeout(60)

TAGS = ["e", "é", "日本", "😀"]


def _write(ds: xr.Dataset, path: Path) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, mode="w", consolidated=False)
    return xr.open_zarr(path, consolidated=False).load()


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, xr.Dataset]:
    monkeypatch.chdir(tmp_path)
    ds = xr.Dataset({"v": (("x",), np.arange(3.0) + 10)}, coords={"x": np.arange(3)})
    return str(tmp_path / "u.zarr"), _write(ds, tmp_path / "u.zarr")


@pytest.mark.parametrize("tag", TAGS)
def test_from_string_after_non_ascii(store, tag):
    _, ds = store
    con = zarrsql.connect()
    rows = con.sql(f"SELECT '{tag}' AS tag, sum(v) FROM 'u.zarr'").fetchall()
    assert rows == [(tag, float(ds.v.sum()))]


@pytest.mark.parametrize("tag", TAGS)
def test_named_equals_after_non_ascii(store, tag):
    path, ds = store
    con = zarrsql.connect()
    rows = con.sql(f"SELECT '{tag}' AS tag, sum(v) FROM read_zarr('{path}', table_name = 'x')").fetchall()
    assert rows == [(tag, float(ds.v.sum()))]


@pytest.mark.parametrize("tag", TAGS)
def test_bounds_after_non_ascii(store, tag):
    path, ds = store
    con = zarrsql.connect()
    sql = f"SELECT '{tag}' AS tag, sum(v) FROM read_zarr('{path}', bounds = [['x', '1', NULL]])"
    assert con.sql(sql).fetchall() == [(tag, float(ds.v.where(ds.x >= 1).sum()))]


def test_non_ascii_table_name_mounts_lists_and_unmounts(tmp_path):
    path = tmp_path / "u2.zarr"
    _write(xr.Dataset({"v": (("Ünï",), np.arange(3.0))}, coords={"Ünï": np.arange(3)}), path)
    con = zarrsql.connect()
    assert zarrsql.mount(con, str(path), "m").project("view_name").fetchall() == [("Ünï",)]
    assert con.sql("SELECT view_name, table_name FROM zarr_mounts('m')").fetchall() == [("Ünï", "Ünï")]
    removed = con.sql("SELECT view_name FROM zarr_unmount('m')").fetchall()
    assert removed == [("Ünï",)]
    attached = [r[0] for r in con.sql("SELECT database_name FROM duckdb_databases()").fetchall()]
    assert "m" not in attached


def test_lateral_store_keeps_duckdbs_error(store):
    """`read_zarr(t.p)`: the store is quoted where it is written; DuckDB's error (only
    literals) is the right one, not a hint to quote it."""
    path, _ = store
    con = zarrsql.connect()
    with pytest.raises(duckdb.BinderException, match="literals") as caught:
        con.sql(f"SELECT * FROM (SELECT '{path}' AS p) t, read_zarr(t.p)").fetchall()
    assert not isinstance(caught.value, zarrsql.ZarrSQLError)
    assert "not quoted" not in str(caught.value)


def test_mount_on_read_only_connection_names_the_fix(store, tmp_path):
    path, _ = store
    file = tmp_path / "ro.duckdb"
    zarrsql.connect(str(file)).close()
    con = zarrsql.connect(str(file), read_only=True)
    assert con.sql(f"SELECT count(*) FROM read_zarr('{path}')").fetchall() == [(3,)]  # reading works
    with pytest.raises(zarrsql.ParameterError, match="read_only=True") as caught:
        zarrsql.mount(con, path, "m")
    assert "another connection" in str(caught.value)
    with pytest.raises(zarrsql.ParameterError, match="read_only=True"):
        con.sql(f"SELECT * FROM zarr_mount('{path}', 'm')").fetchall()
    assert os.path.exists(file)
