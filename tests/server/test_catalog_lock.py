"""A read-only server refuses zarr_mount / zarr_unmount however a statement spells them.

The statement text is checked first (a comment before the parenthesis, a quoted function
name); a call hidden in a string that `query()` runs can only be refused when it runs, by
the session cursor itself. Either way the databases every client shares stay as they were.
"""

from __future__ import annotations

from typing import Any

import adbc_driver_manager
import pytest

from tests.server.helpers import Stores

HIDDEN = [
    "SELECT * FROM zarr_unmount/**/('era5')",
    "SELECT * FROM zarr_unmount -- a comment\n ('era5')",
    'SELECT * FROM "zarr_unmount"(\'era5\')',
    "SELECT * FROM query('SELECT * FROM zarr_unmount(''era5'')')",
    "SELECT * FROM \"zarr_mount\"('{air}', 'evil')",
    "SELECT * FROM query('SELECT * FROM zarr_mount(''{air}'', ''evil'')')",
]


@pytest.mark.parametrize("sql", HIDDEN)
def test_a_hidden_catalog_action_is_refused_when_read_only(client: Any, stores: Stores, sql: str) -> None:
    with client.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as err:
            cur.execute(sql.format(air=stores.air))
            cur.fetch_arrow_table()
        assert "read-only" in str(err.value) and "--allow-writes" in str(err.value)
        cur.execute("SELECT DISTINCT database_name FROM zarr_mounts() ORDER BY 1")
        mounted = [r[0] for r in cur.fetchall()]
        assert "era5" in mounted and "evil" not in mounted
        cur.execute("SELECT count(*) FROM era5.time_lat_lon")
        assert cur.fetchone()[0] > 0
