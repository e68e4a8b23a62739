"""The Spark source takes every `read_zarr` parameter its docs promise: the store choice
(`format`, `branch`, `tag`, `snapshot`, `as_of`, `virtual_chunks`), `longitude` and
`cell_bounds`. Oracles: xarray on the tagged Icechunk version, numpy for wrapped longitudes,
and DuckDB's read of the same store with the same parameters."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from tests.spark.compare import duck_rows, sorted_rows, spark_rows

import zarrsql
from zarrsql.scan import read_request
from zarrsql.spark.options import spark_read

pytestmark = pytest.mark.spark


def test_every_store_choice_option_converts() -> None:
    read = spark_read(
        {
            "path": "/data/repo",
            "format": "icechunk",
            "branch": "dev",
            "as_of": "2026-01-31T12:00:00+00:00",
            "virtual_chunks": '{"file:///data/nc/": null, "s3://public/": "anonymous"}',
            "longitude": "180",
            "cell_bounds": "true",
        }
    )
    request = read_request(read.args)
    assert request.choice.format == "icechunk"
    assert request.choice.branch == "dev"
    assert request.choice.as_of == datetime.datetime(2026, 1, 31, 12, tzinfo=datetime.UTC)
    assert request.choice.virtual_chunks == (("file:///data/nc/", None), ("s3://public/", "anonymous"))
    assert request.options.longitude == 180
    assert request.options.cell_bounds is True
    tag = read_request(spark_read({"path": "/r", "tag": "v1", "snapshot": "X"}).args).choice
    assert (tag.tag, tag.snapshot) == ("v1", "X")


@pytest.fixture(scope="module")
def tagged_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, xr.Dataset]:
    """A repository whose tag `v1` holds the first commit and main a later, different one."""
    import icechunk

    path = str(tmp_path_factory.mktemp("spark-icechunk") / "repo")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(path))
    first = xr.Dataset({"v": ("x", np.arange(4.0))}, coords={"x": np.arange(4)})
    session = repo.writable_session("main")
    first.to_zarr(session.store, zarr_format=3, consolidated=False)
    repo.create_tag("v1", session.commit("first"))
    session = repo.writable_session("main")
    (first + 100).to_zarr(session.store, mode="r+", consolidated=False)
    session.commit("second")
    return path, first


def test_a_tag_reads_that_version(spark: Any, tagged_repo: tuple[str, xr.Dataset]) -> None:
    path, first = tagged_repo
    df = spark.read.format("zarr").option("format", "icechunk").option("tag", "v1").load(path)
    expected = sorted(zip(first.x.values.tolist(), first.v.values.tolist(), strict=True))
    assert spark_rows(df) == expected
    assert spark_rows(df) == duck_rows(zarrsql.read_zarr(path, tag="v1"))


@pytest.fixture(scope="module")
def eastward_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    """A store whose longitudes run 0..330 degrees east, with CF cell bounds."""
    lon = np.arange(0.0, 360.0, 30.0)
    ds = xr.Dataset(
        {"t": ("lon", np.arange(lon.size, dtype="f8")), "lon_bnds": (("lon", "nv"), np.stack([lon - 15, lon + 15], 1))},
        coords={"lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude", "bounds": "lon_bnds"})},
    )
    path = str(tmp_path_factory.mktemp("spark-lon") / "east.zarr")
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    return path, lon


def test_longitude_180_wraps_as_in_duckdb(spark: Any, eastward_store: tuple[str, np.ndarray]) -> None:
    path, lon = eastward_store
    df = spark.read.format("zarr").option("longitude", "180").option("table_name", "lon").load(path)
    rows = spark_rows(df.select("lon", "t"))
    wrapped = (lon + 180.0) % 360.0 - 180.0
    assert sorted(r[0] for r in rows) == sorted(wrapped.tolist())
    assert spark_rows(df) == duck_rows(zarrsql.read_zarr(path, longitude=180, table_name="lon"))


def test_cell_bounds_and_virtual_chunks_read_as_in_duckdb(spark: Any, eastward_store, tmp_path: Path) -> None:
    path, lon = eastward_store
    df = spark.read.format("zarr").option("cell_bounds", "true").option("table_name", "lon").load(path)
    assert {"lon_lower", "lon_upper"} <= set(df.columns)
    assert spark_rows(df) == duck_rows(zarrsql.read_zarr(path, cell_bounds=True, table_name="lon"))

    from tests.kerchunk_refs import kerchunk_refs

    nc = tmp_path / "a.nc"
    xr.Dataset({"v": ("x", np.arange(300.0))}).to_netcdf(nc, engine="h5netcdf")
    refs = tmp_path / "a.json"
    refs.write_text(json.dumps(kerchunk_refs(nc, inline_threshold=0)))
    authorized = json.dumps({f"file://{tmp_path}/": None})
    df = spark.read.format("zarr").option("virtual_chunks", authorized).load(str(refs))
    assert spark_rows(df) == sorted_rows((i, float(i)) for i in range(300))
