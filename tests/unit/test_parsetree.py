"""`engine/parsetree.constant` reads a literal of DuckDB's parse alike on DuckDB 2.x (the text as
written) and 1.5 (a typed value: a DECIMAL's unscaled digits, a HUGEINT's two halves).

The oracle is DuckDB itself: the value `SELECT <literal>` computes, compared with the
constant's text read as a number, so both spellings are checked against what the engine means.
"""

from __future__ import annotations

import decimal

import duckdb
import pytest

from zarrsql.engine import parsetree

NUMBERS = [
    "10",
    "0",
    "-5",
    "1.5",
    "-0.25",
    "123.4500",
    "0.001",
    "3000000000",
    "99999999999999999999",
    "-99999999999999999999",
    "170141183460469231731687303715884105727",
]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def _select_item(con: duckdb.DuckDBPyConnection, literal: str) -> object:
    return parsetree.select_node(con, f"SELECT {literal}")["select_list"][0]


@pytest.mark.parametrize("literal", NUMBERS)
def test_a_number_reads_as_the_value_duckdb_computes(con: duckdb.DuckDBPyConnection, literal: str) -> None:
    value = parsetree.constant(_select_item(con, literal))
    assert value is not None
    (computed,) = con.execute(f"SELECT ({literal})::VARCHAR").fetchone() or ()
    assert decimal.Decimal(value.text) == decimal.Decimal(str(computed))
    assert value.kind == ("integer" if "." not in literal else "number")
    assert not value.double


@pytest.mark.parametrize("literal", ["1e3", "2.5E-2"])
def test_a_double_literal_is_flagged_as_one(con: duckdb.DuckDBPyConnection, literal: str) -> None:
    value = parsetree.constant(_select_item(con, literal))
    assert value is not None
    assert value.kind == "number"
    assert value.double
    (computed,) = con.execute(f"SELECT {literal}").fetchone() or ()
    assert float(value.text) == computed


def test_strings_and_null(con: duckdb.DuckDBPyConnection) -> None:
    text = parsetree.constant(_select_item(con, "'it''s ünïcode'"))
    assert text is not None
    assert (text.kind, text.text) == ("string", "it's ünïcode")
    null = parsetree.constant(_select_item(con, "NULL"))
    assert null is not None
    assert null.kind == "null"


def test_anything_else_is_no_constant(con: duckdb.DuckDBPyConnection) -> None:
    assert parsetree.constant(_select_item(con, "x")) is None
    assert parsetree.constant(_select_item(con, "1 + 2")) is None
    assert parsetree.constant(None) is None


def test_a_parse_is_kept_but_each_caller_gets_its_own_document(con: duckdb.DuckDBPyConnection) -> None:
    first = parsetree.serialize(con, "SELECT 42 AS answer")
    first["statements"][0]["node"]["select_list"] = []
    again = parsetree.serialize(con, "SELECT 42 AS answer")
    assert len(again["statements"][0]["node"]["select_list"]) == 1


def test_several_statements_and_parameters_are_declined(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(parsetree.Decline):
        parsetree.serialize(con, "SELECT 1; SELECT 2")
    with pytest.raises(parsetree.Decline):
        parsetree.serialize(con, "SELECT ?")
    assert parsetree.serialize(con, "SELECT ?", parameters=True)["statements"][0]["named_param_map"]
