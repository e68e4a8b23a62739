"""DuckDB's allocator set to hand freed memory back to the system while a writer runs.

A writer reads the whole result (an aggregate's hash table is most of a write's memory) and
then allocates its output arrays. DuckDB's allocator (jemalloc on Linux) keeps the pages its
finished query freed, so by default the arrays come on top of them: in the benchmark's daily
write (1.8M rows from a 42M-row GROUP BY) that made the peak 35 MB higher than DuckDB's own
sort of the same result. With jemalloc's background threads on, freed pages are purged
while the writer works, and the peak stays within a few MB of that sort's.

The setting is the database's, not the connection's, so it is restored when the write ends;
on a DuckDB that does not know it (or has no jemalloc) the write runs as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import duckdb

__all__ = ["returning_memory"]

_SETTING = "allocator_background_threads"


@contextmanager
def returning_memory(con: Any) -> Iterator[None]:
    """Background purging on `con`'s database for the duration of the block."""
    try:
        ((before,),) = con.execute(f"SELECT current_setting('{_SETTING}')").fetchall()
        if not before:
            con.execute(f"SET {_SETTING} = true")
    except duckdb.Error:  # a DuckDB without the setting
        yield
        return
    try:
        yield
    finally:
        if not before:
            with suppress(duckdb.Error):  # the connection was closed meanwhile: nothing to restore
                con.execute(f"SET {_SETTING} = false")
