"""TIMESTAMP bounds around a TIMESTAMPTZ or TIMESTAMP_NS value, as SQL of the value `{v}`.

DuckDB compares a TIMESTAMP dimension with such a value by casting the dimension, which keeps
the condition out of the scan; a TIMESTAMP bound beside it reaches the scan instead. `low` and
`high` hold every naive time that reads, in any session zone, as the instant `{v}`: the zone's
offsets lie within a day, so within a day of `{v}`'s UTC wall time (±infinity past the years
DuckDB can shift). `floor` and `ceil` are `{v}` cut to a whole microsecond, down or up. Used by
`widened` (a WHERE's comparisons) and `join_keys` (a join's keys).
"""

from __future__ import annotations

#: `{v}`'s UTC wall time.
UTC = "timezone('UTC', CAST({v} AS TIMESTAMPTZ))"
#: Each bound, by name.
BOUNDS = {
    "low": f"CASE WHEN {UTC} > TIMESTAMP '0001-01-02' THEN {UTC} - INTERVAL 1 DAY ELSE TIMESTAMP '-infinity' END",
    "high": f"CASE WHEN {UTC} < TIMESTAMP '9999-12-30' THEN {UTC} + INTERVAL 1 DAY ELSE TIMESTAMP 'infinity' END",
    "floor": "CASE WHEN CAST(CAST({v} AS TIMESTAMP) AS TIMESTAMP_NS) > CAST({v} AS TIMESTAMP_NS) "
    "THEN CAST({v} AS TIMESTAMP) - INTERVAL 1 MICROSECOND ELSE CAST({v} AS TIMESTAMP) END",
    "ceil": "CASE WHEN CAST(CAST({v} AS TIMESTAMP) AS TIMESTAMP_NS) < CAST({v} AS TIMESTAMP_NS) "
    "THEN CAST({v} AS TIMESTAMP) + INTERVAL 1 MICROSECOND ELSE CAST({v} AS TIMESTAMP) END",
}
