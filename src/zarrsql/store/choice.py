"""What a read asks of its store beyond the location: the format and, for a versioned store,
the version and the virtual chunk containers it may read.

These travel next to `storage_options` (`open_store(location, storage_options, choice)`): the
format picks the store class (store/opening.py), the rest is for that class. The core parses
them from the `read_zarr` parameters (`zarrsql.scan.request.store_choice_of`); here they are
only held, already checked for shape, so that every store sees the same record.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from zarrsql.errors import ParameterError

#: The values `format :=` takes; `None` (not given) means: detect from the location.
FORMATS = ("zarr", "icechunk", "kerchunk", "hdf5")

#: The parameters that pick a version of a versioned store, in the order errors name them.
VERSION_PARAMETERS = ("branch", "tag", "snapshot", "as_of")
#: Every parameter this record holds, as `read_zarr` names them.
STORE_ARGUMENT_NAMES = ("format", *VERSION_PARAMETERS, "virtual_chunks")


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """The format (None: detect), the version (`branch`, `tag`, `snapshot` id, or `as_of` a
    time on a branch) and the authorized virtual chunk containers (URL prefix, credentials
    text or None) of one read."""

    format: str | None = None
    branch: str | None = None
    tag: str | None = None
    snapshot: str | None = None
    as_of: datetime.datetime | None = None
    virtual_chunks: tuple[tuple[str, str | None], ...] = ()

    def version_parameters(self) -> list[str]:
        """The version parameters given, by name."""
        return [n for n in VERSION_PARAMETERS if getattr(self, n) is not None]


#: The URL schemes whose public buckets a container may be read from without credentials.
ANONYMOUS_SCHEMES = ("s3", "gs", "gcs")


def container_access(prefix: str, value: str | None) -> str | None:
    """The access one `virtual_chunks :=` entry asks for: None (the environment's credentials,
    or none for local files) or 'anonymous' (a public s3:// or gs:// bucket). Kerchunk and
    Icechunk reads both take these two, so the words are checked once, here."""
    if value is None or value.lower() in ("", "from_env", "default"):
        return None
    if value.lower() == "anonymous":
        scheme = prefix.split("://", 1)[0].lower() if "://" in prefix else ""
        if scheme in ANONYMOUS_SCHEMES:
            return "anonymous"
        raise ParameterError(
            f"virtual_chunks := value 'anonymous' for '{prefix}' names anonymous access to a public s3:// or "
            f"gs:// bucket, which '{prefix}' is not; give NULL for it (no credentials for local files, the "
            "environment's otherwise)"
        )
    raise ParameterError(
        f"virtual_chunks := value {value!r} for '{prefix}' is not understood; give NULL (the environment's "
        "credentials, or none for local files) or 'anonymous' (a public s3:// or gs:// bucket)"
    )


def within_prefix(url: str, prefix: str) -> bool:
    """Whether `url` lies under the container `prefix`, on a path boundary: 'file:///data'
    authorizes '/data/a.nc' but not '/data2/a.nc', which a plain string prefix would."""
    if not url.startswith(prefix):
        return False
    return prefix.endswith("/") or len(url) == len(prefix) or url[len(prefix)] == "/"
