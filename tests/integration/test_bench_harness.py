"""The benchmark harness measures what it claims (issue 20 goal 9), checked without timing.

The decode floor must return what zarr-python reads; the DuckDB-written Parquet copy must hold
the store's rows with DuckDB's COPY defaults; the load guard must account a child's CPU time
and repeat a foreign-loaded run a bounded number of times. Oracles: zarr-python and numpy on
the raw arrays, pyarrow's Parquet metadata, the child's own busy loop.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import engines as E  # noqa: E402
import harness as H  # noqa: E402
import make_era5 as M  # noqa: E402

N_TIME = 30  # two time chunks, the second one ragged (6 of 24 hours)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return M.build(tmp_path_factory.mktemp("era5") / "era5.zarr", N_TIME, verbose=False)


def test_decode_floor_reads_what_zarr_python_reads(store):
    g = zarr.open_group(str(store), mode="r")
    t2m = g["t2m"][...]
    q1 = E.run_decode_floor("floor.numcodecs", "Q1", str(store), "", "2020-01-02")
    assert q1["avg_t2m"][0] == pytest.approx(t2m.mean(dtype=np.float64), rel=1e-12)
    q2 = E.run_decode_floor("floor.numcodecs", "Q2", str(store), "", "2020-01-02")
    np.testing.assert_array_equal(q2["avg_t2m"], t2m.mean(axis=0, dtype=np.float64).ravel())
    np.testing.assert_array_equal(q2["latitude"], np.repeat(g["latitude"][:], g["longitude"].shape[0]))
    q5 = E.run_decode_floor("floor.numcodecs", "Q5", str(store), "", "2020-01-02")
    for v in ("t2m", "u10", "v10"):
        np.testing.assert_array_equal(q5.column(v).to_numpy(), g[v][...].reshape(-1))


def test_decode_floor_selects_the_ragged_chunk_and_the_point(store):
    g = zarr.open_group(str(store), mode="r")
    # 2020-01-02 is hours 24..29: the ragged second chunk, 6 valid rows of 24
    q3 = E.run_decode_floor("floor.numcodecs", "Q3", str(store), "", "2020-01-02")
    lat, lon = g["latitude"][:], g["longitude"][:]
    box = g["t2m"][24:30][:, (lat >= 30) & (lat <= 60)][:, :, (lon >= 0) & (lon <= 30)]
    assert q3["avg_t2m"][0] == pytest.approx(box.mean(dtype=np.float64), rel=1e-12)
    q6 = E.run_decode_floor("floor.numcodecs", "Q6", str(store), "", "2020-01-02")
    iy, ix = int(np.flatnonzero(lat == 45.0)[0]), int(np.flatnonzero(lon == 90.0)[0])
    np.testing.assert_array_equal(q6["t2m"], g["t2m"][:, iy, ix])
    assert q6["time"].size == N_TIME


def test_decode_floor_refuses_a_layout_it_does_not_read(tmp_path):
    other = zarr.create_array(str(tmp_path / "a.zarr"), shape=(4,), chunks=(2,), dtype="float32", compressors=None)
    other[:] = 1.0
    with pytest.raises(ValueError, match="bytes\\+zstd"):
        E._RawArray(tmp_path, "a.zarr", E._ZstdNumcodecs())


def test_duckdb_parquet_copy_holds_the_store_with_copy_defaults(store):
    import pyarrow.parquet as pq

    out = M.build_parquet(store, writer="duckdb", verbose=False)
    assert out == M.parquet_path(store, "duckdb")
    f = pq.ParquetFile(out)
    assert f.metadata.row_group(0).num_rows == 122_880  # DuckDB's default row group size
    assert f.metadata.row_group(0).column(3).compression == "SNAPPY"  # DuckDB's default codec
    t = f.read()
    g = zarr.open_group(str(store), mode="r")
    np.testing.assert_array_equal(t.column("t2m").to_numpy(), g["t2m"][...].reshape(-1))
    lon = g["longitude"][:]
    np.testing.assert_array_equal(t.column("longitude").to_numpy()[: 2 * lon.size], np.tile(lon, 2))
    hours = np.datetime64("1900-01-01T00", "us") + g["time"][:].astype("timedelta64[h]")
    per_hour = g["latitude"].shape[0] * lon.size
    np.testing.assert_array_equal(t.column("time").to_numpy()[::per_hour], hours)
    # the stamp makes a second call a no-op
    mtime = out.stat().st_mtime_ns
    M.build_parquet(store, writer="duckdb", verbose=False)
    assert out.stat().st_mtime_ns == mtime


def test_zstd_parquet_copy_differs_from_the_baseline_in_its_codec_only(store):
    """The `parquet.zstd+duckdb` baseline: DuckDB's COPY with zstd, else its defaults, and the
    same rows, so that it and the baseline differ in the codec alone."""
    import pyarrow.parquet as pq

    base = pq.ParquetFile(M.build_parquet(store, writer="duckdb", verbose=False))
    out = M.build_parquet(store, writer="duckdb-zstd", verbose=False)
    assert out == M.parquet_path(store, "duckdb-zstd") != M.parquet_path(store, "duckdb")
    f = pq.ParquetFile(out)
    assert f.metadata.num_row_groups == base.metadata.num_row_groups
    assert f.metadata.row_group(0).num_rows == base.metadata.row_group(0).num_rows
    for c in range(f.metadata.num_columns):
        assert f.metadata.row_group(0).column(c).compression == "ZSTD"
    assert f.read().equals(base.read())
    run = E.RUNNERS["parquet.zstd+duckdb"]  # given the baseline's path, as run_era5 passes it
    got = run("Q1", str(store), str(M.parquet_path(store, "duckdb")), "2020-01-01").column(0)[0].as_py()
    assert got == pytest.approx(float(zarr.open_group(str(store), mode="r")["t2m"][...].mean(dtype=np.float64)))


def test_run_guarded_accounts_the_childs_cpu_time():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    r = H.run_guarded([sys.executable, "-c", burn], timeout=60, stdout=subprocess.DEVNULL)
    assert r.returncode == 0
    assert r.child_cpu_s >= 0.3  # the busy loop's CPU time, measured by wait4
    assert r.wall_s >= 0.3  # one thread: its wall time is at least its CPU time
    assert r.foreign_cpu_s is not None
    assert r.foreign_cpu_s >= 0.0
    assert r.foreign_loaded == H.is_foreign_loaded(r.foreign_cpu_s, r.wall_s, H.LoadPolicy())


def test_run_guarded_kills_a_child_past_its_timeout():
    r = H.run_guarded([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert r.returncode == "timeout"
    assert r.wall_s < 10


def test_foreign_loaded_runs_are_repeated_a_bounded_number_of_times():
    policy = H.LoadPolicy(retries=2, pause_s=0.0, quiet_wait_s=0.0, enabled=True)
    calls = []

    def always_loaded():
        calls.append(1)
        return {"load": {"foreign_loaded": True, "foreign_cores": 1.5}}

    kept, discarded = H.with_retries(always_loaded, policy)
    assert len(calls) == 3
    assert len(discarded) == 2
    assert kept["load"]["kept_although_loaded"] is True

    results = iter([True, False])

    def loaded_once():
        return {"load": {"foreign_loaded": next(results), "foreign_cores": 0.0}}

    kept, discarded = H.with_retries(loaded_once, policy)
    assert len(discarded) == 1
    assert kept["load"]["kept_although_loaded"] is False
    assert kept["load"]["attempt"] == 2
    summary = H.load_summary([kept], discarded, policy)
    assert summary["runs_discarded"] == 1
    assert summary["kept_although_loaded"] == 0


def test_the_threshold_scales_with_the_run_and_ignores_tick_noise():
    p = H.LoadPolicy(max_foreign_cores=0.25, min_foreign_s=0.05)
    assert not H.is_foreign_loaded(0.04, 0.1, p)  # below one tick's worth of noise
    assert H.is_foreign_loaded(0.3, 1.0, p)  # 0.3 cores > 0.25
    assert not H.is_foreign_loaded(0.2, 1.0, p)
    assert not H.is_foreign_loaded(5.0, 1.0, H.LoadPolicy(enabled=False))


def test_resident_fraction_sees_a_file_just_read(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(np.arange(1 << 18, dtype=np.int64).tobytes())
    H.warm([f])
    assert H.resident_fraction([f]) == 1.0
