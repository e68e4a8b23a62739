"""Bad input surfaces as a Spark error whose text is zarrsql's own message."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.errors import PySparkException

import zarrsql

pytestmark = pytest.mark.spark


def _duck_message(store: str, **params: Any) -> str:
    with pytest.raises(zarrsql.ZarrSQLError) as info:
        zarrsql.read_zarr(store, **params).fetchall()
    return str(info.value)


@pytest.mark.parametrize(
    ("name", "options", "params"),
    [
        ("era5_like.zarr", {}, {}),  # several tables, none selected
        ("era5_like.zarr", {"table_name": "nope"}, {"table_name": "nope"}),
        ("era5_like.zarr", {"table_name": "time_latitude_longitude", "decode_times": "yes"}, None),
        ("air_temperature.zarr", {"bounds": '[["lat", "50", "30"]]'}, {"bounds": [["lat", "50", "30"]]}),
    ],
)
def test_errors_carry_zarrsql_messages(
    spark: Any, fixture_path: Any, name: str, options: dict[str, str], params: dict[str, Any] | None
) -> None:
    store = fixture_path(name)
    # a string where a boolean is meant: SQL cannot pass one, so the core's check is the oracle
    message = 'decode_times := must be true or false, got "yes"' if params is None else _duck_message(store, **params)
    with pytest.raises(PySparkException) as info:
        spark.read.format("zarr").options(**options).load(store).collect()
    assert message in str(info.value)


def test_a_missing_store_is_zarrsqls_error(spark: Any, tmp_path: Any) -> None:
    store = str(tmp_path / "nothing.zarr")
    message = _duck_message(store)
    with pytest.raises(PySparkException) as info:
        spark.read.format("zarr").load(store).collect()
    assert message in str(info.value)


def test_an_unknown_option_is_refused(spark: Any, fixture_path: Any) -> None:
    with pytest.raises(PySparkException, match="unknown option 'tabel_name'"):
        spark.read.format("zarr").option("tabel_name", "x").load(fixture_path("air_temperature.zarr")).collect()
