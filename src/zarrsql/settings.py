"""Process-wide options: `zarrsql.set_option(name, value)` and `zarrsql.get_option(name)`.

One convention for every option: a Python call, with an environment variable read once at
import as its starting value (`ZARRSQL_<NAME>`), so a notebook, a script and CI can each
choose without touching code. Options are few and global on purpose: they change how zarrsql
talks to the person watching (progress), never what a query returns.

- `progress` (bool, default True; `ZARRSQL_PROGRESS=0` turns it off): show a progress bar for
  scans that run longer than about a second, in Jupyter or on a terminal's standard error.
- `scan_aggregates` (bool, default True; `ZARRSQL_SCAN_AGGREGATES=0` turns it off): compute a
  GROUP BY on coordinates inside the scan (`engine/grouped.py`) instead of handing DuckDB
  every cell. Off, DuckDB aggregates the rows itself: the same results (sums of floats may
  differ in their last bits, as they do between DuckDB runs), for comparing the two.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from zarrsql.errors import ParameterError

_FALSE = frozenset({"0", "false", "no", "off"})
_TRUE = frozenset({"1", "true", "yes", "on"})


def _env_flag(name: str, default: bool) -> bool:
    """A boolean from the environment; a value that is not a clear yes or no keeps `default`
    (an option that broke imports over a typo would be worse than one ignored)."""
    text = os.environ.get(name, "").strip().lower()
    if text in _FALSE:
        return False
    if text in _TRUE:
        return True
    return default


_lock = threading.Lock()
_options: dict[str, Any] = {
    "progress": _env_flag("ZARRSQL_PROGRESS", True),
    "scan_aggregates": _env_flag("ZARRSQL_SCAN_AGGREGATES", True),
}


def set_option(name: str, value: Any) -> None:
    """Set a process-wide option (see the module docstring for the options)."""
    if name not in _options:
        raise ParameterError(f"zarrsql has no option {name!r}; its options: {', '.join(sorted(_options))}")
    if not isinstance(value, bool):
        raise ParameterError(f"option {name!r} takes True or False, not {value!r}")
    with _lock:
        _options[name] = value


def get_option(name: str) -> Any:
    """The current value of a process-wide option."""
    if name not in _options:
        raise ParameterError(f"zarrsql has no option {name!r}; its options: {', '.join(sorted(_options))}")
    return _options[name]
