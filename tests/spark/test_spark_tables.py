"""Every table of the project's fixtures read through Spark equals the DuckDB read.

The DuckDB side is zarrsql's SQL path (`read_zarr`), the reference the issue names: the same
columns in the same order and the same rows, NULLs included. Column types are checked
against the Spark type of each DuckDB type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from compare import duck_rows, spark_rows
from tests.table_convention.stores import write_stores

import anndata as ad
import zarrsql

pytestmark = pytest.mark.spark

#: DuckDB's type names → the Spark type zarrsql documents for them.
SPARK_OF_DUCKDB = {
    "BOOLEAN": "boolean",
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "UTINYINT": "smallint",
    "USMALLINT": "int",
    "UINTEGER": "bigint",
    "UBIGINT": "decimal(20,0)",
    "FLOAT": "float",
    "DOUBLE": "double",
    "VARCHAR": "string",
    "TIMESTAMP": "timestamp_ntz",
    "INTERVAL": "interval day to second",
    "BLOB": "binary",
}

XARRAY_STORES = [
    "air_temperature.zarr",
    "era5_like.zarr",
    "datatree.zarr",
    "dtypes.zarr",
    "v2/dtypes.zarr",
    "missing.zarr",
    "times.zarr",
    "labels.zarr",
    "cf_roles.zarr",
]


def _tables(store: str) -> list[dict[str, str]]:
    """Each table of a store as the options that select it (a named table of its group)."""
    out = []
    for group, _, name, *_ in zarrsql.read_zarr_tables(store).fetchall():
        if name is not None:
            out.append({"group_path": group, "table_name": name})
    return out


def _assert_same(spark: Any, store: str, options: dict[str, str]) -> None:
    duck = zarrsql.read_zarr(store, **options)
    df = spark.read.format("zarr").options(**options).load(store)
    assert df.columns == duck.columns
    expected_types = [SPARK_OF_DUCKDB.get(str(t)) for t in duck.types]
    got_types = [f.dataType.simpleString() for f in df.schema.fields]
    for name, want, got in zip(duck.columns, expected_types, got_types, strict=True):
        if want is not None:  # ENUM, lists and structs: checked by their values below
            assert got == want, name
    assert spark_rows(df) == duck_rows(duck), (store, options)


@pytest.fixture(scope="module")
def cases(fixture_path: Any) -> list[tuple[str, dict[str, str]]]:
    out = []
    for name in XARRAY_STORES:
        store = fixture_path(name)
        out.extend((store, t) for t in _tables(store))
    return out


def test_every_xarray_fixture_table_equals_duckdb(spark: Any, cases: list[tuple[str, dict[str, str]]]) -> None:
    assert len(cases) >= 15  # the stores above hold this many named tables
    for store, options in cases:
        _assert_same(spark, store, options)


def test_types_follow_the_documented_mapping(spark: Any, fixture_path: Any) -> None:
    store = fixture_path("dtypes.zarr")
    types = {f.name: f.dataType.simpleString() for f in spark.read.format("zarr").load(store).schema.fields}
    assert (types["f32"], types["f64"]) == ("float", "double")
    assert (types["u8"], types["u64"], types["i8"]) == ("smallint", "decimal(20,0)", "tinyint")
    assert types["dt"] == "timestamp_ntz"


def test_values_match_xarray_for_cf_time(spark: Any, fixture_path: Any) -> None:
    """An oracle outside zarrsql: xarray's decoding of the same store."""
    import xarray as xr

    store = fixture_path("air_temperature.zarr")
    ds = xr.open_zarr(store)
    df = spark.read.format("zarr").load(store).filter("lat = 75.0 AND lon = 200.0").orderBy("time")
    got = [(r.time, r.air) for r in df.collect()]
    series = ds["air"].sel(lat=75.0, lon=200.0)
    # nan_as_null (the default): xarray's NaN is SQL NULL
    want = [
        (pd.Timestamp(t).to_pydatetime(), None if np.isnan(v) else float(v))
        for t, v in zip(series.time.values, series.values, strict=True)
    ]
    assert len(want) == 120
    assert got == want


def _write_anndata(path: Path) -> None:
    rng = np.random.default_rng(7)
    x = sp.random(30, 12, density=0.2, format="csr", random_state=rng, dtype=np.float32)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(rng.choice(["B", "T", "NK"], 30)),
            "n_counts": rng.integers(0, 1000, 30),
        },
        index=[f"c{i:02d}" for i in range(30)],
    )
    var = pd.DataFrame({"mean": rng.random(12)}, index=[f"g{i:02d}" for i in range(12)])
    adata = ad.AnnData(X=x, obs=obs, var=var)
    adata.layers["dense"] = rng.random((30, 12))
    with ad.settings.override(zarr_write_format=3, auto_shard_zarr_v3=False):
        adata.write_zarr(path)


def test_anndata_tables_equal_duckdb(spark: Any, tmp_path: Path) -> None:
    store = str(tmp_path / "small.h5ad.zarr")
    _write_anndata(Path(store))
    tables = _tables(store)
    assert {t["table_name"] for t in tables} >= {"obs", "var"}
    for options in tables:
        _assert_same(spark, store, options)


def test_table_convention_tables_equal_duckdb(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    stores = write_stores(tmp_path_factory.mktemp("spark_table_convention"))
    for key in ("v3/examples.zarr", "v3/sites.zarr", "v2/plots.zarr"):
        store = str(stores[key])
        tables = _tables(store)
        assert tables, key
        for options in tables:
            _assert_same(spark, store, options)


def test_options_convert_like_sql_parameters(spark: Any, fixture_path: Any) -> None:
    """dims as a comma list, bounds as JSON, a boolean flag: the same rows as read_zarr."""
    store = fixture_path("era5_like.zarr")
    bounds = [["latitude", "40", "60"]]
    duck = zarrsql.read_zarr(store, dims=["time", "latitude", "longitude"], bounds=bounds, decode_times=False)
    df = (
        spark.read.format("zarr")
        .option("dims", "time, latitude, longitude")
        .option("bounds", json.dumps(bounds))
        .option("decode_times", "false")
        .load(store)
    )
    assert df.columns == duck.columns
    assert spark_rows(df) == duck_rows(duck)
