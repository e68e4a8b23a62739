"""The hand-written protobuf coding against Google's protobuf runtime: messages built by the
real encoder parse to the same fields, and what the server writes parses back in protobuf.

The message definitions are declared here with the field numbers and types of arrow's
FlightSql.proto (only the messages the server reads or writes)."""

from __future__ import annotations

import pytest
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

from zarrsql.server import commands, protocol

_F = descriptor_pb2.FieldDescriptorProto
_MESSAGES = {
    "CommandGetTables": [
        ("catalog", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, True),
        ("db_schema_filter_pattern", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, True),
        ("table_name_filter_pattern", 3, _F.TYPE_STRING, _F.LABEL_OPTIONAL, True),
        ("table_types", 4, _F.TYPE_STRING, _F.LABEL_REPEATED, False),
        ("include_schema", 5, _F.TYPE_BOOL, _F.LABEL_OPTIONAL, False),
    ],
    "CommandGetSqlInfo": [("info", 1, _F.TYPE_UINT32, _F.LABEL_REPEATED, False)],
    "CommandStatementQuery": [
        ("query", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, False),
        ("transaction_id", 2, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, True),
    ],
    "ActionCreatePreparedStatementResult": [
        ("prepared_statement_handle", 1, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, False),
        ("dataset_schema", 2, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, False),
        ("parameter_schema", 3, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, False),
    ],
    "DoPutUpdateResult": [("record_count", 1, _F.TYPE_INT64, _F.LABEL_OPTIONAL, False)],
    "TicketStatementQuery": [("statement_handle", 1, _F.TYPE_BYTES, _F.LABEL_OPTIONAL, False)],
}


def _classes() -> dict[str, type]:
    """Message classes for `_MESSAGES` (proto3; `optional` fields get their synthetic oneof)."""
    proto = descriptor_pb2.FileDescriptorProto(name="zarrsql_flightsql_test.proto", package="arrow.flight.protocol.sql")
    proto.syntax = "proto3"
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label, optional in fields:
            field = message.field.add(name=field_name, number=number, type=kind, label=label)
            if optional:
                field.proto3_optional = True
                field.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{field_name}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"arrow.flight.protocol.sql.{name}"))
        for name in _MESSAGES
    }


CLASSES = _classes()


def _packed(message: object) -> bytes:
    wrapper = any_pb2.Any()
    wrapper.Pack(message)
    return wrapper.SerializeToString()


def test_get_tables_from_protobuf() -> None:
    message = CLASSES["CommandGetTables"](
        catalog="era5", table_name_filter_pattern="t%", table_types=["VIEW", "BASE TABLE"], include_schema=True
    )
    assert commands.parse(_packed(message)) == commands.Tables("era5", None, "t%", ("VIEW", "BASE TABLE"), True)


def test_an_empty_optional_string_is_a_value_not_absent() -> None:
    message = CLASSES["CommandGetTables"](catalog="")
    assert commands.parse(_packed(message)) == commands.Tables("", None, None, (), False)


def test_sql_info_codes_packed_and_large() -> None:
    message = CLASSES["CommandGetSqlInfo"](info=[0, 3, 504, 10_001])  # proto3 packs repeated uint32
    assert commands.parse(_packed(message)) == commands.SqlInfo((0, 3, 504, 10_001))


def test_a_long_query_with_unicode() -> None:
    sql = "SELECT 'ünïcode' AS s, " + ", ".join(f"{i} AS c{i}" for i in range(400))  # > 127 bytes: 2-byte length
    message = CLASSES["CommandStatementQuery"](query=sql, transaction_id=b"\x00\x01")
    assert commands.parse(_packed(message)) == commands.StatementQuery(sql)


def test_prepared_result_parses_in_protobuf() -> None:
    import pyarrow as pa

    schema = pa.schema([pa.field("a", pa.int64())])
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(commands.prepared_result(b"\xffhandle", schema, None))
    assert wrapper.type_url == "type.googleapis.com/arrow.flight.protocol.sql.ActionCreatePreparedStatementResult"
    result = CLASSES["ActionCreatePreparedStatementResult"]()
    assert wrapper.Unpack(result)
    assert result.prepared_statement_handle == b"\xffhandle"
    assert pa.ipc.read_schema(pa.py_buffer(result.dataset_schema)) == schema
    assert result.parameter_schema == b""


@pytest.mark.parametrize("count", [0, 1, 300, 2**40, -1])
def test_update_counts_parse_in_protobuf(count: int) -> None:
    message = CLASSES["DoPutUpdateResult"]()
    message.ParseFromString(protocol.encode([(1, count)]))
    assert message.record_count == count


def test_tickets_round_trip() -> None:
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(commands.ticket(b"\x00" * 16))
    ticket = CLASSES["TicketStatementQuery"]()
    assert wrapper.Unpack(ticket)
    assert ticket.statement_handle == b"\x00" * 16
    assert commands.parse(commands.ticket(b"\x00" * 16)) == commands.TicketQuery(b"\x00" * 16)


@pytest.mark.parametrize("data", [b"\x0a\x05abc", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", b"\x0b", b""])
def test_malformed_bytes_are_a_protocol_error(data: bytes) -> None:
    with pytest.raises(protocol.ProtocolError):
        commands.parse(data)


def test_an_unknown_command_is_refused_by_name() -> None:
    with pytest.raises(protocol.RequestError, match="CommandStatementIngest is not supported"):
        commands.parse(protocol.pack("CommandStatementIngest", b""))
