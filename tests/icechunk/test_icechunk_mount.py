"""Mounting a repository: the views keep the version they were mounted with."""

from __future__ import annotations

import pytest

import zarrsql
from icechunk_fixtures import open_repo


def test_mount_a_tag_in_sql_and_list_it(versions):
    with zarrsql.connect() as con:
        con.execute(f"SELECT * FROM zarr_mount('{versions.path}', 'v1', tag := 'v1')").fetchall()
        con.execute(f"SELECT * FROM zarr_mount('{versions.path}', 'tip')").fetchall()
        assert con.execute("SELECT count(DISTINCT time) FROM v1.time_lat_lon").fetchall() == [(24,)]
        assert con.execute("SELECT count(DISTINCT time) FROM tip.time_lat_lon").fetchall() == [(36,)]
        listed = con.execute("SELECT database_name, store, table_name FROM zarr_mounts() ORDER BY 1").fetchall()
        assert listed == [("tip", str(versions.path), "time_lat_lon"), ("v1", str(versions.path), "time_lat_lon")]


def test_mount_from_python_with_as_of_and_a_session(versions):
    con = zarrsql.connect()
    zarrsql.mount(con, str(versions.path), "past", as_of=versions.as_of)
    assert con.execute("SELECT count(DISTINCT time) FROM past.time_lat_lon").fetchall() == [(24,)]
    session = open_repo(versions.path).readonly_session(branch="dev")
    zarrsql.mount(con, session, "dev")
    warmer = con.execute(
        "SELECT min(d.t2m - p.t2m), max(d.t2m - p.t2m) FROM dev.time_lat_lon d "
        "JOIN past.time_lat_lon p USING (time, lat, lon)"
    ).fetchall()[0]
    assert warmer == pytest.approx((100.0, 100.0), abs=1e-3)
    con.close()


def test_views_sql_repeats_the_version(versions):
    views = f"read_zarr_views('{versions.path}', 'x', snapshot := '{versions.first}')"
    rows = zarrsql.sql(f"SELECT sql FROM {views} WHERE sql LIKE '%VIEW%'").fetchall()
    assert rows
    assert all(f"snapshot := '{versions.first}'" in r[0] for r in rows)
