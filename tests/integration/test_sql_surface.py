"""read_zarr anywhere SQL allows a table, through the Python API and on file databases."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr

import zarrsql


@pytest.fixture
def air(fixture_path: Callable[[str], str]) -> str:
    return fixture_path("air_temperature.zarr")


def _air_count(air: str) -> int:
    shape = zarr.open_array(f"{air}/air", mode="r").shape
    return int(np.prod(shape))


def test_views_ctas_cte_join_and_copy(air: str, tmp_path: Path) -> None:
    n = _air_count(air)
    with zarrsql.connect() as con:
        con.execute(f"CREATE VIEW air AS SELECT * FROM read_zarr('{air}')")
        assert con.sql("SELECT count(*) FROM air").fetchall() == [(n,)]
        con.execute(f"CREATE TABLE t AS SELECT lat, avg(air) AS a FROM read_zarr('{air}') GROUP BY lat")
        assert con.sql("SELECT count(*) FROM t").fetchall() == [(25,)]
        cte = con.sql(f"WITH x AS (SELECT * FROM read_zarr('{air}') WHERE lat = 75) SELECT count(*) FROM x").fetchall()
        assert cte == [(n // 25,)]
        joined = con.sql(
            f"SELECT count(*) FROM read_zarr('{air}') a JOIN (SELECT DISTINCT lat FROM read_zarr('{air}') "
            "WHERE lat > 70) b USING (lat)"
        ).fetchall()
        lats = zarr.open_array(f"{air}/lat", mode="r")[...]
        assert joined == [(n // 25 * int((lats > 70).sum()),)]


def test_join_of_two_stores_and_subquery(fixture_path: Callable[[str], str]) -> None:
    a = fixture_path("air_temperature.zarr")
    b = fixture_path("v2/air_temperature.zarr")
    with zarrsql.connect() as con:
        diff = con.sql(
            f"SELECT count(*) FROM read_zarr('{a}') x JOIN read_zarr('{b}') y USING (time, lat, lon) "
            "WHERE x.air IS DISTINCT FROM y.air"
        ).fetchall()
        assert diff == [(0,)]
        sub = con.sql(f"SELECT count(*) FROM read_zarr('{a}') WHERE lat IN (SELECT max(lat) FROM read_zarr('{b}'))").fetchall()
        assert sub == [(_air_count(a) // 25,)]


def test_copy_to_parquet(air: str, tmp_path: Path) -> None:
    out = tmp_path / "air.parquet"
    with zarrsql.connect() as con:
        con.execute(f"COPY (SELECT * FROM read_zarr('{air}')) TO '{out}' (FORMAT parquet)")
    table = pq.read_table(out)
    assert table.num_rows == _air_count(air)
    assert table.column_names == ["time", "lat", "lon", "air"]


def test_python_api_returns_relations(air: str) -> None:
    with zarrsql.connect() as con:
        rel = zarrsql.read_zarr(air, table_name="time_lat_lon", connection=con)
        assert isinstance(rel, duckdb.DuckDBPyRelation)
        assert rel.aggregate("count(*)").fetchall() == [(_air_count(air),)]
        meta = zarrsql.read_zarr_metadata(air, connection=con)
        assert sorted(r[0] for r in meta.select("name").fetchall()) == ["air", "lat", "lon", "time"]
        tables = zarrsql.read_zarr_tables(air, connection=con).select("table_name").fetchall()
        assert tables == [("time_lat_lon",)]


def test_module_level_sql(air: str) -> None:
    assert zarrsql.sql(f"SELECT count(*) FROM read_zarr('{air}')").fetchall() == [(_air_count(air),)]


def test_register_existing_connection_and_cursor(air: str) -> None:
    raw = duckdb.connect()
    con = zarrsql.register(raw)
    assert con.duckdb is raw
    assert con.sql(f"SELECT count(*) FROM '{air}'").fetchall() == [(_air_count(air),)]
    cur = con.cursor()
    assert cur.sql(f"SELECT count(*) FROM read_zarr('{air}')").fetchall() == [(_air_count(air),)]
    cur.close()
    con.close()


def test_from_string_claims_only_zarr_stores(tmp_path: Path) -> None:
    fake = tmp_path / "fake.zarr"
    fake.mkdir()
    # not claimed as a store: refused as a folder without Zarr metadata (not DuckDB's "no table")
    with zarrsql.connect() as con, pytest.raises(zarrsql.StoreNotFoundError, match="without zarr.json"):
        con.sql(f"SELECT * FROM '{fake}'")


def test_view_survives_reconnect_in_another_process(air: str, tmp_path: Path) -> None:
    db = tmp_path / "analysis.duckdb"
    with zarrsql.connect(str(db)) as con:
        con.execute(f"CREATE VIEW air AS SELECT * FROM read_zarr('{air}')")
        con.execute(f"CREATE VIEW air2 AS SELECT * FROM '{air}'")
    script = textwrap.dedent(f"""
        import zarrsql
        with zarrsql.connect({str(db)!r}) as con:
            print(con.sql("SELECT count(*) FROM air").fetchall()[0][0])
            print(con.sql("SELECT count(*) FROM air2").fetchall()[0][0])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(_air_count(air))] * 2


def test_plain_duckdb_sees_a_clear_error(air: str, tmp_path: Path) -> None:
    db = tmp_path / "v.duckdb"
    with zarrsql.connect(str(db)) as con:
        con.execute(f"CREATE VIEW air AS SELECT * FROM read_zarr('{air}')")
    raw = duckdb.connect(str(db))
    with pytest.raises(duckdb.Error, match="read_zarr"):
        raw.sql("SELECT * FROM air").fetchall()
    raw.close()


def test_trace_counts_real_work(air: str) -> None:
    with zarrsql.connect() as con, zarrsql.trace() as t:
        con.sql(f"SELECT avg(air) FROM read_zarr('{air}')").fetchall()
    # grid (40, 13, 27) over (120, 25, 53): 3 x 2 x 2 work units, one air chunk each
    assert t.work_units_planned == 12
    assert t.work_units_read == 12
    assert t.chunks_decoded == 12
    assert t.rows == _air_count(air)
    assert t.requests >= 12 and t.bytes_read > 0


def test_store_change_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "grow.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    a = g.create_array("v", shape=(3,), dtype="int32", dimension_names=["i"])
    a[:] = [1, 2, 3]
    with zarrsql.connect() as con:
        con.execute(f"CREATE VIEW v AS SELECT * FROM read_zarr('{path}')")
        assert con.sql("SELECT count(*), sum(v) FROM v").fetchall() == [(3, 6)]
        a.resize((5,))
        a[3:] = [4, 5]
        w = g.create_array("w", shape=(5,), dtype="int32", dimension_names=["i"])
        w[:] = 1
        assert con.sql("SELECT count(*), sum(v), sum(w) FROM v").fetchall() == [(5, 15, 5)]


def test_registrations_are_bounded_and_come_back(air: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from zarrsql.engine import state

    monkeypatch.setattr(state, "MAX_REGISTERED", 3)
    with zarrsql.connect() as con:
        lats = zarr.open_array(f"{air}/lat", mode="r")[...]
        for k, lat in enumerate(lats[:6]):  # six distinct reads (bounds differ): six scans
            rel = con.sql(f"SELECT count(*) FROM read_zarr('{air}', bounds := [['lat', '{lat}', '{lat}']])")
            assert rel.fetchall() == [(_air_count(air) // 25,)], k
        views = con.sql("SELECT count(*) FROM duckdb_views() WHERE view_name LIKE '__zarrsql_%'").fetchall()[0][0]
        assert views <= 3
        first = con.sql(f"SELECT count(*) FROM read_zarr('{air}', bounds := [['lat', '{lats[0]}', '{lats[0]}']])")
        assert first.fetchall() == [(_air_count(air) // 25,)]


def test_coordinate_rewritten_in_place_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "c.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    x = g.create_array("x", shape=(3,), dtype="float64", dimension_names=["x"])
    x[:] = [1.0, 2.0, 3.0]
    g.create_array("v", shape=(3,), dtype="float64", dimension_names=["x"])[:] = 0
    with zarrsql.connect() as con:
        assert con.sql(f"SELECT max(x) FROM read_zarr('{path}')").fetchall() == [(3.0,)]
        x[:] = [10.0, 20.0, 30.0]  # chunks rewritten, no metadata document touched
        assert con.sql(f"SELECT max(x) FROM read_zarr('{path}')").fetchall() == [(30.0,)]


def test_from_a_missing_zarr_path_names_it(tmp_path: Path) -> None:
    with zarrsql.connect() as con, pytest.raises(zarrsql.StoreNotFoundError, match="no Zarr store at"):
        con.sql(f"SELECT * FROM '{tmp_path / 'missing.zarr'}'")
