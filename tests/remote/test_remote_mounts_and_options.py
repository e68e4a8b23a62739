"""Mounts of remote stores with storage_options, and storage options checked when a store opens.

A mount's views read with the options given to the mount (endpoint, credentials), which never
appear in any SQL text DuckDB shows (`duckdb_views()`, `read_zarr_views`); a connection that
did not mount the store cannot use them. Misspelt S3 options, a bare `s3://` and a GCS `token`
that is neither a method, a key file nor a usable token are refused by name when the store
opens, without repeating a secret. Servers: moto's S3 server, fake-gcs-server behind a logging
proxy, Azurite (skipped when not installed). Expected values come from xarray reading the same
remote store.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.remote.conftest import BUCKET
from tests.remote.test_azure import CONTAINER, azurite  # noqa: F401 - a fixture
from tests.remote.test_gcs import BUCKET as GCS_BUCKET
from tests.remote.test_gcs import _no_google_credentials, _proxy, gcs, proxy  # noqa: F401 - fixtures
from zarrsql.errors import ParameterError

ERA5 = "fixtures/era5_like.zarr"
TABLE = "time_latitude_longitude"
#: Credentials moto accepts (its bucket is public) that must never show in any SQL text.
KEY, SECRET = "AKIAMOUNTKEY0123", "mount-secret-value-0123456789"


def _map(options: dict[str, str]) -> str:
    return "MAP {" + ", ".join(f"'{k}': '{v}'" for k, v in options.items()) + "}"


def _oracle(url: str, options: dict[str, str]) -> tuple[int, float]:
    """Rows and the sum of 2m_temperature of the ERA5-like store, as xarray reads it remotely."""
    ds = xr.open_zarr(url, storage_options=options, consolidated=True, mask_and_scale=True)
    values = ds["2m_temperature"].values
    return int(values.size), float(np.nansum(values.astype("float64")))


@pytest.fixture
def s3_options(s3: str, fresh_cache: None) -> dict[str, str]:
    return {"endpoint_url": s3, "key": KEY, "secret": SECRET}


@pytest.fixture
def expected(s3: str) -> tuple[int, float]:
    return _oracle(f"s3://{BUCKET}/{ERA5}", {"endpoint_url": s3, "anon": True})  # type: ignore[dict-item]


def _view_sql(con: zarrsql.Connection, database: str) -> list[str]:
    rows = con.sql(f"SELECT sql FROM duckdb_views() WHERE database_name = '{database}' AND NOT internal").fetchall()
    return [sql for (sql,) in rows]


def _count_and_sum(con: zarrsql.Connection, view: str) -> tuple[int, float]:
    (n, total) = con.sql(f'SELECT count(*), sum("2m_temperature") FROM {view}').fetchall()[0]
    return int(n), float(total)


# ---------------------------------------------------------------------------------- mounts
def test_python_mount_of_s3_store_reads_with_its_storage_options(con, s3_options, expected):
    zarrsql.mount(con, f"s3://{BUCKET}/{ERA5}", "m1", storage_options=s3_options)
    n, total = _count_and_sum(con, f"m1.{TABLE}")
    assert n == expected[0]
    assert total == pytest.approx(expected[1], rel=1e-6)


def test_sql_zarr_mount_of_s3_store_reads_with_its_storage_options(con, s3_options, expected):
    con.sql(f"SELECT * FROM zarr_mount('s3://{BUCKET}/{ERA5}', 'm2', storage_options := {_map(s3_options)})").fetchall()
    n, total = _count_and_sum(con, f"m2.{TABLE}")
    assert n == expected[0]
    assert total == pytest.approx(expected[1], rel=1e-6)


def test_mounted_views_hold_no_storage_option_in_their_sql(con, s3_options):
    zarrsql.mount(con, f"s3://{BUCKET}/{ERA5}", "m3", storage_options=s3_options)
    shown = _view_sql(con, "m3")
    assert shown
    for sql in shown:
        for value in s3_options.values():
            assert value not in sql
    assert KEY not in repr(con.sql("SELECT * FROM zarr_mounts()").fetchall())


def test_zarr_mounts_lists_a_mount_made_with_storage_options(con, s3_options, served_root: Path):
    ERA5_LOCAL = served_root / ERA5  # noqa: N806 - the same store, read locally for its table names
    zarrsql.mount(con, f"s3://{BUCKET}/{ERA5}", "m4", storage_options=s3_options)
    rows = con.sql("SELECT store, table_name FROM zarr_mounts('m4')").fetchall()
    tables = con.sql(f"SELECT table_name FROM read_zarr_tables('{ERA5_LOCAL}')").fetchall()
    assert sorted(rows) == sorted((f"s3://{BUCKET}/{ERA5}", t) for (t,) in tables)


def test_read_zarr_views_statements_read_the_store_on_this_connection(con, s3_options, expected):
    rows = con.sql(
        f"SELECT sql FROM read_zarr_views('s3://{BUCKET}/{ERA5}', 'm5', storage_options := {_map(s3_options)})"
    ).fetchall()
    for (sql,) in rows:
        for value in s3_options.values():
            assert value not in sql
        con.execute(sql)
    n, total = _count_and_sum(con, f"m5.{TABLE}")
    assert n == expected[0]
    assert total == pytest.approx(expected[1], rel=1e-6)


def test_a_cursor_reads_the_views_its_connection_mounted(con, s3_options, expected):
    zarrsql.mount(con, f"s3://{BUCKET}/{ERA5}", "m6", storage_options=s3_options)
    cursor = con.cursor()
    n, _ = _count_and_sum(cursor, f"m6.{TABLE}")
    assert n == expected[0]


def test_another_connection_cannot_use_a_mounts_storage_options(con, s3_options):
    zarrsql.mount(con, f"s3://{BUCKET}/{ERA5}", "m7", storage_options=s3_options)
    (sql,) = [s for s in _view_sql(con, "m7") if f"table_name := '{TABLE}'" in s]
    select = sql[sql.index("SELECT") :].rstrip(";")
    other = zarrsql.connect()
    try:
        with pytest.raises(zarrsql.ZarrSQLError) as info:
            other.sql(select).fetchall()
    finally:
        other.close()
    message = str(info.value)
    assert "mount the store again" in message
    for value in s3_options.values():
        assert value not in message


def test_azure_mount_with_a_connection_string_keeps_it_out_of_the_views(con, azurite):  # noqa: F811
    url = f"az://{CONTAINER}/{ERA5}"
    secret = azurite.connection_string()
    zarrsql.mount(con, url, "az1", storage_options={"connection_string": secret})
    assert all(secret not in sql and "AccountKey" not in sql for sql in _view_sql(con, "az1"))
    n, total = _count_and_sum(con, f"az1.{TABLE}")
    assert (n, total) == pytest.approx(_oracle(url, {"connection_string": secret}), rel=1e-6)


# ---------------------------------------------------------------------------- S3 options
@pytest.mark.parametrize(
    ("option", "spelling"),
    [
        ("region", "region_name"),
        ("region_name", "client_kwargs"),
        ("endpoint", "'endpoint_url'"),
        ("aws_access_key_id", "'key'"),
        ("aws_secret_access_key", "'secret'"),
    ],
)
def test_a_misspelt_s3_option_is_refused_by_name_before_any_request(con, s3, option, spelling):
    options = {"endpoint_url": s3, "retries": "0", option: "value-that-may-be-secret"}
    with zarrsql.trace() as t, pytest.raises(ParameterError) as info:
        con.sql(
            f"SELECT count(*) FROM read_zarr('s3://{BUCKET}/{ERA5}', storage_options := {_map(options)})"
        ).fetchall()
    message = str(info.value)
    assert f"'{option}'" in message
    assert spelling in message
    assert "value-that-may-be-secret" not in message
    assert t.requests == 0


def test_a_nested_s3_option_that_is_not_an_object_is_refused(con, s3):
    options = {"endpoint_url": s3, "config_kwargs": "[1, 2]"}
    with pytest.raises(ParameterError, match="'config_kwargs' must be a JSON object"):
        con.sql(
            f"SELECT count(*) FROM read_zarr('s3://{BUCKET}/{ERA5}', storage_options := {_map(options)})"
        ).fetchall()


@pytest.mark.parametrize("url", ["s3://", "s3:///", "gs://"])
def test_a_url_without_a_bucket_is_refused_by_name(con, url):
    with pytest.raises(ParameterError, match="names no bucket"):
        con.sql(f"SELECT count(*) FROM read_zarr('{url}', storage_options := MAP {{'anon': 'true'}})").fetchall()


# ---------------------------------------------------------------------------- GCS token
def test_a_raw_gcs_access_token_is_sent_as_a_bearer_token(con, proxy, served_root: Path):  # noqa: F811
    token = "ya29.raw-access-token-for-test"
    options = {"endpoint_url": proxy.endpoint, "token": token}
    got = con.sql(
        f"SELECT count(*) FROM read_zarr('gs://{GCS_BUCKET}/{ERA5}', table_name := '{TABLE}', "
        f"storage_options := {_map(options)})"
    ).fetchall()
    size = xr.open_zarr(served_root / ERA5, consolidated=True)["2m_temperature"].size
    assert got == [(size,)]
    assert set(proxy.authorization) == {f"Bearer {token}"}


def test_a_failing_gcs_token_error_hides_the_token(con):
    token = "ya29.SECRET-ACCESS-TOKEN"
    options = {"endpoint_url": "http://127.0.0.1:9", "token": token, "retries": "0", "timeout": "2"}
    with pytest.raises(zarrsql.ZarrSQLError) as info:
        con.sql(f"SELECT count(*) FROM read_zarr('gs://bucket/x.zarr', storage_options := {_map(options)})").fetchall()
    assert token not in str(info.value)


def test_a_gcs_key_file_that_does_not_exist_is_refused_by_name(con, tmp_path: Path):
    missing = tmp_path / "kye.json"
    options = {"endpoint_url": "http://127.0.0.1:9", "token": str(missing)}
    with zarrsql.trace() as t, pytest.raises(ParameterError) as info:
        con.sql(f"SELECT count(*) FROM read_zarr('gs://bucket/x.zarr', storage_options := {_map(options)})").fetchall()
    message = str(info.value)
    assert "'token'" in message
    assert "no such file" in message
    assert str(missing) not in message
    assert t.requests == 0


def test_a_mistyped_gcs_token_method_is_refused_with_its_spelling(con):
    options = {"endpoint_url": "http://127.0.0.1:9", "token": "google-defualt"}
    with pytest.raises(ParameterError, match="did you mean 'google_default'"):
        con.sql(f"SELECT count(*) FROM read_zarr('gs://bucket/x.zarr', storage_options := {_map(options)})").fetchall()


def test_a_misspelt_s3_option_of_a_write_is_refused_before_anything_is_written(s3, tmp_path: Path):
    import s3fs

    options = {"endpoint_url": s3, "key": KEY, "secret": SECRET, "region": "eu-west-1"}
    with pytest.raises(ParameterError, match="'region' is not an option of s3:// stores"):
        zarrsql.to_zarr(
            "SELECT range AS x, range * 2 AS v FROM range(4)",
            f"s3://{BUCKET}/written.zarr",
            dims=["x"],
            storage_options=options,
        )
    listing = s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=s3, skip_instance_cache=True)
    assert not listing.exists(f"{BUCKET}/written.zarr")
