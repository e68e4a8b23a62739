"""Rows of a Spark DataFrame and of a DuckDB relation in one comparable form.

Both sides become sorted lists of tuples of plain Python values: a DECIMAL (Spark's uint64)
an int, NaN a marker that equals itself, so two reads compare with `==`, NULLs included.
"""

from __future__ import annotations

import decimal
import math
from typing import Any

NAN = "<NaN>"


def plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return NAN
    if isinstance(value, decimal.Decimal):
        return int(value)
    if hasattr(value, "asDict"):  # a Spark Row (a struct value), before tuples: a Row is one
        return tuple((k, plain(v)) for k, v in value.asDict().items())
    if isinstance(value, dict):
        return tuple((k, plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(plain(v) for v in value)
    return value


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, repr(v)) for v in row)


def sorted_rows(rows: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(plain(v) for v in row) for row in rows), key=_key)


def spark_rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted_rows(tuple(r) for r in df.collect())


def duck_rows(relation: Any) -> list[tuple[Any, ...]]:
    return sorted_rows(relation.fetchall())
