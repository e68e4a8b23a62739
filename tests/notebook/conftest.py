"""Stores for the notebook tests, written once per session by xarray."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr


def write_grid(path: Path, n: int, side: int) -> Path:
    """`v(t, y, x)`, one chunk per time step: n work units of side*side cells."""
    values = np.random.default_rng(n).random((n, side, side)).astype("f4")
    ds = xr.Dataset(
        {"v": (("t", "y", "x"), values, {"units": "K", "long_name": "a value"})},
        coords={"t": np.arange(n), "y": np.arange(side), "x": np.arange(side)},
    )
    ds.to_zarr(path, mode="w", encoding={"v": {"chunks": (1, side, side)}}, consolidated=False)
    return path


@pytest.fixture(scope="session")
def slow_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 units of 100x100: a scan of well under a second, and a heavy join of several seconds."""
    return write_grid(tmp_path_factory.mktemp("nb") / "slow.zarr", 400, 100)


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_grid(tmp_path_factory.mktemp("nb") / "tiny.zarr", 4, 5)
