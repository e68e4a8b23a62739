"""A broken structural rule is a clear error naming the column and the rule; the rest of the
store stays listable and readable."""

from __future__ import annotations

import duckdb
import pytest

import zarrsql
from tests.table_convention.stores import BROKEN, BROKEN_DATA


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


@pytest.mark.parametrize("group", sorted(BROKEN))
def test_broken_metadata_is_refused_with_column_and_rule(con, stores, fmt, group) -> None:
    store = stores("broken.zarr", fmt)
    _, words = BROKEN[group]
    with pytest.raises(zarrsql.SelectionError) as err:
        con.sql(f"SELECT * FROM read_zarr('{store}', group_path := '{group}')").fetchall()
    for word in words:
        assert word in str(err.value)
    assert f"group '/{group}'" in str(err.value)


def test_broken_tables_are_listed_without_a_name(con, stores, fmt) -> None:
    store = stores("broken.zarr", fmt)
    rows = dict(con.sql(f"SELECT group_path, table_name FROM read_zarr_tables('{store}')").fetchall())
    assert {g.strip("/") for g, name in rows.items() if name is None} == set(BROKEN)
    assert {g.strip("/") for g, name in rows.items() if name is not None} == set(BROKEN_DATA)


@pytest.mark.parametrize("group", sorted(BROKEN_DATA))
def test_broken_data_is_refused_when_read(con, stores, fmt, group) -> None:
    store = stores("broken.zarr", fmt)
    query = f"SELECT * FROM read_zarr('{store}', group_path := '{group}')"
    with pytest.raises(zarrsql.DecodeError) as err:
        con.execute(query).fetchall()
    for word in BROKEN_DATA[group]:
        assert word in str(err.value)
    # a relation streams its rows after the statement: DuckDB's error carries the same text
    with pytest.raises(duckdb.Error) as streamed:
        con.sql(query).fetchall()
    assert str(err.value) in str(streamed.value)


def test_sql_errors_carry_the_same_text(stores) -> None:
    store = stores("broken.zarr")
    raw = duckdb.connect()
    zarrsql.register(raw)
    with pytest.raises(duckdb.Error, match="the table convention requires"):
        raw.sql(f"SELECT * FROM read_zarr('{store}', group_path := 'unequal_chunks')").fetchall()
