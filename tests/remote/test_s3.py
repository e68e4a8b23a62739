"""Stores on S3, against moto's S3 API server on 127.0.0.1, read with s3fs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zarrsql
from tests.remote.conftest import BUCKET, ERA5_TABLE, STORE_CASES, moto_client, start_moto
from zarrsql.errors import StoreReadError
from zarrsql.store import open_store


def _opts(endpoint: str, **more: str) -> str:
    items = {"endpoint_url": endpoint, **more}
    return "storage_options := MAP {" + ", ".join(f"'{k}': '{v}'" for k, v in items.items()) + "}"


def _table(con, location: str, extra: str):
    return con.sql(f"SELECT * FROM read_zarr('{location}', {extra})").to_arrow_table()


@pytest.mark.parametrize(("store", "extra"), STORE_CASES)
def test_s3_read_equals_local_read_anonymously(con, s3, served_root: Path, fresh_cache, store, extra):
    remote = _table(con, f"s3://{BUCKET}/{store}", ", ".join(x for x in (extra, _opts(s3)) if x))
    local = con.sql(f"SELECT * FROM read_zarr('{served_root / store}'{', ' + extra if extra else ''})").to_arrow_table()
    assert remote.num_rows > 0
    assert remote.equals(local)


def test_public_bucket_needs_no_credentials(s3):
    store = open_store(f"s3://{BUCKET}/fixtures/era5_like.zarr", {"endpoint_url": s3})
    assert store.fs_options["anon"] is True  # no credentials anywhere: anonymous requests
    assert store.get("zarr.json") is not None
    with_key = open_store(f"s3://{BUCKET}/fixtures/era5_like.zarr", {"endpoint_url": s3, "key": "k", "secret": "s"})
    assert "anon" not in with_key.fs_options


def test_listing_functions_walk_an_unconsolidated_bucket(con, s3, served_root, fresh_cache):
    remote = con.sql(
        f"SELECT * FROM read_zarr_tables('s3://{BUCKET}/plain/era5_like.zarr', {_opts(s3)}) ORDER BY table_name"
    ).fetchall()
    local = con.sql(
        f"SELECT * FROM read_zarr_tables('{served_root / 'fixtures/era5_like.zarr'}') ORDER BY table_name"
    ).fetchall()
    assert remote == local
    assert len(remote) == 2


def test_second_query_makes_only_validation_requests(con, s3, fresh_cache):
    url = f"s3://{BUCKET}/fixtures/era5_like.zarr"
    query = f"SELECT count(*) FROM read_zarr('{url}', {ERA5_TABLE}, {_opts(s3)})"
    with zarrsql.trace() as first:
        con.sql(query).fetchall()
    with zarrsql.trace() as second:
        con.sql(query).fetchall()
    # count(*) reads no chunk: the first query reads metadata and coordinates (their GETs
    # carry the validators); the second only checks the consolidated document and the
    # coordinate chunks (HEADs), as often as the first validated the tree it had just read
    assert first.bytes_read > 0
    assert 0 < second.requests <= first.requests
    assert second.bytes_read == 0


def test_credentials_in_storage_options_reach_the_server(con, served_root, fresh_cache):
    """A second S3 server that checks signatures: the right key reads, others are refused."""
    from moto import settings

    server, endpoint = start_moto()
    saved = settings.INITIAL_NO_AUTH_ACTION_COUNT
    try:
        iam = moto_client("iam", endpoint, "setup", "setup")
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=json.dumps(policy))
        client = moto_client("s3", endpoint, key["AccessKeyId"], key["SecretAccessKey"])
        client.create_bucket(Bucket="private")
        root = served_root / "fixtures/v2/air_temperature.zarr"
        for f in root.rglob("*"):
            if f.is_file():
                client.put_object(
                    Bucket="private", Key=f"air.zarr/{f.relative_to(root).as_posix()}", Body=f.read_bytes()
                )
        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from here on, every request must be signed
        url = "s3://private/air.zarr"
        rows = con.sql(
            f"SELECT count(*) FROM read_zarr('{url}', "
            f"{_opts(endpoint, key=key['AccessKeyId'], secret=key['SecretAccessKey'])})"
        ).fetchall()
        assert rows[0][0] > 0
        bad = _opts(endpoint, key="AKIAWRONGWRONGWRONG", secret="nope")
        with pytest.raises(StoreReadError) as info:
            con.execute(f"SELECT count(*) FROM read_zarr('{url}', {bad})").fetchall()
        assert "access denied" in str(info.value)
        assert url in str(info.value)
        assert "HTTP 403" in str(info.value)
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = saved
        server.stop()
