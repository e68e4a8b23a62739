"""`--storage-option KEY=VALUE` on the command line: `tables`, `metadata` and `query` of a
store in a private bucket (moto's S3 server on 127.0.0.1) need its endpoint and credentials,
which the SQL would give as `storage_options := MAP {...}`. Values come from xarray reading
the same store through fsspec."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from cli_runner import assert_one_error, run_cli
from tests.remote.conftest import fresh_bucket

BUCKET = "cli-private"
STORE = f"s3://{BUCKET}/air.zarr"


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], xr.Dataset]]:
    """Storage options of a bucket holding `air.zarr` (readable with credentials only), and
    the dataset as xarray reads it back from there."""
    for options in fresh_bucket(BUCKET):
        rng = np.random.default_rng(7)
        air = rng.normal(280, 5, (5, 3, 4))
        air[0, 0, 0] = np.nan  # a missing cell: NULL to zarrsql, skipped by xarray's mean
        ds = xr.Dataset(
            {"air": (("time", "lat", "lon"), air)},
            coords={
                "time": pd.date_range("2021-03-01", periods=5, freq="D"),
                "lat": [50.0, 40.0, 30.0],
                "lon": [0.0, 10.0, 20.0, 30.0],
            },
        )
        ds.to_zarr(STORE, storage_options=dict(options), mode="w")
        read = xr.open_zarr(STORE, storage_options=dict(options)).load()
        yield options, read


def _flags(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--storage-option", f"{key}={value}")]


def test_query_reads_a_private_bucket_with_the_options_given(private) -> None:
    options, ds = private
    out = run_cli(
        "query",
        STORE,
        "SELECT lat, count(air) AS n, avg(air) AS mean FROM time_lat_lon GROUP BY lat ORDER BY lat",
        "--format",
        "csv",
        *_flags(options),
    )
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    expected = ds["air"].mean(dim=["time", "lon"]).sortby("lat")
    counts = ds["air"].count(dim=["time", "lon"]).sortby("lat")
    assert [float(r["lat"]) for r in rows] == expected["lat"].values.tolist()
    assert [int(r["n"]) for r in rows] == counts.values.tolist()
    np.testing.assert_allclose([float(r["mean"]) for r in rows], expected.values, rtol=1e-12)


def test_tables_and_metadata_list_a_private_bucket(private) -> None:
    options, ds = private
    tables = run_cli("tables", STORE, "--format", "json", *_flags(options))
    assert tables.returncode == 0, tables.stderr
    (table,) = [json.loads(line) for line in tables.stdout.splitlines()]
    assert table["table_name"] == "time_lat_lon"
    assert table["shape"] == list(ds["air"].shape)
    metadata = run_cli("metadata", STORE, "--format", "json", *_flags(options))
    assert metadata.returncode == 0, metadata.stderr
    names = {json.loads(line)["name"] for line in metadata.stdout.splitlines()}
    assert names == {"air", "time", "lat", "lon"}


def test_without_the_credentials_the_bucket_is_refused_in_one_message(private) -> None:
    options, _ = private
    out = run_cli("tables", STORE, "--storage-option", f"endpoint_url={options['endpoint_url']}")
    assert_one_error(out, "access denied", "credentials")


@pytest.mark.parametrize("given", ["endpoint_url", "=value", ""])
def test_an_option_without_key_and_value_is_a_usage_error(given: str, tmp_path: Path) -> None:
    out = run_cli("tables", STORE, "--storage-option", given)
    assert out.returncode == 2
    assert "--storage-option" in out.stderr
    assert "KEY=VALUE" in out.stderr
    assert "Traceback" not in out.stderr


def test_serve_mounts_a_private_bucket_with_the_options_given(private, tmp_path: Path) -> None:
    """`serve --mount era=s3://... --storage-option ...`: a Flight SQL client reads the bucket's
    values, and no view the client can list holds the secret key."""
    import subprocess
    import sys

    import adbc_driver_flightsql.dbapi as flightsql

    from cli_runner import cli_env

    options, ds = private
    # moto takes any credentials: distinctive ones, so that their absence below means something
    options = {**options, "key": "AKIAZARRSQLSERVETEST", "secret": "zarrsql/serve/secret/8d1f"}
    command = [sys.executable, "-m", "zarrsql", "serve", "--mount", f"era={STORE}", "--port", "0", "--no-auth"]
    with open(tmp_path / "err", "w") as err:
        process = subprocess.Popen(
            command + _flags(options), stdout=subprocess.PIPE, stderr=err, text=True, env=cli_env()
        )
        try:
            assert process.stdout is not None
            listening = process.stdout.readline()
            assert "read-only; era" in listening, (tmp_path / "err").read_text()
            port = int(listening.split("127.0.0.1:")[1].split()[0])
            with flightsql.connect(f"grpc://127.0.0.1:{port}", autocommit=True) as con, con.cursor() as cur:
                cur.execute("SELECT lon, count(air), avg(air) FROM era.time_lat_lon GROUP BY lon ORDER BY lon")
                rows = cur.fetchall()
                cur.execute("SELECT string_agg(sql, ' ') FROM duckdb_views()")
                (views,) = cur.fetchone()
        finally:
            process.terminate()
            process.wait(10)
            process.stdout.close()
    expected = ds["air"].mean(dim=["time", "lat"]).sortby("lon")
    counts = ds["air"].count(dim=["time", "lat"]).sortby("lon")
    assert [r[0] for r in rows] == expected["lon"].values.tolist()
    assert [r[1] for r in rows] == counts.values.tolist()
    np.testing.assert_allclose([r[2] for r in rows], expected.values, rtol=1e-12)
    assert "time_lat_lon" in views
    assert options["secret"] not in views
    assert options["key"] not in views


def test_serve_refuses_storage_options_with_nothing_to_mount() -> None:
    out = run_cli("serve", "--port", "0", "--storage-option", "anon=false", timeout=60)
    assert_one_error(out, "--storage-option applies to the stores of --mount")
