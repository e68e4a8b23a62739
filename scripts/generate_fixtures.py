#!/usr/bin/env python
"""Generate the Zarr test fixtures for zarrsql.

Every fixture is produced by code (there is no network access in CI), with
seeded ``numpy.random.default_rng`` generators so the bytes are reproducible.

Layout of the fixture root (default ``<repo>/tests/fixtures``)::

    <name>.zarr           Zarr format 3
    v2/<name>.zarr        the same content in Zarr format 2
    corrupt/...           deliberately broken stores (format 3 only)
    .stamp                hash of this file's text + writer library versions
    .lock                 fcntl lock file serialising concurrent generators

The cache rule: ``ensure_fixtures`` computes a stamp from the text of this
source file and the versions of zarr, xarray, numpy and numcodecs.  If
``root/.stamp`` holds the same value nothing is written; otherwise the whole
root is emptied and rebuilt.  Stores are first written into a private build
directory inside the root and then renamed into place, and ``.stamp`` is
removed before and written (atomically) after the rebuild, so an interrupted
run never leaves a cache that looks valid.  An exclusive ``fcntl.flock`` on
``root/.lock`` makes two pytest processes starting at once safe: the second
one waits and then finds a valid stamp.

Which writer produced what
--------------------------
xarray (``Dataset.to_zarr``) writes the stores where a real writer's
conventions matter: air_temperature, era5_like, mixed_chunks, datatree,
labels, case_collision, cf_roles, big_edge and xr_float_fill.  All of them are
written in both formats with consolidated metadata.

zarr-python writes the layouts xarray cannot (or would re-encode): unnamed,
dtypes, unsupported_dtype, missing and times (both formats; consolidated
except ``unnamed.zarr``, which is deliberately left unconsolidated so that
discovery by listing is exercised) and the corrupt stores.

Notes on format differences
---------------------------
* Format 2 has no native place for dimension names: zarr-python writes
  ``dimension_names`` in v3, and for v2 the generator writes the
  ``_ARRAY_DIMENSIONS`` attribute (what xarray itself does).
* The raw v3 ``missing.zarr`` keeps CF attributes exactly as JSON numbers
  (``_FillValue: -9999.0``, ``_FillValue: NaN`` -- the latter is Python's
  non-standard JSON token).  xarray's v3 reader expects base64 for float
  ``_FillValue`` and refuses that store; ``xr_float_fill.zarr`` is the
  xarray-written counterpart.  Use ``tests/oracles.raw_frame`` for it.
* zarr-python 3.1 *can* write every dtype of ``dtypes.zarr`` in format 3, but
  ``|S5`` (``null_terminated_bytes``), ``<U6`` (``fixed_length_utf32``),
  ``datetime64[ns]`` and ``timedelta64[ns]`` have no ratified Zarr v3
  specification yet (zarr-python warns ``UnstableSpecificationWarning``).  They
  are written in both formats anyway; nothing had to be v2-only.
* Raw (zarr-python) v2 arrays get ``fill_value: null`` unless the fixture is
  about fill values, because xarray reading format 2 treats the Zarr
  ``fill_value`` as ``_FillValue`` and would otherwise mask legitimate zeros.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import struct
import sys
import tempfile
import time as _time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = REPO_ROOT / "tests" / "fixtures"

STAMP_FILE = ".stamp"
LOCK_FILE = ".lock"
BUILD_PREFIX = ".build-"

#: Packages whose versions are part of the stamp (a writer upgrade may change bytes).
STAMP_PACKAGES = ("zarr", "xarray", "numpy", "numcodecs")

#: Stores written in both formats (``<name>`` is v3, ``v2/<name>`` is v2).
BOTH_FORMAT_STORES = (
    "air_temperature.zarr",
    "era5_like.zarr",
    "mixed_chunks.zarr",
    "datatree.zarr",
    "unnamed.zarr",
    "dtypes.zarr",
    "unsupported_dtype.zarr",
    "missing.zarr",
    "xr_float_fill.zarr",
    "times.zarr",
    "labels.zarr",
    "case_collision.zarr",
    "cf_roles.zarr",
    "big_edge.zarr",
)
#: Stores written by xarray (they all open with ``xr.open_zarr``).
XARRAY_STORES = (
    "air_temperature.zarr",
    "era5_like.zarr",
    "mixed_chunks.zarr",
    "datatree.zarr",
    "xr_float_fill.zarr",
    "labels.zarr",
    "case_collision.zarr",
    "cf_roles.zarr",
    "big_edge.zarr",
)
CORRUPT_ENTRIES = (
    "corrupt/bad_json.zarr",
    "corrupt/not_a_store",
    "corrupt/bad_chunk.zarr",
)
#: Every path (relative to the root) that the generator guarantees to exist.
ALL_STORES = (
    *BOTH_FORMAT_STORES,
    *(f"v2/{name}" for name in BOTH_FORMAT_STORES),
    *CORRUPT_ENTRIES,
)


# --------------------------------------------------------------------------
# stamp + cache management
# --------------------------------------------------------------------------


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in STAMP_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover
            versions[name] = "absent"
    return versions


def compute_stamp() -> str:
    """Hash of this file's source text plus the writer library versions."""
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    for name, version in sorted(_package_versions().items()):
        h.update(f"\n{name}={version}".encode())
    return h.hexdigest()


def _read_stamp(root: Path) -> str | None:
    try:
        return (root / STAMP_FILE).read_text().strip()
    except FileNotFoundError:
        return None


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp-")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def ensure_fixtures(root: Path | None = None, *, force: bool = False) -> Path:
    """Make sure every fixture store exists under ``root`` and return ``root``.

    Cheap when the cache is valid (one lock + one small file read).  With
    ``force`` (or a stamp mismatch) the root's contents are deleted and
    regenerated.
    """
    root = Path(root) if root is not None else DEFAULT_ROOT
    root = root.resolve()
    stamp = compute_stamp()
    with _locked(root):
        if not force and _read_stamp(root) == stamp:
            return root
        # invalidate first: from here on the cache never looks valid
        with contextlib.suppress(FileNotFoundError):
            (root / STAMP_FILE).unlink()
        for entry in root.iterdir():
            if entry.name != LOCK_FILE:
                _remove(entry)
        build = Path(tempfile.mkdtemp(dir=root, prefix=BUILD_PREFIX))
        try:
            build_all(build)
            for entry in sorted(build.iterdir()):
                os.replace(entry, root / entry.name)
        finally:
            _remove(build)
        _write_atomic(root / STAMP_FILE, stamp + "\n")
    return root


# --------------------------------------------------------------------------
# writer helpers
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence writer warnings (pytest runs with filterwarnings=error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _xr_write(ds, path: Path, fmt: int, *, encoding=None, group=None, mode="w", consolidated=True):
    with _quiet():
        ds.to_zarr(
            path,
            mode=mode,
            zarr_format=fmt,
            consolidated=consolidated,
            encoding=encoding or {},
            group=group,
        )


def _consolidate(path: Path) -> None:
    import zarr

    with _quiet():
        zarr.consolidate_metadata(str(path))


def _raw_array(
    group,
    name: str,
    data: np.ndarray,
    dims: list[str] | None,
    *,
    chunks: tuple[int, ...] | None = None,
    attributes: dict | None = None,
    fill_value="auto",
    write: bool = True,
):
    """Create an array with zarr-python, writing dimension names for the format.

    ``fill_value="auto"`` means: zarr-python's default in v3, ``null`` in v2
    (see the module docstring for why).
    """
    fmt = group.metadata.zarr_format
    attrs = dict(attributes or {})
    kwargs: dict = {}
    if dims is not None:
        if fmt == 3:
            kwargs["dimension_names"] = list(dims)
        else:
            attrs["_ARRAY_DIMENSIONS"] = list(dims)
    if fill_value == "auto":
        if fmt == 2:
            kwargs["fill_value"] = None
    else:
        kwargs["fill_value"] = fill_value
    with _quiet():
        arr = group.create_array(
            name,
            shape=data.shape,
            dtype=data.dtype,
            chunks=chunks or data.shape or (),
            attributes=attrs,
            **kwargs,
        )
        if write:
            arr[...] = data
    return arr


def _open_raw_group(path: Path, fmt: int):
    import zarr

    with _quiet():
        return zarr.open_group(str(path), mode="w", zarr_format=fmt)


def _both_formats(root: Path, name: str, writer: Callable[[Path, int], None]) -> None:
    writer(root / name, 3)
    writer(root / "v2" / name, 2)


# --------------------------------------------------------------------------
# 1. air_temperature
# --------------------------------------------------------------------------


def _air_temperature_dataset():
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(20130101)
    time = pd.date_range("2013-01-01", periods=120, freq="6h")
    lat = np.linspace(75.0, 15.0, 25).astype(np.float32)  # descending
    lon = np.linspace(200.0, 330.0, 53).astype(np.float32)
    # warm south, cold north, a diurnal cycle and a little noise: ~230-300 K
    base = 300.0 - (lat.astype(np.float64) - 15.0) * (60.0 / 60.0)
    diurnal = 3.0 * np.sin(np.arange(120) * (2 * np.pi / 4))
    air = (
        base[None, :, None]
        + diurnal[:, None, None]
        + 2.0 * np.cos(np.deg2rad(lon.astype(np.float64)))[None, None, :]
        + rng.normal(0.0, 1.5, size=(120, 25, 53))
    )
    air = np.clip(air, 230.5, 299.5)
    # a few missing cells (become the int16 sentinel on disk)
    for t, y, x in [(0, 0, 0), (5, 12, 26), (39, 12, 26), (40, 13, 27), (119, 24, 52), (77, 3, 50)]:
        air[t, y, x] = np.nan
    ds = xr.Dataset(
        {
            "air": (
                ("time", "lat", "lon"),
                air,
                {
                    "long_name": "4xDaily Air temperature at sigma level 995",
                    "units": "degK",
                    "var_desc": "Air temperature",
                },
            )
        },
        coords={
            "time": ("time", time, {"long_name": "Time"}),
            "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude"}),
        },
        attrs={"title": "zarrsql fixture modelled on the xarray tutorial air_temperature"},
    )
    encoding = {
        "air": {
            "dtype": "int16",
            "scale_factor": 0.01,
            "add_offset": 0.0,
            "_FillValue": -32767,
            "chunks": (40, 13, 27),
        },
        "time": {"units": "hours since 1800-01-01", "dtype": "int64"},
    }
    return ds, encoding


def write_air_temperature(root: Path) -> None:
    ds, encoding = _air_temperature_dataset()
    _both_formats(root, "air_temperature.zarr", lambda p, f: _xr_write(ds, p, f, encoding=encoding))


# --------------------------------------------------------------------------
# 2. era5_like
# --------------------------------------------------------------------------


def write_era5_like(root: Path) -> None:
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(2020)
    nt, nlev, nlat, nlon = 48, 4, 19, 36
    time = pd.date_range("2020-01-01", periods=nt, freq="h")
    latitude = np.linspace(90.0, -90.0, nlat).astype(np.float32)
    longitude = np.arange(0.0, 360.0, 10.0).astype(np.float32)
    level = np.array([1000, 850, 500, 250], dtype=np.int32)
    coslat = np.cos(np.deg2rad(latitude.astype(np.float64)))
    t2m = (250.0 + 40.0 * coslat[None, :, None] + rng.normal(0, 2, (nt, nlat, nlon))).astype(
        np.float32
    )
    u10 = rng.normal(0, 5, (nt, nlat, nlon)).astype(np.float32)
    tp = np.abs(rng.exponential(1e-4, (nt, nlat, nlon))).astype(np.float32)
    tp[rng.random((nt, nlat, nlon)) < 0.03] = np.nan
    tp[0, 0, :] = np.nan
    lapse = np.array([0.0, -10.0, -35.0, -60.0])
    temp = (
        t2m.astype(np.float64)[:, None, :, :]
        + lapse[None, :, None, None]
        + rng.normal(0, 0.5, (nt, nlev, nlat, nlon))
    ).astype(np.float32)
    z = (
        np.array([110.0, 1450.0, 5600.0, 10400.0])[None, :, None, None] * 9.80665
        + rng.normal(0, 20, (nt, nlev, nlat, nlon))
    ).astype(np.float32)
    dims3 = ("time", "latitude", "longitude")
    dims4 = ("time", "level", "latitude", "longitude")
    ds = xr.Dataset(
        {
            "2m_temperature": (dims3, t2m, {"units": "K", "long_name": "2 metre temperature"}),
            "10m_u_component_of_wind": (dims3, u10, {"units": "m s**-1"}),
            "total_precipitation": (dims3, tp, {"units": "m"}),
            "temperature": (dims4, temp, {"units": "K"}),
            "geopotential": (dims4, z, {"units": "m**2 s**-2"}),
        },
        coords={
            "time": time,
            "latitude": ("latitude", latitude, {"units": "degrees_north"}),
            "longitude": ("longitude", longitude, {"units": "degrees_east"}),
            "level": ("level", level, {"units": "millibars"}),
        },
    )
    encoding = {
        "time": {"units": "hours since 1900-01-01", "dtype": "int32"},
        **{name: {"chunks": (24, nlat, nlon)} for name in ds.data_vars if ds[name].ndim == 3},
        **{
            name: {"chunks": (24, nlev, nlat, nlon)}
            for name in ds.data_vars
            if ds[name].ndim == 4
        },
    }
    _both_formats(root, "era5_like.zarr", lambda p, f: _xr_write(ds, p, f, encoding=encoding))


# --------------------------------------------------------------------------
# 3. mixed_chunks
# --------------------------------------------------------------------------


def write_mixed_chunks(root: Path) -> None:
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(13)
    time = pd.date_range("2013-01-01", periods=30, freq="D")
    lat = np.linspace(75.0, 15.0, 25).astype(np.float32)
    lon = np.linspace(200.0, 330.0, 53).astype(np.float32)
    tair = 270.0 + rng.normal(0, 8, (30, 25, 53))
    dtdx = np.gradient(tair, axis=2).astype(np.float32)
    ds = xr.Dataset(
        {
            "Tair": (("time", "lat", "lon"), tair, {"units": "K"}),
            "dTdx": (("time", "lat", "lon"), dtdx, {"units": "K per grid step"}),
        },
        coords={"time": time, "lat": lat, "lon": lon},
    )
    encoding = {"Tair": {"chunks": (10, 13, 27)}, "dTdx": {"chunks": (10, 7, 27)}}
    _both_formats(root, "mixed_chunks.zarr", lambda p, f: _xr_write(ds, p, f, encoding=encoding))


# --------------------------------------------------------------------------
# 4. datatree
# --------------------------------------------------------------------------


def write_datatree(root: Path) -> None:
    import xarray as xr

    rng = np.random.default_rng(4)
    x = np.array([0.0, 1.0, 2.5, 4.0, 8.0])
    root_ds = xr.Dataset(
        {"root_var": ("x", rng.normal(size=5))},
        coords={"x": ("x", x, {"units": "m"})},
        attrs={"description": "root of the datatree fixture"},
    )
    fine = xr.Dataset(
        {"foo": (("x", "y"), rng.normal(size=(5, 3)))},  # no x array: inherits the root's
        coords={"y": ("y", np.array([10.0, 20.0, 30.0]))},
    )
    coarse = xr.Dataset(
        {"bar": (("x", "y"), rng.integers(0, 100, size=(5, 2)).astype(np.int64))},
        coords={"y": ("y", np.array([100, 200], dtype=np.int64))},
    )
    misaligned = xr.Dataset(
        {"baz": ("x", rng.normal(size=7))},
        coords={"x": ("x", np.arange(7, dtype=np.float64) * 10.0)},  # 7 != root's 5
    )

    def writer(path: Path, fmt: int) -> None:
        _xr_write(root_ds, path, fmt, consolidated=False)
        _xr_write(fine, path, fmt, group="simulation/fine", mode="a", consolidated=False)
        _xr_write(coarse, path, fmt, group="simulation/coarse", mode="a", consolidated=False)
        _xr_write(misaligned, path, fmt, group="misaligned", mode="a", consolidated=False)
        import zarr

        with _quiet():
            g = zarr.open_group(str(path), mode="r+", zarr_format=fmt)
            g.require_group("empty")
        _consolidate(path)

    _both_formats(root, "datatree.zarr", writer)


# --------------------------------------------------------------------------
# 5. unnamed
# --------------------------------------------------------------------------


def write_unnamed(root: Path) -> None:
    def writer(path: Path, fmt: int) -> None:
        g = _open_raw_group(path, fmt)
        _raw_array(g, "a", np.arange(10, dtype=np.int32) * 3 - 7, None, chunks=(4,))
        _raw_array(g, "b", np.arange(24, dtype=np.float64).reshape(4, 6) / 4.0, None, chunks=(3, 4))
        with _quiet():
            named = g.create_group("named")
        _raw_array(named, "c", np.array([1.5, 2.5, 3.5]), ["i"])
        _raw_array(named, "d", np.array([7, 8, 9], dtype=np.int64), None)
        # deliberately NOT consolidated: discovery must work by listing

    _both_formats(root, "unnamed.zarr", writer)


# --------------------------------------------------------------------------
# 6. dtypes + unsupported_dtype
# --------------------------------------------------------------------------


def _int_values(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    if info.min < 0:
        vals = [info.min, info.max, 0, -1, 1, 42, info.min + 1]
    else:
        vals = [info.min, info.max, 1, 2, 3, 42, info.max - 1]
    return np.array(vals, dtype=dtype)


def dtypes_columns() -> dict[str, np.ndarray]:
    """The exact arrays written to ``dtypes.zarr`` (useful as an oracle too)."""
    cols: dict[str, np.ndarray] = {}
    cols["b"] = np.array([True, False, True, True, False, False, True])
    for name, dt in [
        ("i8", np.int8),
        ("i16", np.int16),
        ("i32", np.int32),
        ("i64", np.int64),
        ("u8", np.uint8),
        ("u16", np.uint16),
        ("u32", np.uint32),
        ("u64", np.uint64),
    ]:
        cols[name] = _int_values(dt)
    for name, dt, sub in [("f32", np.float32, 1e-45), ("f64", np.float64, 5e-324)]:
        fi = np.finfo(dt)
        cols[name] = np.array([1.5, -0.0, np.inf, -np.inf, np.nan, fi.max, sub], dtype=dt)
    cols["s"] = np.array(
        ["alpha", "", "Grüße", "日本語", "naïve café", "emoji 🌍", "x y"],
        dtype=np.dtypes.StringDType(),
    )
    cols["fixb"] = np.array([b"abc", b"", b"hello", b"xy", b"12345", b"z", b"A B"], dtype="|S5")
    cols["fixu"] = np.array(["abc", "", "Grüße", "日本", "zzzzzz", "é", "x y"], dtype="<U6")
    cols["dt"] = np.array(
        [
            "2000-01-01T00:00:00",
            "NaT",
            "1970-01-01T00:00:00",
            "2262-04-11T00:00:00",
            "1677-09-22T00:00:00",
            "2020-02-29T12:34:56.789123456",
            "1969-12-31T23:59:59.999999",
        ],
        dtype="datetime64[ns]",
    )
    cols["td"] = np.array(
        [0, "NaT", 86_400 * 10**9, -3_600 * 10**9, 1_500_000_000, 123_456_789_000, 10**18],
        dtype="timedelta64[ns]",
    )
    return cols


def write_dtypes(root: Path) -> None:
    cols = dtypes_columns()

    def writer(path: Path, fmt: int) -> None:
        g = _open_raw_group(path, fmt)
        g.attrs["description"] = "one variable per dtype over positional dimension i (7)"
        for name, data in cols.items():
            _raw_array(g, name, data, ["i"])
        _consolidate(path)

    _both_formats(root, "dtypes.zarr", writer)

    def writer_unsupported(path: Path, fmt: int) -> None:
        g = _open_raw_group(path, fmt)
        _raw_array(g, "good", np.arange(7, dtype=np.int64) * 10, ["i"])
        _raw_array(g, "cplx", np.arange(7) + 1j * np.arange(7)[::-1], ["i"])
        _raw_array(g, "also_good", np.linspace(0.0, 1.5, 7), ["i"])
        _consolidate(path)

    _both_formats(root, "unsupported_dtype.zarr", writer_unsupported)


# --------------------------------------------------------------------------
# 7. missing + xr_float_fill
# --------------------------------------------------------------------------


def write_missing(root: Path) -> None:
    def writer(path: Path, fmt: int) -> None:
        g = _open_raw_group(path, fmt)
        g.attrs["description"] = "CF missing-value conventions, attributes written verbatim"
        _raw_array(g, "i", np.arange(8, dtype=np.int64), ["i"])
        _raw_array(
            g,
            "fill_attr",
            np.array([1.5, -9999.0, 2.5, 3.5, -9999.0, 4.5, 5.5, 0.0], dtype=np.float32),
            ["i"],
            chunks=(4,),
            attributes={"_FillValue": -9999.0},
            fill_value=np.float32(-9999.0),
        )
        _raw_array(
            g,
            "missing_attr",
            np.array([3, -1, 5, -1, 0, 7, 8, 9], dtype=np.int32),
            ["i"],
            chunks=(4,),
            attributes={"missing_value": -1},
        )
        _raw_array(
            g,
            "nan_fill_and_missing",
            np.array([1.0, np.nan, -999.0, 2.0, 3.0, -999.0, 4.0, 5.0]),
            ["i"],
            chunks=(4,),
            attributes={"_FillValue": float("nan"), "missing_value": -999.0},
            fill_value=np.nan,
        )
        # chunk size 2; chunk 2 (elements 4 and 5) is never written -> reads as 7
        nz = _raw_array(
            g,
            "nonzero_fill",
            np.zeros(8, dtype=np.int16),
            ["i"],
            chunks=(2,),
            fill_value=np.int16(7),
            write=False,
        )
        with _quiet():
            nz[0:4] = np.array([1, 7, 3, 4], dtype=np.int16)
            nz[6:8] = np.array([5, 6], dtype=np.int16)
        _raw_array(
            g,
            "zero_fill",
            np.array([0, 1, 0, 2, 3, 0, 4, 5], dtype=np.int32),
            ["i"],
            chunks=(4,),
            fill_value=np.int32(0),
        )
        _raw_array(
            g,
            "nan_data",
            np.array([0.5, np.nan, 1.5, np.nan, np.nan, 2.5, 3.5, -0.5]),
            ["i"],
            chunks=(4,),
            fill_value=np.nan,
        )
        _raw_array(
            g,
            "packed",
            np.array([0, 1, -1, 20, 100, -1, 32767, -32768], dtype=np.int16),
            ["i"],
            chunks=(4,),
            attributes={"scale_factor": 0.5, "add_offset": 10.0, "_FillValue": -1},
            fill_value=np.int16(-1),
        )
        _consolidate(path)

    _both_formats(root, "missing.zarr", writer)


def write_xr_float_fill(root: Path) -> None:
    import xarray as xr

    f64 = np.array([1.0, np.nan, 2.0, -9999.5, np.nan, 3.0, 4.25, 5.0])
    f32 = np.array([np.nan, 1.5, 2.5, np.nan, 3.5, 4.5, 5.5, np.nan], dtype=np.float32)
    ds = xr.Dataset(
        {"f64_fill": ("i", f64), "f32_default": ("i", f32)},
        coords={"i": np.arange(8, dtype=np.int64)},
    )
    # in v3 xarray stores the float _FillValue attribute base64-encoded
    encoding = {"f64_fill": {"_FillValue": -9999.0}}
    _both_formats(root, "xr_float_fill.zarr", lambda p, f: _xr_write(ds, p, f, encoding=encoding))


def float_fill_attr_b64(value: float) -> str:
    """How xarray encodes a float ``_FillValue`` attribute in Zarr v3."""
    return base64.standard_b64encode(struct.pack("<d", float(value))).decode()


# --------------------------------------------------------------------------
# 8. times
# --------------------------------------------------------------------------

#: axis name -> (values, attributes); each is its own 1-D coordinate/dimension.
TIME_AXES: dict[str, tuple[np.ndarray, dict]] = {
    "t_hours": (
        np.array([0, 1, 24, 1_000_000, 1_051_896, 1_051_902], dtype=np.int64),
        {"units": "hours since 1900-01-01", "calendar": "gregorian"},
    ),
    "t_days_float": (
        np.array([0.0, 0.25, 0.5, 1.125, 73_048.75, 80_000.0625]),
        {"units": "days since 1800-01-01 00:00:00"},
    ),
    "t_tz": (
        np.array([-5, 0, 5, 6, 24, 100], dtype=np.int32),
        {"units": "hours since 2000-01-01 00:00:00 +05:00"},
    ),
    # noleap: Feb 27, Feb 28, Mar 1, Mar 2 of 2000, 2001 and 2004
    "t_noleap": (
        np.array([365 * y + d for y in (0, 1, 4) for d in (57, 58, 59, 60)], dtype=np.int64),
        {"units": "days since 2000-01-01", "calendar": "noleap"},
    ),
    # 360_day: 59 is 2000-02-30, 389 is 2001-02-30
    "t_360": (
        np.array([0, 29, 58, 59, 60, 359, 389], dtype=np.int64),
        {"units": "days since 2000-01-01", "calendar": "360_day"},
    ),
    # 360_day, every value a real date: Jan 1, Jan 16, Feb 1, Feb 16, Apr 11, 2001-01-01
    "t_360_real": (
        np.array([0, 15, 30, 45, 100, 360], dtype=np.int64),
        {"units": "days since 2000-01-01", "calendar": "360_day"},
    ),
    # standard (mixed Julian/Gregorian) calendar before and after the 1582 reform
    "t_julian_early": (
        np.array([0, 31, 366, 30_000, 30_600, 40_000], dtype=np.int64),
        {"units": "days since 1500-01-01", "calendar": "standard"},
    ),
    # months are not a fixed-length unit: decoders refuse, values stay numbers
    "t_months": (
        np.array([0, 1, 2, 12, 13], dtype=np.int32),
        {"units": "months since 2000-01-01"},
    ),
}


def write_times(root: Path) -> None:
    def writer(path: Path, fmt: int) -> None:
        g = _open_raw_group(path, fmt)
        for k, (axis, (values, attrs)) in enumerate(TIME_AXES.items()):
            _raw_array(g, axis, values, [axis], attributes=attrs)
            v = np.arange(values.size, dtype=np.float64) + 0.5 + 100.0 * k
            _raw_array(g, f"v_{axis}", v, [axis], attributes={"long_name": f"value over {axis}"})
        _consolidate(path)

    _both_formats(root, "times.zarr", writer)


# --------------------------------------------------------------------------
# 9-12. labels, case_collision, cf_roles, big_edge
# --------------------------------------------------------------------------


def write_labels(root: Path) -> None:
    import xarray as xr

    rng = np.random.default_rng(9)
    stations = np.array(["Zürich", "Oslo", "São Paulo", "Nairobi", "Ōsaka"], dtype=object)
    temp = rng.normal(15, 8, (5, 24))
    temp[1, 3] = np.nan
    ds = xr.Dataset(
        {
            "temp": (("station", "hour"), temp, {"units": "degC"}),
            "noise": ("sample", rng.normal(size=11).astype(np.float32)),
        },
        coords={"station": ("station", stations), "hour": np.arange(24, dtype=np.int64)},
    )
    _both_formats(root, "labels.zarr", lambda p, f: _xr_write(ds, p, f))


def write_case_collision(root: Path) -> None:
    import xarray as xr

    ds = xr.Dataset(
        {
            "a": ("X", np.array([1, 2, 3], dtype=np.int64)),
            "b": ("x", np.array([0.5, 1.5, 2.5, 3.5])),
        },
        coords={
            "X": ("X", np.array([10, 20, 30], dtype=np.int64)),
            "x": ("x", np.array([1.0, 2.0, 3.0, 4.0])),
        },
    )
    _both_formats(root, "case_collision.zarr", lambda p, f: _xr_write(ds, p, f))


def write_cf_roles(root: Path) -> None:
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(11)
    time = pd.date_range("2001-01-01", periods=4, freq="D")
    bnds = np.stack([time.values, (time + pd.Timedelta(days=1)).values], axis=1)
    ny, nx = 3, 4
    y = np.array([0.0, 1000.0, 2000.0])
    x = np.array([0.0, 1000.0, 2000.0, 3000.0])
    lat2d = 40.0 + 0.01 * y[:, None] / 1000.0 + 0.002 * x[None, :] / 1000.0
    lon2d = -10.0 + 0.02 * x[None, :] / 1000.0 - 0.001 * y[:, None] / 1000.0
    sst = (285.0 + rng.normal(0, 1, (ny, nx))).astype(np.float32)
    sst[0, 0] = np.nan  # land
    ds = xr.Dataset(
        {
            "time_bnds": (("time", "nv"), bnds),
            "sst": (("y", "x"), sst, {"standard_name": "sea_surface_temperature", "units": "K"}),
            "g": ((), 9.80665, {"long_name": "gravity", "units": "m s-2"}),
            "depth": ("z", np.array([0.0, 5.0, 10.0, 20.0, 50.0, 100.0]), {"units": "m"}),
        },
        coords={
            "time": ("time", time, {"bounds": "time_bnds"}),
            "y": ("y", y, {"units": "m", "axis": "Y"}),
            "x": ("x", x, {"units": "m", "axis": "X"}),
            "lat2d": (("y", "x"), lat2d, {"standard_name": "latitude", "units": "degrees_north"}),
            "lon2d": (("y", "x"), lon2d, {"standard_name": "longitude", "units": "degrees_east"}),
        },
    )
    encoding = {"time": {"units": "days since 2001-01-01", "dtype": "int64"}}
    _both_formats(root, "cf_roles.zarr", lambda p, f: _xr_write(ds, p, f, encoding=encoding))


def write_big_edge(root: Path) -> None:
    import xarray as xr

    a = np.arange(7, dtype=np.int64) * 10  # ascending
    b = np.arange(11, dtype=np.int32)[::-1] * 3 + 100  # descending
    c = np.array([0, 1, 3, 7, 15], dtype=np.int16)  # uneven spacing
    ia, ib, ic = np.meshgrid(np.arange(7), np.arange(11), np.arange(5), indexing="ij")
    v = ia * 1000.0 + ib * 10.0 + ic + 0.5  # unique, easy to reason about
    ds = xr.Dataset({"v": (("a", "b", "c"), v)}, coords={"a": a, "b": b, "c": c})
    encoding = {"v": {"chunks": (3, 4, 2)}}
    _both_formats(root, "big_edge.zarr", lambda p, f: _xr_write(ds, p, f, encoding=encoding))


# --------------------------------------------------------------------------
# 13. corrupt
# --------------------------------------------------------------------------


def write_corrupt(root: Path) -> None:
    corrupt = root / "corrupt"
    bad_json = corrupt / "bad_json.zarr"
    bad_json.mkdir(parents=True)
    (bad_json / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", attrib')

    not_a_store = corrupt / "not_a_store"
    not_a_store.mkdir()
    (not_a_store / "notes.txt").write_text("This directory is not a Zarr store.\n")

    path = corrupt / "bad_chunk.zarr"
    g = _open_raw_group(path, 3)
    _raw_array(g, "v", np.arange(12, dtype=np.float64), ["i"], chunks=(4,))
    _consolidate(path)
    chunk = path / "v" / "c" / "1"
    good = chunk.read_bytes()
    chunk.write_bytes(good[: max(1, len(good) // 3)] + b"\xde\xad\xbe\xef garbage")


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------

WRITERS: tuple[Callable[[Path], None], ...] = (
    write_air_temperature,
    write_era5_like,
    write_mixed_chunks,
    write_datatree,
    write_unnamed,
    write_dtypes,
    write_missing,
    write_xr_float_fill,
    write_times,
    write_labels,
    write_case_collision,
    write_cf_roles,
    write_big_edge,
    write_corrupt,
)


def build_all(dest: Path) -> None:
    """Write every store into ``dest`` (an empty directory)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "v2").mkdir(exist_ok=True)
    with _quiet():
        for writer in WRITERS:
            writer(dest)
    manifest = {"stores": list(ALL_STORES)}
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="regenerate even if cached")
    parser.add_argument("--root", type=Path, default=None, help="fixture root")
    args = parser.parse_args(argv)
    t0 = _time.perf_counter()
    root = ensure_fixtures(args.root, force=args.force)
    print(f"fixtures ready in {root} ({_time.perf_counter() - t0:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
