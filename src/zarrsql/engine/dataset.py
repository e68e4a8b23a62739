"""The DuckDB 1.5 fallback: a scan as a thin `pyarrow.dataset.Dataset` shell.

DuckDB 1.5 has no scan-source protocol. It reads a registered pyarrow dataset by calling
`scanner(columns=..., filter=...)` once per scan and trusts the scanner to apply the filter
exactly; `Scanner.from_batches` does so with Arrow's semantics on the streamed batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads

from zarrsql.errors import ZarrSQLError
from zarrsql.expand.arrow import schema_of
from zarrsql.expand.reader import read_batches
from zarrsql.scan import TableScan


class ZarrDataset(pads.Dataset):
    """A `pyarrow.dataset.Dataset` shell for DuckDB 1.5 (see the module docstring).

    Only `schema`, `scanner` and `count_rows` are used by DuckDB; the base constructor is
    deliberately not called (the shell holds no Arrow dataset).
    """

    def __init__(self, scan: TableScan, on_error: Callable[[ZarrSQLError], None] | None = None) -> None:  # noqa: D107
        self._scan = scan
        self._on_error = on_error
        self._schema = schema_of(scan.columns)

    @property
    def schema(self) -> pa.Schema:  # type: ignore[override]
        return self._schema

    def count_rows(self, **kwargs: Any) -> int:  # type: ignore[override]
        return self._scan.plan().rows()

    def scanner(self, columns: list[str] | None = None, filter: Any = None, **kwargs: Any) -> pads.Scanner:  # type: ignore[override]  # noqa: A002
        by_name = {c.name: c for c in self._scan.columns}
        wanted = list(self._scan.columns) if columns is None else [by_name[n] for n in columns]
        batches: Iterator[pa.RecordBatch] = read_batches(self._scan, self._scan.plan(), wanted, self._on_error)
        return pads.Scanner.from_batches(batches, schema=schema_of(wanted), filter=filter)
