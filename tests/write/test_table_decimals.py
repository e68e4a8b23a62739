"""The table layout stores a DECIMAL as DuckDB's own `::DOUBLE` of each value, as the grid
layout and `to_xarray` do (docs/writing.md). It stored pyarrow's cast, which differs in the
last digit: 3.300 became 3.3000000000000003.

The oracle is DuckDB itself (the plain `duckdb` module, not zarrsql) casting the same
values: every stored double must equal it bit for bit, over many precisions and scales
(DECIMAL(38, x) included, where DuckDB 1.5 and 2.0 round differently), negative values and
NULLs, in several blocks, for a new table and an append.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.compute as pc
import pytest
import zarr

import zarrsql
from zarrsql.errors import UnwritableColumnError

#: (precision, scale) of the DECIMAL columns tried: the four DuckDB storage widths (int16,
#: int32, int64, int128) and scales from 0 to nearly the precision.
TYPES = [(4, 1), (9, 2), (18, 0), (18, 3), (18, 9), (18, 17), (30, 5), (38, 0), (38, 10), (38, 30), (38, 37)]
ROWS = 300


def _candidates(precision: int, scale: int, seed: int) -> list[str]:
    """Decimal texts of the type, of at most 15 significant digits and below 10**15, negative
    ones, zero and NULLs among them."""
    rng = random.Random(seed)
    out = ["NULL", "0", "-0"]
    while len(out) < 4 * ROWS:
        digits = rng.randint(1, min(15, precision))
        unscaled = rng.randint(1, 10**digits - 1) * rng.choice([1, -1])
        unscaled *= 10 ** rng.randint(0, max(0, min(precision, scale + 15) - digits))  # a wider magnitude
        if rng.random() < 0.1:
            out.append("NULL")
            continue
        sign = "-" if unscaled < 0 else ""
        text = str(abs(unscaled)).rjust(scale + 1, "0")
        out.append(f"{sign}{text[: len(text) - scale]}.{text[len(text) - scale :]}" if scale else f"{sign}{text}")
    return out


def _literals(precision: int, scale: int, seed: int) -> list[str]:
    """`ROWS` of the candidates: those whose double casts back to them (as the writer checks,
    with Arrow's cast back; the others are refused, tested below)."""
    candidates = _candidates(precision, scale, seed)
    with duckdb.connect() as oracle:
        table = oracle.sql(_values(candidates, precision, scale, 0)).to_arrow_table().sort_by("id")
        doubles = oracle.sql(f"SELECT CAST(d AS DOUBLE) AS x FROM ({_values(candidates, precision, scale, 0)}) "
                             "ORDER BY id").to_arrow_table()["x"]  # fmt: skip
    back = pc.cast(doubles, table["d"].type, safe=False).to_pylist()
    kept = [c for c, b, d in zip(candidates, back, table["d"].to_pylist(), strict=True) if b == d]
    assert len(kept) >= ROWS  # most do: the test covers what it says
    return kept[:ROWS]


def _values(literals: list[str], precision: int, scale: int, first_id: int) -> str:
    rows = ", ".join(
        f"({first_id + k}, {v if v == 'NULL' else repr(v)}::DECIMAL({precision}, {scale}))"
        for k, v in enumerate(literals)
    )
    return f"SELECT * FROM (VALUES {rows}) t(id, d)"


def _query(precision: int, scale: int, seed: int, first_id: int = 0) -> str:
    return _values(_literals(precision, scale, seed), precision, scale, first_id)


def _duckdb_doubles(query: str) -> list[float | None]:
    """The oracle: DuckDB's CAST(d AS DOUBLE) of the query's values, in `id` order."""
    with duckdb.connect() as oracle:
        return [row[0] for row in oracle.sql(f"SELECT CAST(d AS DOUBLE) FROM ({query}) ORDER BY id").fetchall()]


def _stored(store: Path, column: str) -> list[float | None]:
    """The column as stored: its `values` array, None where its `mask` is set."""
    node = zarr.open_group(str(store))[column]
    if isinstance(node, zarr.Group):
        values, mask = node["values"][:], node["mask"][:]
    else:
        values, mask = node[:], np.zeros(node.shape, dtype=bool)
    assert values.dtype == np.float64
    return [None if m else float(v) for v, m in zip(values, mask, strict=True)]


def _same_bits(got: list[float | None], expected: list[float | None]) -> bool:
    as_bits = [None if v is None else np.float64(v).tobytes() for v in got]
    return as_bits == [None if v is None else np.float64(v).tobytes() for v in expected]


@pytest.mark.parametrize(("precision", "scale"), TYPES)
def test_table_decimal_is_duckdbs_double(tmp_path: Path, precision: int, scale: int) -> None:
    query = _query(precision, scale, seed=precision * 100 + scale)
    con = zarrsql.connect()
    store = tmp_path / "t.zarr"
    zarrsql.to_zarr(con.sql(query), str(store), layout="table", chunks=64, connection=con)  # five blocks
    expected = _duckdb_doubles(query)
    got = _stored(store, "d")
    assert got == expected
    assert _same_bits(got, expected)  # -0.0 and 0.0 apart too


@pytest.mark.parametrize(("precision", "scale"), [(18, 3), (38, 30)])
def test_table_decimal_append_is_duckdbs_double(tmp_path: Path, precision: int, scale: int) -> None:
    first, second = _query(precision, scale, seed=1), _query(precision, scale, seed=2, first_id=ROWS)
    con = zarrsql.connect()
    store = tmp_path / "t.zarr"
    zarrsql.to_zarr(con.sql(first), str(store), layout="table", chunks=50, connection=con)
    zarrsql.to_zarr(con.sql(second), str(store), layout="table", mode="a", connection=con)
    expected = _duckdb_doubles(f"{first} UNION ALL {second}")
    got = _stored(store, "d")
    assert got == expected
    assert _same_bits(got, expected)


def test_table_decimal_3_300_is_3_3(tmp_path: Path) -> None:
    query = "SELECT range::INT AS id, (range * 1.1)::DECIMAL(18, 3) AS d FROM range(10)"
    con = zarrsql.connect()
    zarrsql.to_zarr(con.sql(query), str(tmp_path / "t.zarr"), layout="table", connection=con)
    assert _stored(tmp_path / "t.zarr", "d") == _duckdb_doubles(query)


def test_table_decimal_a_double_cannot_hold_is_refused_naming_it(tmp_path: Path) -> None:
    con = zarrsql.connect()
    query = "SELECT 1 AS id, 12345678901234567890123::DECIMAL(38, 0) AS d"
    with pytest.raises(UnwritableColumnError, match=r"'d' .*12345678901234567890123.*CAST"):
        zarrsql.to_zarr(con.sql(query), str(tmp_path / "t.zarr"), layout="table", connection=con)
    assert not (tmp_path / "t.zarr").exists()
