"""What a local file given as a store is, so that the error can say so and what to do.

A Zarr store on disk is a folder. People point zarrsql at the files they have at hand, most
often HDF5 (AnnData's `.h5ad`, NetCDF4's `.nc`, plain `.h5`), NetCDF3, a zipped store or a
Parquet file. HDF5 files are read in place (store/hdf5.py): `is_hdf5_file` is how
store/opening.py detects them, by the signature, whatever the name. The errors here are for
the files zarrsql does not read, or a file reached as a Zarr folder. The kind is told by the
file's first bytes (HDF5 allows a user block of 512, 1024, 2048... bytes before its
signature), and by the extension when the file is too short to tell; only those few header
bytes (or a zip's directory) are read.
"""

from __future__ import annotations

import os
import re
import zipfile

from zarrsql.errors import StoreNotFoundError, UnsupportedError, ZarrSQLError
from zarrsql.store.base import METADATA_DOCUMENTS

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Offsets where an HDF5 signature may start (after a user block of that many bytes).
_HDF5_OFFSETS = (0, 512, 1024, 2048, 4096, 8192)
_NETCDF3_SIGNATURES = (b"CDF\x01", b"CDF\x02", b"CDF\x05")  # classic, 64-bit offset, CDF-5
_ZIP_SIGNATURES = (b"PK\x03\x04", b"PK\x05\x06")
_HDF5_EXTENSIONS = (".h5ad", ".h5", ".hdf5", ".he5", ".nc", ".nc4", ".cdf")


def _head(path: str, at: int, size: int = 8) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(at)
            return f.read(size)
    except OSError:
        return b""


def _is_hdf5(path: str) -> bool:
    return any(_head(path, at) == HDF5_SIGNATURE for at in _HDF5_OFFSETS)


def is_hdf5_file(path: str) -> bool:
    """Whether the file at `path` starts (after any user block) with the HDF5 signature."""
    return _is_hdf5(path)


def _xarray_hint(location: str) -> str:
    return f"xarray.open_dataset('{location}').to_zarr('{os.path.splitext(location)[0]}.zarr')"


def _zip_holds_zarr(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return any(n.rsplit("/", 1)[-1] in METADATA_DOCUMENTS and n.count("/") <= 1 for n in names)


def missing_error(location: str, path: str) -> StoreNotFoundError:
    """The error for a local location where nothing is. When a zarrsql replacement (mode="w")
    that cannot swap the two folders in one step was killed between its two renames, the old
    store lies beside the location as `.<name>.zarrsql-old-<hex>` (zarrsql.write.staging): say
    where, and how it comes back. A reader only says so; it moves nothing."""
    folder, name = os.path.split(os.path.abspath(path).rstrip(os.sep))
    aside = re.compile(rf"\.{re.escape(name)}\.zarrsql-old-[0-9a-f]{{32}}")
    try:
        found = sorted(n for n in os.listdir(folder) if aside.fullmatch(n) and os.path.isdir(os.path.join(folder, n)))
    except OSError:
        found = []
    if found:
        return StoreNotFoundError(
            f"no Zarr store at '{location}': the path does not exist, but '{os.path.join(folder, found[0])}' beside "
            'it holds the store a zarrsql replacement (mode="w") moved aside and did not move back (its writer was '
            "killed, or is finishing now: read again). The next zarrsql write to "
            f"'{location}' puts it back; or rename that folder to '{location}' yourself"
        )
    return StoreNotFoundError(
        f"no Zarr store at '{location}': the path does not exist; "
        "check the path (relative paths are resolved from the current directory)"
    )


def file_error(location: str, path: str) -> ZarrSQLError:
    """The error for a store location that is a file: which kind of file, and what to do."""
    start = f"no Zarr store at '{location}': it is a file, not a folder"
    name = os.path.basename(path)
    head = _head(path, 0)
    if name in METADATA_DOCUMENTS:
        return StoreNotFoundError(
            f"{start}; '{name}' is a Zarr metadata document: point at the folder that holds it, "
            f"'{os.path.dirname(location) or '.'}'"
        )
    if _is_hdf5(path):
        return StoreNotFoundError(
            f"{start}: an HDF5 file (as .h5ad, NetCDF4 and .h5 files are), which zarrsql reads in place: "
            "pass format := 'hdf5', or leave format := out (its signature is detected)"
        )
    if not head and name.lower().endswith(_HDF5_EXTENSIONS):
        return StoreNotFoundError(
            f"{start}: named like an HDF5 file, but its first bytes cannot be read (it is empty, or "
            "not readable by this process), so it is no HDF5 file either; check that it was written or "
            "downloaded completely"
        )
    if head.startswith(_NETCDF3_SIGNATURES):
        return StoreNotFoundError(
            f"{start}: a NetCDF3 (classic) file, which zarrsql does not read (it reads Zarr, and HDF5 or "
            f"NetCDF4 files in place); convert it once, e.g. {_xarray_hint(location)}, and read the .zarr folder"
        )
    if head.startswith(_ZIP_SIGNATURES):
        if _zip_holds_zarr(path):
            folder = location[:-4] if location.lower().endswith(".zip") else location + ".unzipped"
            return UnsupportedError(
                f"'{location}' is a zip archive holding a Zarr store; zarrsql does not read zip stores: "
                f"unzip it (e.g. python -m zipfile -e '{location}' '{folder}') and read the folder"
            )
        return StoreNotFoundError(f"{start}: a zip archive that holds no Zarr store at its top")
    if head.startswith(b"PAR1"):
        return StoreNotFoundError(
            f"{start}: a Parquet file, which DuckDB reads itself: SELECT * FROM read_parquet('{location}')"
        )
    return StoreNotFoundError(
        f"{start}; a Zarr store is a folder holding zarr.json (Zarr v3) or .zgroup (Zarr v2): point at the "
        "store's folder"
    )
