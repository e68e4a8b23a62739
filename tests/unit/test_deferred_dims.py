"""`DimValues.deferred`: values read by their first use, once, whichever thread asks first.

The remote scans' coordinates rely on it (tests/remote/test_deferred_coords.py): a plan that
never looks at a dimension's values must not read them, and the decoding threads that build
coordinate columns at once must all see the same, complete values.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from zarrsql.plan.predicate import Cmp
from zarrsql.plan.units import DimValues, plan_scan


class _Loader:
    """A memo as DeferredCoords is one: counts the reads, slow enough for threads to meet."""

    def __init__(self, values: np.ndarray, nulls: np.ndarray | None = None) -> None:
        self.values, self.nulls = values, nulls
        self.reads = 0
        self._lock = threading.Lock()
        self._done: tuple[np.ndarray, np.ndarray | None] | None = None

    def __call__(self) -> tuple[np.ndarray, np.ndarray | None]:
        with self._lock:
            if self._done is None:
                self.reads += 1
                time.sleep(0.05)
                self._done = (self.values, self.nulls)
            return self._done


def test_nothing_is_read_until_the_values_are_used() -> None:
    load = _Loader(np.arange(5.0))
    dv = DimValues.deferred("x", load)
    assert dv.name == "x"
    assert not dv.loaded
    assert "deferred" in repr(dv)  # looking at it reads nothing
    assert load.reads == 0
    np.testing.assert_array_equal(dv.values, np.arange(5.0))
    assert dv.loaded
    assert dv.nulls is None
    assert load.reads == 1


def test_nulls_alone_read_the_values_too() -> None:
    nulls = np.array([False, True, False])
    dv = DimValues.deferred("x", _Loader(np.array([1.0, np.nan, 3.0]), nulls))
    np.testing.assert_array_equal(dv.nulls, nulls)
    assert dv.loaded


def test_threads_that_ask_at_once_get_the_same_values_from_one_read() -> None:
    values = np.arange(1000, dtype=np.int64)
    load = _Loader(values)
    dims = [DimValues.deferred("x", load) for _ in range(4)]  # one loader behind several columns
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: dims[i % 4].values, range(32)))
    assert load.reads == 1
    assert all(g is values for g in got)


def test_a_plan_without_a_predicate_on_a_dimension_does_not_read_it() -> None:
    x = _Loader(np.arange(10.0))
    y = _Loader(np.arange(4.0))
    dims = [DimValues.deferred("x", x), DimValues.deferred("y", y)]
    plan = plan_scan((10, 4), (5, 4), dims, None)
    assert len(list(plan.units())) == 2
    assert (x.reads, y.reads) == (0, 0)
    # a predicate on one reads that one only, and prunes by its values
    plan = plan_scan((10, 4), (5, 4), dims, Cmp("x", ">=", 7.0))
    assert [u.index for u in plan.units()] == [(1, 0)]
    assert (x.reads, y.reads) == (1, 0)


def test_a_failed_read_is_raised_at_each_use_until_one_succeeds() -> None:
    calls = []

    def flaky() -> tuple[np.ndarray, np.ndarray | None]:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the store went away")
        return np.arange(3), None

    dv = DimValues.deferred("x", flaky)
    with pytest.raises(OSError, match="went away"):
        _ = dv.values
    assert not dv.loaded
    np.testing.assert_array_equal(dv.values, np.arange(3))
    assert len(calls) == 2
