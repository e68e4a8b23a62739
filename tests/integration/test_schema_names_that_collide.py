"""Groups whose schemas DuckDB cannot keep apart still mount, each view reading its own group.

DuckDB compares schema names ignoring case and keeps `information_schema` and `pg_catalog` for
itself, so groups `/grp` and `/GRP`, a group `/MAIN` beside root tables, or a group
`/information_schema` would share or miss a schema. The expected sums come from xarray
(`xr.open_zarr(group=...)`), never from zarrsql.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql
from cli_runner import run_cli
from zarrsql.errors import ParameterError


def _group(offset: float) -> xr.Dataset:
    """One table `x` whose sum of `v` tells the groups apart."""
    return xr.Dataset({"v": (("x",), np.arange(3.0) + offset)}, coords={"x": [1, 2, 3]})


def _write(tmp_path: Path, name: str, groups: dict[str, xr.Dataset], zarr_format: int = 3) -> str:
    path = tmp_path / f"{name}.zarr"
    xr.DataTree.from_dict(groups).to_zarr(path, zarr_format=zarr_format)
    return str(path)


def _oracle_sum(store: str, group_path: str) -> float:
    """xarray's sum of `v` in one group, read from the group's own documents: zarr-python looks
    up `grp/v` wrongly in consolidated metadata that also holds `GRP/v`."""
    group = group_path.strip("/") or None
    with xr.open_zarr(store, group=group, consolidated=False) as ds:
        return float(ds["v"].sum())


def _mounted(con: duckdb.DuckDBPyConnection, store: str, database: str) -> list[tuple[str, str, str]]:
    return zarrsql.mount(con, store, database).project("group_path, schema_name, view_name").fetchall()


def _sum(con: duckdb.DuckDBPyConnection, database: str, schema: str, view: str) -> float:
    return float(con.sql(f'SELECT sum(v) FROM "{database}"."{schema}"."{view}"').fetchall()[0][0])


def _assert_each_view_reads_its_group(store: str, mounted: list[tuple[str, str, str]], con, database: str) -> None:
    schemas = [schema.lower() for _, schema, _ in mounted]
    assert len(set(schemas)) == len(schemas), mounted  # one schema per group, ignoring case as DuckDB does
    for group, schema, view in mounted:
        assert _sum(con, database, schema, view) == _oracle_sum(store, group), (group, schema)
    shown = con.sql(
        "SELECT group_path, schema_name, view_name FROM zarr_mounts(?) ORDER BY ALL", params=[database]
    ).fetchall()
    assert sorted(shown) == sorted(mounted)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_groups_differing_only_in_case_each_read_their_own_rows(tmp_path: Path, zarr_format: int) -> None:
    store = _write(tmp_path, "case", {"/": _group(100), "/grp": _group(1), "/GRP": _group(2)}, zarr_format)
    with zarrsql.connect() as con:
        mounted = _mounted(con, store, "t")
        assert {g for g, _, _ in mounted} == {"/", "/grp", "/GRP"}
        _assert_each_view_reads_its_group(store, mounted, con, "t")
        assert dict((g, s) for g, s, _ in mounted) == {"/": "main", "/GRP": "GRP_1", "/grp": "grp_2"}
        # neither spelling reads the other group's rows: the schema is not there at all
        for plain in ("grp", "GRP"):
            with pytest.raises(duckdb.CatalogException, match="does not exist"):
                con.sql(f'SELECT sum(v) FROM t."{plain}".x').fetchall()


def test_a_group_named_main_in_any_case_beside_root_tables_leaves_the_root_in_main(tmp_path: Path) -> None:
    store = _write(tmp_path, "mainupper", {"/": _group(100), "/MAIN": _group(0), "/main": _group(7)})
    with zarrsql.connect() as con:
        mounted = _mounted(con, store, "t")
        _assert_each_view_reads_its_group(store, mounted, con, "t")
        assert float(con.sql("SELECT sum(v) FROM t.x").fetchall()[0][0]) == _oracle_sum(store, "/")
        assert dict((g, s) for g, s, _ in mounted)["/"] == "main"


@pytest.mark.parametrize("reserved", ["information_schema", "pg_catalog", "PG_Catalog"])
def test_a_group_named_as_a_duckdb_schema_mounts_under_another_name(tmp_path: Path, reserved: str) -> None:
    store = _write(tmp_path, "reserved", {"/": xr.Dataset(), f"/{reserved}": _group(1), "/ok": _group(2)})
    with zarrsql.connect() as con:
        mounted = _mounted(con, store, "t")
        assert dict((g, s) for g, s, _ in mounted) == {f"/{reserved}": f"{reserved}_1", "/ok": "ok"}
        _assert_each_view_reads_its_group(store, mounted, con, "t")


def test_a_lone_group_named_main_and_groups_without_tables_keep_their_paths(tmp_path: Path) -> None:
    # the root has no table, and /Grp none either: no schema clashes, so no name changes
    store = _write(tmp_path, "lone", {"/": xr.Dataset(), "/main": _group(1), "/grp": _group(2), "/Grp": xr.Dataset()})
    with zarrsql.connect() as con:
        mounted = _mounted(con, store, "t")
        assert dict((g, s) for g, s, _ in mounted) == {"/main": "main", "/grp": "grp"}
        _assert_each_view_reads_its_group(store, mounted, con, "t")


def test_read_zarr_tables_names_the_schemas_the_mount_function_makes(tmp_path: Path) -> None:
    store = _write(tmp_path, "agree", {"/": _group(100), "/grp": _group(1), "/GRP": _group(2), "/main": _group(3)})
    with zarrsql.connect() as con:
        mounted = con.sql(
            "SELECT group_path, schema_name, view_name FROM zarr_mount(?, 't') ORDER BY ALL", params=[store]
        ).fetchall()
        _assert_each_view_reads_its_group(store, mounted, con, "t")
        listed = con.sql(
            "SELECT group_path, schema_name FROM read_zarr_tables(?) ORDER BY ALL", params=[store]
        ).fetchall()
        assert listed == [(g, s) for g, s, _ in mounted]
        for group, schema, _ in mounted:  # a listing of one group names the same schema
            one = con.sql(
                "SELECT schema_name FROM read_zarr_tables(?, group_path := ?)", params=[store, group]
            ).fetchall()
            assert one[0][0] == schema
        views = con.sql(
            "SELECT DISTINCT schema_name FROM read_zarr_views(?, 't') WHERE view_name IS NOT NULL ORDER BY 1",
            params=[store],
        ).fetchall()
        assert [s for (s,) in views] == sorted(s for _, s, _ in mounted)


def test_a_view_names_key_renames_only_the_table_it_spells(tmp_path: Path) -> None:
    store = _write(tmp_path, "rename", {"/": xr.Dataset(), "/grp": _group(1), "/GRP": _group(2)})
    with zarrsql.connect() as con:
        mounted = zarrsql.mount(con, store, "t", view_names={"grp/x": "lower"})
        rows = mounted.project("group_path, schema_name, view_name").fetchall()
        assert {g: v for g, _, v in rows} == {"/grp": "lower", "/GRP": "x"}
        _assert_each_view_reads_its_group(store, rows, con, "t")
        with pytest.raises(ParameterError, match=r"'Grp/x' names the tables .*grp/x"):
            zarrsql.mount(con, store, "u", view_names={"Grp/x": "either"})


def test_the_command_line_queries_a_store_with_such_groups(tmp_path: Path) -> None:
    store = _write(tmp_path, "cli", {"/": _group(100), "/main": _group(1), "/information_schema": _group(2)})
    out = run_cli("query", store, "SELECT 1 AS one", "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["one", "1"]
    out = run_cli("query", store, 'SELECT sum(v) AS s FROM "information_schema_1".x', "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[1]) == _oracle_sum(store, "/information_schema")
