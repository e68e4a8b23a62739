"""Mounting a store: every view equals read_zarr, file databases keep mounts, remounts see change."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrsql


def test_every_mounted_view_equals_read_zarr(fixture_path: Callable[[str], str]) -> None:
    store = fixture_path("datatree.zarr")
    with zarrsql.connect() as con:
        mounted = zarrsql.mount(con, store, "dt", view_names={"simulation/fine/x_y": "fine"}).fetchall()
        assert len(mounted) == 3
        tables = con.sql(f"SELECT group_path, table_name FROM read_zarr_tables('{store}') WHERE table_name IS NOT NULL").fetchall()
        names = {"/simulation/fine": "fine"}
        for group, table in tables:
            schema = "main" if group == "/" else group.strip("/")
            view = names.get(group, table)
            via_view = con.sql(f'SELECT * FROM dt."{schema}"."{view}" ORDER BY ALL').fetchall()
            direct = con.sql(
                f"SELECT * FROM read_zarr('{store}', group_path := '{group}', table_name := '{table}') ORDER BY ALL"
            ).fetchall()
            assert via_view == direct and via_view
        shown = {(r[1], r[2]) for r in con.sql("SHOW ALL TABLES").fetchall() if r[0] == "dt"}
        assert shown == {("main", "x"), ("simulation/coarse", "x_y"), ("simulation/fine", "fine")}


def test_mount_into_a_file_survives_reopening_in_another_process(fixture_path: Callable[[str], str], tmp_path: Path) -> None:
    store = fixture_path("era5_like.zarr")
    db = tmp_path / "era5.duckdb"
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{db}' AS era5")
        con.sql(f"SELECT * FROM zarr_mount('{store}', 'era5', existing := true, "
                "view_names := MAP {'time_latitude_longitude': 'surface'})").fetchall()
        expected = con.sql('SELECT count(*), avg("2m_temperature") FROM era5.surface').fetchall()
    script = textwrap.dedent(f"""
        import zarrsql
        with zarrsql.connect({str(db)!r}) as con:
            print(repr(con.sql('SELECT count(*), avg("2m_temperature") FROM surface').fetchall()))
            print(repr(con.sql("SELECT view_name FROM zarr_mounts() ORDER BY ALL").fetchall()))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    lines = out.stdout.splitlines()
    assert lines[0] == repr(expected)
    assert lines[1] == repr([("surface",), ("time_level_latitude_longitude",)])
    shape = zarr.open_array(f"{store}/2m_temperature", mode="r").shape
    assert expected[0][0] == int(np.prod(shape))


def test_remount_shows_a_changed_store(tmp_path: Path) -> None:
    path = tmp_path / "grow.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    g.create_array("v", shape=(3,), dtype="int32", dimension_names=["i"])[:] = [1, 2, 3]
    with zarrsql.connect() as con:
        zarrsql.mount(con, str(path), "g")
        assert con.sql("SELECT count(*) FROM g.i").fetchall() == [(3,)]
        g["v"].resize((4,))
        g["v"][3] = 4
        g.create_array("w", shape=(2, 2), dtype="float32", dimension_names=["a", "b"])[:] = 1
        assert con.sql("SELECT count(*) FROM g.i").fetchall() == [(4,)]  # views read the store anew
        zarrsql.mount(con, str(path), "g", replace=True)
        assert con.sql("SELECT count(*) FROM g.a_b").fetchall() == [(4,)]  # the new table appears
        removed = zarrsql.unmount(con, "g").fetchall()
        assert len(removed) == 2


def test_failed_mount_leaves_nothing_behind(fixture_path: Callable[[str], str], tmp_path: Path) -> None:
    store = fixture_path("datatree.zarr")
    db = tmp_path / "x.duckdb"
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{db}' AS x")
        con.execute('CREATE SCHEMA x."simulation/fine"')
        con.execute('CREATE TABLE x."simulation/fine".x_y (a INTEGER)')
        before = con.sql("SELECT count(*) FROM duckdb_schemas() WHERE database_name = 'x'").fetchall()
        with pytest.raises(zarrsql.ParameterError, match="already exists as a table"):
            zarrsql.mount(con, store, "x", existing=True)
        assert con.sql("SELECT count(*) FROM duckdb_views() WHERE database_name = 'x' AND NOT internal").fetchall() == [(0,)]
        assert con.sql("SELECT count(*) FROM duckdb_schemas() WHERE database_name = 'x'").fetchall() == before


def test_zarr_mounts_lists_only_mounts(fixture_path: Callable[[str], str]) -> None:
    store = fixture_path("datatree.zarr")
    with zarrsql.connect() as con:
        con.execute(f"CREATE VIEW mine AS SELECT * FROM read_zarr('{store}')")  # a user's own view
        con.sql(f"SELECT count(*) FROM '{store}'").fetchall()  # a FROM-string temp view
        zarrsql.mount(con, store, "dt")
        listed = con.sql("SELECT database_name, view_name FROM zarr_mounts() ORDER BY ALL").fetchall()
    assert listed == [("dt", "x"), ("dt", "x_y"), ("dt", "x_y")]
