"""DuckDB's file-access settings, read for zarrsql's own readers and writers.

`SET enable_external_access = false` makes DuckDB refuse files and URLs outside
`allowed_directories` and `allowed_paths`; zarrsql's readers and writers do not go through
DuckDB's file system, so they ask the connection here and obey the same rules
(store/access.py holds them; every store opener, reference set and writer applies them).

The settings are database-wide and one-way: DuckDB refuses to turn external access back on,
or to change either list, while the database runs. The SQL functions' macros hand the three
values to the UDFs as arguments DuckDB evaluates when it binds a call (engine/functions.py),
so a statement pays nothing for them. Where no call carries them (a writer, a rewrite's own
read, a scan named directly), `AccessRules` reads them with one small query on a cursor (a
fraction of a millisecond), and keeps a policy read as off for the connection's life.
"""

from __future__ import annotations

from typing import Any

import duckdb

from zarrsql.store.access import OPEN, AccessPolicy

_QUERY = (
    "SELECT current_setting('enable_external_access'), current_setting('allowed_directories'), "
    "current_setting('allowed_paths')"
)
#: How the errors name the switch: the SQL that turned it off.
SETTING = "enable_external_access"


class AccessRules:
    """The file-access policy of one DuckDB connection (see the module docstring)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._closed: AccessPolicy | None = None  # external access seen off: final

    def policy(self) -> AccessPolicy:
        if self._closed is not None:
            return self._closed
        found = policy_of(self._con)
        if not found.external:
            self._closed = found
        return found


def policy_of(con: duckdb.DuckDBPyConnection) -> AccessPolicy:
    """The connection's rules now. A cursor, so that this works inside a running statement
    (a store opened while DuckDB binds) without touching the user's pending result."""
    cur = con.cursor()
    try:
        row = cur.execute(_QUERY).fetchone()
    except duckdb.Error:  # a DuckDB without these settings has no such rules to apply
        return OPEN
    finally:
        cur.close()
    return OPEN if row is None else policy_from(*row)


def policy_from(external: Any, directories: Any, paths: Any) -> AccessPolicy:
    """The policy of the three settings' values (as `current_setting` gives them)."""
    if external is not False:
        return OPEN
    return AccessPolicy(
        external=False, directories=_texts(directories), paths=_texts(paths), setting=f"{SETTING} = false"
    )


def _texts(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return ()
