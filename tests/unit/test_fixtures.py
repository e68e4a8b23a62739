"""Checks of the fixture generator, its cache rule, the stores and the oracles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from oracles import array_dims, assert_frames_equal, nan_to_null, raw_frame, xarray_frame

# The names are a contract with the rest of the test-suite: spell them out here
# instead of trusting the generator's own list.
BOTH_FORMATS = [
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
]
CONTRACT = [
    *BOTH_FORMATS,
    *(f"v2/{n}" for n in BOTH_FORMATS),
    "corrupt/bad_json.zarr",
    "corrupt/not_a_store",
    "corrupt/bad_chunk.zarr",
]

# store, group, expected sizes of every dimension xarray sees in that group
XARRAY_DIMS = [
    ("air_temperature.zarr", None, {"time": 120, "lat": 25, "lon": 53}),
    ("era5_like.zarr", None, {"time": 48, "latitude": 19, "longitude": 36, "level": 4}),
    ("mixed_chunks.zarr", None, {"time": 30, "lat": 25, "lon": 53}),
    ("datatree.zarr", None, {"x": 5}),
    ("datatree.zarr", "simulation/fine", {"x": 5, "y": 3}),
    ("datatree.zarr", "simulation/coarse", {"x": 5, "y": 2}),
    ("datatree.zarr", "misaligned", {"x": 7}),
    ("datatree.zarr", "empty", {}),
    ("xr_float_fill.zarr", None, {"i": 8}),
    ("labels.zarr", None, {"station": 5, "hour": 24, "sample": 11}),
    ("case_collision.zarr", None, {"X": 3, "x": 4}),
    ("cf_roles.zarr", None, {"time": 4, "nv": 2, "y": 3, "x": 4, "z": 6}),
    ("big_edge.zarr", None, {"a": 7, "b": 11, "c": 5}),
]


def _open(path: Path, group: str | None = None, **kw) -> xr.Dataset:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_zarr(str(path), group=group, consolidated=None, chunks=None, **kw)


# --------------------------------------------------------------------------
# generator and cache rule
# --------------------------------------------------------------------------


def test_every_named_store_exists(fixtures_dir: Path, fixture_generator) -> None:
    missing = [name for name in CONTRACT if not (fixtures_dir / name).exists()]
    assert not missing
    assert set(fixture_generator.ALL_STORES) == set(CONTRACT)
    for name in BOTH_FORMATS:
        assert (fixtures_dir / name / "zarr.json").is_file(), name
        assert (fixtures_dir / "v2" / name / ".zgroup").is_file(), name
    assert (fixtures_dir / ".stamp").read_text().strip() == fixture_generator.compute_stamp()


def test_fixture_path_factory(fixture_path) -> None:
    assert fixture_path("v2/big_edge.zarr").endswith(os.path.join("v2", "big_edge.zarr"))
    with pytest.raises(FileNotFoundError):
        fixture_path("no_such_store.zarr")


def _mtimes(root: Path) -> dict[str, int]:
    files = [".stamp", "air_temperature.zarr/zarr.json", "v2/missing.zarr/.zmetadata"]
    return {f: (root / f).stat().st_mtime_ns for f in files}


@pytest.fixture
def cache_copy(fixtures_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the valid cache (cheaper than generating again)."""
    root = tmp_path / "fx"
    shutil.copytree(fixtures_dir, root, ignore=shutil.ignore_patterns(".lock"))
    return root


@pytest.fixture
def fake_build(fixture_generator, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Replace the (slow) store writers by a marker file; record each build."""
    calls: list[Path] = []

    def build(dest: Path) -> None:
        calls.append(dest)
        (dest / "built.txt").write_text(str(len(calls)))

    monkeypatch.setattr(fixture_generator, "build_all", build)
    return calls


def test_cache_hit_does_not_rewrite_and_input_change_regenerates(
    cache_copy: Path, fixture_generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = fixture_generator
    root = cache_copy
    before = _mtimes(root)
    stamp = (root / ".stamp").read_text()

    # same stamp: nothing is rewritten
    assert gen.ensure_fixtures(root) == root.resolve()
    assert _mtimes(root) == before

    # a changed stamp input (e.g. a zarr upgrade) regenerates everything, for real
    (root / "leftover.txt").write_text("must disappear")
    real = gen._package_versions()
    monkeypatch.setattr(gen, "_package_versions", lambda: {**real, "zarr": "999.0"})
    assert gen.compute_stamp() != stamp.strip()
    gen.ensure_fixtures(root)
    assert not (root / "leftover.txt").exists()
    assert (root / ".stamp").read_text().strip() == gen.compute_stamp()
    assert all((root / name).exists() for name in CONTRACT)
    air_meta = "air_temperature.zarr/zarr.json"
    assert _mtimes(root)[air_meta] != before[air_meta]
    assert not list(root.glob(".build-*"))


def test_source_text_is_part_of_the_stamp(fixture_generator, monkeypatch) -> None:
    gen = fixture_generator
    stamp = gen.compute_stamp()
    real_read = Path.read_bytes

    def edited(self: Path) -> bytes:
        data = real_read(self)
        return data + b"# edited" if self == Path(gen.__file__) else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    assert gen.compute_stamp() != stamp


def test_tampered_stamp_and_force_regenerate(
    cache_copy: Path, fixture_generator, fake_build: list[Path]
) -> None:
    gen = fixture_generator
    root = cache_copy
    gen.ensure_fixtures(root)
    assert fake_build == []  # valid copy: cache hit

    (root / ".stamp").write_text("something else\n")
    gen.ensure_fixtures(root)
    assert len(fake_build) == 1
    assert sorted(p.name for p in root.iterdir()) == [".lock", ".stamp", "built.txt"]
    assert (root / ".stamp").read_text().strip() == gen.compute_stamp()

    gen.ensure_fixtures(root)
    assert len(fake_build) == 1
    gen.ensure_fixtures(root, force=True)
    assert len(fake_build) == 2 and (root / "built.txt").read_text() == "2"


def test_interrupted_generation_never_looks_valid(
    cache_copy: Path, fixture_generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = fixture_generator
    root = cache_copy

    def broken(dest: Path) -> None:
        gen.write_big_edge(dest)
        raise KeyboardInterrupt("simulated crash halfway")

    monkeypatch.setattr(gen, "build_all", broken)
    with pytest.raises(KeyboardInterrupt):
        gen.ensure_fixtures(root, force=True)
    assert not (root / ".stamp").exists()
    assert not list(root.glob(".build-*"))  # the temp dir is cleaned up

    def good(dest: Path) -> None:
        (dest / "built.txt").write_text("ok")

    monkeypatch.setattr(gen, "build_all", good)
    gen.ensure_fixtures(root)
    assert (root / ".stamp").read_text().strip() == gen.compute_stamp()
    assert (root / "built.txt").exists() and not (root / "big_edge.zarr").exists()


def test_two_processes_at_once(tmp_path: Path, fixture_generator) -> None:
    root = tmp_path / "fx"
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("gen", {fixture_generator.__file__!r})
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
        gen.ensure_fixtures(__import__("pathlib").Path({str(root)!r}))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE) for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()
    assert (root / ".stamp").read_text().strip() == fixture_generator.compute_stamp()
    assert all((root / name).exists() for name in CONTRACT)


# --------------------------------------------------------------------------
# the stores themselves
# --------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "v2/"])
@pytest.mark.parametrize(("store", "group", "sizes"), XARRAY_DIMS)
def test_xarray_stores_open_with_documented_dims(
    fixtures_dir: Path, prefix: str, store: str, group: str | None, sizes: dict
) -> None:
    ds = _open(fixtures_dir / f"{prefix}{store}", group)
    assert dict(ds.sizes) == sizes


@pytest.mark.parametrize("prefix", ["", "v2/"])
def test_air_temperature_layout(fixtures_dir: Path, prefix: str) -> None:
    path = fixtures_dir / f"{prefix}air_temperature.zarr"
    ds = _open(path)
    assert ds["air"].dtype == np.float64
    assert ds["lat"].dtype == np.float32 and ds["lon"].dtype == np.float32
    assert ds["lat"].values[0] == 75 and ds["lat"].values[-1] == 15
    assert np.all(np.diff(ds["lat"].values) < 0)
    assert ds["lon"].values[0] == 200 and ds["lon"].values[-1] == 330
    assert ds["time"].values[0] == np.datetime64("2013-01-01T00:00")
    assert ds["time"].values[1] - ds["time"].values[0] == np.timedelta64(6, "h")
    air = ds["air"].values
    assert 1 <= np.isnan(air).sum() <= 10
    assert 229 < np.nanmin(air) and np.nanmax(air) < 301
    raw = zarr.open_array(str(path / "air"), mode="r")
    assert raw.dtype == np.int16 and raw.chunks == (40, 13, 27)
    assert (raw[...] == -32767).sum() == np.isnan(air).sum()
    assert raw.attrs["scale_factor"] == 0.01 and raw.attrs["add_offset"] == 0.0
    time = zarr.open_array(str(path / "time"), mode="r")
    assert time.dtype == np.int64 and time.attrs["units"] == "hours since 1800-01-01"


@pytest.mark.parametrize("prefix", ["", "v2/"])
def test_chunking(fixtures_dir: Path, prefix: str) -> None:
    root = fixtures_dir / prefix
    mixed = zarr.open_group(str(root / "mixed_chunks.zarr"), mode="r")
    assert mixed["Tair"].chunks == (10, 13, 27)
    assert mixed["dTdx"].chunks == (10, 7, 27)
    era5 = zarr.open_group(str(root / "era5_like.zarr"), mode="r")
    assert era5["temperature"].chunks == (24, 4, 19, 36)
    assert era5["2m_temperature"].chunks == (24, 19, 36)
    assert list(era5["level"][...]) == [1000, 850, 500, 250]
    big = zarr.open_group(str(root / "big_edge.zarr"), mode="r")
    assert big["v"].shape == (7, 11, 5) and big["v"].chunks == (3, 4, 2)
    assert np.all(np.diff(big["b"][...]) < 0) and np.all(np.diff(big["a"][...]) > 0)


@pytest.mark.parametrize("prefix", ["", "v2/"])
def test_raw_stores_metadata(fixtures_dir: Path, prefix: str) -> None:
    root = fixtures_dir / prefix
    unnamed = array_dims(root / "unnamed.zarr")
    assert unnamed == {"a": None, "b": None}
    assert array_dims(root / "unnamed.zarr", "named") == {"c": ("i",), "d": None}

    dtypes = zarr.open_group(str(root / "dtypes.zarr"), mode="r")
    expected = {
        "b": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
        "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
        "f32": "float32", "f64": "float64", "fixb": "|S5", "fixu": "<U6",
        "dt": "datetime64[ns]", "td": "timedelta64[ns]",
    }  # fmt: skip
    for name, dt in expected.items():
        assert dtypes[name].dtype == np.dtype(dt), name
        assert dtypes[name].shape == (7,)
    assert dtypes["u64"][...].max() == np.iinfo(np.uint64).max
    assert dtypes["i8"][...].min() == -128
    assert "" in list(dtypes["s"][...]) and "Grüße" in list(dtypes["s"][...])
    assert np.isnat(dtypes["dt"][...]).sum() == 1 and np.isnat(dtypes["td"][...]).sum() == 1
    assert set(array_dims(root / "dtypes.zarr").values()) == {("i",)}

    unsupported = zarr.open_group(str(root / "unsupported_dtype.zarr"), mode="r")
    assert unsupported["cplx"].dtype == np.complex128
    assert unsupported["good"].dtype == np.int64

    missing = zarr.open_group(str(root / "missing.zarr"), mode="r")
    assert missing["fill_attr"].attrs["_FillValue"] == -9999
    assert (missing["fill_attr"][...] == -9999).sum() == 2
    assert missing["missing_attr"].attrs["missing_value"] == -1
    assert np.isnan(missing["nan_fill_and_missing"].attrs["_FillValue"])
    assert missing["nan_fill_and_missing"].attrs["missing_value"] == -999
    cf_keys = {"_FillValue", "missing_value", "scale_factor", "add_offset"}
    assert not cf_keys & set(missing["nonzero_fill"].attrs)
    assert not cf_keys & set(missing["zero_fill"].attrs)
    assert not cf_keys & set(missing["nan_data"].attrs)
    assert missing["nonzero_fill"].fill_value == 7
    assert list(missing["nonzero_fill"][...]) == [1, 7, 3, 4, 7, 7, 5, 6]
    chunk_dir = root / "missing.zarr" / "nonzero_fill" / ("c" if prefix == "" else "")
    written = sorted(p.name for p in chunk_dir.iterdir() if p.name[0].isdigit())
    assert written == ["0", "1", "3"]  # chunk 2 never written
    assert missing["zero_fill"].fill_value == 0
    assert dict(missing["packed"].attrs).items() >= {
        "scale_factor": 0.5, "add_offset": 10.0, "_FillValue": -1,
    }.items()  # fmt: skip

    times = zarr.open_group(str(root / "times.zarr"), mode="r")
    assert times["t_tz"].attrs["units"] == "hours since 2000-01-01 00:00:00 +05:00"
    assert times["t_360"].attrs["calendar"] == "360_day"
    assert times["t_months"].attrs["units"] == "months since 2000-01-01"
    dims = array_dims(root / "times.zarr")
    for axis in ["t_hours", "t_days_float", "t_tz", "t_noleap", "t_360", "t_360_real",
                 "t_julian_early", "t_months"]:  # fmt: skip
        assert dims[axis] == (axis,)
        assert dims[f"v_{axis}"] == (axis,)


def test_v3_float_fill_is_base64(fixtures_dir: Path, fixture_generator) -> None:
    meta = json.loads((fixtures_dir / "xr_float_fill.zarr" / "f64_fill" / "zarr.json").read_text())
    assert meta["attributes"]["_FillValue"] == fixture_generator.float_fill_attr_b64(-9999.0)
    meta = json.loads(
        (fixtures_dir / "xr_float_fill.zarr" / "f32_default" / "zarr.json").read_text()
    )
    assert meta["attributes"]["_FillValue"] == fixture_generator.float_fill_attr_b64(np.nan)
    for prefix in ("", "v2/"):
        ds = _open(fixtures_dir / f"{prefix}xr_float_fill.zarr")
        assert np.isnan(ds["f64_fill"].values).sum() == 2
        assert np.isnan(ds["f32_default"].values).sum() == 3


def test_datatree_and_cf_roles(fixtures_dir: Path) -> None:
    for prefix in ("", "v2/"):
        dims = array_dims(fixtures_dir / f"{prefix}datatree.zarr", "simulation/fine")
        assert dims == {"foo": ("x", "y"), "y": ("y",)}  # no x array: inherited
        cf = fixtures_dir / f"{prefix}cf_roles.zarr"
        meta = zarr.open_group(str(cf), mode="r")
        assert meta["time"].attrs["bounds"] == "time_bnds"
        assert set(meta["sst"].attrs["coordinates"].split()) == {"lat2d", "lon2d"}
        assert meta["g"].shape == ()


def test_corrupt_stores(fixtures_dir: Path) -> None:
    corrupt = fixtures_dir / "corrupt"
    with pytest.raises(json.JSONDecodeError):
        json.loads((corrupt / "bad_json.zarr" / "zarr.json").read_text())
    assert [p.name for p in (corrupt / "not_a_store").iterdir()] == ["notes.txt"]
    arr = zarr.open_array(str(corrupt / "bad_chunk.zarr" / "v"), mode="r")
    assert arr.metadata.dimension_names == ("i",)
    assert list(arr[0:4]) == [0, 1, 2, 3]
    with pytest.raises(Exception):  # noqa: B017, PT011 - any decode error is fine
        arr[4:8]


# --------------------------------------------------------------------------
# oracles
# --------------------------------------------------------------------------


def test_xarray_frame_row_major(fixtures_dir: Path) -> None:
    df = xarray_frame(fixtures_dir / "big_edge.zarr", variables=["v"])
    assert list(df.columns) == ["a", "b", "c", "v"]
    assert len(df) == 7 * 11 * 5
    assert df["v"].iloc[0] == 0.5 and df["v"].iloc[1] == 1.5  # c varies fastest
    assert df["b"].iloc[0] == 130  # b descending: first value is the largest
    swapped = xarray_frame(fixtures_dir / "big_edge.zarr", variables=["v"], dims=("c", "a", "b"))
    assert list(swapped.columns) == ["c", "a", "b", "v"]
    assert_frames_equal(swapped, df[["c", "a", "b", "v"]], sort_by=["a", "b", "c"])


def test_xarray_frame_positional_and_neighbours(fixtures_dir: Path) -> None:
    noise = xarray_frame(fixtures_dir / "labels.zarr", variables="noise")
    assert list(noise.columns) == ["sample", "noise"]
    assert list(noise["sample"]) == list(range(11))
    # default variables: everything over the dimension set, coordinates included
    grid = xarray_frame(fixtures_dir / "cf_roles.zarr", dims=("y", "x"))
    assert list(grid.columns) == ["y", "x", "lat2d", "lon2d", "sst"]
    scalar = xarray_frame(fixtures_dir / "cf_roles.zarr", dims=())
    assert list(scalar.columns) == ["g"] and scalar["g"].iloc[0] == 9.80665
    # times.zarr has an undecodable neighbour (months); it must not matter
    t = xarray_frame(fixtures_dir / "times.zarr", variables="v_t_hours")
    assert t["t_hours"].iloc[-1] == pd.Timestamp("2020-01-01T06:00")
    noleap = xarray_frame(fixtures_dir / "times.zarr", variables="v_t_noleap")
    assert noleap["t_noleap"].iloc[2].month == 3
    months = xarray_frame(fixtures_dir / "times.zarr", variables="v_t_months", decode_times=False)
    assert list(months["t_months"]) == [0, 1, 2, 12, 13]
    tree = xarray_frame(fixtures_dir / "datatree.zarr", "simulation/fine", "foo")
    assert list(tree.columns) == ["x", "y", "foo"] and list(tree["x"].unique()) == list(range(5))


def test_raw_frame_agrees_with_xarray_on_v2_missing(fixtures_dir: Path) -> None:
    path = fixtures_dir / "v2" / "missing.zarr"
    expected = xarray_frame(path, dims=("i",))
    actual = raw_frame(path, dims=("i",), zarr_fill_as_mask=True)
    assert_frames_equal(actual, expected, check_column_order=False)


def test_raw_frame_reads_v3_missing(fixtures_dir: Path) -> None:
    df = raw_frame(fixtures_dir / "missing.zarr", dims=("i",)).set_index("i")
    assert df["fill_attr"].isna().sum() == 2
    assert df["missing_attr"].isna().sum() == 2
    assert df["nan_fill_and_missing"].isna().sum() == 3
    assert list(df["nonzero_fill"]) == [1, 7, 3, 4, 7, 7, 5, 6]  # fill_value is not a mask
    assert (df["zero_fill"] == 0).sum() == 3
    assert list(df["packed"].iloc[:2]) == [10.0, 10.5] and df["packed"].isna().sum() == 2


def test_assert_frames_equal_semantics() -> None:
    exp = pd.DataFrame(
        {
            "t": pd.to_datetime(["2000-01-01", None]).astype("datetime64[ns]"),
            "f": [1.5, np.nan],
            "i": np.array([1, 2], dtype=np.uint64),
            "s": ["a", None],
        }
    )
    act = nan_to_null(exp)
    assert act["f"].dtype == object and act["f"].iloc[1] is None
    assert_frames_equal(act, exp)  # None == NaN == NaT
    act2 = exp.assign(t=exp["t"].astype("datetime64[us]"), f=exp["f"].astype(np.float32))
    assert_frames_equal(act2, exp)
    with pytest.raises(AssertionError, match="column 'f'"):
        assert_frames_equal(exp.assign(f=[1.5 + 1e-15, np.nan]), exp)
    assert_frames_equal(exp.assign(f=[1.5 + 1e-15, np.nan]), exp, rtol={"f": 1e-12})
    with pytest.raises(AssertionError, match="column 'f'"):
        assert_frames_equal(exp.assign(f=[1.5, 0.0]), exp)  # NULL vs value
    with pytest.raises(AssertionError, match="columns differ"):
        assert_frames_equal(exp[["f", "t", "i", "s"]], exp)
    assert_frames_equal(exp[["f", "t", "i", "s"]], exp, check_column_order=False)
    with pytest.raises(AssertionError, match="row counts"):
        assert_frames_equal(exp.iloc[:1], exp)
    assert_frames_equal(exp.iloc[::-1], exp, sort_by="i")
    with pytest.raises(AssertionError, match="column 'i'"):
        assert_frames_equal(exp.iloc[::-1], exp)
