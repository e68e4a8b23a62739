"""Filters DuckDB 1.5 cannot hand to an Arrow scan, met through a relation (`con.sql`) too.

DuckDB 1.5 fails a query whose pushed filter holds a UBIGINT of 2^63 or more in an IN list
(pyarrow reads the values as int64) or `IS [NOT] DISTINCT FROM` within an OR on one column
(it has no Arrow form): plain DuckDB 1.5 over a pyarrow dataset fails the same way. zarrsql
raises an UnsupportedError naming the ways around, through `con.execute` and through a relation
alike: a relation runs when fetched, in DuckDB, so the error is found in its plan when it is
made. DuckDB 2 answers every shape. Oracle: plain DuckDB over a native table of the same values.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
import zarr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

U = np.array([1, 2**63, 2**64 - 1], dtype="uint64")
W = np.array([1, 2**63, 5], dtype="uint64")  # a UBIGINT data column, not a dimension
V = [1.0, 2.0, 3.0]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pushdown15") / "u.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("u", shape=(3,), chunks=(3,), dtype="uint64", dimension_names=["u"], fill_value=0)[:] = U
    group.create_array("w", shape=(3,), chunks=(3,), dtype="uint64", dimension_names=["u"], fill_value=0)[:] = W
    group.create_array("v", shape=(3,), chunks=(3,), dtype="float64", dimension_names=["u"], fill_value=0)[:] = V
    group.create_array("s", shape=(3,), chunks=(3,), dtype="int64", dimension_names=["u"], fill_value=0)[:] = [0, 1, 2]
    return str(path)


def _oracle(sql: str, params: list | dict | None = None) -> list[tuple]:
    plain = duckdb.connect()
    plain.execute(
        "CREATE TABLE t AS SELECT unnest(?::UBIGINT[]) AS u, unnest(?::UBIGINT[]) AS w, unnest(?::DOUBLE[]) AS v, "
        "unnest([0, 1, 2]::BIGINT[]) AS s",
        [U.tolist(), W.tolist(), V],
    )
    return sorted(plain.execute(sql.format(t="t"), params).fetchall())


OVERFLOW = [
    ("SELECT v FROM {t} WHERE u IN (9223372036854775808, 1)", None),
    ("SELECT v FROM {t} WHERE w IN (9223372036854775808, 1)", None),
    ("SELECT v FROM {t} WHERE u IN ($big, 1)", {"big": 2**63}),
]
DISTINCT = [
    ("SELECT s FROM {t} WHERE s IS DISTINCT FROM 1 OR s > 2", None),
    ("SELECT s FROM {t} WHERE s IS NOT DISTINCT FROM 1 OR s = 2", None),
    ("SELECT s FROM {t} WHERE v IS DISTINCT FROM 1 OR v > 2", None),
]
#: The ways around the error message names, and statements that merely look alike: each gives the rows.
ANSWERED = [
    ("SELECT v FROM {t} WHERE CAST(u AS HUGEINT) IN (9223372036854775808, 1)", None),
    ("SELECT v FROM {t} WHERE u = 9223372036854775808 OR u = 1", None),
    ("SELECT s FROM {t} WHERE (s IS NULL OR s <> 1) OR s > 2", None),
    ("SELECT s FROM {t} WHERE s = 1 OR s = 2", None),
    ("SELECT s FROM {t} WHERE s IS DISTINCT FROM 1", None),
    ("SELECT s, 'IS DISTINCT FROM' AS note FROM {t} WHERE s IN (1, 2)", None),
    ("SELECT v FROM {t} WHERE s IN (0, 2) AND v < 12345678901234567890", None),
    ("SELECT v FROM {t} WHERE u IN (?, ?)", [2**63, 1]),
]


def _via_relation(con: zarrsql.Connection, sql: str, params: list | dict | None) -> list[tuple]:
    return sorted(con.sql(sql, params=params).fetchall())


def _via_execute(con: zarrsql.Connection, sql: str, params: list | dict | None) -> list[tuple]:
    return sorted(con.execute(sql, params).fetchall())


def _via_frame(con: zarrsql.Connection, sql: str, params: list | dict | None) -> list[tuple]:
    return sorted(tuple(row) for row in con.sql(sql, params=params).df().itertuples(index=False))


WAYS = [_via_relation, _via_execute, _via_frame]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(("sql", "params"), OVERFLOW)
def test_a_large_ubigint_in_list_gives_the_rows_or_says_why_not(store, way, sql, params):
    want = _oracle(sql, params)
    assert len(want) == 2
    with zarrsql.connect() as con:
        if HAS_SOURCES:
            assert way(con, sql.format(t=f"'{store}'"), params) == want
            return
        with pytest.raises(zarrsql.UnsupportedError, match=r"DuckDB 1\.5.*2\^63.*CAST\(u AS HUGEINT\)"):
            way(con, sql.format(t=f"'{store}'"), params)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(("sql", "params"), DISTINCT)
def test_distinct_from_within_an_or_gives_the_rows_or_says_why_not(store, way, sql, params):
    want = _oracle(sql, params)
    with zarrsql.connect() as con:
        if HAS_SOURCES:
            assert way(con, sql.format(t=f"'{store}'"), params) == want
            return
        with pytest.raises(zarrsql.UnsupportedError, match=r"DuckDB 1\.5.*DISTINCT FROM.*\(x IS NULL OR x <> c\)"):
            way(con, sql.format(t=f"'{store}'"), params)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(("sql", "params"), ANSWERED)
def test_the_ways_around_and_lookalikes_give_the_rows(store, way, sql, params):
    with zarrsql.connect() as con:
        assert way(con, sql.format(t=f"'{store}'"), params) == _oracle(sql, params)


def test_printing_a_refused_relation_is_never_a_raw_error(store):
    sql = f"SELECT v FROM '{store}' WHERE u IN (9223372036854775808, 1)"
    with zarrsql.connect() as con:
        if HAS_SOURCES:
            assert "2.0" in str(con.sql(sql))
            return
        with pytest.raises(zarrsql.UnsupportedError):
            print(con.sql(sql))
