"""Arrow filter expressions as DuckDB means them: the filters DuckDB 1.5 pushes into a dataset.

DuckDB 1.5 hands a pyarrow dataset its WHERE (and a join's key filter) as an Arrow expression
and trusts the scan to apply it exactly. Two of Arrow's rules are not DuckDB's:

- `is_in` looks values up by their bits, so it tells -0.0 from 0.0 where DuckDB's `=` does
  not (`zeros_alike` puts both zeros in a value set holding one);
- comparisons are IEEE's (NaN equals nothing and is greater than nothing), where DuckDB's NaN
  equals NaN and is greater than every other value (`duckdb_nan_rules` rewrites each
  comparison of a float column with a literal, and each `is_in`, where the answers differ).

An Arrow expression has no public way to walk its calls. Pickling one writes its literals and
function options as the columns of a one-row Arrow IPC file, and its calls, in prefix order,
as its schema's metadata (`_pickle_form`); the metadata's repeated keys are read through the
Arrow C data interface, since pyarrow's `Schema.metadata` is a dict (`_metadata_entries`). The
rewrite edits that form and reads it back as unpickling does. A filter in any other form is
kept as Arrow wrote it.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def zeros_alike(filter: Any) -> Any:  # noqa: A002
    """`filter` with each floating-point `is_in` value set that holds a zero holding both zeros.

    DuckDB 1.5 hands `x IN (...)` over as Arrow's `is_in`, which looks values up by their bits
    and so tells -0.0 from 0.0, where DuckDB (like IEEE `=`) does not: `x IN (0.0, 1.5)` would
    lose the rows holding -0.0. The value sets are completed in the filter's pickle form
    (`_pickle_form`), in the columns holding its function options. A filter written otherwise
    is kept as it is."""
    form = _pickle_form(filter)
    if form is None:
        return filter
    rebuild, schema, batch = form
    columns = [_both_zeros(column) for column in batch.columns]
    if all(new is old for new, old in zip(columns, batch.columns, strict=True)):
        return filter
    return _unpickled(rebuild, schema, columns)


def _pickle_form(filter: Any) -> tuple[Callable[[Any], Any], pa.Schema, pa.RecordBatch] | None:  # noqa: A002
    """`filter` as pickling writes it (an Arrow expression has no public way to walk its
    calls): the function reading it back, and a one-row Arrow IPC file, given as its schema and
    its batch. The columns hold the literals and function options, one each; the schema's
    metadata lists the calls in prefix order (`_metadata_entries`). None for a filter written
    otherwise."""
    try:
        rebuild, (buffer,) = filter.__reduce__()
        reader = pa.ipc.open_file(buffer)
        return rebuild, reader.schema, reader.get_batch(0)
    except (pa.ArrowException, TypeError, ValueError):
        return None


def _unpickled(rebuild: Callable[[Any], Any], schema: pa.Schema, columns: list[pa.Array]) -> Any:
    """The expression of the pickle form `schema` (its metadata) and `columns`."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
    return rebuild(sink.getvalue())


def _both_zeros(column: pa.Array) -> pa.Array:
    """A one-row column of `is_in` options (`SetLookupOptions`) whose floating-point value set
    holds a zero, with both zeros in it; any other column as it is."""
    values = _float_value_set(column)
    if values is None or not pc.any(pc.equal(values, 0)).as_py():
        return column
    kind = column.type
    listed = kind.field("value_set").type
    completed = pa.concat_arrays([values, pc.cast(pa.array([0.0, -0.0]), values.type)])
    value_set = pa.ListArray.from_arrays(pa.array([0, len(completed)], pa.int32()), completed, type=listed)
    children = [value_set if field.name == "value_set" else column.field(field.name) for field in kind]
    return pa.StructArray.from_arrays(children, fields=list(kind))


def _float_value_set(column: pa.Array) -> pa.Array | None:
    """The value set of a one-row column of `is_in` options (`SetLookupOptions`) when it holds
    floating-point values, else None."""
    kind = column.type
    if not pa.types.is_struct(kind) or kind.get_field_index("value_set") < 0 or kind.get_field_index("_type_name") < 0:
        return None
    listed = kind.field("value_set").type
    if not pa.types.is_list(listed) or not pa.types.is_floating(listed.value_type) or len(column) != 1:
        return None
    if column.field("_type_name")[0].as_py() != b"SetLookupOptions":
        return None
    return column.field("value_set")[0].values  # type: ignore[no-any-return]


def duckdb_nan_rules(filter: Any, schema: pa.Schema) -> Any:  # noqa: A002
    """`filter` comparing floating-point columns of `schema` by DuckDB's rules, where NaN
    equals NaN and is greater than every other value, not IEEE's, which Arrow follows.

    DuckDB 1.5 hands a comparison with a number over as Arrow's (`x > 2`, and `x >= min` beside
    the `is_in` of a join's keys), which a NaN never passes. Each comparison of a column with a
    literal, and each `is_in` of a column, is rewritten where the rules differ (`_by_duckdb`),
    in place in the filter's pickle form; everything around it (AND, OR, NOT, other calls) is
    left as it is: it then combines DuckDB's answers. A filter written otherwise is kept as it is.
    """
    form = _pickle_form(filter)
    if form is None:
        return filter
    rebuild, written, batch = form
    entries = _metadata_entries(written)
    rewritten: list[tuple[bytes, bytes]] = []
    k = 0
    try:
        while k < len(entries):
            atom = _atom(entries, k)
            if atom is None:
                rewritten.append(entries[k])
                k += 1
            else:
                rewritten.extend(_by_duckdb(atom, entries[k : atom.end], batch, schema))
                k = atom.end
    except (ValueError, IndexError):  # entries not as pickling writes them (a name not UTF-8, ...)
        return filter
    if rewritten == entries:
        return filter
    return _unpickled(rebuild, written.with_metadata(pa.KeyValueMetadata(rewritten)), batch.columns)


class _ArrowSchema(ctypes.Structure):
    """The head of the Arrow C data interface's `struct ArrowSchema`, up to its metadata."""

    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p)]


#: CPython's `PyCapsule_GetPointer`: the `struct ArrowSchema` an `__arrow_c_schema__` capsule holds.
_CAPSULE_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _metadata_entries(schema: pa.Schema) -> list[tuple[bytes, bytes]]:
    """`schema`'s metadata entries in their order, repeated keys included (pyarrow's
    `Schema.metadata` is a dict, which keeps one entry per key). Read through the Arrow C data
    interface, which writes them as an int32 count, then each key and value as an int32 length
    and its bytes."""
    capsule = schema.__arrow_c_schema__()  # owns the struct until it is collected
    encoded = _ArrowSchema.from_address(_CAPSULE_POINTER(capsule, b"arrow_schema")).metadata
    if not encoded:
        return []
    entries = []
    offset = encoded + 4
    for _ in range(ctypes.c_int32.from_address(encoded).value):
        pair = []
        for _ in range(2):
            size = ctypes.c_int32.from_address(offset).value
            pair.append(ctypes.string_at(offset + 4, size))
            offset += 4 + size
        entries.append((pair[0], pair[1]))
    return entries


#: Arrow's comparisons, each with its mirror: the same test with the arguments swapped.
_MIRRORED = {
    "equal": "equal",
    "not_equal": "not_equal",
    "less": "greater",
    "greater": "less",
    "less_equal": "greater_equal",
    "greater_equal": "less_equal",
}


@dataclass(frozen=True, slots=True)
class _Atom:
    """A comparison of a column with a literal, or an `is_in` of a column, in a filter's pickle
    form: the function as the column sees it (`2 < x` is `greater`), the column's entries and
    names, the batch column holding the literal or the `is_in` options, and the index of the
    first entry after the atom."""

    function: str
    field: tuple[tuple[bytes, bytes], ...]
    path: tuple[str, ...]
    value: int
    end: int


def _atom(entries: list[tuple[bytes, bytes]], k: int) -> _Atom | None:
    """The atom whose `call` entry is `entries[k]`, or None when it is none."""
    key, name = entries[k]
    function = name.decode("utf-8", "replace")
    if key != b"call" or (function not in _MIRRORED and function != "is_in"):
        return None
    first = _operand(entries, k + 1)
    if first is None:
        return None
    if function == "is_in":
        tail = entries[first[2] : first[2] + 2]  # the options, then the end of the call
        if not isinstance(first[0], tuple) or len(tail) < 2 or tail[0][0] != b"options" or tail[1] != (b"end", name):
            return None
        return _Atom(function, first[1], first[0], int(tail[0][1]), first[2] + 2)
    second = _operand(entries, first[2])
    if second is None or entries[second[2] : second[2] + 1] != [(b"end", name)]:
        return None
    if isinstance(first[0], tuple) and isinstance(second[0], int):
        return _Atom(function, first[1], first[0], second[0], second[2] + 1)
    if isinstance(first[0], int) and isinstance(second[0], tuple):
        return _Atom(_MIRRORED[function], second[1], second[0], first[0], second[2] + 1)
    return None


def _operand(
    entries: list[tuple[bytes, bytes]], j: int
) -> tuple[tuple[str, ...] | int, tuple[tuple[bytes, bytes], ...], int] | None:
    """The operand whose first entry is `entries[j]`: a column's names or a literal's batch
    column, its entries, and the index after them; None for a call or past the end."""
    if j >= len(entries):
        return None
    key, value = entries[j]
    if key == b"literal":
        return int(value), (entries[j],), j + 1
    if key == b"field_ref":
        return (value.decode(),), (entries[j],), j + 1
    if key == b"nested_field_ref":
        names = entries[j + 1 : j + 1 + int(value)]
        if len(names) == int(value) and all(k == b"field_ref" for k, _ in names):
            return tuple(v.decode() for _, v in names), tuple(entries[j : j + 1 + len(names)]), j + 1 + len(names)
    return None


def _by_duckdb(
    atom: _Atom, written: list[tuple[bytes, bytes]], batch: pa.RecordBatch, schema: pa.Schema
) -> list[tuple[bytes, bytes]]:
    """The entries of `atom` (written as `written`) computing DuckDB's answer on a NaN, where
    it differs from Arrow's: `x > c`, `x >= c` true; `x IN (.., NaN, ..)` true whatever the NaN's
    bits (Arrow's `is_in` matches NaN by its bits); against a NaN literal, `=` and `>=` are
    `is_nan(x)`, `<` and `<>` its negation, `>` false and `<=` true (NULL for NULL, as before).
    `x < c`, `x <= c`, `x = c` and `x <> c` with another `c` already agree."""
    kind = _field_type(schema, atom.path)
    if kind is None or not pa.types.is_floating(kind):
        return written
    is_nan = _call("is_nan", atom.field)
    if atom.function == "is_in":
        values = _float_value_set(batch.column(atom.value))
        holds_nan = values is not None and pc.any(pc.is_nan(values)).as_py()
        return _call("or_kleene", written, is_nan) if holds_nan else written
    literal = batch.column(atom.value)[0]
    if pa.types.is_floating(literal.type) and literal.is_valid and math.isnan(literal.as_py()):
        not_nan = _call("invert", is_nan)
        against_nan = {
            "equal": is_nan,
            "greater_equal": is_nan,
            "not_equal": not_nan,
            "less": not_nan,
            "greater": _call("and_kleene", is_nan, not_nan),
            "less_equal": _call("or_kleene", is_nan, not_nan),
        }
        return against_nan[atom.function]
    if atom.function in ("greater", "greater_equal") and literal.is_valid:
        return _call("or_kleene", written, is_nan)
    return written


def _call(function: str, *arguments: Any) -> list[tuple[bytes, bytes]]:
    """The pickle-form entries of a call of `function` on `arguments` (each its entries)."""
    name = function.encode()
    return [(b"call", name), *(entry for argument in arguments for entry in argument), (b"end", name)]


def _field_type(schema: pa.Schema, path: tuple[str, ...]) -> pa.DataType | None:
    """The type of the column (or struct field within it) `path` names in `schema`, or None."""
    holder: Any = schema
    kind = None
    for name in path:
        if kind is not None:
            if not pa.types.is_struct(kind):
                return None
            holder = kind
        index = holder.get_field_index(name)
        if index < 0:
            return None
        kind = holder.field(index).type
    return kind
