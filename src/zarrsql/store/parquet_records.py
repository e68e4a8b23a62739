"""The chunk references of a kerchunk Parquet reference set, read one record file at a time.

The Parquet layout keeps, per array, its chunks' references in files of `record_size` rows
(`<array>/refs.<n>.parq`, columns `path`, `offset`, `size`, `raw`), row `i` of file `n`
being chunk number `n * record_size + i` in C order over the chunk grid. A chunk's
reference therefore costs one small file read the first time its record is needed, and
nothing after (the last `_KEPT` records stay in memory).

The files are read with `pyarrow.parquet`'s `ParquetFile` (a millisecond each, its import
20 ms; `read_table` would import `pyarrow.dataset`, 0.2 s), where fsspec's
`LazyReferenceMapper` goes through pandas (0.37 s to import, then ~10 ms a file): a
`LIMIT 10` over a reference set opens a record per variable, so that cost was most of it.

A row with neither a path nor inline bytes is a chunk the set does not have (read as the
fill value). A record file that is missing or unreadable is an error, never fill values: its
chunks may well exist.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from zarrsql.errors import StoreReadError

#: Record files kept in memory (a few hundred kilobytes each at kerchunk's default size).
_KEPT = 64

#: The columns of a record file, in `Record`'s order.
_COLUMNS = ("path", "offset", "size", "raw")


@dataclass(frozen=True)
class Record:
    """A record file's columns as Arrow arrays (None for a column the file lacks). Rows are
    taken one at a time as chunks are asked for: a file holds `record_size` rows (10,000 by
    default) even for an array of one chunk, so converting it whole would cost more."""

    rows: int
    paths: Any
    offsets: Any
    sizes: Any
    raws: Any

    def reference(self, row: int) -> bytes | list[Any] | None:
        """Row `row`'s reference (see `ParquetRecords`), None when it names no chunk."""
        raw = None if self.raws is None else self.raws[row].as_py()
        if raw is not None:
            return bytes(raw)
        path = None if self.paths is None else self.paths[row].as_py()
        if path is None:
            return None
        offset = 0 if self.offsets is None else self.offsets[row].as_py() or 0
        size = 0 if self.sizes is None else self.sizes[row].as_py() or 0
        return [path] if offset == 0 and size == 0 else [path, int(offset), int(size)]


class ParquetRecords:
    """`records[key]` is a chunk's reference as kerchunk spells it: inline `bytes`,
    `[url]` (a whole file) or `[url, offset, size]`; a KeyError when the set has no such
    chunk. `read(name)` returns a record file's bytes (None when it does not exist)."""

    def __init__(
        self, location: str, metadata: Mapping[str, Any], record_size: int, read: Callable[[str], bytes | None]
    ) -> None:
        self.location = location
        self._metadata = metadata
        self._record_size = record_size
        self._read = read
        self._kept: OrderedDict[tuple[str, int], Record] = OrderedDict()
        self._lock = threading.Lock()

    def __getitem__(self, key: str) -> bytes | list[Any]:
        field, number = self._chunk_number(key)
        record, row = divmod(number, self._record_size)
        found = self._record(field, record)
        if row >= found.rows:
            raise StoreReadError(
                f"the reference record '{field}/refs.{record}.parq' of '{self.location}' has {found.rows} rows, "
                f"too few for chunk '{key}'; the reference set is damaged: write it again"
            )
        reference = found.reference(row)
        if reference is None:
            raise KeyError(key)  # a chunk the set does not have: the fill value
        return reference

    def _chunk_number(self, key: str) -> tuple[str, int]:
        """The array a chunk key belongs to and the chunk's number in C order."""
        parts = key.split("/")
        if parts[-1].startswith(".z"):
            raise KeyError(key)  # a metadata document the set does not have
        for cut in range(len(parts) - 1, 0, -1):  # the array is the longest prefix with a .zarray
            field = "/".join(parts[:cut])
            zarray = self._metadata.get(f"{field}/.zarray")
            if isinstance(zarray, dict):
                break
        else:
            raise KeyError(key)
        grid = [math.ceil(s / c) for s, c in zip(zarray.get("shape", []), zarray.get("chunks", []), strict=False)]
        try:
            index = [int(p) for p in ".".join(parts[cut:]).split(".")]
        except ValueError:
            raise KeyError(key) from None
        if not grid:  # a zero-dimensional array: one chunk, "0"
            grid = [1]
        if len(index) != len(grid) or any(not 0 <= i < n for i, n in zip(index, grid, strict=True)):
            raise KeyError(key)
        number = 0
        for i, n in zip(index, grid, strict=True):
            number = number * n + i
        return field, number

    def _record(self, field: str, record: int) -> Record:
        with self._lock:
            kept = self._kept.get((field, record))
            if kept is not None:
                self._kept.move_to_end((field, record))
                return kept
        loaded = self._load(field, record)
        with self._lock:
            self._kept[(field, record)] = loaded
            while len(self._kept) > _KEPT:
                self._kept.popitem(last=False)
        return loaded

    def _load(self, field: str, record: int) -> Record:
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = f"{field}/refs.{record}.parq"
        data = self._read(name)
        if data is None:
            raise StoreReadError(
                f"the reference record '{name}' of '{self.location}' does not exist, so the chunks it lists "
                "cannot be found; the reference set is incomplete: write it again (kerchunk's refs_to_dataframe)"
            )
        try:
            table = _read_parquet(pa, pq, data)
        except (pa.ArrowException, OSError, ValueError, KeyError) as err:
            raise StoreReadError(f"cannot read the reference record '{name}' of '{self.location}': {err}") from err
        columns = (table.column(c).combine_chunks() if c in table.column_names else None for c in _COLUMNS)
        return Record(table.num_rows, *columns)


def _read_parquet(pa: Any, pq: Any, data: bytes) -> Any:
    """A record file as an Arrow table: through `ParquetFile` (`read_table` would import
    `pyarrow.dataset`), on this thread (Arrow's pool costs more to start than a small file
    takes to read), with the paths dictionary-encoded (a file names a few NetCDF files in
    100,000 rows: as plain strings they would be megabytes per record kept)."""
    file = pq.ParquetFile(pa.BufferReader(data))
    if "path" in file.schema_arrow.names:
        file = pq.ParquetFile(pa.BufferReader(data), read_dictionary=["path"])
    return file.read(use_threads=False)
