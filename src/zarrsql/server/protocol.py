"""The Flight SQL protobuf messages the server reads and writes, encoded by hand.

Flight SQL commands travel as protobuf `google.protobuf.Any` messages (a type URL and the
message bytes) in a FlightDescriptor's `cmd`, a Ticket or an Action body; a few replies go
back bare in a PutResult's `app_metadata`. Only the protobuf wire format's varint (type 0)
and length-delimited (type 2) fields are needed, so this module reads and writes them itself
instead of depending on generated protobuf code. Field numbers follow arrow's
format/FlightSql.proto and format/Flight.proto.

What callers rely on: `unpack(data)` returns `(name, fields)` for an Any (name without the
type URL prefix; `fields` maps a field number to the list of its values, bytes or int),
`pack(name, fields)` is its inverse, and a message that is not well-formed protobuf raises
`ProtocolError`, which the service answers as a Flight error with its message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: The type URL prefix of every Flight SQL message inside an Any.
TYPE_PREFIX = "type.googleapis.com/arrow.flight.protocol.sql."
#: The prefix of Flight's own messages (CancelFlightInfoRequest/Result).
FLIGHT_PREFIX = "type.googleapis.com/arrow.flight.protocol."

Fields = Mapping[int, list[bytes | int]]

#: CancelFlightInfoResult's CancelStatus values (Flight.proto).
CANCEL_CANCELLED = 1
CANCEL_NOT_CANCELLABLE = 3


class RequestError(ValueError):
    """A request this server cannot answer (an unsupported command, a wrong ticket); the
    client gets its message as a Flight error."""


class ProtocolError(RequestError):
    """Bytes that are not the protobuf message the command needs."""


def _varint(value: int) -> bytes:
    if value < 0:  # int64 negatives take ten bytes, as two's complement
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            break
    raise ProtocolError("truncated or overlong varint in a protobuf message")


def decode(data: bytes) -> dict[int, list[bytes | int]]:
    """The fields of one protobuf message: field number → values in order of appearance."""
    fields: dict[int, list[bytes | int]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise ProtocolError("a length-delimited protobuf field runs past the message end")
            value, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):  # fixed64 / fixed32: not used by these messages, skipped
            width = 8 if wire == 1 else 4
            value, pos = data[pos : pos + width], pos + width
        else:
            raise ProtocolError(f"protobuf wire type {wire} is not supported (field {number})")
        fields.setdefault(number, []).append(value)
    return fields


def encode(fields: Iterable[tuple[int, bytes | str | int | bool]]) -> bytes:
    """A protobuf message from (field number, value) pairs; str/bytes are length-delimited,
    int/bool are varints."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, (bool, int)):
            out += _varint(number << 3) + _varint(int(value))
        else:
            raw = value.encode() if isinstance(value, str) else value
            out += _varint(number << 3 | 2) + _varint(len(raw)) + raw
    return bytes(out)


def pack(name: str, body: bytes, *, prefix: str = TYPE_PREFIX) -> bytes:
    """An Any holding message `name` (e.g. "ActionCreatePreparedStatementResult")."""
    return encode([(1, prefix + name), (2, body)])


def unpack(data: bytes) -> tuple[str, dict[int, list[bytes | int]]]:
    """(message name, its fields) of an Any; the name keeps only the part after the last '.'."""
    fields = decode(data)
    url = text(fields, 1)
    if not url:
        raise ProtocolError("the command is not a protobuf Any (no type URL)")
    return url.rsplit(".", 1)[-1], decode(raw(fields, 2))


def raw(fields: Fields, number: int) -> bytes:
    """The last bytes value of a field, b"" when absent."""
    values = fields.get(number)
    if not values:
        return b""
    value = values[-1]
    if not isinstance(value, bytes):
        raise ProtocolError(f"protobuf field {number} should be length-delimited")
    return value


def text(fields: Fields, number: int) -> str:
    """A string field ("" when absent)."""
    try:
        return raw(fields, number).decode()
    except UnicodeDecodeError as err:
        raise ProtocolError(f"protobuf field {number} is not UTF-8 text") from err


def optional_text(fields: Fields, number: int) -> str | None:
    """A proto3 `optional string`: None when absent (an empty string is a value)."""
    return text(fields, number) if number in fields else None


def texts(fields: Fields, number: int) -> list[str]:
    """A repeated string field."""
    out = []
    for value in fields.get(number, []):
        if not isinstance(value, bytes):
            raise ProtocolError(f"protobuf field {number} should hold strings")
        out.append(value.decode())
    return out


def integers(fields: Fields, number: int) -> list[int]:
    """A repeated integer field, packed (one length-delimited run) or not."""
    out: list[int] = []
    for value in fields.get(number, []):
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            item, pos = _read_varint(value, pos)
            out.append(item)
    return out


def flag(fields: Fields, number: int) -> bool:
    """A bool field (false when absent)."""
    values = fields.get(number)
    return bool(values and values[-1])
