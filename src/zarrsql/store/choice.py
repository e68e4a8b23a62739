"""What a read asks of its store beyond the location: the format and, for a versioned store,
the version and the virtual chunk containers it may read.

These travel next to `storage_options` (`open_store(location, storage_options, choice)`): the
format picks the store class (store/opening.py), the rest is for that class. The core parses
them from the `read_zarr` parameters (`zarrsql.scan.request.store_choice_of`); here they are
only held, already checked for shape, so that every store sees the same record.
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote

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


def normal_location(location: str) -> str:
    """`location` with its `.` and `..` segments collapsed, so that a prefix test sees where a
    reference really leads: '/data/in/../out/a.nc' is '/data/out/a.nc', outside '/data/in/'.
    Callers read the collapsed location too, so what is checked is what is opened.

    A local path (`file://` already removed) is collapsed as text (`os.path.normpath`): symlinks
    are not resolved. A URL (anything with '://') has the dot segments of its path collapsed as
    RFC 3986 resolves them (a percent-encoded '%2e%2e' counted as '..', since an HTTP client or
    server may decode it), never above its host or bucket; its query and fragment are kept as
    they are. An empty location stays empty."""
    if not location:
        return location
    if "://" not in location:
        return os.path.normpath(location)
    scheme, _, rest = location.partition("://")
    authority, slash, tail = rest.partition("/")
    if not slash:
        return location
    cut = min((i for i in (tail.find("?"), tail.find("#")) if i >= 0), default=len(tail))
    path, query = tail[:cut], tail[cut:]  # no dot segment is taken from the query
    segments = path.split("/")
    kept: list[str] = []
    for segment in segments:
        dots = unquote(segment)
        if dots == "..":
            if kept:
                kept.pop()
        elif dots != ".":
            kept.append(segment)
    if unquote(segments[-1]) in (".", ".."):
        kept.append("")  # 'a/b/..' is the folder 'a/', still ending on '/'
    return f"{scheme}://{authority}/{'/'.join(kept)}{query}"


#: A percent-encoded slash or backslash, which a server may decode into a path separator.
_ENCODED_SEPARATOR = re.compile(r"%(?:2f|5c)", re.IGNORECASE)


def within_prefix(url: str, prefix: str) -> bool:
    """Whether `url` lies under the container `prefix`, on a path boundary: 'file:///data'
    authorizes '/data/a.nc' but not '/data2/a.nc', which a plain string prefix would. Both are
    compared collapsed (`normal_location`): '/data/../secret/a.nc' is not under '/data'. A URL
    with an encoded separator must lie under it read both ways: 'ok/..%2Fsecret' is one segment
    to a client and 'ok/../secret' to a server that decodes it."""
    if "://" in url and _ENCODED_SEPARATOR.search(url):
        decoded = _ENCODED_SEPARATOR.sub("/", url)
        return _within(url, prefix) and _within(decoded, prefix)
    return _within(url, prefix)


def _within(url: str, prefix: str) -> bool:
    url, prefix = normal_location(url), normal_location(prefix)
    if not url.startswith(prefix):
        return False
    return prefix.endswith("/") or len(url) == len(prefix) or url[len(prefix)] == "/"
