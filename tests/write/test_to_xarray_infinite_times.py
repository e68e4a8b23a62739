"""`to_xarray` of a time 'infinity' or '-infinity' (session 25, leftover of session 24).

datetime64 has no infinite time. DuckDB's TIMESTAMP_NS 'infinity' is its largest count,
which as datetime64[ns] is a real date (2262-04-11; '-infinity': 1677-09-21): `to_xarray`
returned that date, silently. Both Zarr layouts refuse infinite times; `to_xarray` now does
too, as a dimension or as a variable, naming the column and a fix that works. Other units'
infinities (and DATE's) were already refused, as beyond datetime64[ns]'s years.

Oracles: DuckDB's `isfinite` says which values are infinite; pandas (`.df()` of the same
rows) gives the finite values `to_xarray` must return once the fix is followed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import zarrsql

TIME_TYPES = ("TIMESTAMP_NS", "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMPTZ", "DATE")


@pytest.fixture
def con():
    with zarrsql.connect() as c:
        yield c


def _rows(sql_type: str, value: str) -> str:
    """Two rows: a time `value` ('infinity' or '-infinity') and a finite one, with v = 1, 2."""
    return f"SELECT * FROM (VALUES ({sql_type} '{value}', 1), ({sql_type} '2020-01-02', 2)) r(t, v)"


@pytest.mark.parametrize("value", ["infinity", "-infinity"])
@pytest.mark.parametrize("sql_type", TIME_TYPES)
@pytest.mark.parametrize("as_dim", [True, False], ids=["dimension", "variable"])
def test_an_infinite_time_is_refused_naming_the_column(con, sql_type, value, as_dim) -> None:
    query = _rows(sql_type, value)
    finite = [row[0] for row in con.sql(f"SELECT isfinite(t) FROM ({query}) ORDER BY v").fetchall()]
    assert finite == [False, True]  # the oracle: DuckDB holds a real infinity in the first row
    with pytest.raises(zarrsql.WriteError, match="'t'"):
        zarrsql.to_xarray(con.sql(query), dims=["t"] if as_dim else ["v"])


@pytest.mark.parametrize("value", ["infinity", "-infinity"])
@pytest.mark.parametrize("as_dim", [True, False], ids=["dimension", "variable"])
def test_a_nanosecond_infinity_is_not_returned_as_a_date(con, value, as_dim) -> None:
    """The defect: the value came back as 2262-04-11T23:47:16.854775807 (or 1677-09-21)."""
    query = _rows("TIMESTAMP_NS", value)
    with pytest.raises(zarrsql.WriteError, match=f"the time '{value}'") as caught:
        zarrsql.to_xarray(con.sql(query), dims=["t"] if as_dim else ["v"])
    message = str(caught.value)
    assert 'WHERE isfinite("t")' in message
    assert ("dimension 't'" if as_dim else "column 't'") in message


def test_the_suggested_fixes_work(con) -> None:
    query = _rows("TIMESTAMP_NS", "infinity")
    with pytest.raises(zarrsql.WriteError) as caught:
        zarrsql.to_xarray(con.sql(query), dims=["v"])
    fix = 'CASE WHEN isfinite("t") THEN "t" END AS "t"'
    assert fix in str(caught.value)
    # the variable made NULL: NaT where it was infinite, the finite time as pandas reads it
    nulled = f"SELECT {fix}, v FROM ({query})"
    expected = con.sql(nulled + " ORDER BY v").df()
    ds = zarrsql.to_xarray(con.sql(nulled), dims=["v"])
    got = ds.t.sel(v=expected.v.to_numpy()).values
    assert pd.isna(expected.t[0])
    assert np.isnat(got[0])
    assert got[1] == expected.t[1].to_datetime64()
    # the rows filtered out, for a dimension: only the finite time is left
    kept = f"SELECT * FROM ({query}) WHERE isfinite(t)"
    ds = zarrsql.to_xarray(con.sql(kept), dims=["t"])
    np.testing.assert_array_equal(ds.t.values, con.sql(kept).df().t.to_numpy())


def test_the_largest_finite_nanosecond_time_is_kept(con) -> None:
    """Only DuckDB's infinity code is refused: the last representable finite instant is not."""
    query = "SELECT TIMESTAMP_NS '2262-04-11 23:47:16.854775806' AS t, 1 AS v"
    ds = zarrsql.to_xarray(con.sql(query), dims=["v"])
    assert ds.t.values[0] == con.sql(query).df().t[0].to_datetime64()
