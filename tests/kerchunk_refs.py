"""kerchunk reference sets for fixtures, made without the collector's deadlock.

`SingleHdf5ToZarr.translate` builds its Zarr metadata from inside h5py's `visititems`, which
holds h5py's global lock while it waits for zarr-python's event-loop thread. When the garbage
collector starts on that thread and frees an h5py object caught in a reference cycle (xarray
and earlier tests leave such cycles), the finalizer waits for the same lock and the fixture
hangs until pytest-timeout ends it (a CI run lost ten tests this way; VirtualiZarr's issue
1072 is the same hang). zarrsql's own scan holds the collector the same way
(`store/hdf5._collector_held`); this is the tests' copy of that guard, kept apart so that
fixtures do not depend on the code under test.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any


def kerchunk_refs(path: str | Path, **kwargs: Any) -> dict[str, Any]:
    """`SingleHdf5ToZarr(path, **kwargs).translate()`, with no collection while it runs."""
    from kerchunk.hdf import SingleHdf5ToZarr

    gc.collect()  # cycles made before the scan are freed here, on this thread, lock-free
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return SingleHdf5ToZarr(str(path), **kwargs).translate()
    finally:
        if was_enabled:
            gc.enable()
