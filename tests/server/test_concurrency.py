"""Many clients at once: eight ADBC clients each send every query of a mixed workload several
times, in an order of their own, and every result is checked against the same query run in
process before the clients start.

The soak is counted in rounds, not seconds: each client runs the whole workload `ROUNDS`
times (shuffled per client and per round), so every kind of query is sent by every client
while the others are busy, however fast or slow the machine. Results are fetched as Arrow
(ADBC's `fetch_arrow_table`): the server sends the same stream either way, and the rows
`fetchall` builds one by one in the client cost seconds per large result without testing
the server any further.
"""

from __future__ import annotations

import math
import random
import threading
import time
from typing import Any

import pytest

from tests.server.helpers import Stores, adbc_connect, wait_for

CLIENTS = 8
ROUNDS = 2
#: Seconds all clients together may take: far above a loaded CI machine's few seconds; a
#: client still running past it was starved or hung.
DEADLINE = 120.0


def _workload(stores: Stores) -> list[tuple[str, tuple[Any, ...]]]:
    """Queries of every kind the clients send: plain, with parameters, aggregates, AnnData,
    a streamed large result, a catalog listing."""
    lats = [float(v) for v in stores.lat[::3]]
    return [
        ("SELECT count(*), sum(air) FROM era5.time_lat_lon", ()),
        *[
            ("SELECT lon, avg(air) FROM era5.time_lat_lon WHERE lat = ? GROUP BY lon ORDER BY lon", (v,)) for v in lats
        ],  # fmt: skip
        *[("SELECT count(*) FROM cells.obs WHERE cell_type = ?", (k,)) for k in ("B", "T", "NK")],
        ("SELECT var, sum(X) FROM cells.obs_var GROUP BY var ORDER BY var", ()),
        ("SELECT y, sum(value) FROM big.y_x WHERE y < 400 GROUP BY y ORDER BY y", ()),
        ("SELECT y, x, value FROM big.y_x WHERE y BETWEEN 1000 AND 1049 ORDER BY y, x", ()),
        ("SELECT table_name FROM read_zarr_tables('" + str(stores.cells) + "') ORDER BY 1", ()),
    ]


def _same(rows: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> bool:
    """Equal rows, floats to rounding (DuckDB's parallel sums add in varying order)."""
    if len(rows) != len(expected):
        return False
    for row, want in zip(rows, expected, strict=True):
        for got, value in zip(row, want, strict=True):
            if isinstance(value, float):
                if not math.isclose(got, value, rel_tol=1e-9):
                    return False
            elif got != value:
                return False
    return True


def _rows(cur: Any) -> list[tuple[Any, ...]]:
    """The whole result of the cursor's statement, as row tuples of Python values."""
    table = cur.fetch_arrow_table()
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True))


@pytest.mark.slow
def test_eight_clients_at_once(server: Any, local: Any, stores: Stores) -> None:
    work = _workload(stores)
    expected = {(sql, params): local.sql(sql, params=list(params)).fetchall() for sql, params in work}
    done = [0] * CLIENTS
    failures: list[str] = []

    def client(index: int) -> None:
        rng = random.Random(index)
        con = adbc_connect(server)
        try:
            with con.cursor() as cur:
                for _ in range(ROUNDS):
                    for sql, params in rng.sample(work, len(work)):
                        if failures:
                            return
                        cur.execute(sql, params or None)
                        rows = _rows(cur)
                        if not _same(rows, expected[(sql, params)]):
                            failures.append(f"client {index}: {sql} {params} gave {rows[:3]}...")
                        done[index] += 1
        except Exception as err:  # recorded for the main thread's assertion
            failures.append(f"client {index}: {type(err).__name__}: {err}")
        finally:
            con.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    end = time.monotonic() + DEADLINE
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    assert not failures, failures[:3]
    assert all(not t.is_alive() for t in threads), f"clients still waiting after {DEADLINE} s: {done}"
    assert done == [ROUNDS * len(work)] * CLIENTS, done  # every client got every answer: none was starved
    assert wait_for(lambda: server.open_streams == 0)
