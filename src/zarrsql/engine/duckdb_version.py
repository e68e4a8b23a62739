"""The DuckDB release this process runs: a few of zarrsql's rules differ between DuckDB 1.5
and 2 (how `SHOW 'x'` reads its string, whether a prepared statement is bound again, whether
a relation can run its own query), decided in one place from the version's major number."""

from __future__ import annotations

import duckdb

#: DuckDB's major version (1 or 2).
MAJOR = int(duckdb.__version__.split(".")[0])
