"""A scan's failure inside `%zarrsql` is zarrsql's own error, as `con.execute` raises it,
not DuckDB's stream error quoting it twice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from IPython.core.interactiveshell import InteractiveShell

import zarrsql


def test_a_corrupt_chunk_in_a_magic_is_a_decode_error(tmp_path: Path) -> None:
    store = tmp_path / "bad.zarr"
    xr.Dataset({"a": (("x",), np.arange(40.0))}).to_zarr(
        store, zarr_format=3, consolidated=False, encoding={"a": {"chunks": (10,)}}
    )
    (store / "a" / "c" / "1").write_bytes(b"garbage")
    with pytest.raises(zarrsql.DecodeError) as direct:
        zarrsql.connect().execute(f"SELECT sum(a) FROM read_zarr('{store}')").fetchall()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "zarrsql")
    with pytest.raises(zarrsql.DecodeError) as magic:
        shell.run_line_magic("zarrsql", f"SELECT sum(a) FROM read_zarr('{store}')")
    assert str(magic.value) == str(direct.value)
    assert "a/c/1" in str(magic.value) and "__zarrsql_" not in str(magic.value)
