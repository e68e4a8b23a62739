"""S3 credentials from DuckDB's secrets (`CREATE SECRET (TYPE s3, ...)`).

S3 secrets need DuckDB's httpfs extension. Here it can only be loaded on DuckDB 1.5.x from the
`duckdb-extension-httpfs` wheel of the same version (DuckDB cannot download extensions on
these machines, and there is no wheel for 2.x). Each test asserts what a user of the DuckDB
that runs gets: with httpfs, `s3://` reads use the secret; without it, `CREATE SECRET` fails
with DuckDB's own error and zarrsql reads through fsspec. CI's 1.5 run sets
`ZARRSQL_EXPECT_HTTPFS=1`, so a missing wheel there fails instead of taking the second branch.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

import zarrsql
from tests.remote.conftest import BUCKET
from zarrsql.engine.secrets import DuckDBStore, SecretOpener

ERA5 = "fixtures/era5_like.zarr"
ERA5_TABLE = "table_name := 'time_latitude_longitude'"


def _httpfs_path() -> Path | None:
    """The httpfs extension file built for this DuckDB, if its wheel is installed."""
    try:
        import duckdb_extension_httpfs
    except ImportError:
        return None
    path = (
        Path(duckdb_extension_httpfs.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / "httpfs.duckdb_extension"
    )
    return path if path.is_file() else None


HTTPFS = _httpfs_path()
if os.environ.get("ZARRSQL_EXPECT_HTTPFS") == "1":
    assert HTTPFS is not None, f"ZARRSQL_EXPECT_HTTPFS=1 but no httpfs wheel for DuckDB {duckdb.__version__}"


def _connect() -> zarrsql.Connection:
    # no downloads: this machine cannot reach DuckDB's extension server, so fail fast
    return zarrsql.connect(config={"autoinstall_known_extensions": False})


def _secret_sql(endpoint: str) -> str:
    host = endpoint.removeprefix("http://")
    return (
        f"CREATE SECRET fixtures (TYPE s3, KEY_ID 'fixture', SECRET 'fixture', ENDPOINT '{host}', "
        "URL_STYLE 'path', USE_SSL false, REGION 'us-east-1', SCOPE 's3://" + BUCKET + "')"
    )


def test_s3_secret_supplies_credentials_where_duckdb_can_hold_one(s3, served_root, fresh_cache):
    url = f"s3://{BUCKET}/{ERA5}"
    with _connect() as con:
        if HTTPFS is None:
            # DuckDB 2.x here (or 1.5 without the wheel): DuckDB itself refuses the secret, and
            # zarrsql has no secret to use; fsspec with storage_options is the way (next test).
            with pytest.raises(duckdb.Error, match="httpfs|s3"):
                con.execute(_secret_sql(s3))
            assert SecretOpener(con.duckdb)(url, {}) is None
            return
        con.execute(f"LOAD '{HTTPFS}'")
        con.execute(_secret_sql(s3))
        # no storage_options: the endpoint is known only to the secret, so a read that
        # succeeds went through DuckDB
        remote = con.sql(f"SELECT * FROM read_zarr('{url}', {ERA5_TABLE})").to_arrow_table()
        local = con.sql(f"SELECT * FROM read_zarr('{served_root / ERA5}', {ERA5_TABLE})").to_arrow_table()
        assert remote.num_rows > 0
        assert remote.equals(local)
        walked = con.sql(
            f"SELECT table_name FROM read_zarr_tables('s3://{BUCKET}/plain/era5_like.zarr') ORDER BY 1"
        ).fetchall()
        assert walked == [("time_latitude_longitude",), ("time_level_latitude_longitude",)]
        opener = SecretOpener(con.duckdb)
        assert isinstance(opener(url, {}), DuckDBStore)
        assert opener(url, {"endpoint_url": s3}) is None  # storage_options given: fsspec reads
        assert opener(f"s3://elsewhere/{ERA5}", {}) is None  # outside the secret's scope


def test_without_a_secret_s3_reads_go_through_fsspec(s3, fresh_cache):
    url = f"s3://{BUCKET}/{ERA5}"
    with _connect() as con:
        assert SecretOpener(con.duckdb)(url, {}) is None
        rows = con.sql(
            f"SELECT count(*) FROM read_zarr('{url}', {ERA5_TABLE}, storage_options := MAP {{'endpoint_url': '{s3}'}})"
        ).fetchall()
        assert rows[0][0] > 0
