"""Opening a NetCDF4/HDF5 file must not hang when the garbage collector meets an h5py object.

kerchunk writes its Zarr metadata from inside h5py's `visititems`, holding h5py's global lock
while it waits for zarr-python's event-loop thread. If the collector runs on that thread and
frees an h5py object left in a reference cycle, the object's destructor waits for the same
lock, and nothing ever lets go (this hung CI runs). The subprocess below builds exactly that
moment: on zarr's thread, during the scan, an open h5py file becomes cyclic garbage and the
collector's thresholds are lowered so that it would run at the next allocation.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest
import xarray as xr

from tests.virtual.conftest import TABLE, VirtualFiles
from zarrsql.store import hdf5

SCRIPT = textwrap.dedent(
    """
    import gc, sys, threading
    import h5py
    import zarr.core.array as zarr_array
    import zarrsql

    path, table = sys.argv[1], sys.argv[2]
    held = [h5py.File(path, "r")]  # opened here; dropped into a cycle on zarr's thread
    parse_dtype = zarr_array.parse_dtype

    class Cycle:
        pass

    def on_zarr_thread(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread() and held:
            garbage = Cycle()
            garbage.me, garbage.file = garbage, held.pop()
            del garbage
            thresholds = gc.get_threshold()
            gc.set_threshold(1, 1, 1)
            try:
                [[] for _ in range(100)]  # an automatic collection would run here
            finally:
                gc.set_threshold(*thresholds)
        return parse_dtype(*args, **kwargs)

    zarr_array.parse_dtype = on_zarr_thread
    con = zarrsql.connect()
    print(con.sql(f"SELECT count(*) FROM read_zarr('{path}', table_name := '{table}')").fetchall()[0][0])
    print(held == [], gc.isenabled())
    """
)


def test_a_scan_is_not_hung_by_h5py_garbage_collected_on_zarrs_thread(virtual: VirtualFiles) -> None:
    with xr.open_dataset(virtual.nc, engine="h5netcdf") as ds:
        cells = ds["t2m"].size
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(virtual.nc), TABLE], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading the NetCDF file hung: a collection on zarr's thread waited for h5py's lock")
    assert done.returncode == 0, done.stderr
    count, state = done.stdout.split("\n")[:2]
    assert int(count) == cells
    assert state == "True True"  # the hook ran (the file was dropped), and the collector runs again


def test_the_collector_comes_back_as_it_was_after_overlapping_scans() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with hdf5._collector_held():
            with hdf5._collector_held():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer scan still holds it
        assert gc.isenabled()
        gc.disable()  # a user who turned it off keeps it off
        with hdf5._collector_held():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
