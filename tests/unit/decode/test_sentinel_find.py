"""`Sentinel.find`: None exactly when no cell is missing, else the mask numpy's own
comparisons give (isnan, ==), whatever the chunk holds."""

from __future__ import annotations

import numpy as np
import pytest

from zarrsql.decode.sentinel import Sentinel, has_nan


def _expected(raw: np.ndarray, sentinel: Sentinel) -> np.ndarray:
    hit = np.isnan(raw) if sentinel.is_nan else np.zeros(raw.shape, bool)
    for v in sentinel.values:
        hit |= raw == v
    return hit


CHUNKS = {
    "plain": np.linspace(-5, 5, 1000, dtype=np.float32),
    "nan_last": np.append(np.ones(999, np.float32), np.nan),
    "nan_first": np.append(np.nan, np.ones(999)),
    "infinities": np.array([np.inf, -np.inf, 1.0, 0.0, -0.0], np.float32),
    "all_nan": np.full(17, np.nan, np.float64),
    "empty": np.zeros(0, np.float32),
    "with_fill": np.array([1.0, -9999.0, np.nan, 3.0], np.float32),
    "2d": np.where(np.eye(30, dtype=bool), np.nan, 2.0).astype(np.float32),
}


@pytest.mark.parametrize("name", CHUNKS)
@pytest.mark.parametrize("sentinel", [Sentinel((), True), Sentinel((-9999.0,), True), Sentinel((-9999.0,), False)])
def test_find_agrees_with_numpy(name: str, sentinel: Sentinel) -> None:
    raw = CHUNKS[name]
    want = _expected(raw, sentinel)
    got = sentinel.find(raw)
    if want.any():
        assert got is not None and got.shape == raw.shape and (got == want).all()
    else:
        assert got is None or not got.any()
    assert (sentinel.mask(raw) == want).all()
    assert has_nan(raw) == bool(np.isnan(raw).any())


def test_integers_never_have_nan() -> None:
    assert not has_nan(np.arange(10))
    assert Sentinel((3,), False).find(np.arange(5)).tolist() == [False, False, False, True, False]
