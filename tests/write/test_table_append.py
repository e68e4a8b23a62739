"""Appends to a table-layout store (mode "a"): the rows of every column kind arrive, a reader
during the append sees the old table, and a refused or failed append leaves the store as it
was. The oracle is the UNION ALL of the two relations in a plain DuckDB connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr

from tests.write.table_oracle import expected, zarrsql_read
from zarrsql.errors import AppendSchemaError, StoreNotFoundError, ZarrSQLError
from zarrsql.write import commit
from zarrsql.write.table import write_table

CHUNK = 8
ROWS = """
SELECT i::INTEGER AS id,
       CASE WHEN i % 5 = 3 THEN NULL ELSE i * 1.25 END AS x,
       'name ' || i AS label,
       (['red', 'green', 'blue', 'cyan'][1 + i % {k}])::VARCHAR AS colour_text,
       [i, i * 2, i * 3]::SMALLINT[3] AS triple,
       ('POINT(' || i || ' ' || -i || ')')::GEOMETRY AS location,
       ('LINESTRING(0 0, ' || i || ' 1, 2 ' || (i % 3) || ')')::GEOMETRY AS track
FROM range({lo}, {hi}) r(i)
"""


def _rows(con: duckdb.DuckDBPyConnection, lo: int, hi: int, k: int) -> duckdb.DuckDBPyRelation:
    sql = ROWS.format(lo=lo, hi=hi, k=k)
    colour = "colour_text::ENUM('red', 'green', 'blue', 'cyan') AS colour"
    con.sql(f"CREATE OR REPLACE TABLE r{lo} AS SELECT * EXCLUDE (colour_text), {colour} FROM ({sql})")
    return con.table(f"r{lo}")


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


@pytest.fixture
def table(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> Path:
    out = tmp_path / "t.zarr"
    write_table(_rows(con, 0, 13, 2).to_arrow_reader(5), str(out), chunks=CHUNK, index="id")
    return out


def _as_wkt(store: Path) -> list[tuple]:
    """The table as zarrsql reads it, geometries as WKT (through shapely), ENUMs as text."""
    import shapely

    _, names, rows = zarrsql_read(store, geometry="wkb")
    out = []
    for row in rows:
        values = dict(zip(names, row, strict=True))
        values["location"] = shapely.from_wkb(values["location"]).wkt
        values["track"] = shapely.from_wkb(values["track"]).wkt
        out.append(tuple(values[k] for k in sorted(values)))
    return out


def _oracle(con: duckdb.DuckDBPyConnection, *tables: str) -> list[tuple]:
    import shapely

    union = " UNION ALL ".join(f"SELECT * FROM {t}" for t in tables)
    rel = con.sql(f"SELECT * REPLACE (colour::VARCHAR AS colour) FROM ({union})")
    names = rel.columns
    out = []
    for row in rel.fetchall():
        values = dict(zip(names, row, strict=True))
        values["location"] = shapely.from_wkb(values["location"]).wkt
        values["track"] = shapely.from_wkb(values["track"]).wkt
        out.append(tuple(values[k] for k in sorted(values)))
    return out


def test_an_append_adds_the_rows_of_every_column_kind(con: duckdb.DuckDBPyConnection, table: Path) -> None:
    more = _rows(con, 13, 31, 4)  # two new categories; NULLs in x again; starts mid-chunk
    write_table(more.to_arrow_reader(6), str(table), mode="a")
    assert _as_wkt(table) == _oracle(con, "r0", "r13")
    types = zarrsql_read(table)[0]
    assert "ENUM('red', 'green', 'blue', 'cyan')" in types
    ds = xr.open_zarr(table)
    assert ds.sizes["id"] == 31


def test_a_reader_during_the_append_sees_the_old_table(con: duckdb.DuckDBPyConnection, table: Path) -> None:
    before = _as_wkt(table)
    more = _rows(con, 13, 40, 4).to_arrow_table()
    seen: list[list[tuple]] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in more.to_batches(max_chunksize=9):
            yield batch
            seen.append(_as_wkt(table))  # new chunks and documents are written by now

    write_table(pa.RecordBatchReader.from_batches(more.schema, batches()), str(table), mode="a")
    assert len(seen) >= 2
    assert all(s == before for s in seen)
    assert _as_wkt(table) == _oracle(con, "r0", "r13")


def test_types_that_cast_safely_are_appended(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    out = tmp_path / "t.zarr"
    first = con.sql("SELECT range AS n, (range * 0.5)::DOUBLE AS f FROM range(5)")
    write_table(first.to_arrow_reader(), str(out), chunks=4)
    more = con.sql("SELECT range::INTEGER AS n, range::FLOAT AS f FROM range(5, 7)")
    write_table(more.to_arrow_reader(), str(out), mode="a")
    want = con.sql(
        "SELECT range AS n, (range * 0.5)::DOUBLE AS f FROM range(5) UNION ALL SELECT range, range FROM range(5, 7)"
    )
    assert zarrsql_read(out) == expected(want)


def _unchanged(store: Path, before: tuple[dict[str, str], list]) -> None:
    assert commit.node_documents(store, 3) == before[0]
    assert zarrsql_read(store) == before[1]
    assert not (store / commit.BACKUP_NAME).exists()


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELECT range AS n FROM range(3)", ["missing", "'f'"]),
        ("SELECT range AS n, 1.0 AS f, 2 AS extra FROM range(3)", ["extra"]),
        ("SELECT 1.5 AS n, 1.0 AS f", ["'n'", "CAST"]),
        ("SELECT 'x' AS n, 1.0 AS f", ["'n'"]),
        ("SELECT NULL::BIGINT AS n, 1.0 AS f", ["'n'", "NULL"]),
    ],
)
def test_a_refused_append_names_the_column_and_changes_nothing(
    con: duckdb.DuckDBPyConnection, tmp_path: Path, sql: str, words: list[str]
) -> None:
    out = tmp_path / "t.zarr"
    write_table(con.sql("SELECT range AS n, range * 0.5 AS f FROM range(5)").to_arrow_reader(), str(out), chunks=4)
    before = (commit.node_documents(out, 3), zarrsql_read(out))
    with pytest.raises(AppendSchemaError) as info:
        write_table(con.sql(sql).to_arrow_reader(), str(out), mode="a")
    assert all(w in str(info.value) for w in words), str(info.value)
    _unchanged(out, before)


class StreamBroke(RuntimeError):
    """The input stream failing in the middle of an append."""


def test_a_stream_that_fails_mid_append_leaves_the_old_table(con: duckdb.DuckDBPyConnection, table: Path) -> None:
    before = (commit.node_documents(table, 3), zarrsql_read(table))
    more = _rows(con, 13, 60, 4).to_arrow_table()

    def batches() -> Iterator[pa.RecordBatch]:
        parts = more.to_batches(max_chunksize=10)
        yield from parts[:3]
        raise StreamBroke("the query failed")

    with pytest.raises(Exception, match="the query failed"):
        write_table(pa.RecordBatchReader.from_batches(more.schema, batches()), str(table), mode="a")
    _unchanged(table, before)
    write_table(_rows(con, 13, 31, 4).to_arrow_reader(), str(table), mode="a")  # and it appends again
    assert _as_wkt(table) == _oracle(con, "r0", "r13")


def test_appending_to_a_grid_store_is_refused(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    out = tmp_path / "grid.zarr"
    xr.Dataset({"v": ("t", np.arange(4.0))}, coords={"t": np.arange(4)}).to_zarr(out, zarr_format=3)
    with pytest.raises(AppendSchemaError, match="not a table-layout store"):
        write_table(con.sql("SELECT 1 AS v").to_arrow_reader(), str(out), mode="a")
    np.testing.assert_array_equal(xr.open_zarr(out)["v"].values, np.arange(4.0))


def test_appending_to_no_store_says_how_to_create_it(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match='mode="w-"') as info:
        write_table(con.sql("SELECT 1 AS v").to_arrow_reader(), str(tmp_path / "none.zarr"), mode="a")
    assert isinstance(info.value, ZarrSQLError)
    assert list(tmp_path.iterdir()) == []


def test_one_connection_sees_the_append_once_committed(con: duckdb.DuckDBPyConnection, table: Path) -> None:
    """A zarrsql connection that read the table before the append (its node tree cached)
    reads the new rows after it: the consolidated root it revalidates against changed."""
    import zarrsql

    zc = zarrsql.connect()
    query = f"SELECT count(*), max(id) FROM read_zarr('{table}')"
    assert zc.sql(query).fetchall() == [(13, 12)]
    write_table(_rows(con, 13, 31, 4).to_arrow_reader(), str(table), mode="a")
    assert zc.sql(query).fetchall() == [(31, 30)]
