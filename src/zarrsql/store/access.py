"""Which locations a read or a write may touch, as the engine running it allows.

DuckDB can switch off its access to files and networks (`SET enable_external_access =
false`), leaving open only the folders of `allowed_directories` and the files of
`allowed_paths`. zarrsql reads and writes stores with its own readers, not through DuckDB's
file system, so DuckDB would never see a `read_zarr('/elsewhere')` to refuse it. The engine
therefore hands its rules to the core as an `AccessPolicy` (through the store opener of the
call, store/opening.py), and the core asks it before anything of a location is looked at:
the store itself (before the format is detected, which already reads a file's first bytes),
each file a kerchunk reference set points into, each virtual chunk container an Icechunk
read authorizes, and a writer's target.

A location passes when access is on, when it is an allowed directory or lies in one, or when
it is an allowed path or lies below one (a store is a folder: allowing the store's own path
lets its keys be read). Locations are compared as DuckDB compares them: a local path made
absolute against the working directory, with `.` and `..` collapsed ('/ok/../secret' is not
under '/ok/') and symlinks followed to where they lead (a link inside an allowed folder to a
folder outside it is refused, a link to an allowed folder passes); a URL by its text with its
dot segments collapsed, on path boundaries ('s3://b/data' does not open 's3://b/data2/'), an
encoded separator read both ways (store/choice.py, `within_prefix`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from zarrsql.errors import AccessDeniedError
from zarrsql.store.base import is_url
from zarrsql.store.choice import within_prefix
from zarrsql.store.redaction import redacted_url


def comparable(location: str) -> str:
    """`location` as the rules compare it: a local path (or `file://` URL) absolute with its
    symlinks resolved, as DuckDB resolves both the allowed folders and the files it opens; a
    URL as given."""
    if location.lower().startswith("file://"):
        location = location[len("file://") :]
    if is_url(location):
        return location
    return os.path.realpath(os.path.expanduser(location))


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The engine's file-access rules at the moment a call began (see the module docstring)."""

    external: bool = True
    directories: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    setting: str = "external access is off"  # how the engine says it, for the errors

    def admits(self, location: str) -> bool:
        """Whether `location` may be read or written under these rules."""
        if self.external:
            return True
        where = comparable(location)
        allowed = (comparable(p).rstrip("/") or "/" for p in (*self.directories, *self.paths))
        return any(within_prefix(where, p) for p in allowed)

    def check_links(self, location: str) -> None:
        """`check` every symbolic link below the local folder `location`: a reader that opens the
        files below it itself (Icechunk) follows a link out of an allowed folder unasked. Only
        while access is off (a walk of the folder); a URL has no links to follow."""
        if self.external:
            return
        folder = location[len("file://") :] if location.lower().startswith("file://") else location
        if is_url(folder) or not os.path.isdir(folder):
            return
        for root, dirs, files in os.walk(folder):  # links to folders are listed, not entered
            for name in (*dirs, *files):
                path = os.path.join(root, name)
                if os.path.islink(path):
                    self.check(path)

    def check(self, location: str, *, writing: bool = False) -> None:
        """Raise an `AccessDeniedError` naming the location, the rules and the way out when
        `location` may not be read (or, with `writing`, written)."""
        if self.admits(location):
            return
        shown = redacted_url(location) if is_url(location) else location
        resolved = comparable(location)
        plain = location[len("file://") :] if location.lower().startswith("file://") else location
        if not is_url(plain) and os.path.abspath(os.path.expanduser(plain)) != resolved:
            shown += f"' (which leads to '{resolved}')"
        else:
            shown += "'"
        verb = "write" if writing else "read"
        raise AccessDeniedError(
            f"cannot {verb} '{shown}: {self.setting} on this connection, and the location lies in none of "
            f"its allowed_directories {list(self.directories)} or allowed_paths {list(self.paths)}; list its "
            "folder in allowed_directories before turning external access off (the lists cannot change "
            "once it is off), or use a connection with external access on"
        )


#: The rules of an engine that restricts nothing (and of a call without an engine).
OPEN = AccessPolicy()
