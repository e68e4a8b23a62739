"""Running a DuckDB call as if from the user's own code, so DuckDB finds their variables.

DuckDB reads `FROM df` (a pandas or polars frame, an Arrow table, a relation) by looking up
`df` in the Python frame that called it: that frame's locals, then its globals. A call made
from inside zarrsql would look in zarrsql's frames instead, where the user's names are not
(and zarrsql's own locals could stand in for them). So the wrapper finds the first frame
outside zarrsql and makes the DuckDB call from a frame of `eval` whose globals are that
frame's globals and whose locals are its locals: the frame DuckDB then inspects.
"""

from __future__ import annotations

import sys
from collections import ChainMap
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

_SLOT = "__zarrsql_call__"
_CALL = compile(f"{_SLOT}[0](*{_SLOT}[1], **{_SLOT}[2])", "<zarrsql>", "eval")


def _inside_zarrsql(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__") or ""
    return name == "zarrsql" or name.startswith("zarrsql.")


def caller_frame() -> FrameType | None:
    """The innermost frame that is not zarrsql's own (the code that called zarrsql)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _inside_zarrsql(frame):
        frame = frame.f_back
    return frame


def call_from(frame: FrameType | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, called from a frame that sees `frame`'s locals and globals."""
    if frame is None:
        return fn(*args, **kwargs)
    local = ChainMap({_SLOT: (fn, args, kwargs)}, frame.f_locals)
    # DuckDB names the caller's file and line in some errors: give it the user's
    code = _CALL.replace(co_filename=frame.f_code.co_filename, co_firstlineno=frame.f_lineno or 1)
    return eval(code, frame.f_globals, local)  # noqa: S307 - a fixed expression, no user text
