"""`ORDER BY <data variable> LIMIT n` over http: the first rows' cells are found without a
request per chunk beforehand. On a local store the rewrite notes each chunk file's token (a
`stat`) to check a kept relation later; over the network a token is a request, so it is not
taken (a remote table's state is not checked either: `scan/validity.py`). Oracle: pandas over
xarray's frame of the store; requests from the real test server's log."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import xarray as xr

import zarrsql
from tests.remote import httpserver
from tests.remote.conftest import stop_http


def test_hottest_cells_over_http_send_no_head_requests(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ds = xr.Dataset({"v": (("t", "x"), rng.standard_normal((40, 6)))}, coords={"t": np.arange(40), "x": np.arange(6)})
    with warnings.catch_warnings():  # zarr's note that consolidated metadata is not in the v3 spec
        warnings.simplefilter("ignore")
        ds.to_zarr(tmp_path / "s.zarr", encoding={"v": {"chunks": (4, 6)}}, zarr_format=3, consolidated=True)
    server = httpserver.start(tmp_path)
    try:
        with zarrsql.connect() as con:
            got = con.sql(f"SELECT * FROM read_zarr('{server.url('s.zarr')}') ORDER BY v DESC LIMIT 3").fetchall()
        want = ds.to_dataframe().reset_index().sort_values("v", ascending=False).head(3)
        assert got == list(want.itertuples(index=False, name=None))
        assert server.count("HEAD", lambda path: True) == 0
    finally:
        stop_http(server)
