"""A remote store rewritten while (or between) queries, and servers that answer oddly, on
the real HTTP server of `httpserver.py`. The oracle is xarray on the files served.

- a chunk that disappears while the store is rewritten during a query is never read as
  fill, even when its 404 comes within a second of the last "did it change?" check;
- with `metadata_ttl`, the query that found the change succeeds when run again;
- a server that refuses HEAD is read again on the next query (validators from a GET);
- an answer aiohttp cannot parse is not reported as an HTTP status the server never sent.
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrsql
from zarrsql.errors import StoreReadError


def _write(root: Path, ds: xr.Dataset, **kwargs) -> str:
    name = f"changes/{uuid.uuid4().hex[:8]}.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(root / name, zarr_format=3, consolidated=True, **kwargs)
    return name


def test_a_chunk_deleted_by_a_rewrite_during_the_query_is_not_fill(con, http, served_root) -> None:
    values = np.arange(16, dtype="int32").reshape(4, 4) + 1
    values[0] = 0  # an all-fill first row: its chunk is never written, a legitimate 404
    ds = xr.Dataset({"v": (("x", "y"), values)}, coords={"x": np.arange(4), "y": np.arange(4)})
    name = _write(
        served_root, ds, encoding={"v": {"chunks": (1, 4), "fill_value": 0, "_FillValue": None}}, write_empty_chunks=False
    )
    assert not (served_root / name / "v/c/0/0").exists()

    def rewrite() -> None:
        http.salt = "-rewritten"  # zarr.json gets a new ETag
        (served_root / name / "v/c/2/0").unlink()  # and a chunk the query planned with is gone

    def hook(method: str, path: str) -> None:
        # the legitimate 404 makes zarrsql check zarr.json; the rewrite follows that check, and
        # the vanished chunk's 404 arrives well within a second of it
        if method == "HEAD" and path.endswith(f"{name}/zarr.json") and not http.salt:
            threading.Timer(0.05, rewrite).start()
        if method == "GET" and path.endswith(f"{name}/v/c/2/0"):
            time.sleep(0.5)

    http.on_request = hook
    with pytest.raises(StoreReadError, match="changed during the query"):
        con.execute(f"SELECT x, sum(v) FROM read_zarr('{http.url(name)}') GROUP BY x").fetchall()


def test_run_again_after_a_change_works_within_metadata_ttl(con, http, served_root) -> None:
    def ds(n: int) -> xr.Dataset:
        return xr.Dataset(
            {"air": (("time", "x"), np.ones((n, 4)))}, coords={"time": pd.date_range("2020", periods=n), "x": np.arange(4)}
        )

    name = _write(served_root, ds(12), encoding={"air": {"chunks": (3, 4)}})
    # a sum reads the chunks (a count alone is answered from the cached coordinates, which
    # metadata_ttl trusts by design)
    query = f"SELECT sum(air) FROM read_zarr('{http.url(name)}', storage_options := MAP {{'metadata_ttl': '60'}})"
    assert con.execute(query).fetchall() == [(48.0,)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds(6).to_zarr(served_root / name, zarr_format=3, consolidated=True, mode="w", encoding={"air": {"chunks": (3, 4)}})
    want = float(xr.open_zarr(served_root / name).air.sum())
    with pytest.raises(StoreReadError, match="run the query again"):
        con.execute(query).fetchall()  # planned with the cached tree: its later chunks are gone
    assert con.execute(query).fetchall() == [(want,)]  # as it says, and within the TTL


def test_a_server_that_refuses_head_reads_again(con, http, served_root) -> None:
    ds = xr.Dataset({"v": (("x",), np.arange(4.0))}, coords={"x": np.arange(4)})
    name = _write(served_root, ds)
    http.answer_head = False
    want = float(xr.open_zarr(served_root / name).v.sum())
    for _ in range(3):
        assert con.execute(f"SELECT sum(v) FROM read_zarr('{http.url(name)}')").fetchall() == [(want,)]
    assert http.count("HEAD") > 0  # it was asked, refused, and a GET of one byte answered instead


def test_an_upper_case_scheme_reads_and_a_query_string_is_named(con, http, served_root) -> None:
    ds = xr.Dataset({"v": (("x",), np.arange(4.0))}, coords={"x": np.arange(4)})
    name = _write(served_root, ds)
    want = float(xr.open_zarr(served_root / name).v.sum())
    upper = http.url(name).replace("http://", "HTTP://")
    assert con.execute(f"SELECT sum(v) FROM read_zarr('{upper}')").fetchall() == [(want,)]
    with pytest.raises(zarrsql.ParameterError, match="query string"):
        con.execute(f"SELECT sum(v) FROM read_zarr('{http.url(name)}?token=abc')").fetchall()
