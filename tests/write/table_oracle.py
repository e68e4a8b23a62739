"""Helpers of the table-layout tests: input relations from numpy data, and the two readers
the output is checked with (zarr-python array by array, zarrsql as a whole).

Expected values always come from the numpy/shapely data the relation was built from, or from
the relation itself through a plain DuckDB connection — never from the writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import zarr

import zarrsql

UUID = "d517ea5f-92bb-4df1-8bbf-db736286a307"


def relation(con: duckdb.DuckDBPyConnection, table: pa.Table, sql: str = "SELECT * FROM t") -> duckdb.DuckDBPyRelation:
    """`sql` over the Arrow table `t`, materialised in a plain DuckDB connection."""
    con.register("t", table)
    rel = con.sql(f"CREATE OR REPLACE TABLE src AS {sql}")
    del rel
    con.unregister("t")
    return con.table("src")


def zarrsql_read(store: Path, **params: Any) -> tuple[list[Any], list[str], list[tuple[Any, ...]]]:
    """(types, column names, rows) of the store's table as zarrsql reads it."""
    con = zarrsql.connect()
    args = "".join(f", {k} := {v if isinstance(v, bool) else repr(v)}" for k, v in params.items())
    rel = con.sql(f"SELECT * FROM read_zarr('{store}'{args})")
    return [str(t) for t in rel.types], list(rel.columns), rel.fetchall()


def expected(rel: duckdb.DuckDBPyRelation) -> tuple[list[Any], list[str], list[tuple[Any, ...]]]:
    return [str(t) for t in rel.types], list(rel.columns), rel.fetchall()


def root(store: Path) -> zarr.Group:
    return zarr.open_group(str(store), mode="r")


def columns(store: Path) -> list[dict[str, str]]:
    return list(root(store).attrs["table:columns"])
