"""A UBIGINT dimension holding values of 2^63 or more, filtered by an IN list or joined.

DuckDB 2 answers every shape. DuckDB 1.5 hands an Arrow scan its IN lists and its join
filters as Python integers that pyarrow reads as int64, and fails with a raw OverflowError
(plain DuckDB 1.5 over a pyarrow dataset too): there the error is a ZarrSQLError naming the
limit and the ways around it, and each way around it gives the rows. Oracle: plain DuckDB over
a native table holding the same values.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest
import zarr

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

U = np.array([0, 1, 2**63, 2**64 - 1], dtype="uint64")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ubigint") / "u.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("u", shape=(4,), chunks=(2,), dtype="uint64", dimension_names=["u"], fill_value=0)[:] = U
    group.create_array("w", shape=(4,), chunks=(2,), dtype="float64", dimension_names=["u"])[:] = np.arange(4.0)
    return str(path)


def _oracle(sql: str) -> list[tuple]:
    plain = duckdb.connect()
    plain.execute("CREATE TABLE t AS SELECT unnest(?::UBIGINT[]) AS u, unnest([0.0, 1, 2, 3]) AS w", [U.tolist()])
    return plain.execute(sql.format(t="t")).fetchall()


PUSHED = [
    "SELECT u, w FROM {t} WHERE u IN (9223372036854775808, 0) ORDER BY u",
    "SELECT u, w FROM {t} JOIN (SELECT unnest([18446744073709551615::UBIGINT, 1])) k(u) USING (u) ORDER BY u",
]
AROUND = [
    "SELECT u, w FROM {t} WHERE CAST(u AS HUGEINT) IN (9223372036854775808, 0) ORDER BY u",
    "SELECT u, w FROM {t} WHERE u = 9223372036854775808 OR u = 0 ORDER BY u",
    "SELECT z.u, w FROM {t} z JOIN (SELECT unnest([18446744073709551615::UBIGINT, 1])) k(u) "
    "ON CAST(z.u AS HUGEINT) = k.u ORDER BY z.u",
]


@pytest.mark.parametrize("sql", PUSHED)
def test_pushed_filters_give_the_rows_or_say_why_not(store, sql):
    want = _oracle(sql)
    assert len(want) == 2
    with zarrsql.connect() as con:
        if HAS_SOURCES:
            assert con.execute(sql.format(t=f"'{store}'")).fetchall() == want
            return
        with pytest.raises(zarrsql.ZarrSQLError, match=r"DuckDB 1\.5.*2\^63.*CAST\(u AS HUGEINT\)"):
            con.execute(sql.format(t=f"'{store}'")).fetchall()


@pytest.mark.parametrize("sql", AROUND)
def test_the_ways_around_give_the_rows(store, sql):
    with zarrsql.connect() as con:
        assert con.execute(sql.format(t=f"'{store}'")).fetchall() == _oracle(sql)
