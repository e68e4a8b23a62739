"""A statement run over Flight SQL with fewer or more values than it has parameters is
refused before it runs, with an error naming both counts, the same on every DuckDB version.

DuckDB's own errors differed: 2.x said "Values were not provided for the following
parameters: 1", 1.5 "Binder Error: Unexpected prepared parameter. This type of statement
can't be prepared!", which names neither the problem nor the fix.

Oracle for the rows of the runs that follow: the arrays xarray wrote (`Stores`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_manager
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from tests.server.helpers import ROWS_LON, ROWS_TIME, Stores, adbc_connect, flight_client, mounted
from zarrsql.server import protocol, serve

pytestmark = pytest.mark.timeout(120)

ONE = "SELECT time, lat, lon, air FROM era5.time_lat_lon WHERE lat > ?"
TWO = "SELECT time, lat, lon, air FROM era5.time_lat_lon WHERE lat > ? AND lon < ?"
#: DuckDB's own wordings, which the client must no longer get (2.x, then 1.5).
DUCKDB_WORDINGS = ("Values were not provided", "Unexpected prepared parameter")


def _refusal(takes: str, given: str) -> str:
    return rf"the statement takes {takes} \(a '\?' or '\$1' in its SQL\) and was given {given}(?!s)"


@pytest.mark.parametrize(
    ("sql", "values", "takes", "given"),
    [
        (ONE, None, "1 parameter", "0 values"),
        (TWO, (15.0,), "2 parameters", "1 value"),
        (ONE, (15.0, 20.0), "1 parameter", "2 values"),
        ("SELECT 1 AS one", (1,), "0 parameters", "1 value"),
    ],
)
def test_a_query_given_the_wrong_number_of_values_names_both_counts(
    client: Any, sql: str, values: tuple[Any, ...] | None, takes: str, given: str
) -> None:
    with client.cursor() as cur, pytest.raises(adbc_driver_manager.Error, match=_refusal(takes, given)) as caught:
        cur.execute(sql, values)
    assert not any(wording in str(caught.value) for wording in DUCKDB_WORDINGS)


def test_the_session_goes_on_after_the_refusal(client: Any, stores: Stores) -> None:
    with client.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match=_refusal("1 parameter", "0 values")):
            cur.execute(ONE)
        cur.execute(ONE, (float(stores.lat[4]),))
        rows = cur.fetch_arrow_table()
    # every time and lon of the latitudes above lat[4] (lat descends in the store)
    assert rows.num_rows == ROWS_TIME * int(np.sum(stores.lat > stores.lat[4])) * ROWS_LON


def test_parameter_rows_of_the_wrong_width_name_the_row(client: Any) -> None:
    """Two rows bound at once (executemany): each holds one value for two parameters."""
    with client.cursor() as cur:
        cur.adbc_prepare(TWO)
        cur.adbc_statement.bind(pa.record_batch({"a": [10.0, 20.0]}))
        with pytest.raises(
            adbc_driver_manager.Error, match=_refusal("2 parameters", r"1 value \(parameter row 1 of 2\)")
        ):
            cur.adbc_statement.execute_query()


def test_a_raw_statement_query_is_refused_before_it_gets_a_ticket(server: Any) -> None:
    client, options = flight_client(server)
    command = protocol.pack("CommandStatementQuery", protocol.encode([(1, ONE)]))
    with pytest.raises(flight.FlightError, match=_refusal("1 parameter", "0 values")):
        client.get_flight_info(flight.FlightDescriptor.for_command(command), options)
    client.close()


@pytest.fixture(scope="module")
def writable(stores: Stores) -> Iterator[Any]:
    con = mounted(stores)
    handle = serve(con, "127.0.0.1", 0, allow_writes=True)
    yield handle
    handle.shutdown()
    con.close()


def test_an_update_without_its_values_is_refused_and_changes_nothing(writable: Any) -> None:
    client, options = flight_client(writable)
    sql = "CREATE TABLE memory.main.never AS SELECT ?::INTEGER AS x"
    command = protocol.pack("CommandStatementUpdate", protocol.encode([(1, sql)]))

    def update() -> None:
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(command), pa.schema([]), options)
        writer.done_writing()
        reader.read()
        writer.close()  # the server's error arrives here at the latest

    with pytest.raises(flight.FlightError, match=_refusal("1 parameter", "0 values")):
        update()
    client.close()
    con = adbc_connect(writable)
    try:
        with con.cursor() as cur:
            cur.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'never'")
            assert cur.fetchone() == (0,)
    finally:
        con.close()
