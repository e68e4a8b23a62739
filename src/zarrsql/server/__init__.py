"""An Arrow Flight SQL server over a zarrsql connection: `zarrsql.serve(con)`, `zarrsql serve`.

Any ADBC or Flight SQL JDBC client can then query the connection's mounted stores: statement
and prepared queries with bound parameters, results streamed as Arrow record batches, and
the catalog commands tools browse with. Read-only and token-protected by default; see
docs/server.md. Needs only pyarrow (its `flight` module) beside zarrsql's own dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Limits", "ServerHandle", "serve"]

#: Public names → their modules, imported on first use (the command line's `--help` imports
#: this package to add `serve`, and must not load pyarrow or DuckDB for it).
_LAZY = {
    "Limits": "zarrsql.server.streams",
    "ServerHandle": "zarrsql.server.serving",
    "serve": "zarrsql.server.serving",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zarrsql.server' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
