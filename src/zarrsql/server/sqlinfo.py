"""`CommandGetSqlInfo`: what the server tells a client about itself.

The result schema is fixed by FlightSql.proto: `info_name: uint32` and `value`, a dense
union of (string, bool, int64, int32 bitmask, list of strings, map int32 → list of int32).
Clients (ADBC's `adbc_get_info`, JDBC's DatabaseMetaData) ask for the server's name and
version, whether it is read-only, and a few SQL syntax facts.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

#: SqlInfo codes used here (FlightSql.proto, enum SqlInfo).
SERVER_NAME, SERVER_VERSION, ARROW_VERSION, READ_ONLY, SERVER_SQL, SUBSTRAIT = 0, 1, 2, 3, 4, 5
TRANSACTION, CANCEL = 8, 9
IDENTIFIER_QUOTE_CHAR = 504
#: zarrsql's own codes (the protocol leaves 10 000 and up to servers): what the server holds
#: now, so an operator (or a test) can watch for leaks from outside the process.
OPEN_STREAMS, SESSIONS = 10_000, 10_001
#: SqlSupportedTransaction.SQL_SUPPORTED_TRANSACTION_NONE
_NO_TRANSACTIONS = 0
#: Codes whose value is an int32 (an enum or bitmask), not an int64.
_BITMASKS = frozenset({TRANSACTION})

_VALUE = pa.dense_union(
    [
        pa.field("string_value", pa.string()),
        pa.field("bool_value", pa.bool_()),
        pa.field("bigint_value", pa.int64()),
        pa.field("int32_bitmask", pa.int32()),
        pa.field("string_list", pa.list_(pa.field("item", pa.string()))),
        pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.field("item", pa.int32())))),
    ],
    type_codes=[0, 1, 2, 3, 4, 5],
)
SCHEMA = pa.schema([pa.field("info_name", pa.uint32(), nullable=False), pa.field("value", _VALUE, nullable=False)])


def values(*, read_only: bool, held: dict[str, int] | None = None) -> dict[int, str | bool | int]:
    """Every SqlInfo answer of this server; `held` the server's counts of open streams and
    sessions."""
    from zarrsql import __version__

    return {
        SERVER_NAME: "zarrsql",
        SERVER_VERSION: f"{__version__} (DuckDB {duckdb.__version__})",
        ARROW_VERSION: pa.__version__,
        READ_ONLY: read_only,
        SERVER_SQL: True,
        SUBSTRAIT: False,
        TRANSACTION: _NO_TRANSACTIONS,
        CANCEL: True,
        IDENTIFIER_QUOTE_CHAR: '"',
        OPEN_STREAMS: (held or {}).get("streams", 0),
        SESSIONS: (held or {}).get("sessions", 0),
    }


def table(requested: list[int], *, read_only: bool, held: dict[str, int] | None = None) -> pa.Table:
    """The rows for `requested` codes (all when empty; unknown codes are left out)."""
    known = values(read_only=read_only, held=held)
    codes = [c for c in (requested or sorted(known)) if c in known]
    children: list[list[object]] = [[], [], [], []]  # string, bool, bigint, int32 bitmask
    type_ids, offsets = [], []
    for code in codes:
        child = _child(code, known[code])
        type_ids.append(child)
        offsets.append(len(children[child]))
        children[child].append(known[code])
    arrays = [pa.array(values, _VALUE.field(i).type) for i, values in enumerate(children)]
    arrays += [pa.array([], _VALUE.field(4).type), pa.array([], _VALUE.field(5).type)]
    union = pa.UnionArray.from_dense(
        pa.array(type_ids, pa.int8()),
        pa.array(offsets, pa.int32()),
        arrays,
        [f.name for f in _VALUE],
        [0, 1, 2, 3, 4, 5],
    )
    return pa.table([pa.array(codes, pa.uint32()), union], schema=SCHEMA)


def _child(code: int, value: object) -> int:
    """The union member a value goes in: bool before int (a bool is an int in Python)."""
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return 3 if code in _BITMASKS else 2
    return 0
