"""A table-layout append of a bare `NULL AS v` (session 25, leftover of session 24).

DuckDB 2 gives a bare NULL the type null, which no array holds. A grid append already took
it as a NULL of the stored array's type; a table append refused it with a hint. It now takes
the stored column's type too: its rows are NULL (the `nullable` group's mask set, an ENUM's
code -1), the stored dtypes unchanged. Where the column cannot hold a NULL (a plain array) it
is refused as a typed NULL is, and a new table still asks for the type. An all-NULL column of
a type (`NULL::INTEGER`) appends as before.

Oracles: zarr-python reading the stored arrays (dtypes, the validity mask, the codes) and
pandas (the expected rows: the old ones, then DuckDB's own typed NULLs).
"""

from __future__ import annotations

import os

import duckdb
import numpy as np
import pandas as pd
import pytest
import zarr

import zarrsql

DUCKDB_2 = int(duckdb.__version__.split(".")[0]) >= 2
needs_null_type = pytest.mark.skipif(not DUCKDB_2, reason="DuckDB before 2.0 types a bare NULL as INTEGER")

#: Every column nullable in the store (one NULL among the first rows), of each scalar kind.
FIRST = """
SELECT i AS n,
       CASE WHEN i = 1 THEN NULL ELSE i * 0.5 END::DOUBLE AS f,
       CASE WHEN i = 1 THEN NULL ELSE i * 10 END::BIGINT AS b,
       CASE WHEN i = 1 THEN NULL ELSE 'w' || i END AS s,
       CASE WHEN i = 1 THEN NULL ELSE TIMESTAMP '2024-01-01' + i * INTERVAL 1 HOUR END AS ts,
       CASE WHEN i = 1 THEN NULL ELSE DATE '2024-01-01' + i::INTEGER END AS d,
       CASE WHEN i = 1 THEN NULL ELSE i % 2 = 0 END AS ok,
       CASE WHEN i = 1 THEN NULL ELSE 'x' END::ENUM('x', 'y') AS e
FROM range(3) r(i)
"""
TYPES = {"f": "DOUBLE", "b": "BIGINT", "s": "VARCHAR", "ts": "TIMESTAMP", "d": "DATE", "ok": "BOOLEAN",
         "e": "ENUM('x', 'y')"}  # fmt: skip


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _tree(path) -> dict[str, bytes]:
    files = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                files[os.path.relpath(full, path)] = f.read()
    return files


def _new_table(con, out: str, query: str = FIRST, chunks: int = 2) -> None:
    zarrsql.to_zarr(query, out, layout="table", chunks=chunks, connection=con)


def _appended(con, out: str, bare: str, rows: str = "range(3, 8) r(i)") -> str:
    """The append's SELECT: n from `rows`, the column `bare` as `NULL AS <bare>`, the others typed."""
    items = ", ".join(f"NULL AS {c}" if c == bare else f"NULL::{t} AS {c}" for c, t in TYPES.items())
    return f"SELECT i AS n, {items} FROM {rows}"


def _as_read(con, out: str) -> pd.DataFrame:
    frame = con.sql(f"SELECT * FROM read_zarr('{out}') ORDER BY n").df()
    return frame.assign(e=frame.e.astype(object))


@needs_null_type
@pytest.mark.parametrize("bare", list(TYPES))
def test_a_bare_null_appends_as_nulls_of_the_stored_type(con, tmp_path, bare) -> None:
    out = str(tmp_path / "t.zarr")
    _new_table(con, out)
    group = zarr.open_group(out, mode="r")
    dtypes = {c: group[f"{c}/values" if c != "e" else c].dtype for c in TYPES}
    query = _appended(con, out, bare)
    types = dict(zip(con.sql(query).columns, con.sql(query).types, strict=True))
    assert types[bare].id == "null"  # really a bare NULL: DuckDB 2's type null

    zarrsql.to_zarr(query, out, layout="table", mode="a", connection=con)

    group = zarr.open_group(out, mode="r")
    for c in TYPES:  # the oracle: zarr-python reads the stored arrays
        if c == "e":
            assert group["e"].dtype == dtypes["e"]
            assert group["e"][3:].tolist() == [-1] * 5  # NULL's code
            continue
        assert group[f"{c}/values"].dtype == dtypes[c], c
        assert group[f"{c}/mask"][...].tolist() == [False, True, False] + [True] * 5, c
    # the oracle: pandas' rows of the first query, then DuckDB's own typed NULLs
    typed = _appended(con, out, bare="")
    expected = pd.concat([duckdb.sql(FIRST).df(), duckdb.sql(typed).df()], ignore_index=True)
    got = _as_read(con, out)
    expected = expected.assign(e=expected.e.astype(object))
    for c in TYPES:
        assert got[c].isna().tolist() == expected[c].isna().tolist(), c
        present = ~expected[c].isna()
        assert got[c][present].tolist() == expected[c][present].tolist(), c


@needs_null_type
def test_every_column_bare_at_once(con, tmp_path) -> None:
    out = str(tmp_path / "t.zarr")
    _new_table(con, out)
    items = ", ".join(f"NULL AS {c}" for c in TYPES)
    zarrsql.to_zarr(f"SELECT 9 AS n, {items}", out, layout="table", mode="a", connection=con)
    group = zarr.open_group(out, mode="r")
    assert [bool(group[f"{c}/mask"][3]) for c in TYPES if c != "e"] == [True] * (len(TYPES) - 1)
    assert int(group["e"][3]) == -1
    last = con.sql(f"SELECT * EXCLUDE (n) FROM read_zarr('{out}') WHERE n = 9").fetchall()
    assert last == [(None,) * len(TYPES)]


@needs_null_type
def test_a_bare_null_into_a_column_without_nulls_is_refused_as_a_typed_null_is(con, tmp_path) -> None:
    out = str(tmp_path / "t.zarr")
    _new_table(con, out, "SELECT i AS n, i * 0.5 AS f FROM range(3) r(i)")
    assert not isinstance(zarr.open_group(out, mode="r")["f"], zarr.Group)  # a plain array
    before = _tree(out)
    for value in ("NULL", "NULL::DOUBLE"):
        with pytest.raises(zarrsql.AppendSchemaError, match="COALESCE"):
            zarrsql.to_zarr(f"SELECT 3 AS n, {value} AS f", out, layout="table", mode="a", connection=con)
    assert _tree(out) == before


@needs_null_type
def test_a_new_table_still_asks_for_the_type(con, tmp_path) -> None:
    out = str(tmp_path / "t.zarr")
    with pytest.raises(zarrsql.UnwritableColumnError, match='bare NULL.*NULL::DOUBLE AS "v"'):
        zarrsql.to_zarr("SELECT 1 AS n, NULL AS v", out, layout="table", connection=con)
    assert not os.path.exists(out)


@pytest.mark.parametrize(("stored", "given"), [("BIGINT", "INTEGER"), ("DOUBLE", "INTEGER"), ("VARCHAR", "VARCHAR")])
def test_an_all_null_column_of_a_type_still_appends(con, tmp_path, stored, given) -> None:
    out = str(tmp_path / "t.zarr")
    _new_table(con, out, f"SELECT i AS n, CASE WHEN i = 0 THEN NULL ELSE i END::{stored} AS v FROM range(3) r(i)")
    dtype = zarr.open_group(out, mode="r")["v/values"].dtype
    zarrsql.to_zarr(f"SELECT 3 + i AS n, NULL::{given} AS v FROM range(2) r(i)", out, layout="table", mode="a",
                    connection=con)  # fmt: skip
    group = zarr.open_group(out, mode="r")
    assert group["v/values"].dtype == dtype
    assert group["v/mask"][...].tolist() == [True, False, False, True, True]
    expected = pd.Series([None, 1, 2, None, None], dtype=object)
    got = con.sql(f"SELECT v FROM read_zarr('{out}') ORDER BY n").df().v.astype(object)
    assert got.isna().tolist() == expected.isna().tolist()
    assert [str(v) for v in got[1:3]] == [str(duckdb.sql(f"SELECT {i}::{stored}").fetchall()[0][0]) for i in (1, 2)]


@needs_null_type
def test_a_bare_null_across_row_chunks(con, tmp_path) -> None:
    """Many rows in blocks of two rows (the store's chunk), the first block shorter."""
    out = str(tmp_path / "t.zarr")
    _new_table(con, out, "SELECT i AS n, CASE WHEN i = 1 THEN NULL ELSE i END::DOUBLE AS v FROM range(3) r(i)")
    zarrsql.to_zarr("SELECT i AS n, NULL AS v FROM range(3, 1000) r(i)", out, layout="table", mode="a", connection=con)
    group = zarr.open_group(out, mode="r")
    mask = group["v/mask"][...]
    np.testing.assert_array_equal(mask, [False, True, False] + [True] * 997)
    np.testing.assert_array_equal(group["v/values"][[0, 2]], [0.0, 2.0])


def _stored_categories(out: str) -> list:
    """The column's categories as zarr-python reads them: the codes' `categories` attribute
    (inline), or the `categories` array of the categorical group."""
    node = zarr.open_group(out, mode="r")["e"]
    if isinstance(node, zarr.Group):
        return node["categories"][...].tolist()
    return list(node.attrs["categories"])


@needs_null_type
@pytest.mark.parametrize("count", [2, 70])  # inline categories, and the categorical group past 64
def test_a_bare_null_leaves_an_enums_categories(con, tmp_path, count) -> None:
    """Before, the encoded bare NULL's dictionary entry (a null) was added as a category: inline,
    `categories` got a None and the column then read as VARCHAR, refusing every later text
    append; in a group, a category 'None' appeared."""
    out = str(tmp_path / "e.zarr")
    words = [f"c{i}" for i in range(count)]
    con.execute(f"CREATE TYPE cats{count} AS ENUM ({', '.join(repr(w) for w in words)})")
    zarrsql.to_zarr(
        f"SELECT i AS n, ('c' || (i % {count}))::cats{count} AS e FROM range({count}) t(i)", out, layout="table",
        connection=con,
    )  # fmt: skip
    assert _stored_categories(out) == words
    zarrsql.to_zarr(f"SELECT {count} AS n, NULL AS e", out, layout="table", mode="a", connection=con)
    assert _stored_categories(out) == words
    zarrsql.to_zarr(f"SELECT {count + 1} AS n, 'c1' AS e", out, layout="table", mode="a", connection=con)
    assert _stored_categories(out) == words
    described = {r[0]: r[1] for r in con.sql(f"DESCRIBE SELECT * FROM read_zarr('{out}')").fetchall()}
    assert described["e"].startswith("ENUM")
    last = con.sql(f"SELECT n, e::VARCHAR FROM read_zarr('{out}') WHERE n >= {count} ORDER BY n").fetchall()
    assert last == [(count, None), (count + 1, "c1")]
