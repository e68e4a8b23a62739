"""Small rules of the CF value work checked against independent oracles: exact rational
rounding (`fractions`), DuckDB's own casts, and numpy on the stored bytes."""

from __future__ import annotations

from fractions import Fraction

import duckdb
import numpy as np
import pytest

from zarrsql.plan.bounds import nearest_float32


def _exact_nearest_float32(text: str) -> float:
    """The float32 nearest to the decimal, by exact rational distance (ties to even)."""
    target = Fraction(text)
    start = np.float32(float(text))
    candidates = {start, np.nextafter(start, np.float32(np.inf)), np.nextafter(start, np.float32(-np.inf))}
    best = min(candidates, key=lambda c: (abs(Fraction(float(c)) - target), int(np.array(c).view(np.uint32)) & 1))
    return float(best)


def _tie_texts() -> list[str]:
    """Decimals a hair above or below a float32 midpoint that float64 rounds onto it."""
    out = []
    for base in (1.0, 45.1, 1234.5, 3.0e-5):
        low = np.float32(base)
        high = np.nextafter(low, np.float32(np.inf))
        middle = Fraction(float(low)) / 2 + Fraction(float(high)) / 2
        for delta in (Fraction(1, 10**40), -Fraction(1, 10**40)):
            value = middle + delta
            digits = f"{value.numerator * 10**60 // value.denominator}"
            out.append(f"{digits[:-60] or '0'}.{digits[-60:]}")
    return out


@pytest.mark.parametrize("text", ["45.1", "45.3", "0.1", "-0.25", "1e20", "-9.96921e36", "3.4e38", "7", *_tie_texts()])
def test_nearest_float32_is_exactly_rounded(text: str) -> None:
    assert nearest_float32(text) == _exact_nearest_float32(text)


def test_tie_texts_do_land_on_a_float64_midpoint() -> None:
    """The tie cases are real: rounding through float64 alone gets half of them wrong."""
    wrong = [t for t in _tie_texts() if float(np.float32(float(t))) != _exact_nearest_float32(t)]
    assert wrong


@pytest.mark.parametrize("text", ["45.1", "45.3", "0.01", "-12.75", "44.97", "1e-7", "123456.789"])
def test_nearest_float32_matches_duckdb_casts(text: str) -> None:
    as_text, as_literal = duckdb.sql(f"SELECT CAST('{text}' AS FLOAT), CAST({text} AS FLOAT)").fetchall()[0]
    assert nearest_float32(text) == as_text == as_literal


def test_nearest_float32_beyond_range_keeps_the_number() -> None:
    assert nearest_float32("1e39") == 1e39
    assert nearest_float32("-1e39") == -1e39
