"""A repository on the local S3 API server (moto), read through Icechunk's own S3 client."""

from __future__ import annotations

import pytest

import zarrsql
from icechunk_fixtures import frame
from oracles import assert_frames_equal
from zarrsql.errors import ParameterError

KEYS = ["time", "lat", "lon"]


def _repo(url: str, options: dict[str, str]):
    import icechunk

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    storage = icechunk.s3_storage(
        bucket=bucket,
        prefix=prefix,
        endpoint_url=options["endpoint_url"],
        region="us-east-1",
        allow_http=True,
        force_path_style=True,
        access_key_id=options["key"],
        secret_access_key=options["secret"],
    )
    return icechunk.Repository.open(storage)


@pytest.mark.parametrize(
    ("params", "version"),
    [({}, {"branch": "main"}), ({"tag": "v1"}, {"tag": "v1"}), ({"branch": "dev"}, {"branch": "dev"})],
)
def test_each_version_on_s3_equals_xarray(s3_repo, params, version):
    import xarray as xr

    url, options = s3_repo
    expected = frame(xr.open_zarr(_repo(url, options).readonly_session(**version).store, consolidated=False))
    actual = zarrsql.read_zarr(url, format="icechunk", storage_options=options, **params).df()
    assert_frames_equal(actual, expected, sort_by=KEYS, check_column_order=False)


def test_sql_with_client_kwargs_and_trace(s3_repo):
    url, options = s3_repo
    client = '{"endpoint_url": "' + options["endpoint_url"] + '"}'
    sql = (
        f"SELECT count(t2m), count(DISTINCT time) FROM read_zarr('{url}', format := 'icechunk', tag := 'v1', "
        f"storage_options := MAP {{'client_kwargs': '{client}', 'key': 'fixture', 'secret': 'fixture', "
        "'region': 'us-east-1'})"
    )
    with zarrsql.trace() as t:
        assert zarrsql.sql(sql).fetchall() == [(24 * 10 * 12, 24)]
    assert t.requests >= t.chunks_decoded > 0
    assert t.bytes_read > 0


def test_unknown_branch_on_s3_names_the_branches(s3_repo):
    url, options = s3_repo
    with pytest.raises(ParameterError, match=r"no branch 'nope'.*branches: \['dev', 'main'\]"):
        zarrsql.read_zarr(url, format="icechunk", branch="nope", storage_options=options).fetchall()


def test_a_storage_option_icechunk_does_not_take_is_named(s3_repo):
    url, options = s3_repo
    with pytest.raises(ParameterError, match=r"\['use_ssl'\] are not understood for an Icechunk repository on S3"):
        zarrsql.read_zarr(url, format="icechunk", storage_options={**options, "use_ssl": "false"}).fetchall()


def test_a_missing_repository_on_s3(s3_repo):
    url, options = s3_repo
    with pytest.raises(zarrsql.ZarrSQLError, match="no Icechunk repository at 's3://icechunk-repos/nothing'"):
        zarrsql.read_zarr("s3://icechunk-repos/nothing", format="icechunk", storage_options=options).fetchall()


def test_gcs_options_icechunk_does_not_take_are_named():
    with pytest.raises(ParameterError, match=r"\['bogus'\] are not all understood by Icechunk's gcs_storage\(\)"):
        zarrsql.read_zarr("gs://bucket/repo", format="icechunk", storage_options={"bogus": "1"}).fetchall()


def test_azure_needs_an_account_name():
    with pytest.raises(ParameterError, match="needs storage_options := MAP {'account_name'"):
        zarrsql.read_zarr("az://container/repo", format="icechunk").fetchall()
