"""A core `Scan` (from `open_scan`) whose store is rewritten before or while it reads gives
the rows of one version of the store, or a `StoreReadError` saying the store changed: never
old coordinates beside new chunks, bytes of a new dtype read as the old one, or rows that no
longer exist read as NULL. Expected rows come from xarray over each version of the store.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from zarrsql.errors import StoreReadError
from zarrsql.plan.predicate import Cmp
from zarrsql.scan import Scan, open_scan

Rows = list[tuple[float, float | None]]


def _write(path: Path, n: int, offset: float = 0.0, dtype: str = "float64", chunk: int = 2) -> Rows:
    """Write x (n values from `offset`) and a(x) in chunks of `chunk`; its rows, by xarray."""
    ds = xr.Dataset(
        {"a": (("x",), (np.arange(n) + offset).astype(dtype))},
        coords={"x": np.arange(n, dtype="float64") + offset},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(path, mode="w", encoding={"a": {"chunks": (chunk,)}})
        back = xr.open_zarr(path).load()
    return sorted(zip(back.x.values.tolist(), back.a.values.astype("float64").tolist(), strict=True))


def _from_arrays(scan: Scan) -> Rows:
    rows: Rows = []
    for part in scan.arrays():
        (x, _), (a, nulls) = part["x"], part["a"]
        values: list[Any] = np.asarray(a, dtype="float64").tolist()
        if nulls is not None:
            values = [None if null else v for v, null in zip(values, nulls.tolist(), strict=True)]
        rows += zip(np.asarray(x).tolist(), values, strict=True)
    return sorted(rows, key=repr)


def _from_batches(scan: Scan) -> Rows:
    rows: Rows = []
    for batch in scan.batches():
        rows += zip(batch.column("x").to_pylist(), batch.column("a").to_pylist(), strict=True)
    return sorted(rows, key=repr)


READERS: dict[str, Callable[[Scan], Rows]] = {"arrays": _from_arrays, "batches": _from_batches}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(
    "new",
    [
        pytest.param({"n": 6, "offset": 100.0}, id="new-values"),
        pytest.param({"n": 3}, id="shrunk"),
        pytest.param({"n": 6, "chunk": 4}, id="rechunked"),
        pytest.param({"n": 9, "offset": 50.0}, id="grown-other-values"),
    ],
)
def test_scan_planned_before_a_rewrite_reads_the_new_version(tmp_path: Path, reader: str, new: dict) -> None:
    path = tmp_path / "s.zarr"
    _write(path, 6)
    scan = open_scan({"store": str(path)}, columns=["x", "a"])
    now = _write(path, **new)
    assert READERS[reader](scan) == sorted(now, key=repr)


@pytest.mark.parametrize("reader", READERS)
def test_scan_planned_before_a_rewrite_applies_its_predicate_to_the_new_version(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "s.zarr"
    _write(path, 6)
    scan = open_scan({"store": str(path)}, columns=["x", "a"], predicate=Cmp("x", ">=", 101.0))
    now = _write(path, 6, offset=100.0)
    assert READERS[reader](scan) == sorted([r for r in now if r[0] >= 101.0], key=repr)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_scan_planned_before_a_type_change_is_refused(tmp_path: Path, reader: str, dtype: str) -> None:
    path = tmp_path / "s.zarr"
    _write(path, 6)
    scan = open_scan({"store": str(path)}, columns=["x", "a"])
    _write(path, 6, dtype=dtype)
    with pytest.raises(StoreReadError, match=r"open_scan\(\): the store changed since this scan was planned"):
        READERS[reader](scan)


@pytest.mark.parametrize("reader", READERS)
def test_scan_of_an_unchanged_store_reads_it_each_time(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "s.zarr"
    rows = _write(path, 6)
    scan = open_scan({"store": str(path)}, columns=["x", "a"])
    assert READERS[reader](scan) == rows
    assert READERS[reader](scan) == rows


def test_arrays_meeting_a_store_shrunk_under_it_raises(tmp_path: Path) -> None:
    """The chunks past the new end are missing: fill, were the table unchanged; here the
    store was rewritten, so the rest of the scan is an error, not NULL rows."""
    path = tmp_path / "s.zarr"
    _write(path, 6)
    parts = open_scan({"store": str(path)}, columns=["x", "a"]).arrays()
    first = next(parts)
    assert first["x"][0].tolist() == [0.0, 1.0]
    _write(path, 2)
    with pytest.raises(StoreReadError, match="changed during the query"):
        list(parts)
