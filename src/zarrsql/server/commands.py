"""The Flight SQL commands the server answers, parsed from their protobuf form.

Each command is a frozen record built from the Any a client sent (see `protocol`); `parse`
maps a message name to its record, and refuses a command this server does not implement
with a message naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from zarrsql.server import protocol as pb


@dataclass(frozen=True, slots=True)
class StatementQuery:
    query: str


@dataclass(frozen=True, slots=True)
class StatementUpdate:
    query: str


@dataclass(frozen=True, slots=True)
class PreparedQuery:
    handle: bytes


@dataclass(frozen=True, slots=True)
class PreparedUpdate:
    handle: bytes


@dataclass(frozen=True, slots=True)
class TicketQuery:
    handle: bytes


@dataclass(frozen=True, slots=True)
class Catalogs:
    pass


@dataclass(frozen=True, slots=True)
class DbSchemas:
    catalog: str | None
    pattern: str | None


@dataclass(frozen=True, slots=True)
class Tables:
    catalog: str | None
    schema_pattern: str | None
    table_pattern: str | None
    table_types: tuple[str, ...]
    include_schema: bool


@dataclass(frozen=True, slots=True)
class TableTypes:
    pass


@dataclass(frozen=True, slots=True)
class SqlInfo:
    info: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Keys:
    """GetPrimaryKeys / GetImportedKeys / GetExportedKeys / GetCrossReference: DuckDB views
    have no keys, so the answer is always empty; `kind` picks its schema."""

    kind: str


Command = (
    StatementQuery
    | StatementUpdate
    | PreparedQuery
    | PreparedUpdate
    | TicketQuery
    | Catalogs
    | DbSchemas
    | Tables
    | TableTypes
    | SqlInfo
    | Keys
)

_KEYS = {
    "CommandGetPrimaryKeys": "primary",
    "CommandGetImportedKeys": "foreign",
    "CommandGetExportedKeys": "foreign",
    "CommandGetCrossReference": "foreign",
}


def parse(data: bytes) -> Command:
    """The command in an Any (a descriptor's cmd or a ticket)."""
    name, f = pb.unpack(data)
    if name == "CommandStatementQuery":
        return StatementQuery(pb.text(f, 1))
    if name == "CommandStatementUpdate":
        return StatementUpdate(pb.text(f, 1))
    if name == "CommandPreparedStatementQuery":
        return PreparedQuery(pb.raw(f, 1))
    if name == "CommandPreparedStatementUpdate":
        return PreparedUpdate(pb.raw(f, 1))
    if name == "TicketStatementQuery":
        return TicketQuery(pb.raw(f, 1))
    if name == "CommandGetCatalogs":
        return Catalogs()
    if name == "CommandGetDbSchemas":
        return DbSchemas(pb.optional_text(f, 1), pb.optional_text(f, 2))
    if name == "CommandGetTables":
        return Tables(
            pb.optional_text(f, 1), pb.optional_text(f, 2), pb.optional_text(f, 3), tuple(pb.texts(f, 4)), pb.flag(f, 5)
        )
    if name == "CommandGetTableTypes":
        return TableTypes()
    if name == "CommandGetSqlInfo":
        return SqlInfo(tuple(pb.integers(f, 1)))
    if name in _KEYS:
        return Keys(_KEYS[name])
    raise pb.RequestError(
        f"the Flight SQL command {name} is not supported (supported: statement and prepared "
        "queries, updates when writes are allowed, GetCatalogs, GetDbSchemas, GetTables, GetTableTypes, GetSqlInfo)"
    )


def ticket(handle: bytes) -> bytes:
    """The ticket of a statement's result: a TicketStatementQuery holding the handle."""
    return pb.pack("TicketStatementQuery", pb.encode([(1, handle)]))


def prepared_result(handle: bytes, dataset: pa.Schema | None, parameters: pa.Schema | None) -> bytes:
    fields: list[tuple[int, bytes | str | int | bool]] = [(1, handle)]
    if dataset is not None:
        fields.append((2, bytes(dataset.serialize())))
    if parameters is not None:
        fields.append((3, bytes(parameters.serialize())))
    return pb.pack("ActionCreatePreparedStatementResult", pb.encode(fields))


def action_request(body: bytes, expected: str) -> dict[int, list[bytes | int]]:
    """The fields of an action's Any-wrapped request, checked to be of the expected type."""
    name, fields = pb.unpack(body)
    if name != expected:
        raise pb.ProtocolError(f"the action body is a {name}, not an {expected}")
    return fields


_PRIMARY_KEYS = pa.schema(
    [
        pa.field("catalog_name", pa.string()),
        pa.field("db_schema_name", pa.string()),
        pa.field("table_name", pa.string(), nullable=False),
        pa.field("column_name", pa.string(), nullable=False),
        pa.field("key_name", pa.string()),
        pa.field("key_sequence", pa.int32(), nullable=False),
    ]
)
_FOREIGN_KEYS = pa.schema(
    [
        pa.field("pk_catalog_name", pa.string()),
        pa.field("pk_db_schema_name", pa.string()),
        pa.field("pk_table_name", pa.string(), nullable=False),
        pa.field("pk_column_name", pa.string(), nullable=False),
        pa.field("fk_catalog_name", pa.string()),
        pa.field("fk_db_schema_name", pa.string()),
        pa.field("fk_table_name", pa.string(), nullable=False),
        pa.field("fk_column_name", pa.string(), nullable=False),
        pa.field("key_sequence", pa.int32(), nullable=False),
        pa.field("fk_key_name", pa.string()),
        pa.field("pk_key_name", pa.string()),
        pa.field("update_rule", pa.uint8(), nullable=False),
        pa.field("delete_rule", pa.uint8(), nullable=False),
    ]
)


def keys_schema(kind: str) -> pa.Schema:
    return _PRIMARY_KEYS if kind == "primary" else _FOREIGN_KEYS
